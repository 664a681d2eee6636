package scrub

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/faultdev"
	"github.com/difctl/difctl/blockdev/pisource"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// scatter returns hits on the first and last block of every run of
// runBlocks blocks and at a few odd places, alternating the field.
func scatter(blocks, runBlocks int) []hit {
	fields := []dif.Field{dif.FieldData, dif.FieldGuard, dif.FieldAppTag, dif.FieldRefTag}
	var hits []hit
	add := func(b int) {
		if b >= 0 && b < blocks {
			hits = append(hits, hit{b, fields[len(hits)%len(fields)], len(hits) % 7})
		}
	}
	for b := 0; b < blocks; b += runBlocks {
		add(b)
		add(b + runBlocks - 1)
	}
	add(blocks / 3)
	add(blocks - 1)
	return hits
}

// collect is an OnFinding that appends to *dst and checks the LBA order.
func collect(t *testing.T, dst *[]Finding) func(Finding) error {
	return func(f Finding) error {
		if k := len(*dst); k > 0 && (*dst)[k-1].LBA > f.LBA {
			t.Errorf("finding at %d delivered after one at %d", f.LBA, (*dst)[k-1].LBA)
		}
		*dst = append(*dst, f)
		return nil
	}
}

func sorted(fs []Finding) []Finding {
	fs = keys(fs)
	slices.SortFunc(fs, cmpFinding)
	return fs
}

func TestScrubFindsEachOnce(t *testing.T) {
	for _, format := range []string{"512+8", "4096+16:crc64"} {
		for _, layout := range []dif.Layout{dif.Interleaved, dif.Separate} {
			for _, workers := range []int{1, 3, 8} {
				for _, run := range []int{1, 7, 64, 1000} {
					t.Run(fmt.Sprintf("format=%s/layout=%s/workers=%d/run=%d", format, layoutName(layout), workers, run), func(t *testing.T) {
						blocks := 500
						if run == 1 {
							blocks = 100
						}
						x := newFixture(t, format, layout, blocks, []int{2, 3, blocks / 2}, scatter(blocks, 7))
						s := x.source(t, t.TempDir())
						var got []Finding
						rep, err := Run(context.Background(), s, Options{Workers: workers, RunBlocks: run, OnFinding: collect(t, &got)})
						if err != nil {
							t.Fatal(err)
						}
						want := x.badSet()
						if !slices.Equal(sorted(got), want) {
							t.Errorf("findings\n got %v\nwant %v", sorted(got), want)
						}
						bad := map[int64]bool{}
						for _, w := range want {
							bad[w.LBA] = true
						}
						if !rep.Complete || rep.Blocks != int64(blocks) || rep.Failed != int64(len(bad)) || rep.Unwritten != 3 ||
							rep.OK != int64(blocks-3-len(bad)) || rep.FindingsTotal != int64(len(want)) || rep.Bytes != int64(blocks*x.f.BlockSize()) ||
							rep.Next != int64(blocks) || rep.BlockSize != x.f.BlockSize() {
							t.Errorf("report %+v", rep)
						}
						var byKind int64
						for _, n := range rep.Failures {
							byKind += n
						}
						if byKind != int64(len(want)) || rep.Failures[blockdev.KindRefTag] == 0 || rep.Failures[blockdev.KindAppTag] == 0 || rep.Failures[blockdev.KindGuard] == 0 {
							t.Errorf("failures by kind %v", rep.Failures)
						}
						if !slices.Equal(keys(rep.Findings), keys(got)) {
							t.Error("report findings differ from the delivered ones")
						}
						for _, f := range got {
							if f.State != FindingOpen || f.N != 1 || f.Err == nil || f.LastSeen.IsZero() || !f.Bad() {
								t.Errorf("finding %+v", f)
							}
						}
					})
				}
			}
		}
	}
}

