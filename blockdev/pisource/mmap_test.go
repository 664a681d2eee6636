package pisource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
)

// TestSourceMappedFault shrinks an extended image under a source: the
// mapped check faults and the run is read instead, which reports the
// missing sectors as unreadable.
func TestSourceMappedFault(t *testing.T) {
	blocktest.SkipNoMmap(t)
	const blocks = 64
	x := newFixture(t, "4096+8", dif.Interleaved, blocks, nil, nil)
	path, _ := x.write(t, t.TempDir())
	src := openSource(t, x.f, x.p, path, "")
	sc := make([]byte, src.ScratchSize(blocks))
	if st, err := src.CheckRun(context.Background(), 0, blocks, sc, blockdev.CheckOptions{}, nil); err != nil || st.OK != blocks {
		t.Fatalf("CheckRun of the whole image: %+v, %v", st, err)
	}
	if err := os.Truncate(path, 40*4104); err != nil {
		t.Fatal(err)
	}
	var nio int
	st, err := src.CheckRun(context.Background(), 0, blocks, sc, blockdev.CheckOptions{}, func(p blockdev.Problem) {
		if p.Kind == blockdev.KindIO {
			nio++
		}
	})
	if err != nil || st.OK != 40 || st.Failed != blocks-40 || nio != blocks-40 {
		t.Fatalf("CheckRun of a shrunk image: %+v, %v, %d I/O problems", st, err, nio)
	}
}

// refusingMapper is an image whose mapping is refused, as a device.Reader
// of a file reports it when the system refuses to map the file (see
// device.TestMapRefused).
type refusingMapper struct{ io.ReaderAt }

func (refusingMapper) ReadMapped(int64, int, func([]byte) error) error {
	return fmt.Errorf("no mapping: %w", errors.ErrUnsupported)
}

// TestMapRefused checks images whose mapping is refused: they are read
// instead, with the same results, and the source stops trying.
func TestMapRefused(t *testing.T) {
	for _, layout := range []dif.Layout{dif.Interleaved, dif.Separate} {
		t.Run("layout="+layoutName(layout), func(t *testing.T) {
			x := newFixture(t, "4096+8", layout, 64, nil, nil)
			var src *Source
			var err error
			if layout == dif.Interleaved {
				img, ierr := NewExtendedImage(refusingMapper{bytes.NewReader(x.data)}, int64(len(x.data)), 4096, 8)
				if ierr != nil {
					t.Fatal(ierr)
				}
				src, err = NewExtendedSource(img, x.f, x.p)
			} else {
				pair, perr := NewDIXPair(refusingMapper{bytes.NewReader(x.data)}, int64(len(x.data)), refusingMapper{bytes.NewReader(x.md)}, int64(len(x.md)), 4096, 8)
				if perr != nil {
					t.Fatal(perr)
				}
				src, err = NewDIXSource(pair, x.f, x.p)
			}
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if st, err := src.CheckRun(context.Background(), 0, 64, make([]byte, src.ScratchSize(64)), blockdev.CheckOptions{}, nil); err != nil || st.OK != 64 {
					t.Errorf("CheckRun with the mapping refused: %+v, %v", st, err)
				}
			}
			if !src.noMap.Load() {
				t.Error("the source did not note that the images cannot be mapped")
			}
		})
	}
}
