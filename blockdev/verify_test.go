package blockdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/blockdev/internal/check"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// failingReads is a Device whose reads fail while r is told to. It hides
// the device's other interfaces (Mapper, DataFinder), so every read goes
// through ReadAt.
type failingReads struct {
	device.Device
	r blocktest.FailingReader // over Device
}

func (d *failingReads) ReadAt(p []byte, off int64) (int, error) { return d.r.ReadAt(p, off) }

// The one predicate for a fatal device error (check.Fatal) holds for
// every verifier: a closed, crashed or cancelled device, or a read out of
// range, fails a Volume's CheckRun and ReadAt and an export as a whole and
// reports no block, while an ordinary I/O error marks every block
// unreadable (KindIO). (The same test of a pisource.Source is in its
// package.) Before, a Volume reported a cancelled read as unreadable
// blocks, and an image source (pisource.Source) a crashed device.
func TestFatalReadErrors(t *testing.T) {
	const blocks = 64
	f := dif.MustFormat("512+8:dix")
	mem, err := device.NewMem(blocks*512, 512)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mem.WriteAt(blocktest.Pattern(blocks*512, 7), 0); err != nil {
		t.Fatal(err)
	}
	dev := &failingReads{Device: mem, r: blocktest.FailingReader{R: mem}}
	kv := store.NewMem()
	defer kv.Close()
	v, err := Create(context.Background(), dev, kv, CreateOptions{Format: f, Options: Options{NoMap: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()

	for _, readErr := range blocktest.ReadErrors(check.FatalErrors()) {
		tc := struct {
			err   error
			fatal bool
		}{readErr, check.Fatal(readErr)}
		t.Run(fmt.Sprintf("err=%v", tc.err), func(t *testing.T) {
			dev.r.Fail(tc.err)
			defer dev.r.Fail(nil)

			var io int
			st, err := v.CheckRun(context.Background(), 0, blocks, make([]byte, v.ScratchSize(blocks)),
				CheckOptions{Rereads: 1}, func(p Problem) {
					if p.Kind == KindIO {
						io++
					}
				})
			if tc.fatal {
				if !errors.Is(err, tc.err) || io != 0 {
					t.Errorf("CheckRun: %v with %d unreadable blocks, want %v and none", err, io, tc.err)
				}
			} else if err != nil || io != blocks || st.Failed != blocks {
				t.Errorf("CheckRun: %v, %d unreadable blocks, %d failed; want nil and %d", err, io, st.Failed, blocks)
			}

			buf := make([]byte, 4096)
			_, err = v.ReadAt(buf, 0)
			var ie *IntegrityError
			switch {
			case !errors.Is(err, tc.err):
				t.Errorf("ReadAt: %v, want %v", err, tc.err)
			case tc.fatal && errors.As(err, &ie):
				t.Errorf("ReadAt: %v, want the device's error, not an integrity error", err)
			}

			var out bytes.Buffer
			_, err = ExportVolume(context.Background(), v, ExportDest{Data: &writerAt{&out}}, ExportOptions{})
			if tc.fatal != !errors.As(err, &ie) || tc.fatal && !errors.Is(err, tc.err) {
				t.Errorf("ExportVolume: %v (fatal %v)", err, tc.fatal)
			}
		})
	}
}

// writerAt is an io.WriterAt over a growing buffer.
type writerAt struct{ b *bytes.Buffer }

func (w *writerAt) WriteAt(p []byte, off int64) (int, error) {
	if need := int(off) + len(p); w.b.Len() < need {
		w.b.Write(make([]byte, need-w.b.Len()))
	}
	copy(w.b.Bytes()[off:], p)
	return len(p), nil
}

// Export reads through the Volume's verifier, so it holds unwritten blocks
// to their rule: data in a discarded block is reported (KindUnwrittenData)
// and stops the export, instead of being exported as zeros under the
// unwritten tuple as the separate export checker did.
func TestExportUnwrittenData(t *testing.T) {
	tv := newTestVol(t, "512+8:dix", 64, CreateOptions{})
	if err := tv.v.Discard(8*512, 4*512); err != nil {
		t.Fatal(err)
	}
	if _, err := tv.mem.WriteAt([]byte("not zeros"), 9*512+100); err != nil {
		t.Fatal(err)
	}
	var kinds []Kind
	var out bytes.Buffer
	rep, err := ExportVolume(context.Background(), tv.v, ExportDest{Data: &writerAt{&out}},
		ExportOptions{OnProblem: func(p Problem) { kinds = append(kinds, p.Kind) }})
	var ie *IntegrityError
	if !errors.As(err, &ie) || ie.LBA != 9 || ie.Failed != 1 || !errors.Is(err, ErrUnwrittenData) {
		t.Fatalf("ExportVolume: %v, want an integrity error at block 9 matching ErrUnwrittenData", err)
	}
	if len(kinds) != 1 || kinds[0] != KindUnwrittenData || rep.Failed != 1 || rep.Next != 0 {
		t.Fatalf("problems %v, report %+v; want one unwritten-data and nothing written", kinds, rep)
	}
}
