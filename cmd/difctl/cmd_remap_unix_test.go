//go:build unix

package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestRemapInterruptResume interrupts a store-backed remap with SIGINT
// while it rewrites the tuples (slowed down and made to rewrite 256 blocks
// per store commit by the DIFCTL_TEST_REMAP hook), checks that the image
// then cannot be opened (the journal is in the store) and that the remap
// run again finishes it: the image verifies against its store, and an
// export carries the new ref tags.
func TestRemapInterruptResume(t *testing.T) {
	if testing.Short() {
		t.Skip("takes seconds")
	}
	dir := t.TempDir()
	img := patternImage(t, filepath.Join(dir, "big.img"), 4<<20) // 8192 blocks
	if code, _, stderr := runDifctl(t, dir, "protect", "big.img"); code != 0 {
		t.Fatalf("protect: exit %d, %s", code, stderr)
	}
	t.Setenv("DIFCTL_TEST_REMAP", "chunk=256,delay=100ms")
	code, stdout, stderr := interrupt(t, dir, func(br *bufio.Reader) error {
		// Busy once two chunks have been rewritten.
		for range 2 {
			line, err := br.ReadString('\n')
			if err != nil {
				return err
			}
			if !strings.HasPrefix(line, "remap-step ") {
				return errors.New("unexpected line " + line)
			}
		}
		return nil
	}, "remap", "--new-ref-tag", "0x10000", "big.img")
	if code != exitCancelled {
		t.Fatalf("interrupted remap: exit %d, want %d (stdout %q, stderr %q)", code, exitCancelled, stdout, stderr)
	}
	if !regexp.MustCompile(`^difctl: big.img: remap stopped at LBA [1-9]\d* of 8192; run difctl remap big.img --new-ref-tag 0x10000 again to finish \(until then the image cannot be opened\)\ndifctl: cancelled by the user \(SIGINT\)\n$`).MatchString(stderr) {
		t.Errorf("interrupted remap: stderr %q", stderr)
	}
	t.Setenv("DIFCTL_TEST_REMAP", "")

	// Every opener refuses the half-remapped image.
	for _, args := range [][]string{{"verify", "big.img"}, {"scrub", "big.img"}, {"convert", "--to", "interleaved", "big.img", "big.dump"}} {
		code, _, stderr := runDifctl(t, dir, args...)
		if code != exitOperational || !strings.Contains(stderr, "remap in progress: run difctl remap again to finish") {
			t.Errorf("%s during the remap: exit %d, stderr %q", args[0], code, stderr)
		}
	}
	// Another new ref tag is refused until this one is finished.
	if code, _, stderr := runDifctl(t, dir, "remap", "--new-ref-tag", "5", "big.img"); code != exitUsage || !strings.Contains(stderr, "a remap to 0x10000 is in progress") {
		t.Errorf("remap to another value: exit %d, stderr %q", code, stderr)
	}
	code, stdout, stderr = runDifctl(t, dir, "remap", "--new-ref-tag", "0x10000", "big.img")
	if code != 0 || !regexp.MustCompile(`^big.img: remapped the ref tags of 8192 blocks \(512\+8, resumed at LBA [1-9]\d*\): block 0 from 0x00000000 to 0x00010000`).MatchString(stdout) {
		t.Fatalf("resumed remap: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, stdout, _ := runDifctl(t, dir, "verify", "big.img"); code != 0 || !strings.Contains(stdout, "8192 ok, 0 failed") {
		t.Errorf("verify after the remap: exit %d, %q", code, stdout)
	}
	if code, _, stderr := runDifctl(t, dir, "convert", "--to", "interleaved", "big.img", "big.dump"); code != 0 {
		t.Fatalf("export: exit %d, %q", code, stderr)
	}
	code, stdout, _ = runDifctl(t, dir, "verify", "--interleaved", "512+8", "--ref-tag", "0x10000", "big.dump")
	if code != 0 || !strings.Contains(stdout, "8192 ok, 0 failed") {
		t.Errorf("export verified with the new ref tag: exit %d, %q", code, stdout)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "big.img")); err != nil || !bytes.Equal(b, img) {
		t.Errorf("the remap changed the image (%v)", err)
	}
}
