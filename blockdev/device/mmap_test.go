package device

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/difctl/difctl/blockdev/internal/blocktest"
)

func TestFileReadMapped(t *testing.T) {
	blocktest.SkipNoMmap(t)
	data := blocktest.Pattern(1<<20, 7)
	p := blocktest.WriteImage(t, t.TempDir(), data)
	d, err := OpenFile(p, FileOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ off, n int }{{0, 1 << 20}, {4096, 512}, {1, 3}, {1<<20 - 1, 1}, {100, 0}} {
		var got []byte
		if err := d.ReadMapped(int64(c.off), c.n, func(m []byte) error {
			got = append(got, m...)
			return nil
		}); err != nil {
			t.Fatalf("ReadMapped(%d, %d): %v", c.off, c.n, err)
		}
		if !bytes.Equal(got, data[c.off:c.off+c.n]) {
			t.Fatalf("ReadMapped(%d, %d) differs from the file", c.off, c.n)
		}
	}
	errFn := errors.New("from fn")
	if err := d.ReadMapped(0, 10, func([]byte) error { return errFn }); err != errFn {
		t.Errorf("fn's error came back as %v", err)
	}
	if err := d.ReadMapped(1<<20-4, 8, func([]byte) error { return nil }); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("ReadMapped past the end: %v, want ErrOutOfRange", err)
	}
	// A panic that is not a fault on the mapping goes on.
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the callback's panic", r)
			}
		}()
		d.ReadMapped(0, 1, func([]byte) error { panic("boom") })
	}()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.ReadMapped(0, 1, func([]byte) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("ReadMapped after Close: %v, want ErrClosed", err)
	}
}