func TestScrubRangeAndLimits(t *testing.T) {
	x := newFixture(t, "512+8", dif.Interleaved, 300, nil, scatter(300, 10))
	s := x.source(t, t.TempDir())
	var got []Finding
	rep, err := Run(context.Background(), s, Options{Start: 95, End: 211, RunBlocks: 8, MaxFindings: 3, OnFinding: collect(t, &got)})
	if err != nil {
		t.Fatal(err)
	}
	var want []Finding
	for _, f := range x.badSet() {
		if f.LBA >= 95 && f.LBA < 211 {
			want = append(want, f)
		}
	}
	if !slices.Equal(sorted(got), want) {
		t.Errorf("findings %v, want %v", sorted(got), want)
	}
	if rep.Blocks != 211-95 || rep.From != 95 || rep.Next != 211 || len(rep.Findings) != 3 || rep.FindingsTotal != int64(len(want)) {
		t.Errorf("report %+v", rep)
	}
	rep, err = Run(context.Background(), s, Options{Start: 7, End: 7})
	if err != nil || !rep.Complete || rep.Blocks != 0 {
		t.Errorf("empty range: %+v %v", rep, err)
	}
	if rep, _ := Run(context.Background(), s, Options{MaxFindings: -1}); len(rep.Findings) != 0 || rep.FindingsTotal == 0 {
		t.Errorf("MaxFindings -1 kept %d of %d", len(rep.Findings), rep.FindingsTotal)
	}
}

func TestScrubErrors(t *testing.T) {
	x := newFixture(t, "512+8", dif.Interleaved, 64, nil, []hit{{5, dif.FieldData, 1}, {40, dif.FieldData, 1}})
	s := x.source(t, t.TempDir())
	ctx := context.Background()
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"start=-1", Options{Start: -1}},
		{"end=65", Options{End: 65}},
		{"start>end", Options{Start: 10, End: 5}},
		{"workers=-1", Options{Workers: -1}},
		{"run=-1", Options{RunBlocks: -1}},
		{"run=huge", Options{RunBlocks: math.MaxInt}},
		{"workers=huge", Options{Workers: 1 << 20}},
		{"rereads=-1", Options{Check: blockdev.CheckOptions{Rereads: -1}}},
		{"errors-only=nostate", Options{ErrorsOnly: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if rep, err := Run(ctx, s, c.o); err == nil || rep != nil || !strings.HasPrefix(err.Error(), "scrub: ") {
				t.Errorf("Scrub: %v, %v", rep, err)
			}
		})
	}
	if _, err := Run(ctx, nil, Options{}); err == nil {
		t.Error("nil source accepted")
	}
	t.Run("sink=fails", func(t *testing.T) {
		st := openFileState(t, filepath.Join(t.TempDir(), "state"))
		boom := errors.New("boom")
		n := 0
		rep, err := Run(ctx, s, Options{RunBlocks: 4, State: st, OnFinding: func(Finding) error {
			if n++; n == 2 {
				return boom
			}
			return nil
		}})
		if !errors.Is(err, boom) || rep == nil || rep.Complete {
			t.Fatalf("Scrub: %+v, %v", rep, err)
		}
		// The run holding the refused finding is not past the cursor.
		c, ok, err := st.LoadCursor(0, 64)
		if err != nil || !ok || c.Next != 40 || rep.Next != 40 {
			t.Errorf("cursor %+v %v %v, report next %d", c, ok, err, rep.Next)
		}
	})
	t.Run("source=closed", func(t *testing.T) {
		y := newFixture(t, "512+8", dif.Interleaved, 64, nil, nil)
		dp, _ := y.write(t, t.TempDir())
		img, err := pisource.OpenExtendedImage(dp, 512, 8)
		if err != nil {
			t.Fatal(err)
		}
		src, err := pisource.NewExtendedSource(img, y.f, y.p)
		if err != nil {
			t.Fatal(err)
		}
		img.Close()
		rep, err := Run(ctx, src, Options{})
		if err == nil || rep == nil || rep.Complete || rep.Blocks != 0 {
			t.Errorf("closed: %+v %v", rep, err)
		}
	})
}

