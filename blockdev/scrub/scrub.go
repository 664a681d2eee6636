package scrub

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
)

const (
	// DefaultRunBytes is the data size of a scrub run unless
	// Options.RunBlocks says otherwise.
	DefaultRunBytes = 1 << 20
	// MaxRunBytes bounds the data of a scrub run, MaxWorkers the
	// workers: together they bound a scrub's memory.
	MaxRunBytes = 64 << 20
	MaxWorkers  = 256
	// RepairRunBytes is the data size of the runs of a scrub that repairs
	// (Options.Check.Repair) unless Options.RunBlocks says otherwise: a
	// run's repairs are synced and recorded once, at its end, so larger
	// runs pay that once for more blocks.
	RepairRunBytes = MaxRunBytes
	// DefaultMaxFindings bounds Report.Findings unless
	// Options.MaxFindings says otherwise.
	DefaultMaxFindings = 1000
)

// Options tune a Scrub. The zero value scrubs the whole source with
// GOMAXPROCS workers, unlimited, without persistence.
type Options struct {
	// Start and End select the blocks [Start, End). Default: 0 and, for
	// End 0, the source's Blocks().
	Start, End int64
	// Workers is the number of runs checked in parallel, at most
	// MaxWorkers. Default (0): GOMAXPROCS.
	Workers int
	// RunBlocks is the number of blocks per CheckRun, at most MaxRunBytes
	// of data. Default (0): DefaultRunBytes of data, at least one block.
	RunBlocks int
	// Limiter, if not nil, limits the data bytes checked per second and can
	// pause the scrub; keep it to call SetRate, Pause and Resume while the
	// scrub runs. Default nil: unlimited, never paused.
	Limiter *RateLimiter
	// Check is passed to every CheckRun: Uncached to read around the page
	// cache, Rereads to re-read failing blocks and tell transient failures
	// apart. Default: cached, no re-reads.
	Check blockdev.CheckOptions
	// State persists the cursor and the findings. Default nil: nothing is
	// persisted, Resume and ErrorsOnly are not available.
	State State
	// Resume continues the pass over [Start, End) that State's cursor says
	// was stopped, from its first unchecked block. Without a stopped pass
	// (or without Resume) a new pass starts at Start. Default false.
	Resume bool
	// ErrorsOnly rechecks only the blocks of State's open findings in
	// [Start, End): findings that now pass are set to FindingRecheckedOK
	// (and delivered with that state), those that still fail are recorded
	// again. The cursor is not used. Default false.
	ErrorsOnly bool
	// OnFinding, if not nil, receives every finding from the Scrub
	// goroutine in LBA order, just before State records it (and, in an
	// errors-only scrub, every finding it sets to rechecked-ok). An error
	// stops the scrub and is returned; the findings of that run are then
	// not recorded and the cursor stays before it.
	OnFinding func(Finding) error
	// MaxFindings bounds the findings kept in Report.Findings (the
	// counts are always complete). Default (0): DefaultMaxFindings;
	// negative: none are kept.
	MaxFindings int
	// Progress, if not nil, is called from the Scrub goroutine every
	// ProgressInterval and once when the scrub ends.
	Progress func(Progress)
	// ProgressInterval defaults to one second.
	ProgressInterval time.Duration
	// CheckpointInterval is how often the cursor is saved (each save syncs
	// the state). The cursor is also saved when the scrub ends or stops.
	// Default (0): 5 seconds; negative: after every run.
	CheckpointInterval time.Duration
}

// Progress reports a running scrub.
//
// Active time is the wall-clock time since Scrub began minus the time the
// Limiter spent paused; time spent waiting for the rate limit is active.
// Rate is the data bytes checked by this call per second of active time,
// capped by the Limiter's current rate; ETA is the remaining bytes at that
// rate (-1 while the rate is unknown). A paused scrub's ETA does not count
// down, and after a resume its Rate is not diluted by the pause.
type Progress struct {
	// Done and Total are data bytes of the range: checked (including what
	// a resumed pass had checked before) and in all. For an errors-only
	// scrub, of the blocks to recheck.
	Done, Total int64
	// Bytes and Blocks are what this call checked.
	Bytes, Blocks int64
	// Findings counts the findings delivered so far.
	Findings        int64
	Rate            float64 // bytes per second of active time
	ETA             time.Duration
	Active, Elapsed time.Duration
	Paused          bool
}