func TestFileReadMappedDirect(t *testing.T) {
	blocktest.SkipNoMmap(t)
	p := blocktest.WriteImage(t, t.TempDir(), blocktest.Pattern(1<<16, 1))
	d, err := OpenFile(p, FileOptions{Direct: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if !d.DirectIO() {
		t.Skipf("the filesystem refuses O_DIRECT: %v", d.DirectIOError())
	}
	if err := d.ReadMapped(0, 512, func([]byte) error { return nil }); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("ReadMapped of a direct-I/O file: %v, want ErrUnsupported", err)
	}
}

// TestFileReadMappedFault shrinks the file under the mapping: touching the
// pages past the new end raises SIGBUS, which must come back as an error.
func TestFileReadMappedFault(t *testing.T) {
	blocktest.SkipNoMmap(t)
	p := blocktest.WriteImage(t, t.TempDir(), blocktest.Pattern(1<<20, 2))
	d, err := OpenFile(p, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.ReadMapped(0, 1<<20, func([]byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 1<<19); err != nil {
		t.Fatal(err)
	}
	var sink byte
	err = d.ReadMapped(1<<19, 1<<19, func(m []byte) error {
		for _, b := range m {
			sink ^= b
		}
		return nil
	})
	var ioe *IOError
	if !errors.Is(err, ErrMapFault) || !errors.As(err, &ioe) || ioe.Off != 1<<19 {
		t.Fatalf("ReadMapped past the shrunk end: %v (sink %d), want an *IOError wrapping ErrMapFault", err, sink)
	}
	// The part still in the file reads fine.
	if err := d.ReadMapped(0, 1<<19, func(m []byte) error { sink ^= m[len(m)-1]; return nil }); err != nil {
		t.Errorf("ReadMapped of the remaining part: %v", err)
	}
}

func TestFileUnmapOnClose(t *testing.T) {
	blocktest.SkipNoMmap(t)
	p := filepath.Join(t.TempDir(), "img")
	d, err := CreateImage(p, 1<<16, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.ReadMapped(0, 1<<16, func([]byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if d.mp.m != nil {
		t.Error("Close left the mapping")
	}
}

// rssFile returns the process's resident file-backed memory
// (/proc/self/status RssFile).
func rssFile(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		var kb int64
		if _, err := fmt.Sscanf(l, "RssFile: %d kB", &kb); err == nil {
			return kb << 10
		}
	}
	t.Skip("no RssFile in /proc/self/status")
	return 0
}

// TestFileMapBudget sweeps a 160 MiB image through the mapping: what stays
// mapped (and counts in the resident set) is bounded by mapBudget.
func TestFileMapBudget(t *testing.T) {
	blocktest.SkipNoMmap(t)
	if testing.Short() {
		t.Skip("sweeps 160 MiB")
	}
	p := filepath.Join(t.TempDir(), "img")
	const size = 160 << 20
	d, err := CreateImage(p, size, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	before := rssFile(t)
	var sink byte
	for off := int64(0); off < size; off += 1 << 20 {
		if err := d.ReadMapped(off, 1<<20, func(m []byte) error {
			for i := 0; i < len(m); i += 4096 {
				sink ^= m[i]
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	grew := rssFile(t) - before
	if grew > mapBudget+16<<20 {
		t.Errorf("the resident set grew by %d MiB sweeping %d MiB (budget %d MiB, sink %d)", grew>>20, size>>20, mapBudget>>20, sink)
	}
	if d.mp.held > mapBudget {
		t.Errorf("%d bytes held, budget %d", d.mp.held, mapBudget)
	}
}

// TestMapRefused makes every mapping fail (as a 32-bit address space or a
// descriptor not open for reading would): ReadMapped of a File and of a
// Reader of a file report an error matching errors.ErrUnsupported, which
// sends their callers to ReadAt (a Volume, a pisource.Source).
func TestMapRefused(t *testing.T) {
	blocktest.SkipNoMmap(t)
	defer func(f func(*os.File, int64) ([]byte, error)) { mapFile = f }(mapFile)
	mapFile = func(*os.File, int64) ([]byte, error) { return nil, os.NewSyscallError("mmap", syscall.ENOMEM) }
	p := blocktest.WriteImage(t, t.TempDir(), blocktest.Pattern(1<<16, 3))
	d, err := OpenFile(p, FileOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	r, err := OpenReader(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for name, m := range map[string]Mapper{"file": d, "reader": r} {
		err := m.ReadMapped(0, 4096, func([]byte) error { return nil })
		if !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, syscall.ENOMEM) {
			t.Errorf("%s: ReadMapped with the mapping refused: %v, want ErrUnsupported and ENOMEM", name, err)
		}
	}
}

// TestReader reads a file, and a reader that is not one, through a
// Reader: whole reads, short ones as an *IOError, ranges checked, the
// mapping of a file, and none for the other.
func TestReader(t *testing.T) {
	data := blocktest.Pattern(10000, 4) // not a whole number of blocks
	p := blocktest.WriteImage(t, t.TempDir(), data)
	fr, err := OpenReader(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close()
	br := NewReader(bytes.NewReader(data[:9000]), 10000) // 1000 bytes short
	for name, r := range map[string]*Reader{"file": fr, "bytes": br} {
		t.Run("reader="+name, func(t *testing.T) {
			if r.Size() != 10000 {
				t.Errorf("size %d", r.Size())
			}
			got := make([]byte, 520)
			if n, err := r.ReadAt(got, 520*3); err != nil || n != 520 || !bytes.Equal(got, data[520*3:520*4]) {
				t.Errorf("ReadAt: %d, %v", n, err)
			}
			if _, err := r.ReadAt(got, 10000-100); !errors.Is(err, ErrOutOfRange) {
				t.Errorf("ReadAt past the end: %v, want ErrOutOfRange", err)
			}
			err := r.ReadMapped(0, 520, func(m []byte) error {
				if !bytes.Equal(m, data[:520]) {
					t.Error("the mapping holds other bytes")
				}
				return nil
			})
			if name == "bytes" {
				if !errors.Is(err, errors.ErrUnsupported) {
					t.Errorf("ReadMapped of a bytes.Reader: %v, want ErrUnsupported", err)
				}
				var ioe *IOError
				if _, err := r.ReadAt(got, 9000-100); !errors.As(err, &ioe) || !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("short ReadAt: %v, want an *IOError wrapping io.ErrUnexpectedEOF", err)
				}
			} else if runtime.GOOS == "linux" && err != nil {
				t.Errorf("ReadMapped: %v", err)
			}
		})
	}
	if err := fr.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := fr.ReadAt(make([]byte, 10), 0); !errors.Is(err, ErrClosed) {
		t.Errorf("ReadAt after Close: %v, want ErrClosed", err)
	}
}