func TestScrubTransient(t *testing.T) {
	x := newFixture(t, "512+8", dif.Interleaved, 128, nil, []hit{{100, dif.FieldData, 9}})
	s, fd := faultySource(t, x)
	if _, err := fd.Inject(faultdev.Fault{Kind: faultdev.CorruptRead, Bit: (30*520 + 1) * 8, Times: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := fd.Inject(faultdev.Fault{Kind: faultdev.FailRead, Off: 70 * 520, Len: 1}); err != nil {
		t.Fatal(err)
	}
	var got []Finding
	rep, err := Run(context.Background(), s, Options{RunBlocks: 16, Workers: 2, Check: blockdev.CheckOptions{Rereads: 2}, OnFinding: collect(t, &got)})
	if err != nil {
		t.Fatal(err)
	}
	want := []Finding{
		{LBA: 30, Kind: blockdev.KindGuard, Transient: true, State: FindingRecheckedOK},
		{LBA: 70, Kind: blockdev.KindIO, State: FindingOpen},
		{LBA: 100, Kind: blockdev.KindGuard, State: FindingOpen},
	}
	if len(got) != len(want) {
		t.Fatalf("findings %+v", got)
	}
	for i, f := range got {
		w := want[i]
		if f.LBA != w.LBA || f.Kind != w.Kind || f.Transient != w.Transient || f.State != w.State || f.Bad() == w.Transient {
			t.Errorf("finding %+v, want %+v", f, w)
		}
	}
	if rep.Transient != 1 || rep.Failed != 2 || rep.TransientFailures[blockdev.KindGuard] != 1 || rep.Failures[blockdev.KindIO] != 1 || rep.Failures[blockdev.KindGuard] != 1 {
		t.Errorf("report %+v", rep)
	}
}

// openFileState opens a FileState closed at the end of the test.
func openFileState(t *testing.T, path string) *FileState {
	t.Helper()
	st, err := OpenFileState(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// newStoreState returns a StoreState over a fresh in-memory volume of
// blocks blocks.
func newStoreState(t *testing.T, blocks int) (*StoreState, *store.Tuples) {
	t.Helper()
	kv := store.NewMem()
	t.Cleanup(func() { kv.Close() })
	tu, err := store.CreateTuples(kv, "vol", store.NewManifest("512+8", 512, 8, int64(blocks)*512, "test"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := NewStoreState(tu, "default")
	if err != nil {
		t.Fatal(err)
	}
	return st, tu
}

// killable drops every save once killed, as if the process had died at
// that moment: what it recorded since its last save is not durable.
type killable struct {
	State
	killed atomic.Bool
}

func (k *killable) SaveCursor(c Cursor) error {
	if k.killed.Load() {
		return nil
	}
	return k.State.SaveCursor(c)
}

func (k *killable) Sync() error {
	if k.killed.Load() {
		return nil
	}
	return k.State.Sync()
}

// logFindings returns every finding of a state's log.
func logFindings(t *testing.T, st State) []Finding {
	t.Helper()
	switch st := st.(type) {
	case *FileState:
		fs, err := st.Findings()
		if err != nil {
			t.Fatal(err)
		}
		return fs
	case *StoreState:
		var out []Finding
		for f, err := range st.t.Findings(store.FindingQuery{}) {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, Finding{LBA: f.LBA, Kind: blockdev.Kind(f.Field), Count: f.Count, State: f.State})
		}
		return out
	}
	t.Fatalf("state %T", st)
	return nil
}

func TestScrubResume(t *testing.T) {
	for _, kind := range []string{"file", "store"} {
		for _, stop := range []string{"cancel", "kill"} {
			for _, checkpoint := range []time.Duration{-1, time.Hour} {
				for _, after := range []int{1, 9, 25} {
					t.Run(fmt.Sprintf("state=%s/stop=%s/checkpoint=%v/after=%d", kind, stop, checkpoint, after), func(t *testing.T) {
						const blocks, run = 1000, 16
						x := newFixture(t, "512+8", dif.Interleaved, blocks, []int{500}, scatter(blocks, 37))
						dir := t.TempDir()
						s := x.source(t, dir)
						statePath := filepath.Join(dir, "image.scrub")
						var st State
						if kind == "file" {
							st = openFileState(t, statePath)
						} else {
							st, _ = newStoreState(t, blocks)
						}
						k := &killable{State: st}
						ctx, cancel := context.WithCancel(context.Background())
						defer cancel()
						var first, second []Finding
						n := 0
						o := Options{Workers: 3, RunBlocks: run, State: k, CheckpointInterval: checkpoint}
						o.OnFinding = func(f Finding) error {
							first = append(first, f)
							if n++; n == after {
								if stop == "kill" {
									k.killed.Store(true)
								}
								cancel()
							}
							return nil
						}
						rep1, err := Run(ctx, s, o)
						if !errors.Is(err, context.Canceled) || rep1 == nil || rep1.Complete {
							t.Fatalf("first scrub: %+v, %v", rep1, err)
						}
						if kind == "file" {
							// A new process: the state as found on disk.
							st.(*FileState).Close()
							st = openFileState(t, statePath)
						}
						o = Options{Workers: 2, RunBlocks: run, State: st, Resume: true, CheckpointInterval: checkpoint, OnFinding: collect(t, &second)}
						rep2, err := Run(context.Background(), s, o)
						if err != nil || !rep2.Complete || !rep2.Resumed || rep2.Pass != 1 {
							t.Fatalf("second scrub: %+v, %v", rep2, err)
						}
						want := x.badSet()
						// The log holds every finding exactly once.
						logged := logFindings(t, st)
						if !slices.Equal(sorted(logged), want) {
							t.Errorf("log\n got %v\nwant %v", sorted(logged), want)
						}
						for _, f := range logged {
							if f.Count != 1 || f.State != FindingOpen {
								t.Errorf("logged %+v, want seen once and open", f)
							}
						}
						if stop == "cancel" {
							// A clean stop: deliveries and blocks are exactly
							// once too.
							if got := sorted(append(first, second...)); !slices.Equal(got, want) {
								t.Errorf("delivered\n got %v\nwant %v", got, want)
							}
							if rep2.From != rep1.Next || rep1.Blocks+rep2.Blocks != blocks {
								t.Errorf("first checked %d blocks up to %d, second %d from %d", rep1.Blocks, rep1.Next, rep2.Blocks, rep2.From)
							}
						}
						// The pass is complete: the next scrub starts a new one.
						rep3, err := Run(context.Background(), s, Options{RunBlocks: run, State: st, Resume: true})
						if err != nil || rep3.Resumed || rep3.From != 0 || rep3.Pass != 2 || rep3.FindingsTotal != int64(len(want)) {
							t.Fatalf("third scrub: %+v, %v", rep3, err)
						}
						for _, f := range logFindings(t, st) {
							if f.Count != 2 {
								t.Errorf("after two passes %+v", f)
							}
						}
					})
				}
			}
		}
	}
}

// repair writes the original bytes of block b of the clean fixture into
// the image files of x.
func repair(t *testing.T, x, clean *piFixture, dp, mp string, b int) {
	t.Helper()
	f := x.f
	write := func(path string, off int64, p []byte) {
		fh, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		if _, err := fh.WriteAt(p, off); err != nil {
			t.Fatal(err)
		}
	}
	if f.Layout() == dif.Interleaved {
		ss := f.ExtendedBlockSize()
		write(dp, int64(b*ss), clean.data[b*ss:(b+1)*ss])
		return
	}
	bs, ms := f.BlockSize(), f.MetadataSize()
	write(dp, int64(b*bs), clean.data[b*bs:(b+1)*bs])
	write(mp, int64(b*ms), clean.md[b*ms:(b+1)*ms])
}

// scrubbedAndRepaired returns a 512+8 image of blocks blocks with bad
// blocks 3 (two findings), 50, 51, 52 and 399, scrubbed once with its
// state of kind ("file" or "store"), after which blocks 3 and 51 are
// repaired behind the state's back (block 50 stays bad: the same kind,
// guard, fails again).
func scrubbedAndRepaired(t *testing.T, kind string, layout dif.Layout, blocks int) (blockdev.CheckSource, State) {
	t.Helper()
	hits := []hit{{3, dif.FieldData, 0}, {3, dif.FieldAppTag, 0}, {50, dif.FieldGuard, 1}, {51, dif.FieldRefTag, 2}, {52, dif.FieldData, 7}, {399, dif.FieldAppTag, 3}}
	x := newFixture(t, "512+8", layout, blocks, nil, hits)
	clean := newFixture(t, "512+8", layout, blocks, nil, nil)
	dir := t.TempDir()
	dp, mp := x.write(t, dir)
	s := openSource(t, x.f, x.p, dp, mp)
	var st State
	if kind == "file" {
		st = openFileState(t, filepath.Join(dir, "state"))
	} else {
		st, _ = newStoreState(t, blocks)
	}
	if _, err := Run(context.Background(), s, Options{RunBlocks: 32, State: st}); err != nil {
		t.Fatal(err)
	}
	repair(t, x, clean, dp, mp, 3)
	repair(t, x, clean, dp, mp, 51)
	return s, st
}

func TestScrubErrorsOnly(t *testing.T) {
	for _, kind := range []string{"file", "store"} {
		for _, layout := range []dif.Layout{dif.Interleaved, dif.Separate} {
			t.Run(fmt.Sprintf("state=%s/layout=%s", kind, layoutName(layout)), func(t *testing.T) {
				const blocks = 400
				s, st := scrubbedAndRepaired(t, kind, layout, blocks)
				ctx := context.Background()
				var got []Finding
				rep, err := Run(ctx, s, Options{RunBlocks: 32, State: st, ErrorsOnly: true, OnFinding: collect(t, &got)})
				if err != nil {
					t.Fatal(err)
				}
				if !rep.Complete || !rep.ErrorsOnly || rep.Rechecked != 6 || rep.Resolved != 3 || rep.StillOpen != 3 || rep.Blocks != 5 {
					t.Errorf("report %+v", rep)
				}
				var closed, open []Finding
				for _, f := range got {
					if f.State == FindingRecheckedOK {
						closed = append(closed, f)
					} else {
						open = append(open, f)
					}
				}
				if want := []Finding{{LBA: 3, Kind: blockdev.KindGuard}, {LBA: 3, Kind: blockdev.KindAppTag}, {LBA: 51, Kind: blockdev.KindRefTag}}; !slices.Equal(sorted(closed), sorted(want)) {
					t.Errorf("closed %v, want %v", closed, want)
				}
				if want := []Finding{{LBA: 50, Kind: blockdev.KindGuard}, {LBA: 52, Kind: blockdev.KindGuard}, {LBA: 399, Kind: blockdev.KindAppTag}}; !slices.Equal(sorted(open), want) {
					t.Errorf("still open %v, want %v", open, want)
				}
				var left []Finding
				for f, err := range st.OpenFindings(0, blocks) {
					if err != nil {
						t.Fatal(err)
					}
					left = append(left, f)
				}
				if !slices.Equal(sorted(left), sorted(open)) {
					t.Errorf("open findings after recheck %v", left)
				}
				// A range selects the findings to recheck.
				rep, err = Run(ctx, s, Options{State: st, ErrorsOnly: true, Start: 100})
				if err != nil || rep.Rechecked != 1 || rep.StillOpen != 1 || rep.Resolved != 0 {
					t.Errorf("ranged recheck %+v %v", rep, err)
				}
			})
		}
	}
}

func TestScrubRateLimit(t *testing.T) {
	// Coarse: a limited scrub cannot be faster than its rate allows (less
	// the burst and one run), and lifting the limit while it runs lets it
	// finish at once.
	const blocks = 4096 // 2 MiB of data
	x := newFixture(t, "512+8", dif.Interleaved, blocks, nil, nil)
	s := x.source(t, t.TempDir())
	const rate = 4 << 20
	l := NewRateLimiter(rate)
	start := time.Now()
	rep, err := Run(context.Background(), s, Options{RunBlocks: 64, Limiter: l})
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	min := time.Duration(float64(rep.Bytes-rate/10-64*512) / rate * float64(time.Second))
	if el < min || el > time.Minute {
		t.Errorf("%d bytes at %d B/s took %v, want at least %v", rep.Bytes, rate, el, min)
	}
	l.SetRate(1) // would take weeks
	var lifted atomic.Bool
	rep, err = Run(context.Background(), s, Options{RunBlocks: 64, Limiter: l, ProgressInterval: 10 * time.Millisecond, Progress: func(p Progress) {
		if !lifted.Swap(true) {
			l.SetRate(0)
		}
	}})
	if err != nil || !rep.Complete {
		t.Fatalf("lifted: %+v %v", rep, err)
	}
}

func TestScrubPauseAndProgress(t *testing.T) {
	x := newFixture(t, "512+8", dif.Interleaved, 256, nil, []hit{{7, dif.FieldData, 0}})
	s := x.source(t, t.TempDir())
	l := NewRateLimiter(0)
	l.Pause()
	// Resumed 350 ms after this point, so at least 300 ms into Run, which
	// starts within the 50 ms left (its clock starts after the goroutine's).
	go func() {
		time.Sleep(350 * time.Millisecond)
		l.Resume()
	}()
	var ps []Progress
	rep, err := Run(context.Background(), s, Options{RunBlocks: 16, Limiter: l, ProgressInterval: 50 * time.Millisecond, Progress: func(p Progress) { ps = append(ps, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Elapsed < 300*time.Millisecond || rep.Active > rep.Elapsed-250*time.Millisecond {
		t.Errorf("elapsed %v, active %v: the pause counts as active", rep.Elapsed, rep.Active)
	}
	if len(ps) < 2 {
		t.Fatalf("%d progress reports", len(ps))
	}
	if !ps[0].Paused || ps[0].ETA != -1 || ps[0].Done != 0 {
		t.Errorf("first progress %+v", ps[0])
	}
	last := ps[len(ps)-1]
	if last.Done != 256*512 || last.Total != 256*512 || last.Bytes != last.Done || last.Blocks != 256 || last.Findings != 1 || last.ETA != 0 || last.Rate <= 0 || last.Paused {
		t.Errorf("last progress %+v", last)
	}
}

// TestScrubFullPassCloses: a full pass closes (sets rechecked-ok) the
// open findings of blocks that pass now, as an errors-only scrub does,
// and leaves open those that still fail and those reaching across its
// runs (an errors-only scrub closes those).
func TestScrubFullPassCloses(t *testing.T) {
	for _, kind := range []string{"file", "store"} {
		t.Run("state="+kind, func(t *testing.T) {
			const blocks = 400
			s, st := scrubbedAndRepaired(t, kind, dif.Interleaved, blocks)
			ctx := context.Background()
			// A finding of blocks 20-43, which pass, across two runs.
			if err := st.RecordFinding(Cursor{}, Finding{LBA: 20, N: 24, Kind: blockdev.KindGuard, State: FindingOpen, LastSeen: time.Now()}); err != nil {
				t.Fatal(err)
			}
			var got []Finding
			rep, err := Run(ctx, s, Options{RunBlocks: 32, State: st, OnFinding: collect(t, &got)})
			if err != nil {
				t.Fatal(err)
			}
			var closed []Finding
			for _, f := range got {
				if f.State == FindingRecheckedOK {
					closed = append(closed, f)
				}
			}
			if want := []Finding{{LBA: 3, Kind: blockdev.KindGuard}, {LBA: 3, Kind: blockdev.KindAppTag}, {LBA: 51, Kind: blockdev.KindRefTag}}; !slices.Equal(sorted(closed), sorted(want)) || rep.Resolved != 3 {
				t.Errorf("closed %v (report: %d resolved), want %v", closed, rep.Resolved, want)
			}
			var left []Finding
			for f, err := range st.OpenFindings(0, blocks) {
				if err != nil {
					t.Fatal(err)
				}
				left = append(left, f)
			}
			want := []Finding{{LBA: 20, Kind: blockdev.KindGuard}, {LBA: 50, Kind: blockdev.KindGuard}, {LBA: 52, Kind: blockdev.KindGuard}, {LBA: 399, Kind: blockdev.KindAppTag}}
			if !slices.Equal(sorted(left), want) {
				t.Errorf("open findings after a full pass %v, want %v", left, want)
			}
			// The finding across runs is closed by an errors-only scrub.
			if rep, err := Run(ctx, s, Options{RunBlocks: 32, State: st, ErrorsOnly: true}); err != nil || rep.Resolved != 1 || rep.StillOpen != 3 {
				t.Errorf("errors-only after the pass: %+v %v", rep, err)
			}
		})
	}
}
