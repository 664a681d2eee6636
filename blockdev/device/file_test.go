package device

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/difctl/difctl/blockdev/internal/blocktest"
)

func testSize() int64 {
	if testing.Short() {
		return 1 << 20
	}
	return 8 << 20
}

func TestFileReadWrite(t *testing.T) {
	for _, bs := range []int{512, 4096} {
		for _, direct := range []bool{false, true} {
			t.Run(fmt.Sprintf("bs=%d/direct=%v", bs, direct), func(t *testing.T) {
				size := testSize()
				p := filepath.Join(t.TempDir(), "img")
				d, err := CreateImage(p, size, FileOptions{BlockSize: bs, Direct: direct})
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				if d.Size() != size || d.LogicalBlockSize() != bs || d.IsBlockDevice() {
					t.Fatalf("size %d lbs %d block %v, want %d %d false", d.Size(), d.LogicalBlockSize(), d.IsBlockDevice(), size, bs)
				}
				if pbs := d.PhysicalBlockSize(); pbs < bs || pbs%bs != 0 {
					t.Fatalf("physical block size %d for logical %d", pbs, bs)
				}
				if direct && !d.DirectIO() && d.DirectIOError() == nil {
					t.Fatal("direct I/O off without a reason")
				}
				if !direct && (d.DirectIO() || d.DirectIOError() != nil) {
					t.Fatalf("direct I/O %v (%v) though not asked", d.DirectIO(), d.DirectIOError())
				}
				t.Logf("direct I/O active: %v (%v)", d.DirectIO(), d.DirectIOError())
				want := blocktest.Pattern(int(size), uint64(bs))
				// Aligned writes from an unaligned buffer exercise the bounce path.
				src := make([]byte, len(want)+1)[1:]
				copy(src, want)
				for off := 0; off < len(want); off += 3 * bs {
					end := min(off+3*bs, len(want))
					if n, err := d.WriteAt(src[off:end], int64(off)); err != nil || n != end-off {
						t.Fatalf("WriteAt(%d): %d, %v", off, n, err)
					}
				}
				if err := d.Sync(); err != nil {
					t.Fatal(err)
				}
				got := AlignedBuffer(len(want))
				if _, err := d.ReadAt(got, 0); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatal("read back differs from what was written")
				}
				// Unaligned reads: offsets, lengths and buffer addresses.
				for _, c := range []struct{ off, n, shift int }{
					{0, 1, 0}, {1, 1, 1}, {bs - 1, 2, 3}, {bs, bs, 0}, {7, 3 * bs, 5},
					{len(want) - 1, 1, 0}, {len(want) - bs - 3, bs + 3, 2},
					{100, bounceSize + 2*bs + 11, 1}, // spans several bounce buffers
				} {
					if c.off+c.n > len(want) {
						continue
					}
					buf := make([]byte, c.n+c.shift)[c.shift:]
					if n, err := d.ReadAt(buf, int64(c.off)); err != nil || n != c.n {
						t.Fatalf("ReadAt(off=%d n=%d): %d, %v", c.off, c.n, n, err)
					}
					if !bytes.Equal(buf, want[c.off:c.off+c.n]) {
						t.Fatalf("ReadAt(off=%d n=%d) differs", c.off, c.n)
					}
				}
				// The file holds what was written.
				raw, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(raw, want) {
					t.Fatal("file contents differ")
				}
			})
		}
	}
}

func TestFileUnalignedWrite(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			d, err := CreateImage(filepath.Join(t.TempDir(), "img"), 64<<10, FileOptions{Direct: direct})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			_, err = d.WriteAt([]byte("abc"), 513)
			if d.DirectIO() {
				if !errors.Is(err, ErrUnaligned) {
					t.Fatalf("unaligned direct write: %v, want ErrUnaligned", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unaligned buffered write: %v", err)
			}
			got := make([]byte, 3)
			if _, err := d.ReadAt(got, 513); err != nil || string(got) != "abc" {
				t.Fatalf("read back %q, %v", got, err)
			}
		})
	}
}

func TestFileBadRequests(t *testing.T) {
	d, err := CreateImage(filepath.Join(t.TempDir(), "img"), 4096, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	buf := make([]byte, 512)
	for _, c := range []struct {
		name string
		off  int64
		n    int
	}{
		{"negative", -1, 512},
		{"past-end", 4096, 1},
		{"straddle", 4000, 512},
		{"huge-offset", math.MaxInt64 - 10, 512},
		{"min-offset", math.MinInt64, 512},
	} {
		t.Run("case="+c.name, func(t *testing.T) {
			if n, err := d.ReadAt(buf[:c.n], c.off); !errors.Is(err, ErrOutOfRange) || n != 0 {
				t.Errorf("ReadAt: %d, %v; want 0, ErrOutOfRange", n, err)
			}
			if n, err := d.WriteAt(buf[:c.n], c.off); !errors.Is(err, ErrOutOfRange) || n != 0 {
				t.Errorf("WriteAt: %d, %v; want 0, ErrOutOfRange", n, err)
			}
			if err := d.Discard(c.off, int64(c.n)); !errors.Is(err, ErrOutOfRange) {
				t.Errorf("Discard: %v, want ErrOutOfRange", err)
			}
			if _, err := d.NextData(c.off); (c.off < 0 || c.off > 4096) && !errors.Is(err, ErrOutOfRange) {
				t.Errorf("NextData: %v, want ErrOutOfRange", err)
			}
		})
	}
	if err := d.Discard(0, 100); !errors.Is(err, ErrUnaligned) {
		t.Errorf("unaligned Discard: %v, want ErrUnaligned", err)
	}
	if err := d.Discard(0, -512); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("negative Discard: %v, want ErrOutOfRange", err)
	}
	// Empty requests at the end are in range.
	if n, err := d.ReadAt(nil, 4096); n != 0 || err != nil {
		t.Errorf("empty ReadAt at end: %d, %v", n, err)
	}
}

