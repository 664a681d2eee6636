package pisource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/blockdev/internal/check"
	"github.com/difctl/difctl/dif"
)

// The one predicate for a fatal device error (check.Fatal) holds for a
// Source as for a Volume (blockdev's TestFatalReadErrors): a closed,
// crashed or cancelled image, or a read out of range, fails CheckRun as a
// whole and reports no block, while an ordinary I/O error marks every
// block unreadable (KindIO).
func TestFatalReadErrors(t *testing.T) {
	const blocks = 64
	f := dif.MustFormat("512+8")
	img := make([]byte, blocks*520)
	data := blocktest.Pattern(blocks*512, 7)
	p := dif.Params{RefTag: 0}
	for i := range blocks {
		copy(img[i*520:], data[i*512:(i+1)*512])
	}
	if err := f.Generate(img, nil, p); err != nil {
		t.Fatal(err)
	}
	rd := &blocktest.FailingReader{R: bytes.NewReader(img)}
	ext, err := NewExtendedImage(rd, int64(len(img)), 512, 8)
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewExtendedSource(ext, f, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, readErr := range blocktest.ReadErrors(check.FatalErrors()) {
		tc := struct {
			err   error
			fatal bool
		}{readErr, check.Fatal(readErr)}
		t.Run(fmt.Sprintf("err=%v", tc.err), func(t *testing.T) {
			rd.Fail(tc.err)
			defer rd.Fail(nil)
			var io int
			st, err := src.CheckRun(context.Background(), 0, blocks, make([]byte, src.ScratchSize(blocks)),
				blockdev.CheckOptions{Rereads: 1}, func(p blockdev.Problem) {
					if p.Kind == blockdev.KindIO {
						io++
					}
				})
			if tc.fatal {
				// An image reports a closed reader as ErrClosed.
				if !errors.Is(err, tc.err) && !(errors.Is(tc.err, os.ErrClosed) && errors.Is(err, device.ErrClosed)) || io != 0 {
					t.Errorf("CheckRun: %v with %d unreadable blocks, want %v and none", err, io, tc.err)
				}
				return
			}
			if err != nil || io != blocks || st.Failed != blocks {
				t.Errorf("CheckRun: %v, %d unreadable blocks, %d failed; want nil and %d", err, io, st.Failed, blocks)
			}
		})
	}
}
