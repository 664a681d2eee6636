package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestServe runs difctl serve in-process on two images, writes and reads
// through qemu-io, corrupts a block behind the server (the read fails with
// an I/O error and the failure is reported), then stops it as SIGTERM
// would: the writes are durable, the finding is in the store (difctl
// inspect), the exit status is 32|4 and the socket had mode 0600.
func TestServe(t *testing.T) {
	for _, tool := range []string{"qemu-io", "nbdinfo"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (Debian: qemu-utils, libnbd-bin)", tool)
		}
	}
	dir := t.TempDir()
	imgs := []string{filepath.Join(dir, "a.img"), filepath.Join(dir, "b.img")}
	for _, im := range imgs {
		if err := os.WriteFile(im, make([]byte, 4<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"protect", "--format", "4096+8", im}, nil, &out, &errb); code != 0 {
			t.Fatalf("protect: %d %s", code, errb.String())
		}
	}
	sock := filepath.Join(dir, "srv.sock")
	ctx, cancel := context.WithCancelCause(context.Background())
	srv := startServe(t, ctx, serveOptions{Images: imgs, Socket: sock, MaxConns: 4})
	stderr := srv.stderr
	if srv.ended {
		t.Fatalf("serve: %v; %s", srv.err, stderr.String())
	}
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket %v mode %v, want a socket with mode 0600", err, fi.Mode())
	}
	for _, name := range []string{"a.img", "b.img"} {
		if !strings.Contains(stderr.String(), "difctl: serving "+name+" at nbd+unix:///"+name+"?socket="+sock+"\n") {
			t.Errorf("stderr does not give the URI of %s:\n%s", name, stderr.String())
		}
	}
	ua := "nbd+unix:///a.img?socket=" + sock
	ub := "nbd+unix:///b.img?socket=" + sock
	sh := func(name string, args ...string) (string, error) {
		out, err := exec.Command(name, args...).CombinedOutput()
		return string(out), err
	}
	if out, err := sh("qemu-io", "-f", "raw", "-c", "write -P 0x61 0 1M", "-c", "write -P 0x62 2M 4k", ua); err != nil {
		t.Fatalf("qemu-io: %v\n%s", err, out)
	}
	if out, err := sh("qemu-io", "-f", "raw", "-c", "write -P 0x63 0 64k", "-c", "flush", ub); err != nil {
		t.Fatalf("qemu-io b: %v\n%s", err, out)
	}
	// Corrupt block 100 of a.img (written with 0x61) behind the server.
	f, err := os.OpenFile(imgs[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0x00}, 100*4096+9)
	f.Close()
	out, err := sh("qemu-io", "-f", "raw", "-c", "read -P 0x61 396k 8k", ua)
	if err == nil || !strings.Contains(out, "Input/output error") {
		t.Errorf("read of the corrupted block: %v\n%s", err, out)
	}
	if out, err := sh("nbdinfo", "--list", ua); err != nil || !strings.Contains(out, "b.img") {
		t.Errorf("nbdinfo --list: %v\n%s", err, out)
	}
	cancel(&signalError{sig: syscall.SIGTERM})
	stopped, serr := srv.wait()
	if !stopped {
		t.Fatal("serve did not stop after SIGTERM")
	}
	if code := exitCode(ctx, serr, true); code != exitCancelled|exitUncorrected {
		t.Errorf("exit code %d (%v), want %d", code, serr, exitCancelled|exitUncorrected)
	}
	if !strings.Contains(stderr.String(), "difctl: a.img: read at offset 409600: ") {
		t.Errorf("the failure is not reported on stderr:\n%s", stderr.String())
	}
	if _, err := os.Stat(sock); err == nil {
		t.Error("socket left behind")
	}
	// The store is closed and holds the finding; the writes are durable.
	var o, e bytes.Buffer
	code := run(context.Background(), []string{"inspect", imgs[0]}, nil, &o, &e)
	if code != 0 || !strings.Contains(o.String(), "findings:     2 open (guard 1, sector checksum 1)") {
		t.Errorf("inspect after serve: %d\n%s%s", code, o.String(), e.String())
	}
	o.Reset()
	e.Reset()
	if code := run(context.Background(), []string{"verify", imgs[1]}, nil, &o, &e); code != 0 || !strings.Contains(o.String(), "1024 ok, 0 failed") {
		t.Errorf("verify b.img after serve: %d\n%s%s", code, o.String(), e.String())
	}
	got, _ := os.ReadFile(imgs[1])
	if !bytes.Equal(got[:64<<10], bytes.Repeat([]byte{0x63}, 64<<10)) {
		t.Error("b.img does not hold what was written through the server")
	}
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serveTest is runServe running in a goroutine, for a test.
type serveTest struct {
	done   chan error // runServe's result
	stderr *syncBuffer
	// ended: runServe returned, with err, before it listened.
	ended bool
	err   error
}

// startServe runs runServe(ctx, o) in a goroutine and waits until it
// listens (o.Ready is set here) or ends; a server that does neither within
// 30 seconds fails the test.
func startServe(t *testing.T, ctx context.Context, o serveOptions) *serveTest {
	t.Helper()
	s := &serveTest{done: make(chan error, 1), stderr: &syncBuffer{}}
	ready := make(chan net.Addr, 1)
	o.Ready = func(a net.Addr) { ready <- a }
	go func() { s.done <- runServe(ctx, o, nil, s.stderr) }()
	select {
	case <-ready:
	case s.err = <-s.done:
		s.ended = true
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start")
	}
	return s
}

// wait waits up to 30 seconds for runServe to end and returns its result;
// stopped is false if it did not end.
func (s *serveTest) wait() (stopped bool, err error) {
	select {
	case err := <-s.done:
		return true, err
	case <-time.After(30 * time.Second):
		return false, nil
	}
}

