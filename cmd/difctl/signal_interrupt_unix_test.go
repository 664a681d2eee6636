//go:build unix

package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/difctl/difctl/dif"
)

// difctlPath is the difctl command testscript.Main installed in $PATH.
func difctlPath(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("difctl")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// interrupt starts difctl with args in dir, waits until ready says it is
// busy, sends SIGINT and returns its exit code, stdout and stderr.
func interrupt(t *testing.T, dir string, ready func(stdout *bufio.Reader) error, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(difctlPath(t), args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(pipe)
	if err := ready(br); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("waiting for difctl to get busy: %v (stderr %q)", err, stderr.String())
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	// Read the rest of stdout to its end before Wait, which closes the
	// pipe (os/exec: Wait must not run before reads from StdoutPipe are
	// done), and so that stdout is not read while it is still written.
	var stdout bytes.Buffer
	done := make(chan error, 1)
	go func() {
		io.Copy(&stdout, br)
		done <- cmd.Wait()
	}()
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatal("difctl did not stop on SIGINT")
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

// run runs difctl with args in dir and returns its exit code and output.
func runDifctl(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(difctlPath(t), args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), stdout.String(), stderr.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, stdout.String(), stderr.String()
}

// patternImage writes size bytes of non-zero data (no holes) to path.
func patternImage(t *testing.T, path string, size int) []byte {
	t.Helper()
	b := make([]byte, size)
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], uint64(i)*0x9e3779b97f4a7c15+1)
	}
	if err := os.WriteFile(path, b, 0o666); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestProtectInterruptResume interrupts a rate-limited protect with SIGINT
// (exit 32), checks that verify refuses the incomplete volume, and that a
// second protect resumes and completes.
func TestProtectInterruptResume(t *testing.T) {
	if testing.Short() {
		t.Skip("takes seconds")
	}
	dir := t.TempDir()
	patternImage(t, filepath.Join(dir, "big.img"), 8<<20)
	store := filepath.Join(dir, "big.img.difdb")
	code, _, stderr := interrupt(t, dir, func(*bufio.Reader) error {
		// Busy once the store exists and a checkpoint (1 MiB at 2 MiB/s)
		// has passed.
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(store); err == nil {
				time.Sleep(1200 * time.Millisecond)
				return nil
			}
		}
		return errors.New("no store after 30s")
	}, "protect", "--rate", "2MiB/s", "--checkpoint", "1MiB", "big.img")
	if code != exitCancelled {
		t.Fatalf("interrupted protect: exit %d, want %d (stderr %q)", code, exitCancelled, stderr)
	}
	if !regexp.MustCompile(`^difctl: big.img: protection stopped; run difctl protect big.img again to resume\ndifctl: cancelled by the user \(SIGINT\)\n$`).MatchString(stderr) {
		t.Errorf("interrupted protect: stderr %q", stderr)
	}
	code, _, stderr = runDifctl(t, dir, "verify", "big.img")
	if code != exitOperational || !regexp.MustCompile(`^difctl: big.img: protection incomplete \(.*\): run difctl protect big.img to resume\n$`).MatchString(stderr) {
		t.Errorf("verify of an incomplete volume: exit %d, stderr %q", code, stderr)
	}
	code, stdout, stderr := runDifctl(t, dir, "--json", "protect", "big.img")
	if code != 0 || !regexp.MustCompile(`"resumed":true,"protected":true`).MatchString(stdout) {
		t.Fatalf("resumed protect: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, stderr = runDifctl(t, dir, "verify", "big.img")
	if code != 0 || !regexp.MustCompile(`: 16384 blocks checked \(512\+8\): 16384 ok, 0 failed`).MatchString(stdout) {
		t.Errorf("verify after resume: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestScrubInterruptResume interrupts a rate-limited scrub of an image with
// its own PI and one bad block (exit 32|4 = 36: the failure found before
// the interrupt is kept), then resumes it: the second run continues from
// the cursor, does not report the bad block again and completes the pass.
func TestScrubInterruptResume(t *testing.T) {
	if testing.Short() {
		t.Skip("takes seconds")
	}
	dir := t.TempDir()
	f := dif.MustFormat("512+8")
	const blocks = 16384
	img := make([]byte, blocks*f.ExtendedBlockSize())
	for i := range img {
		img[i] = byte(i*7 + i>>9)
	}
	if err := f.Generate(img, nil, dif.Params{}); err != nil {
		t.Fatal(err)
	}
	img[3*f.ExtendedBlockSize()+100] ^= 0x10 // a data bit of block 3
	if err := os.WriteFile(filepath.Join(dir, "pi.img"), img, 0o666); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := interrupt(t, dir, func(br *bufio.Reader) error {
		// The first finding (block 3) is printed early: the scrub runs.
		line, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		if !regexp.MustCompile(`^LBA 3: guard mismatch`).MatchString(line) {
			return errors.New("first line " + line)
		}
		time.Sleep(500 * time.Millisecond)
		return nil
	}, "scrub", "--interleaved", "512+8", "--rate", "1MiB/s", "--workers", "1", "pi.img")
	if code != exitCancelled|exitUncorrected {
		t.Fatalf("interrupted scrub: exit %d, want %d (stdout %q, stderr %q)", code, exitCancelled|exitUncorrected, stdout, stderr)
	}
	if !regexp.MustCompile(`^difctl: pi.img: scrub stopped at LBA \d+ of 16384; run it again to resume\ndifctl: cancelled by the user \(SIGINT\)\n$`).MatchString(stderr) {
		t.Errorf("interrupted scrub: stderr %q", stderr)
	}
	// The resumed run does not report block 3 again, but its exit status
	// and its last line cover the whole pass, block 3 included: a cron job
	// must not miss it.
	code, stdout, stderr = runDifctl(t, dir, "scrub", "--interleaved", "512+8", "--badblocks", "bad.txt", "pi.img")
	if code != exitUncorrected {
		t.Fatalf("resumed scrub: exit %d, want %d (stdout %q, stderr %q)", code, exitUncorrected, stdout, stderr)
	}
	if !regexp.MustCompile(`(?m)^pass 1 resumed at LBA [1-9]\d*, complete.*; whole pass: 1 blocks failed, 1 of them before LBA \d+, found before the interruption \(guard 1\)`).MatchString(stdout) || regexp.MustCompile(`LBA 3:`).MatchString(stdout) {
		t.Errorf("resumed scrub: stdout %q", stdout)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "bad.txt")); err != nil || string(b) != "3\n" {
		t.Errorf("badblocks list of the resumed pass: %q, %v", b, err)
	}
	// A new pass finds the bad block again.
	code, stdout, _ = runDifctl(t, dir, "scrub", "--interleaved", "512+8", "pi.img")
	if code != exitUncorrected || !regexp.MustCompile(`(?m)^LBA 3: guard mismatch.*\n.*16384 blocks checked.*\npass 2 complete`).MatchString(stdout) {
		t.Errorf("second pass: exit %d, stdout %q", code, stdout)
	}
}

// TestReadOnlyImage: a read-only image can be verified and protected (the
// image is only read) but not written or injected into; exit 8 with the
// cause. As root, permissions do not stop writes, so the commands run as
// nobody when the test runs as root.
func TestReadOnlyImage(t *testing.T) {
	dir := t.TempDir()
	// t.TempDir makes dir and its parent private; other users need in.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(dir, "ro.img")
	patternImage(t, img, 64<<10)
	if err := os.Chmod(img, 0o444); err != nil {
		t.Fatal(err)
	}
	ext := filepath.Join(dir, "ro.dump")
	b := make([]byte, 8*520)
	f := dif.MustFormat("512+8")
	if err := f.Generate(b, nil, dif.Params{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ext, b, 0o444); err != nil {
		t.Fatal(err)
	}
	// A copy of the command that another user can run.
	exe := difctlPath(t)
	if os.Geteuid() == 0 {
		bin, err := os.ReadFile(exe)
		if err != nil {
			t.Fatal(err)
		}
		exe = filepath.Join(dir, "bin", "difctl")
		if err := os.MkdirAll(filepath.Dir(exe), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(exe, bin, 0o755); err != nil {
			t.Fatal(err)
		}
		for d := dir; d != filepath.Dir(d); d = filepath.Dir(d) {
			if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
				t.Skipf("%s is not searchable by other users", d)
			}
		}
	}
	run := func(args ...string) (int, string) {
		cmd := exec.Command(exe, args...)
		cmd.Dir = dir
		if os.Geteuid() == 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), stderr.String()
		} else if err != nil {
			t.Skipf("cannot run difctl as another user: %v", err)
		}
		return 0, stderr.String()
	}
	if code, stderr := run("protect", "ro.img"); code != 0 {
		t.Fatalf("protect of a read-only image: exit %d, stderr %q", code, stderr)
	}
	if code, stderr := run("verify", "ro.img"); code != 0 {
		t.Errorf("verify of a read-only image: exit %d, stderr %q", code, stderr)
	}
	if code, stderr := run("write", "ro.img", "--offset", "0", "ro.dump"); code != exitOperational || stderr != "difctl: open ro.img: permission denied\n" {
		t.Errorf("write to a read-only image: exit %d, stderr %q", code, stderr)
	}
	if code, stderr := run("verify", "--interleaved", "512+8", "ro.dump"); code != 0 {
		t.Errorf("verify of a read-only dump: exit %d, stderr %q", code, stderr)
	}
	if code, stderr := run("inject", "--interleaved", "512+8", "--lba", "1", "ro.dump"); code != exitOperational || stderr != "difctl: open ro.dump: permission denied\n" {
		t.Errorf("inject into a read-only dump: exit %d, stderr %q", code, stderr)
	}
	if code, stderr := run("remap", "--interleaved", "512+8", "--new-ref-tag", "1", "ro.dump"); code != exitOperational || stderr != "difctl: open ro.dump: permission denied\n" {
		t.Errorf("remap of a read-only dump: exit %d, stderr %q", code, stderr)
	}
	if err := os.WriteFile(filepath.Join(dir, "ro.out"), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if code, stderr := run("convert", "--from", "interleaved:512+8", "--to", "interleaved", "ro.dump", "ro.out"); code != exitUsage {
		t.Errorf("convert to itself: exit %d, stderr %q", code, stderr)
	}
	if code, stderr := run("convert", "--from", "interleaved:512+8", "--to", "dix", "ro.dump", "ro.out", "ro.md"); code != exitOperational || stderr != "difctl: open ro.out: permission denied\n" {
		t.Errorf("convert to a read-only output: exit %d, stderr %q", code, stderr)
	}
}
