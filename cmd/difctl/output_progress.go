package main

import (
	"encoding/json"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// progress reports how far a long operation got, in bytes. Commands call
// Add as they go and Finish once, whatever the outcome; both are cheap and
// safe on the no-op reporter, so commands never test whether progress is
// shown.
type progress interface {
	Add(n int64)
	Finish()
}

// newProgress returns a progress bar with rate and ETA on stderr when
// stderr is a terminal and --quiet is off, and a no-op reporter otherwise.
// total is the number of bytes expected, or -1 when unknown (a spinner).
func newProgress(stderr io.Writer, quiet bool, total int64, desc string) progress {
	if quiet || !isTerminal(stderr) {
		return noProgress{}
	}
	return newBar(stderr, total, desc)
}

// newCmdProgress is the progress of protect, verify and scrub: JSON Lines
// progress records on stderr with --progress-json (whatever --quiet and
// the terminal say: a program asked for them), else newProgress. command
// and image name the operation in the records and the bar.
func newCmdProgress(stderr io.Writer, g globalOptions, total int64, command, image string) progress {
	if g.ProgressJSON {
		return newJSONProgress(stderr, total, command, image)
	}
	return newProgress(stderr, g.Quiet, total, command+" "+image)
}

// addProgressJSONFlag registers --progress-json.
func addProgressJSONFlag(cmd *cobra.Command, g *globalOptions) {
	cmd.Flags().BoolVar(&g.ProgressJSON, "progress-json", false, "write progress as JSON Lines on standard error, every second and once at the end (see SCHEMA.md), instead of a bar on a terminal")
}

// minRateElapsed is how long an operation runs before a rate (and an
// ETA) is given: the first reports come after a few chunks done in
// microseconds, whose rate (bytes over almost no time) would be absurd.
const minRateElapsed = time.Second

// progressRecord is a --progress-json record.
type progressRecord struct {
	header
	Command string   `json:"command"`
	Image   string   `json:"image"`
	Done    int64    `json:"bytes_done"`
	Total   *int64   `json:"bytes_total,omitempty"`
	Seconds float64  `json:"seconds"`
	Rate    *float64 `json:"bytes_per_second,omitempty"`
	ETA     *float64 `json:"eta_seconds,omitempty"`
	Final   bool     `json:"final"`
}

func (*progressRecord) recordType() string { return "progress" }

// jsonProgress writes a progressRecord every interval (on the first Add
// after it) and a final one on Finish.
type jsonProgress struct {
	mu       sync.Mutex
	enc      *json.Encoder
	command  string
	image    string
	total    int64
	done     int64
	t0, last time.Time
	interval time.Duration
	finished bool
}

func newJSONProgress(w io.Writer, total int64, command, image string) *jsonProgress {
	now := time.Now()
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return &jsonProgress{enc: enc, command: command, image: image, total: total, t0: now, last: now, interval: time.Second}
}

func (p *jsonProgress) Add(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	if now := time.Now(); now.Sub(p.last) >= p.interval {
		p.last = now
		p.emitLocked(now, false)
	}
}

func (p *jsonProgress) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return
	}
	p.finished = true
	p.emitLocked(time.Now(), true)
}

func (p *jsonProgress) emitLocked(now time.Time, final bool) {
	el := now.Sub(p.t0)
	r := &progressRecord{Command: p.command, Image: p.image, Done: p.done, Seconds: el.Seconds(), Final: final}
	if p.total >= 0 {
		r.Total = &p.total
	}
	if el >= minRateElapsed {
		rate := float64(p.done) / el.Seconds()
		r.Rate = &rate
		if p.total >= 0 && rate > 0 {
			eta := float64(max(0, p.total-p.done)) / rate
			r.ETA = &eta
		}
	}
	r.stamp(r.recordType())
	_ = p.enc.Encode(r) // progress is best effort: stderr may be gone
}

// isTerminal reports whether w is a terminal: a file that is one, or a
// writer that says so (the standard error of a client of serve's control
// socket, which forwards it; control.go).
func isTerminal(w io.Writer) bool {
	if t, ok := w.(interface{ terminal() bool }); ok {
		return t.terminal()
	}
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

type noProgress struct{}

func (noProgress) Add(int64) {}
func (noProgress) Finish()   {}

// bar is the terminal reporter. It clears itself on Finish so the results
// that follow on stdout do not interleave with it. Sizes and rates are in
// binary units (KiB, MiB, as the flags and summaries), and the times are
// labelled: "elapsed 3s, ETA 12s" (the library's bare "[3s:12s]" does not
// say which is which).
type bar struct {
	pb    *progressbar.ProgressBar
	desc  string
	total int64
	done  int64
	t0    time.Time
	last  time.Time
	// minElapsed is minRateElapsed but in tests.
	minElapsed time.Duration
	// pending is added but not yet drawn.
	pending int64
}

func newBar(w io.Writer, total int64, desc string) *bar {
	b := &bar{desc: desc, total: total, t0: time.Now(), minElapsed: minRateElapsed}
	b.pb = progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowBytes(true), // rate in bytes per second
		progressbar.OptionUseIECUnits(true),
		progressbar.OptionShowCount(), // bytes done / total
		progressbar.OptionSetPredictTime(false),
		// A spinner (unknown total) shows only the elapsed time, in
		// brackets; the bar shows both, labelled, in its description.
		progressbar.OptionSetElapsedTime(total < 0),
		progressbar.OptionSetWidth(30),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionClearOnFinish(),
	)
	// The bar's rate is its bytes over the time since it started, which
	// would otherwise be the first Add: bytes done in microseconds, an
	// absurd rate (296 GiB/s). Its clock starts now, and Add draws
	// nothing before minRateElapsed (but the end).
	b.pb.StartWithoutRender()
	return b
}

func (b *bar) Add(n int64) {
	b.done += n
	b.pending += n
	now := time.Now()
	if (now.Sub(b.last) < 100*time.Millisecond || now.Sub(b.t0) < b.minElapsed) && (b.total < 0 || b.done < b.total) {
		return
	}
	// The bar draws on each call (it is not throttled: this is): the
	// description with the times first, then the count.
	b.last = now
	if b.total >= 0 {
		b.pb.Describe(b.desc + " " + b.times(now))
	}
	_ = b.pb.Add64(b.pending)
	b.pending = 0
}

// times is the labelled elapsed time and, with a known total and some
// progress, the estimated time left.
func (b *bar) times(now time.Time) string {
	el := now.Sub(b.t0)
	s := "(elapsed " + el.Round(time.Second).String()
	if b.total > 0 && b.done > 0 && el > 0 {
		left := time.Duration(float64(el) * float64(max(0, b.total-b.done)) / float64(b.done))
		s += ", ETA " + left.Round(time.Second).String()
	}
	return s + ")"
}

func (b *bar) Finish() {
	if b.pending > 0 {
		_ = b.pb.Add64(b.pending)
		b.pending = 0
	}
	// Finish draws the final state and, with OptionClearOnFinish, wipes
	// the line; on an unknown total it stops the spinner.
	_ = b.pb.Finish()
}

// byteProgress turns the (done, total) callbacks of the library, which
// start again from 0 for each pass, into progress increments.
func byteProgress(prog progress) func(done, total int64) {
	var last int64
	return func(done, _ int64) {
		if done < last {
			last = 0
		}
		prog.Add(done - last)
		last = done
	}
}