// TestServeSignal runs difctl serve as a real process and stops it with
// SIGTERM and SIGINT: it exits 32 with one line naming the signal, what
// clients wrote is durable (difctl verify is clean and reads it back),
// and a second server on the same socket is refused while the first runs.
func TestServeSignal(t *testing.T) {
	if _, err := exec.LookPath("qemu-io"); err != nil {
		t.Skip("qemu-io is not installed (Debian: qemu-utils)")
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run("sig="+sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			img := filepath.Join(dir, "d.img")
			if err := os.WriteFile(img, make([]byte, 2<<20), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("difctl", "protect", img).CombinedOutput(); err != nil {
				t.Fatalf("protect: %v %s", err, out)
			}
			cmd := exec.Command("difctl", "serve", img)
			var stderr syncBuffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			sock := img + ".sock"
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if c, err := net.Dial("unix", sock); err == nil {
					c.Close()
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no server: %s", stderr.String())
				}
			}
			// (The same image would be refused by its store's lock first.)
			other := filepath.Join(dir, "e.img")
			os.WriteFile(other, make([]byte, 1<<20), 0o644)
			exec.Command("difctl", "protect", other).Run()
			if out, err := exec.Command("difctl", "serve", "--socket", sock, other).CombinedOutput(); err == nil || !strings.Contains(string(out), "another server is listening there") {
				t.Errorf("second server on the socket: %v %s", err, out)
			}
			u := "nbd+unix:///d.img?socket=" + sock
			if out, err := exec.Command("qemu-io", "-f", "raw", "-c", "write -P 0x5c 4096 65536", "-c", "write -P 0x5d 1M 700", u).CombinedOutput(); err != nil {
				t.Fatalf("qemu-io: %v %s", err, out)
			}
			cmd.Process.Signal(sig)
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != exitCancelled {
				t.Errorf("exit: %v, want status %d", err, exitCancelled)
			}
			name := map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT"}[sig]
			if !strings.HasSuffix(stderr.String(), "difctl: cancelled by the user ("+name+")\n") {
				t.Errorf("stderr:\n%s", stderr.String())
			}
			if out, err := exec.Command("difctl", "verify", img).CombinedOutput(); err != nil {
				t.Errorf("verify after the signal: %v %s", err, out)
			}
			b, _ := os.ReadFile(img)
			if !bytes.Equal(b[4096:4096+65536], bytes.Repeat([]byte{0x5c}, 65536)) || !bytes.Equal(b[1<<20:1<<20+700], bytes.Repeat([]byte{0x5d}, 700)) {
				t.Error("the image does not hold what was written")
			}
		})
	}
}

// TestServeVolumeOptions: served volumes are read with pread, not through
// the mapping (measured cheaper for the server's requests, and no file
// pages in its resident set; see serveVolumeOptions), and --read-only
// reaches the volume.
func TestServeVolumeOptions(t *testing.T) {
	for _, ro := range []bool{false, true} {
		o := serveVolumeOptions(ro)
		if !o.NoMap || o.ReadOnly != ro || o.MaxUnsynced != serveMaxUnsynced {
			t.Errorf("serveVolumeOptions(%v) = %+v, want NoMap, ReadOnly %v and MaxUnsynced %d", ro, o, ro, serveMaxUnsynced)
		}
	}
}

// TestServeMemory: a served volume's store gets serve's small engine
// sizes (the flags, or the defaults), and the collector runs at
// serveGCPercent while serving and as before afterwards.
func TestServeMemory(t *testing.T) {
	if so := serveStoreOptions(&serveOptions{}); so.CacheBytes != defaultServeStoreCache || so.MemTableBytes != defaultServeMemTable {
		t.Errorf("default store sizes %+v, want cache %d and memtable %d", so, defaultServeStoreCache, defaultServeMemTable)
	}
	if so := serveStoreOptions(&serveOptions{StoreCache: 3 << 20, MemTable: 5 << 20}); so.CacheBytes != 3<<20 || so.MemTableBytes != 5<<20 {
		t.Errorf("store sizes %+v, want the flags' 3 MiB and 5 MiB", so)
	}
	if _, set := os.LookupEnv("GOGC"); set {
		t.Skip("GOGC is set: serve keeps it")
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "a.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"protect", img}, nil, &out, &errb); code != 0 {
		t.Fatalf("protect: %d %s", code, errb.String())
	}
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	ctx, cancel := context.WithCancel(context.Background())
	gc := make(chan int, 1)
	var stderr syncBuffer
	err := runServe(ctx, serveOptions{Images: []string{img}, MaxConns: 1, Ready: func(net.Addr) {
		p := debug.SetGCPercent(-1)
		debug.SetGCPercent(p)
		gc <- p
		cancel()
	}}, nil, &stderr)
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("serve: %v %s", err, stderr.String())
	}
	if p := <-gc; p != serveGCPercent {
		t.Errorf("GOGC while serving %d, want %d", p, serveGCPercent)
	}
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("GOGC after serving %d, want 100 again", p)
	}
}

// --keyed-crc without the key is a usage error (exit 16), before anything
// is opened.
func TestServeKeyedCRCNeedsKey(t *testing.T) {
	var out, errb bytes.Buffer
	img := filepath.Join(t.TempDir(), "none.img")
	if code := run(context.Background(), []string{"serve", "--keyed-crc", img}, nil, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), "--keyed-crc needs the key") {
		t.Fatalf("serve --keyed-crc without a key: exit %d, stderr %q; want %d and the reason", code, errb.String(), exitUsage)
	}
}