// Report is the outcome of a Scrub: everything a summary needs.
type Report struct {
	// Start and End are the range; From is the first block this call
	// checked (after Start when Resumed); Next the first block it did not
	// (End when Complete).
	Start, End, From, Next int64
	Resumed                bool
	Complete               bool
	ErrorsOnly             bool
	// Pass is the number of the pass (1 for the first over this range with
	// this State; 0 without State).
	Pass      uint64
	BlockSize int
	// RunStats counts the blocks this call checked by outcome.
	blockdev.RunStats
	// Bytes is the data checked by this call.
	Bytes int64
	// Failures counts failed checks by Kind (a block failing two checks
	// counts in both), not counting transient or repaired ones;
	// TransientFailures and RepairedFailures count those.
	Failures, TransientFailures, RepairedFailures map[blockdev.Kind]int64
	// Repairable and Unrepairable count the failed checks of Failures for
	// which the repair stage found a verified copy (a scrub that does not
	// repair) or none, with repair sources (blockdev.CheckOptions).
	Repairable, Unrepairable int64
	// Findings holds the first MaxFindings findings, in LBA order;
	// FindingsTotal counts them all.
	Findings      []Finding
	FindingsTotal int64
	// Errors-only scrubs: the open findings rechecked, those now passing
	// (set to rechecked-ok) and those still failing. A full pass with a
	// State counts in Resolved the open findings it closed: those whose
	// blocks lie in one of its runs and pass now.
	Rechecked, Resolved, StillOpen int64
	// Active is the elapsed time minus the time spent paused (see
	// Progress).
	Active, Elapsed time.Duration
}

// Scrub checks the blocks of src in runs, in parallel, and reports every
// block that is not clean (see Options). Memory is bounded whatever
// the size of src: Workers scratch buffers of ScratchSize(RunBlocks) bytes,
// the problems of at most 2*Workers runs waiting to be delivered in order,
// and MaxFindings findings (an errors-only scrub also holds the open
// findings it rechecks).
//
// The cursor only moves past runs that were fully checked and whose
// findings were recorded and delivered, so a scrub stopped at any moment
// and resumed records and delivers every finding of the pass exactly once
// (with a State that keeps its contract).
//
// Scrub returns a report even with an error: the counts of what was
// checked. The error is non-nil if the scrub stopped early: ctx cancelled
// (matching context.Canceled), a run failed as a whole, State or OnFinding
// failed. Integrity failures are not errors: they are in the report.
func Run(ctx context.Context, src blockdev.CheckSource, opts Options) (*Report, error) {
	s, err := newScrubber(src, opts)
	if err != nil {
		return nil, err
	}
	if opts.ErrorsOnly {
		err = s.errorsOnly(ctx)
	} else {
		err = s.scan(ctx)
	}
	s.rep.Elapsed = time.Since(s.t0)
	s.rep.Active = s.active(s.rep.Elapsed)
	if s.o.Progress != nil {
		s.o.Progress(s.progress())
	}
	return s.rep, err
}

// scrubJob is a run to check.
type scrubJob struct {
	lba int64
	n   int
}

// scrubSlot holds a dispatched run until it is committed in order.
type scrubSlot struct {
	job      scrubJob
	stats    blockdev.RunStats
	problems []blockdev.Problem
	err      error
}

type scrubber struct {
	src     blockdev.CheckSource
	o       Options
	bs      int64
	window  int64
	rep     *Report
	t0      time.Time
	paused0 time.Duration
	total   int64 // bytes of the work, for progress
	done    int64 // bytes of the range done before this call (resume)

	// scan
	pass     Cursor
	lastSave time.Time

	batch   []Finding // findings of the run being committed
	closes  []bool    // for each of batch: an open finding to close
	pending []Finding // emit's findings for a FindingsRecorder
	closing []Finding // emit's findings to close, for a FindingStatesSetter
	anyOpen bool      // a full pass: State had open findings in its range

	// errors-only
	open     []Finding
	failing  []bool
	repaired []bool // an open finding repaired by the recheck
	lo       int
}

