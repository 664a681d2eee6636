//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestSignalContext sends the process a real signal once the handler is in
// place: the context is cancelled with a cause that names the signal and
// matches errInterrupted.
func TestSignalContext(t *testing.T) {
	ctx, stop := signalContext(context.Background())
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("context not cancelled by SIGTERM")
	}
	cause := context.Cause(ctx)
	if !errors.Is(cause, errInterrupted) {
		t.Errorf("cause %v does not match errInterrupted", cause)
	}
	if got, want := cause.Error(), "cancelled by the user (SIGTERM)"; got != want {
		t.Errorf("cause %q, want %q", got, want)
	}
	stop()
	stop() // idempotent
}

// TestInterrupt sends a real signal to a real difctl process that is busy
// and checks it stops with exit 32. The process signals readiness by its
// first line of output, written after the signal handler is installed.
func TestInterrupt(t *testing.T) {
	path, err := exec.LookPath("difctl") // installed in $PATH by testscript.Main
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []struct {
		name string
		sig  os.Signal
	}{{"SIGINT", os.Interrupt}, {"SIGTERM", syscall.SIGTERM}} {
		t.Run("signal="+sig.name, func(t *testing.T) {
			cmd := exec.Command(path, "bench", "--duration", "1h")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
				cmd.Process.Kill()
				t.Fatalf("reading the first line: %v", err)
			}
			if err := cmd.Process.Signal(sig.sig); err != nil {
				t.Fatal(err)
			}
			go io.Copy(io.Discard, stdout)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				cmd.Process.Kill()
				t.Fatal("difctl did not stop on the signal")
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != exitCancelled {
				t.Fatalf("difctl ended with %v, want exit status %d", err, exitCancelled)
			}
			if got, want := stderr.String(), fmt.Sprintf("difctl: cancelled by the user (%s)\n", sig.name); got != want {
				t.Errorf("stderr %q, want %q", got, want)
			}
		})
	}
}
