package scrub

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// dropCache writes the file at path back and drops its pages from the
// page cache, so that the next reads go to the medium.
func dropCache(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		b.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatal(err)
	}
}
