package scrub

import (
	"context"
	"math"
	"sync"
	"time"
)

// RateLimiter is a token bucket that limits a flow of bytes to a rate that
// can be changed, or paused, while the flow runs. A scrub's workers share
// one (Options.Limiter); the caller keeps it to call SetRate, Pause and
// Resume from another goroutine. It is safe for concurrent use.
//
// The bucket fills at Rate bytes per second up to a burst of a tenth of a
// second's worth. Wait(n) proceeds as soon as the bucket is not empty and
// then takes all n bytes, possibly leaving it in debt, which later callers
// wait out: over any interval T the bytes let through are at most
// Rate*T + burst + the largest single request, whatever n is.
type RateLimiter struct {
	clk clock

	mu      sync.Mutex
	rate    int64 // bytes per second; 0 unlimited
	tokens  float64
	last    time.Time // when tokens was last brought up to date
	paused  bool
	since   time.Time     // when the pause began
	pausedD time.Duration // total of completed pauses
	changed chan struct{} // closed when the rate or the pause state changes
}

// burstWindow is how much of the rate the bucket holds when full.
const burstWindow = 100 * time.Millisecond

// NewRateLimiter returns a limiter of bytesPerSecond; 0 (or less) means
// unlimited.
func NewRateLimiter(bytesPerSecond int64) *RateLimiter {
	return newRateLimiter(bytesPerSecond, realClock{})
}

func newRateLimiter(bytesPerSecond int64, clk clock) *RateLimiter {
	l := &RateLimiter{clk: clk, changed: make(chan struct{})}
	l.rate = max(bytesPerSecond, 0)
	l.last = clk.Now()
	return l
}

// Rate returns the current rate in bytes per second, 0 for unlimited.
func (l *RateLimiter) Rate() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rate
}

// SetRate changes the rate; 0 (or less) means unlimited. Callers blocked in
// Wait recompute their wait at once.
func (l *RateLimiter) SetRate(bytesPerSecond int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	bytesPerSecond = max(bytesPerSecond, 0)
	now := l.clk.Now()
	l.refill(now)
	if l.rate == 0 {
		// Leaving unlimited: start with an empty bucket.
		l.tokens = 0
	}
	l.rate = bytesPerSecond
	l.tokens = min(l.tokens, l.burst())
	l.wake()
}

// Pause stops every Wait until Resume. Time spent paused is not active
// time (see PausedTime).
func (l *RateLimiter) Pause() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.paused {
		return
	}
	now := l.clk.Now()
	l.refill(now)
	l.paused, l.since = true, now
	l.wake()
}

// Resume ends a pause. The bucket does not fill while paused.
func (l *RateLimiter) Resume() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.paused {
		return
	}
	now := l.clk.Now()
	l.pausedD += now.Sub(l.since)
	l.paused, l.last = false, now
	l.wake()
}

// Paused reports whether the limiter is paused.
func (l *RateLimiter) Paused() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.paused
}

// PausedTime returns the total time the limiter has spent paused since it
// was made, including the current pause.
func (l *RateLimiter) PausedTime() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.pausedD
	if l.paused {
		d += l.clk.Now().Sub(l.since)
	}
	return d
}

// Wait blocks until n more bytes may flow, or until ctx is done (returning
// its error). It returns at once when the rate is unlimited and the limiter
// is not paused.
func (l *RateLimiter) Wait(ctx context.Context, n int64) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		l.mu.Lock()
		changed := l.changed
		var d time.Duration
		switch {
		case l.paused:
			d = -1 // until Resume
		case l.rate == 0:
			l.mu.Unlock()
			return nil
		default:
			l.refill(l.clk.Now())
			if l.tokens >= 0 {
				l.tokens -= float64(max(n, 0))
				l.mu.Unlock()
				return nil
			}
			d = time.Duration(math.Ceil(-l.tokens * float64(time.Second) / float64(l.rate)))
			d = max(d, time.Nanosecond)
		}
		l.mu.Unlock()
		if d < 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-changed:
			}
			continue
		}
		c, stop := l.clk.Timer(d)
		select {
		case <-ctx.Done():
			stop()
			return ctx.Err()
		case <-changed:
			stop()
		case <-c:
		}
	}
}

// refill brings the bucket up to now. l.mu is held.
func (l *RateLimiter) refill(now time.Time) {
	if !l.paused && l.rate > 0 {
		if dt := now.Sub(l.last); dt > 0 {
			l.tokens = min(l.tokens+dt.Seconds()*float64(l.rate), l.burst())
		}
	}
	l.last = now
}

func (l *RateLimiter) burst() float64 { return float64(l.rate) * burstWindow.Seconds() }

// wake tells the waiters that the rate or the pause state changed. l.mu is
// held.
func (l *RateLimiter) wake() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// clock is the time source of a RateLimiter; tests use a fake one.
type clock interface {
	Now() time.Time
	// Timer returns a channel that receives once d has passed, and a
	// function that stops the timer.
	Timer(d time.Duration) (<-chan time.Time, func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Timer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}