func TestOpenFileErrors(t *testing.T) {
	dir := t.TempDir()
	odd := filepath.Join(dir, "odd")
	if err := os.WriteFile(odd, make([]byte, 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "img")
	if err := os.WriteFile(img, make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		path string
		opts FileOptions
		is   error
	}{
		{"missing", filepath.Join(dir, "nope"), FileOptions{}, fs.ErrNotExist},
		{"directory", dir, FileOptions{}, nil},
		{"odd-size", odd, FileOptions{}, nil},
		{"size-not-multiple-of-4096", img + "x", FileOptions{BlockSize: 4096}, fs.ErrNotExist},
		{"bad-block-size", img, FileOptions{BlockSize: 1000}, nil},
		{"tiny-block-size", img, FileOptions{BlockSize: 256}, nil},
		{"char-device", "/dev/null", FileOptions{ReadOnly: true}, nil},
	} {
		t.Run("case="+c.name, func(t *testing.T) {
			d, err := OpenFile(c.path, c.opts)
			if err == nil {
				d.Close()
				t.Fatal("open succeeded")
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Fatalf("error %v does not match %v", err, c.is)
			}
			if msg := err.Error(); len(msg) < 10 || msg[:10] != "blockdev: " {
				t.Fatalf("error %q lacks the package prefix", msg)
			}
		})
	}
	// 8192 bytes is a multiple of 4096, 12288+512 is not.
	if err := os.WriteFile(img, make([]byte, 12288+512), 0o644); err != nil {
		t.Fatal(err)
	}
	if d, err := OpenFile(img, FileOptions{BlockSize: 4096}); err == nil {
		d.Close()
		t.Fatal("opened an image whose size is not a multiple of the block size")
	}
	if _, err := CreateImage(img, 4096, FileOptions{}); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("CreateImage over an existing file: %v, want ErrExist", err)
	}
	for _, size := range []int64{-512, 100} {
		p := filepath.Join(dir, fmt.Sprint("c", size))
		if _, err := CreateImage(p, size, FileOptions{}); err == nil {
			t.Fatalf("CreateImage(size=%d) succeeded", size)
		}
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("CreateImage(size=%d) left a file behind: %v", size, err)
		}
	}
}

func TestFileReadOnlyAndClosed(t *testing.T) {
	p := blocktest.WriteImage(t, t.TempDir(), blocktest.Pattern(8192, 3))
	d, err := OpenFile(p, FileOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	if _, err := d.WriteAt(buf, 0); !errors.Is(err, ErrReadOnly) {
		t.Errorf("WriteAt on read-only: %v", err)
	}
	if err := d.Discard(0, 512); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Discard on read-only: %v", err)
	}
	if _, err := d.ReadAt(buf, 512); err != nil || !bytes.Equal(buf, blocktest.Pattern(8192, 3)[512:1024]) {
		t.Errorf("ReadAt on read-only: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"close":   d.Close(),
		"sync":    d.Sync(),
		"discard": d.Discard(0, 512),
		"drop":    d.DropCache(0, 0),
		"read":    second(d.ReadAt(buf, 0)),
		"write":   second(d.WriteAt(buf, 0)),
		"direct":  second(d.ReadAtDirect(buf, 0)),
		"data":    second(d.NextData(0)),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// TestFileShortRead checks that a file shrinking under the device turns
// into an error, not a silent short read.
func TestFileShortRead(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			p := blocktest.WriteImage(t, t.TempDir(), blocktest.Pattern(16384, 4))
			d, err := OpenFile(p, FileOptions{Direct: direct})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if err := os.Truncate(p, 8192); err != nil {
				t.Fatal(err)
			}
			buf := AlignedBuffer(8192)
			n, err := d.ReadAt(buf, 4096)
			var ioe *IOError
			if !errors.As(err, &ioe) || !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("short read: %d, %v; want *IOError wrapping ErrUnexpectedEOF", n, err)
			}
			if ioe.Op != "read" || ioe.Off != 4096 || ioe.Len != 8192 {
				t.Fatalf("IOError %+v", ioe)
			}
		})
	}
}

