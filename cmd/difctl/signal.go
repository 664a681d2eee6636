package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// signalError is the cancellation cause of the command context when the
// user interrupts difctl. It matches errInterrupted.
type signalError struct{ sig os.Signal }

func (e *signalError) Error() string {
	name := e.sig.String()
	switch e.sig {
	case os.Interrupt:
		name = "SIGINT"
	case syscall.SIGTERM:
		name = "SIGTERM"
	}
	return fmt.Sprintf("%v (%s)", errInterrupted, name)
}

func (e *signalError) Is(target error) bool { return target == errInterrupted }

// signalContext returns a context cancelled, with a *signalError cause, on
// the first SIGINT or SIGTERM. After that first signal the default handling
// is restored, so a second Ctrl-C kills a command stuck in a blocking read.
// stop releases the signal handler.
func signalContext(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			signal.Stop(ch)
			cancel(&signalError{sig: sig})
		case <-done:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(ch)
			close(done)
			cancel(nil)
		})
	}
}
