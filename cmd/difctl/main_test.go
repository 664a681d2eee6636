package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/difctl/difctl/fixtures"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets the test binary act as the difctl command inside the
// testscript scripts.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"difctl": func() { os.Exit(difctlMain()) },
	})
}

// TestScript runs the CLI scenarios in testdata/script: real processes,
// real exit codes. Besides the standard commands, scripts have
//
//	exitcode N command [args...]
//
// which runs command like exec and fails unless it exits with status N;
// its stdout and stderr are then checked as after exec, and
//
//	truncate FILE SIZE
//
// which cuts or extends FILE to SIZE bytes,
//
//	corrupt FILE OFFSET
//	corruptdir DIR PREFIX
//
// which flip a bit of FILE and overwrite the files PREFIX* of DIR with
// garbage,
//
//	waitsock PATH
//
// which waits until a unix socket at PATH takes connections (a server
// started in the background is ready), and the condition [root] (running as root, when permissions
// do not stop writes). Every script
// starts with $WORK/check.bin holding "123456789" with no newline (which a
// txtar file cannot hold), the input of the CRC catalogue's check values,
// and with a copy of every fixture image (fixtures.All, README.md in
// fixtures/images) in $WORK, which scripts may damage at will.
func TestScript(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Setup: func(env *testscript.Env) error {
			// The scripts check the default kernels; a forced choice in
			// the caller's environment must not leak in.
			env.Setenv("DIFCTL_KERNELS", "")
			if err := copyFixtures(env.WorkDir); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(env.WorkDir, "check.bin"), []byte("123456789"), 0o666)
		},
		Condition: func(cond string) (bool, error) {
			if cond == "root" {
				return os.Geteuid() == 0, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exitcode":   cmdExitCode,
			"truncate":   cmdTruncate,
			"corrupt":    cmdCorrupt,
			"corruptdir": cmdCorruptDir,
			"storefile":  cmdStoreFile,
			"attack":     cmdAttack, // keys_attack_test.go
			"waitsock":   cmdWaitSock,
		},
	})
}

// cmdTruncate is "truncate FILE SIZE": it cuts or extends FILE to SIZE
// bytes, to make truncated images.
func cmdTruncate(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: truncate FILE SIZE")
	}
	size, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil {
		ts.Fatalf("truncate: bad size %q", args[1])
	}
	ts.Check(os.Truncate(ts.MkAbs(args[0]), size))
}

// cmdCorrupt is "corrupt FILE OFFSET": it flips the low bit of the byte at
// OFFSET of FILE, behind difctl's back.
func cmdCorrupt(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: corrupt FILE OFFSET")
	}
	off, err := strconv.ParseInt(args[1], 0, 64)
	if err != nil {
		ts.Fatalf("corrupt: bad offset %q", args[1])
	}
	f, err := os.OpenFile(ts.MkAbs(args[0]), os.O_RDWR, 0)
	ts.Check(err)
	defer f.Close()
	b := make([]byte, 1)
	_, err = f.ReadAt(b, off)
	ts.Check(err)
	b[0] ^= 1
	_, err = f.WriteAt(b, off)
	ts.Check(err)
}

// cmdCorruptDir is "corruptdir DIR PREFIX": it overwrites every file of DIR
// whose name starts with PREFIX with garbage (a corrupt store).
func cmdCorruptDir(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: corruptdir DIR PREFIX")
	}
	dir := ts.MkAbs(args[0])
	entries, err := os.ReadDir(dir)
	ts.Check(err)
	n := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), args[1]) {
			ts.Check(os.WriteFile(filepath.Join(dir, e.Name()), []byte("garbage, not a store\n"), 0o666))
			n++
		}
	}
	if n == 0 {
		ts.Fatalf("corruptdir: no file %s* in %s", args[1], dir)
	}
}

// cmdStoreFile is "storefile flip|rm DIR PREFIX SUFFIX": it flips one bit in
// the middle of the largest file of DIR named PREFIX*SUFFIX, or removes
// every such file: a store damaged behind difctl's back.
func cmdStoreFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 4 || args[0] != "flip" && args[0] != "rm" {
		ts.Fatalf("usage: storefile flip|rm DIR PREFIX SUFFIX")
	}
	dir := ts.MkAbs(args[1])
	entries, err := os.ReadDir(dir)
	ts.Check(err)
	var big string
	var bigSize int64 = -1
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), args[2]) || !strings.HasSuffix(e.Name(), args[3]) || e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if args[0] == "rm" {
			ts.Check(os.Remove(p))
			big = p
			continue
		}
		fi, err := e.Info()
		ts.Check(err)
		if fi.Size() > bigSize {
			big, bigSize = p, fi.Size()
		}
	}
	if big == "" {
		ts.Fatalf("storefile: no file %s*%s in %s", args[2], args[3], dir)
	}
	if args[0] == "flip" {
		b, err := os.ReadFile(big)
		ts.Check(err)
		b[len(b)/2] ^= 0x10
		ts.Check(os.WriteFile(big, b, 0o600))
	}
}

// cmdWaitSock is "waitsock PATH": it waits, 30 seconds at most, until a
// unix socket at PATH takes connections.
func cmdWaitSock(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitsock PATH")
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("unix", ts.MkAbs(args[0]))
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("waitsock: %v", err)
		}
	}
}

// copyFixtures copies the embedded fixture images into dir.
func copyFixtures(dir string) error {
	fsys := fixtures.FS()
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".img") && !strings.HasSuffix(e.Name(), ".md") || e.Name() == "README.md" {
			continue
		}
		b, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o666); err != nil {
			return err
		}
	}
	return nil
}

func cmdExitCode(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! exitcode")
	}
	if len(args) < 2 {
		ts.Fatalf("usage: exitcode N command [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exitcode: bad status %q", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exitcode: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[1], got, want)
	}
}
