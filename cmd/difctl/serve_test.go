package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
	ready := make(chan net.Addr, 1)
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, serveOptions{Images: imgs, Socket: sock, MaxConns: 4, Ready: func(a net.Addr) { ready <- a }}, nil, &stderr)
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve: %v; %s", err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start")
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
	var serr error
	select {
	case serr = <-done:
	case <-time.After(30 * time.Second):
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
