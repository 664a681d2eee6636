package device

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/difctl/difctl/blockdev/internal/blocktest"
)

// The file benchmarks compare a File with *os.File: sequential 1 MiB
// requests over a page-cached image with plain pread and pwrite. (The
// volume's benchmarks, in blockdev, measure themselves against a plain
// pread pass.)

const benchReq = 1 << 20

func benchImage(b *testing.B) (string, int64) {
	size := int64(64 << 20)
	if testing.Short() {
		size = 8 << 20
	}
	p := filepath.Join(b.TempDir(), "img")
	if err := os.WriteFile(p, blocktest.Pattern(int(size), 1), 0o644); err != nil {
		b.Fatal(err)
	}
	return p, size
}

func BenchmarkFileRead(b *testing.B) {
	for _, via := range []string{"os", "device"} {
		b.Run(fmt.Sprintf("via=%s/size=1MiB", via), func(b *testing.B) {
			p, size := benchImage(b)
			var r interface {
				ReadAt([]byte, int64) (int, error)
			}
			if via == "os" {
				f, err := os.Open(p)
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				r = f
			} else {
				d, err := OpenFile(p, FileOptions{ReadOnly: true})
				if err != nil {
					b.Fatal(err)
				}
				defer d.Close()
				r = d
			}
			buf := AlignedBuffer(benchReq)
			var off int64
			sum := 0
			b.SetBytes(benchReq)
			for b.Loop() {
				n, err := r.ReadAt(buf, off)
				if err != nil {
					b.Fatal(err)
				}
				sum += n + int(buf[n-1])
				if off += benchReq; off >= size {
					off = 0
				}
			}
			if sum == 0 {
				b.Fatal("nothing read")
			}
		})
	}
}

func BenchmarkFileWrite(b *testing.B) {
	for _, via := range []string{"os", "device"} {
		b.Run(fmt.Sprintf("via=%s/size=1MiB", via), func(b *testing.B) {
			p, size := benchImage(b)
			var w interface {
				WriteAt([]byte, int64) (int, error)
			}
			var sync func() error
			if via == "os" {
				f, err := os.OpenFile(p, os.O_RDWR, 0)
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				w, sync = f, func() error { return fdatasync(f) }
			} else {
				d, err := OpenFile(p, FileOptions{})
				if err != nil {
					b.Fatal(err)
				}
				defer d.Close()
				w, sync = d, d.Sync
			}
			buf := blocktest.Pattern(benchReq, 2)
			var off int64
			b.SetBytes(benchReq)
			for b.Loop() {
				if _, err := w.WriteAt(buf, off); err != nil {
					b.Fatal(err)
				}
				// Sync every 64 MiB, as the volume's write benchmark does.
				if off += benchReq; off%(64<<20) == 0 || off >= size {
					if err := sync(); err != nil {
						b.Fatal(err)
					}
				}
				if off >= size {
					off = 0
				}
			}
		})
	}
}

func BenchmarkMem(b *testing.B) {
	b.Run("size=1MiB", benchMem)
}

func benchMem(b *testing.B) {
	m, err := NewMem(64<<20, 4096)
	if err != nil {
		b.Fatal(err)
	}
	buf := blocktest.Pattern(benchReq, 3)
	var off int64
	b.SetBytes(2 * benchReq)
	for b.Loop() {
		if _, err := m.WriteAt(buf, off); err != nil {
			b.Fatal(err)
		}
		if _, err := m.ReadAt(buf, off); err != nil {
			b.Fatal(err)
		}
		off = (off + benchReq) % m.Size()
	}
}
