package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/difctl/difctl/store"
)

func TestExitCode(t *testing.T) {
	interrupted, cancel := context.WithCancelCause(context.Background())
	cancel(&signalError{sig: os.Interrupt})
	plainCancel, cancel2 := context.WithCancel(context.Background())
	cancel2()
	bg := context.Background()

	tests := []struct {
		name string
		ctx  context.Context
		err  error
		ran  bool
		want int
	}{
		{"nil", bg, nil, true, exitOK},
		{"plain", bg, errors.New("read: I/O error"), true, exitOperational},
		{"wrapped-exit", bg, fmt.Errorf("x: %w", &exitError{code: exitUncorrected}), true, exitUncorrected},
		{"mask", bg, &exitError{code: exitCorrected | exitUncorrected}, true, 5},
		{"usage", bg, fmt.Errorf("x: %w", usageErrorf("bad")), true, exitUsage},
		{"before-run", bg, errors.New("unknown flag: --x"), false, exitUsage},
		{"interrupt-marker", bg, fmt.Errorf("x: %w", &signalError{sig: os.Interrupt}), true, exitCancelled},
		{"interrupted", interrupted, context.Canceled, true, exitCancelled},
		{"interrupted-io", interrupted, errors.New("read: bad file descriptor"), true, exitCancelled},
		{"interrupted-findings", interrupted, &exitError{code: exitUncorrected | exitOperational}, true, exitCancelled | exitUncorrected},
		{"interrupted-clean", interrupted, nil, true, exitCancelled},
		// A context cancelled by anything but the user is an operational
		// failure, not exit 32.
		{"cancelled-not-by-user", plainCancel, context.Canceled, true, exitOperational},
	}
	for _, tt := range tests {
		t.Run("case="+tt.name, func(t *testing.T) {
			if got := exitCode(tt.ctx, tt.err, tt.ran); got != tt.want {
				t.Errorf("exitCode = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestErrorLine(t *testing.T) {
	interrupted, cancel := context.WithCancelCause(context.Background())
	cancel(&signalError{sig: syscall.SIGTERM})
	bg := context.Background()
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want string
	}{
		{"nil", bg, nil, ""},
		{"reported", bg, fmt.Errorf("w: %w", &exitError{code: exitOperational}), ""},
		{"cause", bg, &exitError{code: exitOperational, err: errors.New("store: corrupt")}, "corrupt"},
		// Library errors are wrapped whole and lose their package prefixes
		// only when printed, at every level of the chain.
		{"chain", bg, fmt.Errorf("sync a.img: %w", fmt.Errorf("blockdev: volume: %w", fmt.Errorf("store: commit: %w", errors.New("scrub: x")))), "sync a.img: volume: commit: x"},
		{"inner-words", bg, errors.New("a.img: the store: kept"), "a.img: the store: kept"},
		{"multiline", bg, errors.New("unknown command \"x\"\n\nDid you mean this?\n\tcrc\n"), `unknown command "x" Did you mean this? crc`},
		{"interrupted", interrupted, errors.New("read: interrupted system call"), "cancelled by the user (SIGTERM)"},
	}
	for _, tt := range tests {
		t.Run("case="+tt.name, func(t *testing.T) {
			if got := errorLine(tt.ctx, tt.err); got != tt.want {
				t.Errorf("errorLine = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStatus(t *testing.T) {
	var s status
	if err := s.err(); err != nil {
		t.Fatalf("clean status: %v", err)
	}
	s.add(exitOK)
	s.add(exitOperational)
	s.add(exitUncorrected)
	s.add(exitOperational)
	if got := classify(s.err(), true); got != exitOperational|exitUncorrected {
		t.Errorf("exit code %d, want %d", got, exitOperational|exitUncorrected)
	}
	if line := errorLine(context.Background(), s.err()); line != "" {
		t.Errorf("an accumulated status prints %q, want nothing (already reported)", line)
	}
}

func TestExitCodesHelp(t *testing.T) {
	got := exitCodesHelp(exitOK, exitUsage)
	want := "Exit status (a bit mask, as in fsck(8)):\n  0   success, nothing wrong found\n  16  usage error (bad flag, argument or command)"
	if got != want {
		t.Errorf("exitCodesHelp =\n%s\nwant\n%s", got, want)
	}
	for code, text := range exitMeaning {
		if text == "" || strings.Contains(text, "\n") {
			t.Errorf("exit code %d: bad help text %q", code, text)
		}
	}
}

func TestSignalContextStop(t *testing.T) {
	ctx, stop := signalContext(context.Background())
	stop()
	<-ctx.Done()
	if errors.Is(context.Cause(ctx), errInterrupted) {
		t.Error("stop alone must not look like a user interrupt")
	}
}

// TestErrorsKeepTheirChain checks that the errors commands return for a
// failing store or device still match the library's sentinels and types:
// a message shortened as it was built (the old storeCause, %s) loses them.
func TestErrorsKeepTheirChain(t *testing.T) {
	cause := &store.CorruptFileError{Path: "x/000001.sst", Reason: "bad block"}
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"storeFailure", storeFailure("sync a.img", "pebble:a", fmt.Errorf("blockdev: fold: %w", store.ErrFailed))},
		{"storeErr", storeErr("pebble:a", fmt.Errorf("store: read: %w", store.ErrFailed))},
		{"storeOpenError", storeOpenError("a.img", "pebble:a", fmt.Errorf("store: open pebble:a: %w", store.ErrFailed))},
		{"busy", storeOpenError("a.img", "pebble:a", fmt.Errorf("store: open pebble:a: %w: pid 1", store.ErrBusy))},
	} {
		t.Run("case="+tt.name, func(t *testing.T) {
			if !errors.Is(tt.err, store.ErrFailed) && !errors.Is(tt.err, store.ErrBusy) {
				t.Errorf("%v: the store's sentinel is lost", tt.err)
			}
			if m := shortMessage(tt.err); strings.Contains(m, "store: ") {
				t.Errorf("printed %q: the package prefix is kept", m)
			}
		})
	}
	d := storeErr("pebble:a", fmt.Errorf("store: read: %w", cause))
	var cf *store.CorruptFileError
	if !errors.As(d, &cf) || cf.Path != cause.Path {
		t.Errorf("%v: the damaged file is lost", d)
	}
}