func newScrubber(src blockdev.CheckSource, o Options) (*scrubber, error) {
	if src == nil {
		return nil, errors.New("scrub: nil source")
	}
	blocks, bs := src.Blocks(), src.BlockSize()
	if blocks < 0 || bs <= 0 {
		return nil, fmt.Errorf("scrub: source of %d blocks of %d bytes", blocks, bs)
	}
	if o.End == 0 {
		o.End = blocks
	}
	if o.Start < 0 || o.Start > o.End || o.End > blocks {
		return nil, fmt.Errorf("scrub: range [%d, %d) of %d blocks: %w", o.Start, o.End, blocks, device.ErrOutOfRange)
	}
	if o.Workers < 0 || o.Workers > MaxWorkers || o.RunBlocks < 0 || int64(o.RunBlocks)*int64(bs) > MaxRunBytes {
		return nil, fmt.Errorf("scrub: %d workers (at most %d), %d blocks of %d bytes per run (at most %d bytes)", o.Workers, MaxWorkers, o.RunBlocks, bs, MaxRunBytes)
	}
	if o.Workers == 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.RunBlocks == 0 {
		o.RunBlocks = max(1, DefaultRunBytes/bs)
		if o.Check.Repair {
			o.RunBlocks = max(1, RepairRunBytes/bs)
		}
	}
	if n := src.ScratchSize(o.RunBlocks); n < 0 || n > 2*MaxRunBytes+o.RunBlocks {
		return nil, fmt.Errorf("scrub: the source wants %d bytes of scratch for %d blocks", n, o.RunBlocks)
	}
	if o.Check.Rereads < 0 {
		return nil, fmt.Errorf("scrub: %d re-reads", o.Check.Rereads)
	}
	if o.ErrorsOnly && o.State == nil {
		return nil, errors.New("scrub: errors-only needs a State")
	}
	if o.MaxFindings == 0 {
		o.MaxFindings = DefaultMaxFindings
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = time.Second
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = 5 * time.Second
	}
	s := &scrubber{
		src: src, o: o, bs: int64(bs), window: int64(2 * o.Workers),
		rep: &Report{
			Start: o.Start, End: o.End, From: o.Start, Next: o.Start, ErrorsOnly: o.ErrorsOnly, BlockSize: bs,
			Failures: map[blockdev.Kind]int64{}, TransientFailures: map[blockdev.Kind]int64{}, RepairedFailures: map[blockdev.Kind]int64{},
		},
		t0: time.Now(),
	}
	if o.Limiter != nil {
		s.paused0 = o.Limiter.PausedTime()
	}
	return s, nil
}

func (s *scrubber) active(elapsed time.Duration) time.Duration {
	if s.o.Limiter == nil {
		return elapsed
	}
	return max(0, elapsed-(s.o.Limiter.PausedTime()-s.paused0))
}

func (s *scrubber) progress() Progress {
	el := time.Since(s.t0)
	p := Progress{
		Done: s.done + s.rep.Bytes, Total: s.total, Bytes: s.rep.Bytes, Blocks: s.rep.Blocks,
		Findings: s.rep.FindingsTotal, Elapsed: el, Active: s.active(el), ETA: -1,
	}
	if l := s.o.Limiter; l != nil {
		p.Paused = l.Paused()
	}
	if sec := p.Active.Seconds(); sec > 0 && p.Bytes > 0 {
		p.Rate = float64(p.Bytes) / sec
		if l := s.o.Limiter; l != nil {
			if r := l.Rate(); r > 0 {
				p.Rate = min(p.Rate, float64(r))
			}
		}
		p.ETA = time.Duration(float64(max(0, p.Total-p.Done)) / p.Rate * float64(time.Second))
	}
	return p
}

