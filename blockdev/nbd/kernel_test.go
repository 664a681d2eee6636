package nbd

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fuseFile exposes an export as a file with nbdfuse (several connections:
// CAN_MULTI_CONN) and attaches a loop device to it; undo detaches both.
func fuseFile(t *testing.T, dir, sock string) (loop string, undo func()) {
	t.Helper()
	mnt, err := os.MkdirTemp(dir, "fuse")
	if err != nil {
		t.Fatal(err)
	}
	pidfile := filepath.Join(dir, "nbdfuse.pid")
	os.Remove(pidfile)
	cmd := exec.Command("nbdfuse", "-P", pidfile, mnt+"/disk", "--unix", sock)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if _, err := os.Stat(pidfile); err == nil {
			break
		}
		select {
		case err := <-exited:
			t.Skipf("nbdfuse cannot mount here (%v): %s", err, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("nbdfuse did not come up: %s", stderr.String())
		}
	}
	out, err := exec.Command("losetup", "-f", "--show", mnt+"/disk").CombinedOutput()
	if err != nil {
		exec.Command("fusermount3", "-u", mnt).Run()
		<-exited
		t.Skipf("no loop device: losetup: %v: %s", err, out)
	}
	loop = strings.TrimSpace(string(out))
	return loop, func() {
		exec.Command("losetup", "-d", loop).Run()
		for i := 0; i < 50; i++ {
			if exec.Command("fusermount3", "-u", mnt).Run() == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
}

// needKernel skips the test unless ext4 can be mounted on an export
// through nbdfuse and a loop device: the tools, root, /dev/fuse and loop
// devices.
func needKernel(t *testing.T) {
	t.Helper()
	need(t, "nbdfuse", "losetup", "mkfs.ext4", "e2fsck", "debugfs", "fusermount3", "mount", "umount")
	if os.Geteuid() != 0 {
		t.Skip("needs root for losetup and mount")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skip("no loop devices (/dev/loop-control)")
	}
}

// TestKernelExt4 is the kernel path: nbdfuse, losetup, mkfs.ext4, mount,
// files written, umount, e2fsck -fn clean, files read back; then a block
// of one file is corrupted in the image and reading that file fails with
// EIO while the finding is recorded.
func TestKernelExt4(t *testing.T) {
	needKernel(t)
	size, files, fileSize := int64(64<<20), 8, 1<<20
	if testing.Short() {
		size, files = 32<<20, 3
	}
	dir := t.TempDir()
	tv := newTestVolume(t, dir, size, "4096+8")
	var fl failures
	ts := startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}}, Options{OnFailure: fl.add})
	loop, undo := fuseFile(t, dir, ts.sock)
	defer func() { undo() }()
	run(t, "mkfs.ext4", "-q", "-F", "-b", "4096", loop)
	mnt := filepath.Join(dir, "mnt")
	os.Mkdir(mnt, 0o755)
	run(t, "mount", loop, mnt)
	want := map[string][]byte{}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range files {
		b := make([]byte, fileSize)
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		name := fmt.Sprintf("f%d", i)
		want[name] = b
		if err := os.WriteFile(filepath.Join(mnt, name), b, 0o644); err != nil {
			run(t, "umount", mnt)
			t.Fatal(err)
		}
	}
	run(t, "umount", mnt)
	run(t, "e2fsck", "-fn", loop)
	run(t, "mount", "-o", "ro", loop, mnt)
	for name, b := range want {
		got, err := os.ReadFile(filepath.Join(mnt, name))
		if err != nil || !bytes.Equal(got, b) {
			t.Errorf("%s read back: %v, equal %v", name, err, bytes.Equal(got, b))
		}
	}
	run(t, "umount", mnt)
	if fs := tv.findings(t); len(fs) != 0 {
		t.Fatalf("findings before corruption: %+v", fs)
	}
	// The physical block of f0's third block, from debugfs.
	out := run(t, "debugfs", "-R", "bmap /f0 2", loop)
	fsblock, err := strconv.ParseInt(strings.TrimSpace(lastLine(out)), 10, 64)
	if err != nil {
		t.Fatalf("debugfs bmap: %q", out)
	}
	undo()
	undo = func() {}
	tv.corrupt(t, fsblock*4096+77)
	// Fresh FUSE file and loop device: no cache holds the old block.
	loop, undo = fuseFile(t, dir, ts.sock)
	run(t, "mount", "-o", "ro", loop, mnt)
	defer exec.Command("umount", mnt).Run()
	_, err = os.ReadFile(filepath.Join(mnt, "f0"))
	if !errors.Is(err, syscall.EIO) {
		t.Errorf("reading the corrupted file: %v, want EIO", err)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "f1")); err != nil || !bytes.Equal(got, want["f1"]) {
		t.Errorf("reading an intact file after the corruption: %v", err)
	}
	run(t, "umount", mnt)
	fs := tv.findings(t)
	if len(fs) == 0 || int64(fs[0].LBA) != fsblock {
		t.Errorf("findings %+v, want one at block %d", fs, fsblock)
	}
	if len(fl.get()) == 0 {
		t.Error("no OnFailure call")
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// checkCopied checks the ext4 on loop after a copy: e2fsck -fn clean, every
// file of sums (by name, the SHA-256 of what was copied) reads back the
// same through a read-only mount at mnt, and e2fsck -fn clean again.
// *mounted says whether mnt is mounted, for the test's cleanup.
func checkCopied(t *testing.T, loop, mnt string, sums map[string][32]byte, mounted *bool) {
	t.Helper()
	run(t, "e2fsck", "-fn", loop)
	run(t, "mount", "-o", "ro", loop, mnt)
	*mounted = true
	for name, want := range sums {
		b, err := os.ReadFile(filepath.Join(mnt, name))
		if err != nil {
			t.Errorf("reading %s: %v", name, err)
		} else if sha256.Sum256(b) != want {
			t.Errorf("%s does not hold what was copied", name)
		}
	}
	run(t, "umount", mnt)
	*mounted = false
	run(t, "e2fsck", "-fn", loop)
}
