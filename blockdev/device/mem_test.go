package device

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"testing"

	"github.com/difctl/difctl/blockdev/internal/blocktest"
)

func TestMem(t *testing.T) {
	for _, bs := range []int{512, 4096} {
		for _, size := range []int64{0, int64(bs), 3*memChunk + int64(bs)} {
			t.Run(fmt.Sprintf("bs=%d/size=%d", bs, size), func(t *testing.T) {
				m, err := NewMem(size, bs)
				if err != nil {
					t.Fatal(err)
				}
				if m.Size() != size || m.LogicalBlockSize() != bs || m.PhysicalBlockSize() != bs {
					t.Fatal("geometry")
				}
				// A flat oracle.
				ref := make([]byte, size)
				for i, c := range []struct{ off, n int64 }{
					{0, 1}, {size - 1, 1}, {5, memChunk}, {memChunk - 3, 7}, {100, 2*memChunk + 9}, {0, size},
				} {
					if c.off < 0 || c.n > size || c.off+c.n > size {
						continue
					}
					p := blocktest.Pattern(int(c.n), uint64(i))
					if _, err := m.WriteAt(p, c.off); err != nil {
						t.Fatal(err)
					}
					copy(ref[c.off:], p)
				}
				got := make([]byte, size)
				if _, err := m.ReadAt(got, 0); err != nil || !bytes.Equal(got, ref) {
					t.Fatalf("contents differ: %v", err)
				}
				if m.Allocated() > size {
					t.Fatalf("allocated %d for a %d-byte device", m.Allocated(), size)
				}
			})
		}
	}
}

func TestMemSparse(t *testing.T) {
	size := int64(1 << 40) // 1 TiB, nothing allocated up front
	m, err := NewMem(size, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.NextData(0); err != io.EOF {
		t.Fatalf("NextData on an empty device: %v", err)
	}
	writes := []int64{3 * memChunk, 4 * memChunk, 1 << 30, size - 4096}
	for _, off := range writes {
		if _, err := m.WriteAt([]byte{1}, off); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.Allocated(); got != 4*memChunk {
		t.Fatalf("allocated %d, want %d", got, 4*memChunk)
	}
	var got []Extent
	for e, err := range DataExtents(m, 100, size) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	want := []Extent{{Off: 3 * memChunk, Len: 2 * memChunk}, {Off: 1 << 30, Len: memChunk}, {Off: size - memChunk, Len: memChunk}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("extents %v, want %v", got, want)
	}
	// Discard frees whole chunks and zeroes partial ones.
	if err := m.Discard(3*memChunk, memChunk+4096); err != nil {
		t.Fatal(err)
	}
	if got := m.Allocated(); got != 3*memChunk {
		t.Fatalf("allocated %d after discard, want %d", got, 3*memChunk)
	}
	b := []byte{9}
	if _, err := m.ReadAt(b, 4*memChunk); err != nil || b[0] != 0 {
		t.Fatalf("discarded byte reads %d, %v", b[0], err)
	}
	if e, err := m.NextData(0); err != nil || e != (Extent{Off: 4 * memChunk, Len: memChunk}) {
		t.Fatalf("NextData after discard: %v, %v", e, err)
	}
}

func TestMemErrors(t *testing.T) {
	for _, c := range []struct {
		size int64
		bs   int
	}{{-512, 512}, {100, 512}, {4096, 0}, {4096, 768}, {4096, 1 << 17}} {
		if _, err := NewMem(c.size, c.bs); err == nil {
			t.Errorf("NewMem(%d, %d) succeeded", c.size, c.bs)
		}
	}
	m, err := NewMem(8192, 512)
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{-1, 8192, 8000, math.MaxInt64} {
		if _, err := m.ReadAt(make([]byte, 512), off); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("ReadAt(%d): %v", off, err)
		}
		if _, err := m.WriteAt(make([]byte, 512), off); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("WriteAt(%d): %v", off, err)
		}
	}
	if err := m.Discard(0, 100); !errors.Is(err, ErrUnaligned) {
		t.Errorf("Discard unaligned: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ReadAt(make([]byte, 1), 0); !errors.Is(err, ErrClosed) {
		t.Errorf("ReadAt after Close: %v", err)
	}
	if err := m.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}
