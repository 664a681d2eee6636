package blockdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// failingReads is a Device whose reads fail with err while it is set. It
// hides the device's other interfaces (Mapper, DataFinder), so every read
// goes through ReadAt.
type failingReads struct {
	Device
	err atomic.Pointer[error]
}

func (d *failingReads) ReadAt(p []byte, off int64) (int, error) {
	if e := d.err.Load(); e != nil {
		return 0, *e
	}
	return d.Device.ReadAt(p, off)
}

// failingReader is an io.ReaderAt (an image) with the same switch.
type failingReader struct {
	r   io.ReaderAt
	err atomic.Pointer[error]
}

func (r *failingReader) ReadAt(p []byte, off int64) (int, error) {
	if e := r.err.Load(); e != nil {
		return 0, *e
	}
	return r.r.ReadAt(p, off)
}

// The one predicate for a fatal device error (fatalReadError) holds for
// every verifier: a closed, crashed or cancelled device, or a read out of
// range, fails a Volume's CheckRun and ReadAt, an export and a PISource's
// CheckRun as a whole and reports no block, while an ordinary I/O error
// marks every block unreadable (KindIO). Before, a Volume reported a
// cancelled read as unreadable blocks, and a PISource a crashed device.
func TestFatalReadErrors(t *testing.T) {
	const blocks = 64
	f := dif.MustFormat("512+8:dix")
	mem, err := NewMemDevice(blocks*512, 512)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mem.WriteAt(pattern(blocks*512, 7), 0); err != nil {
		t.Fatal(err)
	}
	dev := &failingReads{Device: mem}
	kv := store.NewMem()
	defer kv.Close()
	v, err := Create(context.Background(), dev, kv, CreateOptions{Format: f, Options: Options{NoMap: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()

	// An extended-LBA image of the same blocks, for a PISource.
	fi := dif.MustFormat("512+8")
	img := make([]byte, blocks*520)
	data := pattern(blocks*512, 7)
	p := dif.Params{RefTag: 0}
	for i := range blocks {
		copy(img[i*520:], data[i*512:(i+1)*512])
	}
	if err := fi.Generate(img, nil, p); err != nil {
		t.Fatal(err)
	}
	rd := &failingReader{r: bytes.NewReader(img)}
	ext, err := NewExtendedImage(rd, int64(len(img)), 512, 8)
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewExtendedSource(ext, fi, p)
	if err != nil {
		t.Fatal(err)
	}

	eio := &os.PathError{Op: "read", Path: "dev", Err: syscall.EIO}
	for _, tc := range []struct {
		err   error
		fatal bool
	}{
		{ErrClosed, true},
		{os.ErrClosed, true},
		{ErrCrashed, true},
		{ErrOutOfRange, true},
		{context.Canceled, true},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("wrapped: %w", ErrCrashed), true},
		{eio, false},
	} {
		t.Run(fmt.Sprintf("err=%v", tc.err), func(t *testing.T) {
			if got := fatalReadError(tc.err); got != tc.fatal {
				t.Fatalf("fatalReadError = %v, want %v", got, tc.fatal)
			}
			e := tc.err
			dev.err.Store(&e)
			rd.err.Store(&e)
			defer dev.err.Store(nil)
			defer rd.err.Store(nil)

			type checker interface {
				CheckRun(context.Context, int64, int, []byte, CheckOptions, func(Problem)) (RunStats, error)
				ScratchSize(int) int
			}
			for name, c := range map[string]checker{"volume": v, "pisource": src} {
				var io int
				st, err := c.CheckRun(context.Background(), 0, blocks, make([]byte, c.ScratchSize(blocks)),
					CheckOptions{Rereads: 1}, func(p Problem) {
						if p.Kind == KindIO {
							io++
						}
					})
				if tc.fatal {
					// An image reports a closed reader as ErrClosed.
					if !errors.Is(err, tc.err) && !(tc.err == os.ErrClosed && errors.Is(err, ErrClosed)) || io != 0 {
						t.Errorf("%s: CheckRun: %v with %d unreadable blocks, want %v and none", name, err, io, tc.err)
					}
					continue
				}
				if err != nil || io != blocks || st.Failed != blocks {
					t.Errorf("%s: CheckRun: %v, %d unreadable blocks, %d failed; want nil and %d", name, err, io, st.Failed, blocks)
				}
			}

			buf := make([]byte, 4096)
			_, err := v.ReadAt(buf, 0)
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
