package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestRun drives the whole command line in-process: flag parsing, the
// command, and the mapping of its outcome to an exit code and one stderr
// line.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	check := filepath.Join(dir, "check.bin")
	if err := os.WriteFile(check, []byte("123456789"), 0o666); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string // regexp
		stderr string // regexp; "" means empty
	}{
		{"crc", []string{"crc", check}, exitOK, `^d0db 9 .*check.bin\n$`, ""},
		{"crc/missing", []string{"crc", missing, check}, exitOperational,
			`^d0db 9 `, `^difctl: open .*missing: no such file or directory\n$`},
		{"crc/badalg", []string{"crc", "--alg", "x"}, exitUsage, `^$`, `^difctl: invalid argument "x" for "--alg" flag: .*\(see 'difctl crc --help'\)\n$`},
		{"crc/json-missing", []string{"--json", "crc", missing}, exitOperational,
			`^\{"schema":"difctl/v1","type":"error","file":".*missing","error":"open .*"\}\n$`, `^difctl: open `},
		{"unknown-command", []string{"nope"}, exitUsage, `^$`, `^difctl: unknown command "nope" \(see 'difctl --help'\)\n$`},
		{"unknown-flag", []string{"--nope"}, exitUsage, `^$`, `^difctl: unknown flag: --nope \(see 'difctl --help'\)\n$`},
		{"extra-arg", []string{"kernels", "x"}, exitUsage, `^$`, `^difctl: unknown command "x" for "difctl kernels"`},
		{"help", []string{"--help"}, exitOK, `Exit status`, ""},
		{"bench/baddur", []string{"bench", "--duration", "-1ms"}, exitUsage, `^$`, `^difctl: --duration must be positive, not -1ms \(see 'difctl bench --help'\)\n$`},
	}
	for _, tt := range tests {
		t.Run("args="+tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, strings.NewReader(""), &stdout, &stderr)
			if code != tt.code {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tt.code, stderr.String())
			}
			if !regexp.MustCompile(tt.stdout).MatchString(stdout.String()) {
				t.Errorf("stdout %q does not match %q", stdout.String(), tt.stdout)
			}
			if tt.stderr == "" && stderr.Len() > 0 || tt.stderr != "" && !regexp.MustCompile(tt.stderr).MatchString(stderr.String()) {
				t.Errorf("stderr %q does not match %q", stderr.String(), tt.stderr)
			}
		})
	}
}

// TestRunCancelled: a command whose context the user cancelled exits 32
// with one line naming the signal, whatever error the interrupted command
// returned.
func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(&signalError{sig: os.Interrupt})
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"bench", "--duration", "1h"}, nil, &stdout, &stderr)
	if code != exitCancelled {
		t.Errorf("exit code %d, want %d", code, exitCancelled)
	}
	if got, want := stderr.String(), "difctl: cancelled by the user (SIGINT)\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
}

// TestHelpListsExitCodes holds every command, present and future, to the
// convention that its help lists its exit codes.
func TestHelpListsExitCodes(t *testing.T) {
	var g globalOptions
	root := newRootCmd(&g, nil)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && c.Name() != "help" && c.Parent() != nil && c.Parent().Name() != "completion" && c.Name() != "completion" {
			if !strings.Contains(c.Long, "Exit status") || !strings.Contains(c.Long, "  0 ") {
				t.Errorf("%s: help does not list the exit codes", c.CommandPath())
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	if !strings.Contains(root.Long, "Exit status") {
		t.Error("difctl: help does not list the exit codes")
	}
}

// difctl runs the command line in-process and returns its exit code and
// its stdout and stderr together.
func difctl(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String() + stderr.String()
}

// mustDifctl is difctl that fails the test unless the exit code is want.
func mustDifctl(t *testing.T, want int, args ...string) string {
	t.Helper()
	code, out := difctl(t, args...)
	if code != want {
		t.Fatalf("difctl %s: exit %d, want %d:\n%s", strings.Join(args, " "), code, want, out)
	}
	return out
}

// randomImage writes size bytes of data drawn from seed to path.
func randomImage(t *testing.T, path string, size int, seed uint64) {
	t.Helper()
	b := make([]byte, size)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	r.Read(b)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