// scan runs a full pass (or the rest of one) over [Start, End).
func (s *scrubber) scan(ctx context.Context) error {
	o := s.o
	now := time.Now()
	s.pass = Cursor{Start: o.Start, End: o.End, Next: o.Start, Started: now, Updated: now}
	if o.State != nil {
		c, ok, err := o.State.LoadCursor(o.Start, o.End)
		if err != nil {
			return err
		}
		if ok {
			s.pass.Pass = c.Pass
			// A pass in progress has a start time; a completed one does
			// not (its cursor is back at Start for the next pass).
			if o.Resume && !c.Started.IsZero() && c.Next >= o.Start && c.Next < o.End {
				s.pass = c
				s.rep.Resumed = true
			}
		}
		if !s.rep.Resumed {
			// Record the start of the pass before any of its findings.
			if err := o.State.SaveCursor(s.pass); err != nil {
				return err
			}
		}
		s.lastSave = now
		s.rep.Pass = s.pass.Pass + 1
	}
	from := s.pass.Next
	s.rep.From, s.rep.Next = from, from
	if o.State != nil {
		// Open findings in the pass's range: its runs close those that
		// pass now (passing).
		for _, err := range o.State.OpenFindings(from, o.End) {
			if err != nil {
				return err
			}
			s.anyOpen = true
			break
		}
	}
	s.total = (o.End - o.Start) * s.bs
	s.done = (from - o.Start) * s.bs
	rb := int64(o.RunBlocks)
	njobs := (o.End - from + rb - 1) / rb
	job := func(i int64) scrubJob {
		lba := from + i*rb
		return scrubJob{lba: lba, n: int(min(rb, o.End-lba))}
	}
	err := s.run(ctx, njobs, job, s.commitScan)
	if o.State == nil {
		s.rep.Complete = err == nil
		return err
	}
	now = time.Now()
	c := s.pass
	c.Updated = now
	if err == nil {
		// The pass is complete: the next one starts at Start.
		s.rep.Complete = true
		c = Cursor{Start: o.Start, End: o.End, Next: o.Start, Pass: s.pass.Pass + 1, Updated: now}
	}
	if serr := o.State.SaveCursor(c); serr != nil {
		return errors.Join(err, serr)
	}
	return err
}

func (s *scrubber) commitScan(sl *scrubSlot) error {
	now := time.Now()
	s.reset()
	closes, err := s.passing(sl)
	if err != nil {
		return err
	}
	// The run's findings and the open findings it closes, in LBA order.
	for _, p := range sl.problems {
		for len(closes) > 0 && closes[0].LBA <= p.LBA {
			s.add(closes[0], true)
			closes = closes[1:]
		}
		s.add(FindingOf(p, now), false)
	}
	for _, f := range closes {
		s.add(f, true)
	}
	if err := s.emit(); err != nil {
		return err
	}
	s.account(sl)
	s.pass.Next = sl.job.lba + int64(sl.job.n)
	if s.o.State != nil && now.Sub(s.lastSave) >= s.o.CheckpointInterval {
		s.pass.Updated = now
		if err := s.o.State.SaveCursor(s.pass); err != nil {
			return err
		}
		s.lastSave = now
	}
	return nil
}

// passing returns the open findings (bad: open or unrepairable) that a
// full pass's run sl shows to pass now, in LBA order, set to
// rechecked-ok: those whose blocks all lie in the run and that no problem
// of the run matches (a problem that passed on a re-read or was repaired
// matches none). A finding reaching across runs is left to an
// errors-only scrub. Without open findings where the pass started (the
// usual case) it costs nothing.
func (s *scrubber) passing(sl *scrubSlot) ([]Finding, error) {
	if s.o.State == nil || !s.anyOpen {
		return nil, nil
	}
	lo, hi := sl.job.lba, sl.job.lba+int64(sl.job.n)
	s.open = s.open[:0]
	for f, err := range s.o.State.OpenFindings(lo, hi) {
		if err != nil {
			return nil, err
		}
		if f.LBA < lo || f.End() > hi {
			continue
		}
		fails := slices.ContainsFunc(sl.problems, func(p blockdev.Problem) bool {
			return p.Kind == f.Kind && f.LBA <= p.LBA && p.LBA < f.End() && !p.Transient && p.Repair != blockdev.RepairRepaired
		})
		repaired := slices.ContainsFunc(sl.problems, func(p blockdev.Problem) bool {
			return p.Kind == f.Kind && f.LBA <= p.LBA && p.LBA < f.End() && p.Repair == blockdev.RepairRepaired
		})
		if fails || repaired {
			continue // recorded again, or repaired by the repair stage
		}
		f.State = FindingRecheckedOK
		s.open = append(s.open, f)
	}
	return s.open, nil
}

// account adds a committed run to the report.
func (s *scrubber) account(sl *scrubSlot) {
	s.rep.RunStats.Add(sl.stats)
	s.rep.Bytes += int64(sl.job.n) * s.bs
	s.rep.Next = sl.job.lba + int64(sl.job.n)
}