func TestFileSparse(t *testing.T) {
	const size = 8 << 20
	d, err := CreateImage(filepath.Join(t.TempDir(), "img"), size, FileOptions{BlockSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.NextData(0); err != io.EOF {
		if errors.Is(err, errors.ErrUnsupported) {
			t.Skip("filesystem does not report holes")
		}
		t.Fatalf("NextData on an empty image: %v, want io.EOF", err)
	}
	writes := []int64{1 << 20, 3 << 20, 3<<20 + 4096, size - 4096}
	for _, off := range writes {
		if _, err := d.WriteAt(bytes.Repeat([]byte{0xA5}, 4096), off); err != nil {
			t.Fatal(err)
		}
	}
	var got []Extent
	for e, err := range DataExtents(d, 0, size) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	t.Logf("extents: %v", got)
	covered := func(off int64) bool {
		for _, e := range got {
			if e.Off <= off && off < e.End() {
				return true
			}
		}
		return false
	}
	for _, off := range writes {
		if !covered(off) {
			t.Errorf("written block at %d not in a data extent", off)
		}
	}
	for _, off := range []int64{0, 2 << 20, 5 << 20} {
		if covered(off) {
			t.Errorf("hole at %d reported as data", off)
		}
	}
	for i := 1; i < len(got); i++ {
		if got[i].Off < got[i-1].End() {
			t.Errorf("extents overlap or are out of order: %v", got)
		}
	}
	// A window clips the extents.
	var clipped []Extent
	for e, err := range DataExtents(d, 3<<20+100, 3<<20+200) {
		if err != nil {
			t.Fatal(err)
		}
		clipped = append(clipped, e)
	}
	if len(clipped) != 1 || clipped[0] != (Extent{Off: 3<<20 + 100, Len: 100}) {
		t.Errorf("clipped extents %v", clipped)
	}
	// Punching the holes back leaves zeros and no data.
	for _, off := range writes {
		if err := d.Discard(off, 4096); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 4096)
	if _, err := d.ReadAt(buf, 3<<20); err != nil || !bytes.Equal(buf, make([]byte, 4096)) {
		t.Fatalf("discarded block reads %v, %x...", err, buf[:8])
	}
	for e, err := range DataExtents(d, 0, size) {
		t.Errorf("after discard: extent %v, %v", e, err)
	}
}

func TestReadUncached(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			want := blocktest.Pattern(64<<10, 9)
			p := blocktest.WriteImage(t, t.TempDir(), want)
			d, err := OpenFile(p, FileOptions{Direct: direct})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if err := d.DropCache(0, 0); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct{ off, n int }{{0, 4096}, {511, 3000}, {60000, 5536}} {
				got := make([]byte, c.n)
				if _, err := ReadUncached(d, got, int64(c.off)); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want[c.off:c.off+c.n]) {
					t.Fatalf("ReadUncached(%d, %d) differs", c.off, c.n)
				}
				got2 := make([]byte, c.n)
				_, err := d.ReadAtDirect(got2, int64(c.off))
				if errors.Is(err, errors.ErrUnsupported) {
					continue
				}
				if err != nil || !bytes.Equal(got2, want[c.off:c.off+c.n]) {
					t.Fatalf("ReadAtDirect(%d, %d): %v", c.off, c.n, err)
				}
			}
		})
	}
}

// TestDirectFallback simulates filesystems that refuse O_DIRECT at open or
// at the first read, as older tmpfs and some FUSE filesystems do.
func TestDirectFallback(t *testing.T) {
	for _, stage := range []string{"open", "probe"} {
		t.Run("refused-at="+stage, func(t *testing.T) {
			testHookDirect = func(s string) error {
				if s == stage {
					return &fs.PathError{Op: "open", Path: "x", Err: syscall.EINVAL}
				}
				return nil
			}
			defer func() { testHookDirect = nil }()
			want := blocktest.Pattern(16384, 5)
			p := blocktest.WriteImage(t, t.TempDir(), want)
			if d, err := OpenFile(p, FileOptions{RequireDirect: true}); err == nil {
				d.Close()
				t.Fatal("RequireDirect open succeeded")
			} else if !errors.Is(err, syscall.EINVAL) {
				t.Fatalf("RequireDirect: %v, want EINVAL", err)
			}
			d, err := OpenFile(p, FileOptions{Direct: true})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if d.DirectIO() || !errors.Is(d.DirectIOError(), syscall.EINVAL) {
				t.Fatalf("DirectIO %v, %v; want false, EINVAL", d.DirectIO(), d.DirectIOError())
			}
			// Buffered I/O works, unaligned included.
			if _, err := d.WriteAt([]byte("xyz"), 7); err != nil {
				t.Fatal(err)
			}
			copy(want[7:], "xyz")
			got := make([]byte, len(want))
			if _, err := d.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("read after fallback: %v", err)
			}
			if _, err := d.ReadAtDirect(got[:512], 0); !errors.Is(err, errors.ErrUnsupported) {
				t.Fatalf("ReadAtDirect after refusal: %v, want ErrUnsupported", err)
			}
			// ReadUncached still reads, through the cache dropper.
			if _, err := ReadUncached(d, got, 0); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("ReadUncached after refusal: %v", err)
			}
		})
	}
}
