package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/difctl/difctl/blockdev/nbd"
)

// failureLog reports serve's refused reads and writes (nbd.Options.
// OnFailure) on standard error. A client retries a failed read (the Linux
// nbd driver and qemu do, several times), so the same failure comes again
// and again: the first of a kind (same export, operation, offset and
// length) is printed in full, the repeats within per (a minute but in
// tests) are counted, and "N more like it" is printed once the window
// ends, at most once per window and kind. summary gives the totals by
// export when serve stops.
type failureLog struct {
	w   io.Writer
	per time.Duration

	mu     sync.Mutex
	kinds  map[failureKind]*failureCount
	totals map[string]map[string]int64 // export -> op -> refused
	timer  *time.Timer
}

type failureKind struct {
	export, op     string
	offset, length int64
}

type failureCount struct {
	start time.Time // of the kind's window: when it was last printed
	more  int64     // repeats not printed in the window
}

func newFailureLog(w io.Writer) *failureLog {
	return &failureLog{w: w, per: time.Minute}
}

// failure is the server's OnFailure.
func (l *failureLog) failure(f nbd.Failure) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.totals == nil {
		l.totals, l.kinds = map[string]map[string]int64{}, map[failureKind]*failureCount{}
	}
	if l.totals[f.Export] == nil {
		l.totals[f.Export] = map[string]int64{}
	}
	l.totals[f.Export][f.Op]++
	k := failureKind{f.Export, f.Op, f.Offset, f.Length}
	now := time.Now()
	if c := l.kinds[k]; c != nil && now.Sub(c.start) < l.per {
		c.more++
		if l.timer == nil {
			l.timer = time.AfterFunc(l.per, l.tick)
		}
		return
	} else if c != nil {
		l.printMoreLocked(k, c) // the timer has not run yet
	}
	l.kinds[k] = &failureCount{start: now}
	fmt.Fprintf(l.w, "difctl: %s: %s at offset %d: %s\n", f.Export, f.Op, f.Offset, storeCause(f.Err))
	if f.RecordErr != nil {
		fmt.Fprintf(l.w, "difctl: %s: recording the finding: %s\n", f.Export, storeCause(f.RecordErr))
	}
}

func (l *failureLog) printMoreLocked(k failureKind, c *failureCount) {
	if c.more > 0 {
		fmt.Fprintf(l.w, "difctl: %s: %s at offset %d: %d more like it\n", k.export, k.op, k.offset, c.more)
		c.more = 0
	}
}

// tick ends the windows that are over: their counts are printed, and a
// kind that came again starts a new window (its repeats are still
// counted); the others are forgotten.
func (l *failureLog) tick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer = nil
	now := time.Now()
	pending := false
	for _, k := range l.sortedKindsLocked() {
		c := l.kinds[k]
		switch {
		case c.more > 0 && now.Sub(c.start) >= l.per:
			l.printMoreLocked(k, c)
			c.start = now
		case c.more > 0:
			pending = true
		case now.Sub(c.start) >= l.per:
			delete(l.kinds, k)
		}
	}
	if pending {
		l.timer = time.AfterFunc(l.per, l.tick)
	}
}

func (l *failureLog) sortedKindsLocked() []failureKind {
	ks := make([]failureKind, 0, len(l.kinds))
	for k := range l.kinds {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		a, b := ks[i], ks[j]
		if a.export != b.export {
			return a.export < b.export
		}
		if a.offset != b.offset {
			return a.offset < b.offset
		}
		return a.op < b.op
	})
	return ks
}

// summary prints the counts not printed yet and, for each export that
// refused anything, one line of totals. serve calls it when it stops.
func (l *failureLog) summary() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	for _, k := range l.sortedKindsLocked() {
		l.printMoreLocked(k, l.kinds[k])
	}
	exports := make([]string, 0, len(l.totals))
	for e := range l.totals {
		exports = append(exports, e)
	}
	sort.Strings(exports)
	for _, e := range exports {
		ops := make([]string, 0, len(l.totals[e]))
		for op := range l.totals[e] {
			ops = append(ops, op)
		}
		sort.Strings(ops)
		var parts []string
		for _, op := range ops {
			n := l.totals[e][op]
			unit := op + "s"
			if n == 1 {
				unit = op
			}
			parts = append(parts, fmt.Sprintf("%d %s", n, unit))
		}
		fmt.Fprintf(l.w, "difctl: %s: refused %s while serving (difctl inspect lists the findings)\n", e, strings.Join(parts, ", "))
	}
}