// emit delivers the findings of a run (s.batch) to OnFinding, persists
// them in State and adds them to the report. A finding with s.closes[i]
// set is an open finding that now passes: State sets it to rechecked-ok;
// the others are recorded. A run's findings all reach OnFinding before any
// is persisted: a failing sink leaves nothing of the run in the log.
func (s *scrubber) emit() error {
	fs := s.batch
	if s.o.OnFinding != nil {
		for _, f := range fs {
			if err := s.o.OnFinding(f); err != nil {
				return err
			}
		}
	}
	if st := s.o.State; st != nil {
		rec, batched := st.(FindingsRecorder)
		setter, batchedStates := st.(FindingStatesSetter)
		s.pending, s.closing = s.pending[:0], s.closing[:0]
		for i, f := range fs {
			var err error
			switch {
			case s.closes[i] && batchedStates:
				s.closing = append(s.closing, f)
			case s.closes[i]:
				err = st.SetFindingState(f.LBA, f.Kind, FindingRecheckedOK)
			case f.Repair == blockdev.RepairRepaired:
				// The repair stage recorded it (open before its write,
				// repaired after).
			case batched:
				s.pending = append(s.pending, f)
			default:
				err = st.RecordFinding(s.pass, f)
			}
			if err != nil {
				return err
			}
		}
		if len(s.pending) > 0 {
			if err := rec.RecordFindings(s.pass, s.pending); err != nil {
				return err
			}
		}
		if len(s.closing) > 0 {
			if err := setter.SetFindingStates(s.closing, FindingRecheckedOK); err != nil {
				return err
			}
		}
	}
	for i, f := range fs {
		switch {
		case s.closes[i]:
			s.rep.Resolved++
		case f.Transient:
			s.rep.TransientFailures[f.Kind]++
		case f.Repair == blockdev.RepairRepaired:
			s.rep.RepairedFailures[f.Kind]++
		default:
			s.rep.Failures[f.Kind]++
			switch f.Repair {
			case blockdev.RepairAvailable:
				s.rep.Repairable++
			case blockdev.RepairUnavailable:
				s.rep.Unrepairable++
			}
		}
		s.rep.FindingsTotal++
		if s.o.MaxFindings > 0 && len(s.rep.Findings) < s.o.MaxFindings {
			s.rep.Findings = append(s.rep.Findings, f)
		}
	}
	return nil
}

// add appends a finding to the batch of the run being committed.
func (s *scrubber) add(f Finding, closes bool) {
	s.batch = append(s.batch, f)
	s.closes = append(s.closes, closes)
}

func (s *scrubber) reset() {
	clear(s.batch) // drop the causes
	s.batch, s.closes = s.batch[:0], s.closes[:0]
}

// errorsOnly rechecks the open findings of [Start, End).
func (s *scrubber) errorsOnly(ctx context.Context) error {
	o := s.o
	var ranges BadRanges
	for f, err := range o.State.OpenFindings(o.Start, o.End) {
		if err != nil {
			return err
		}
		s.open = append(s.open, f)
		lo, hi := max(f.LBA, o.Start), min(f.End(), o.End)
		ranges.Add(lo, hi-lo)
	}
	s.failing = make([]bool, len(s.open))
	s.repaired = make([]bool, len(s.open))
	s.rep.Rechecked = int64(len(s.open))
	var jobs []scrubJob
	rb := int64(o.RunBlocks)
	for _, r := range ranges.Ranges() {
		for lba := r.LBA; lba < r.End(); lba += rb {
			jobs = append(jobs, scrubJob{lba: lba, n: int(min(rb, r.End()-lba))})
		}
		s.total += r.N * s.bs
	}
	if len(jobs) > 0 {
		s.rep.From = jobs[0].lba
	}
	err := s.run(ctx, int64(len(jobs)), func(i int64) scrubJob { return jobs[i] }, s.commitRecheck)
	if err == nil {
		s.rep.Complete = true
		s.rep.Next = o.End
		// Findings reaching past End (or past the last rechecked block).
		s.reset()
		s.settle(1<<63 - 1)
		err = s.emit()
	}
	if serr := o.State.Sync(); serr != nil {
		return errors.Join(err, serr)
	}
	return err
}

