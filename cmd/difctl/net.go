package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/difctl/difctl/blockdev/nbd"
)

// handshakeLogMax is how many failed TLS handshakes serve reports a minute.
const handshakeLogMax = 10

// handshakeLog reports the failed TLS handshakes of serve's clients
// (nbd.Options.OnConnError, errors matching nbd.ErrTLSHandshake), one line
// each with the client and the reason, at most max in each window of per
// (a minute but in tests). The number of those it did not print follows
// in one line when the window ends, so that a flood of bad handshakes
// costs a line or two a window.
type handshakeLog struct {
	w   io.Writer
	max int
	per time.Duration

	mu      sync.Mutex
	start   time.Time // of the window
	n       int       // lines printed in the window
	dropped int       // failures not printed in the window
	timer   *time.Timer
}

func newHandshakeLog(w io.Writer) *handshakeLog {
	return &handshakeLog{w: w, max: handshakeLogMax, per: time.Minute}
}

// connError is the server's OnConnError.
func (l *handshakeLog) connError(remote string, err error) {
	if !errors.Is(err, nbd.ErrTLSHandshake) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.start) >= l.per {
		l.flushLocked()
		l.start, l.n = now, 0
	}
	if l.n >= l.max {
		if l.dropped == 0 {
			l.timer = time.AfterFunc(l.start.Add(l.per).Sub(now), l.flush)
		}
		l.dropped++
		return
	}
	l.n++
	fmt.Fprintf(l.w, "difctl: client %s: %s\n", printable(remote), printable(strings.TrimPrefix(oneLine(err.Error()), "nbd: ")))
}

// flush prints the number of failures not printed, if any. serve calls it
// when it stops.
func (l *handshakeLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked()
}

func (l *handshakeLog) flushLocked() {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	if l.dropped > 0 {
		fmt.Fprintf(l.w, "difctl: %d more failed TLS handshakes not shown (at most %d lines a minute)\n", l.dropped, l.max)
		l.dropped = 0
	}
}
