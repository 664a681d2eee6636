package scrub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock whose timers fire at once, moving the time forward
// by their duration: a Wait takes no real time and the fake time it
// advanced is exactly what a real Wait would have slept.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) Timer(d time.Duration) (<-chan time.Time, func() bool) {
	c.Advance(d)
	ch := make(chan time.Time, 1)
	ch <- c.Now()
	return ch, func() bool { return false }
}

func TestRateLimiterRate(t *testing.T) {
	for _, c := range []struct {
		rate, req int64
	}{{1 << 20, 1 << 20}, {1 << 20, 4096}, {1000, 1}, {1000, 999}, {10 << 20, 1 << 20}, {512, 1 << 20}} {
		t.Run(fmt.Sprintf("rate=%d/req=%d", c.rate, c.req), func(t *testing.T) {
			clk := newFakeClock()
			l := newRateLimiter(c.rate, clk)
			start := clk.Now()
			const reqs = 200
			for range reqs {
				if err := l.Wait(context.Background(), c.req); err != nil {
					t.Fatal(err)
				}
			}
			// The first request goes at once (the bucket starts empty but
			// not in debt); each later one waits for the previous one's
			// bytes: (reqs-1)*req bytes at rate.
			got := clk.Now().Sub(start)
			want := time.Duration(float64(reqs-1) * float64(c.req) / float64(c.rate) * float64(time.Second))
			if d := got - want; d < -time.Millisecond || d > time.Millisecond+want/1000 {
				t.Errorf("took %v, want %v", got, want)
			}
		})
	}
}

func TestRateLimiterBurst(t *testing.T) {
	clk := newFakeClock()
	l := newRateLimiter(1000, clk)
	// After a long idle time the bucket holds a tenth of a second's worth,
	// not more.
	clk.Advance(time.Hour)
	start := clk.Now()
	var sent int64
	for clk.Now() == start {
		if err := l.Wait(context.Background(), 10); err != nil {
			t.Fatal(err)
		}
		sent += 10
	}
	// 100 bytes of burst, plus the one request that empties the bucket,
	// plus the one that overdraws it; the last is the one that waited.
	if sent < 100 || sent > 130 {
		t.Errorf("burst of %d bytes, want about 100", sent)
	}
}

func TestRateLimiterSetRate(t *testing.T) {
	clk := newFakeClock()
	l := newRateLimiter(0, clk)
	ctx := context.Background()
	for range 100 {
		if err := l.Wait(ctx, 1<<30); err != nil {
			t.Fatal(err)
		}
	}
	if clk.Now() != time.Unix(1_000_000, 0) {
		t.Fatal("unlimited limiter waited")
	}
	l.SetRate(1000)
	if l.Rate() != 1000 {
		t.Fatalf("rate %d", l.Rate())
	}
	start := clk.Now()
	for range 11 {
		if err := l.Wait(ctx, 100); err != nil {
			t.Fatal(err)
		}
	}
	if d := clk.Now().Sub(start); d != time.Second {
		t.Errorf("11 x 100 bytes at 1000 B/s took %v, want 1s", d)
	}
	// Halve the rate while in debt: the debt is paid at the new rate.
	l.SetRate(500)
	start = clk.Now()
	for range 10 {
		if err := l.Wait(ctx, 100); err != nil {
			t.Fatal(err)
		}
	}
	if d := clk.Now().Sub(start); d < 1990*time.Millisecond || d > 2010*time.Millisecond {
		t.Errorf("1000 bytes at 500 B/s took %v, want 2s", d)
	}
	l.SetRate(-5)
	if l.Rate() != 0 {
		t.Errorf("negative rate gave %d", l.Rate())
	}
	start = clk.Now()
	if err := l.Wait(ctx, 1<<40); err != nil || clk.Now() != start {
		t.Errorf("unlimited again: %v, waited %v", err, clk.Now().Sub(start))
	}
}

func TestRateLimiterPause(t *testing.T) {
	clk := newFakeClock()
	l := newRateLimiter(0, clk)
	l.Pause()
	l.Pause() // idempotent
	if !l.Paused() {
		t.Fatal("not paused")
	}
	clk.Advance(3 * time.Second)
	if d := l.PausedTime(); d != 3*time.Second {
		t.Errorf("paused time %v during a pause", d)
	}
	done := make(chan error)
	go func() { done <- l.Wait(context.Background(), 1) }()
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v while paused", err)
	case <-time.After(20 * time.Millisecond):
	}
	clk.Advance(2 * time.Second)
	l.Resume()
	l.Resume() // idempotent
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := l.PausedTime(); d != 5*time.Second {
		t.Errorf("paused time %v, want 5s", d)
	}
	clk.Advance(time.Second)
	if d := l.PausedTime(); d != 5*time.Second {
		t.Errorf("paused time %v after the pause, want 5s", d)
	}
	// A paused Wait ends with its context.
	l.Pause()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- l.Wait(ctx, 1) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled paused Wait: %v", err)
	}
}

func TestRateLimiterWakesOnSetRate(t *testing.T) {
	// A waiter blocked on a very low rate is released when the rate is
	// lifted. Real clock: the initial wait would last for days.
	l := NewRateLimiter(1)
	ctx := context.Background()
	if err := l.Wait(ctx, 1<<20); err != nil { // goes at once, leaves a debt
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- l.Wait(ctx, 1) }()
	time.Sleep(10 * time.Millisecond)
	l.SetRate(0)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken by SetRate")
	}
}

func TestRateLimiterConcurrent(t *testing.T) {
	// Many goroutines share the limiter: the total fake time is what the
	// total bytes need.
	clk := newFakeClock()
	l := newRateLimiter(1<<20, clk)
	var wg sync.WaitGroup
	const workers, reqs, req = 8, 50, 64 << 10
	start := clk.Now()
	for range workers {
		wg.Go(func() {
			for range reqs {
				if err := l.Wait(context.Background(), req); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	// Each Wait advances the shared fake clock by its own sleep, and
	// concurrent sleepers overlap in real life but add up here: the fake
	// time is at least what the bytes need.
	want := time.Duration(float64(workers*reqs-1) * req / (1 << 20) * float64(time.Second))
	if got := clk.Now().Sub(start); got < want-time.Millisecond {
		t.Errorf("took %v, want at least %v", got, want)
	}
}
