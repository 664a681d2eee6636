package main

import (
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
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

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
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
	// pending is added but not yet drawn.
	pending int64
}

func newBar(w io.Writer, total int64, desc string) *bar {
	b := &bar{desc: desc, total: total, t0: time.Now()}
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
	return b
}

func (b *bar) Add(n int64) {
	b.done += n
	b.pending += n
	now := time.Now()
	if now.Sub(b.last) < 100*time.Millisecond && (b.total < 0 || b.done < b.total) {
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