func (s *scrubber) commitRecheck(sl *scrubSlot) error {
	now := time.Now()
	s.reset()
	for _, p := range sl.problems {
		// Findings wholly before p were wholly rechecked: settle them
		// first, so that the run's findings stay in LBA order.
		s.settle(p.LBA)
		matched := false
		for k := s.lo; k < len(s.open) && s.open[k].LBA <= p.LBA; k++ {
			if f := s.open[k]; f.Kind == p.Kind && p.LBA < f.End() {
				matched = true
				s.failing[k] = s.failing[k] || !p.Passes()
				s.repaired[k] = s.repaired[k] || p.Repair == blockdev.RepairRepaired
			}
		}
		if matched && p.Transient {
			continue // the finding passes on a re-read: settle closes it
		}
		s.add(FindingOf(p, now), false)
	}
	s.settle(sl.job.lba + int64(sl.job.n))
	if err := s.emit(); err != nil {
		return err
	}
	s.account(sl)
	return nil
}

// settle decides the open findings that end at or before block end (all
// their blocks were rechecked): those that did not fail again are added to
// the batch to close.
func (s *scrubber) settle(end int64) {
	for s.lo < len(s.open) && s.open[s.lo].End() <= end {
		k := s.lo
		s.lo++
		if s.failing[k] {
			s.rep.StillOpen++
			continue
		}
		if s.repaired[k] {
			// Recorded repaired by the repair stage, and delivered.
			continue
		}
		f := s.open[k]
		f.State = FindingRecheckedOK
		s.add(f, true)
	}
}

// run checks njobs runs (job(i) describes run i) on the workers and commits
// them in order. It stops at the first error of a run or of commit; runs
// after it are not committed.
func (s *scrubber) run(ctx context.Context, njobs int64, job func(int64) scrubJob, commit func(*scrubSlot) error) error {
	if njobs == 0 {
		return nil
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	window := min(s.window, njobs)
	slots := make([]scrubSlot, window)
	done := make([]bool, window)
	jobs := make(chan int64, window)
	results := make(chan int64, window)
	var wg sync.WaitGroup
	for range min(int64(s.o.Workers), njobs) {
		wg.Add(1)
		go s.worker(wctx, slots, jobs, results, &wg)
	}
	defer func() {
		close(jobs)
		wg.Wait()
	}()
	var tick <-chan time.Time
	if s.o.Progress != nil {
		t := time.NewTicker(s.o.ProgressInterval)
		defer t.Stop()
		tick = t.C
	}
	var next, received, committed int64
	var stop error
	for {
		for stop == nil && next < njobs && next-committed < window {
			sl := &slots[next%window]
			clear(sl.problems)
			*sl = scrubSlot{job: job(next), problems: sl.problems[:0]}
			jobs <- next
			next++
		}
		if received == next && (stop != nil || committed == njobs) {
			return stop
		}
		select {
		case i := <-results:
			received++
			done[i%window] = true
		case <-tick:
			s.o.Progress(s.progress())
		}
		for stop == nil && committed < next && done[committed%window] {
			sl := &slots[committed%window]
			done[committed%window] = false
			if sl.err != nil {
				stop = fmt.Errorf("scrub: stopped at block %d: %w", sl.job.lba, sl.err)
			} else if err := commit(sl); err != nil {
				stop = err
			} else {
				committed++
				continue
			}
			cancel()
		}
	}
}

func (s *scrubber) worker(ctx context.Context, slots []scrubSlot, jobs <-chan int64, results chan<- int64, wg *sync.WaitGroup) {
	defer wg.Done()
	scratch := make([]byte, s.src.ScratchSize(s.o.RunBlocks))
	var cur *scrubSlot
	report := func(p blockdev.Problem) { cur.problems = append(cur.problems, p) }
	w := int64(len(slots))
	for i := range jobs {
		cur = &slots[i%w]
		switch {
		case ctx.Err() != nil:
			cur.err = ctx.Err()
		case s.o.Limiter != nil:
			cur.err = s.o.Limiter.Wait(ctx, int64(cur.job.n)*s.bs)
		}
		if cur.err == nil {
			cur.stats, cur.err = s.src.CheckRun(ctx, cur.job.lba, cur.job.n, scratch, s.o.Check, report)
		}
		results <- i
	}
}
