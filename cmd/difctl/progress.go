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
// that follow on stdout do not interleave with it.
type bar struct{ pb *progressbar.ProgressBar }

func newBar(w io.Writer, total int64, desc string) *bar {
	return &bar{pb: progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowBytes(true), // rate in bytes per second
		progressbar.OptionShowCount(),     // bytes done / total
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionClearOnFinish(),
	)}
}

func (b *bar) Add(n int64) { _ = b.pb.Add64(n) }

func (b *bar) Finish() {
	// Finish draws the final state and, with OptionClearOnFinish, wipes
	// the line; on an unknown total it stops the spinner.
	_ = b.pb.Finish()
}
