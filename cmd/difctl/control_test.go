package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/difctl/difctl/internal/nbdtest"
)

// Checks of a served image through the server's control socket
// (control*.go).

// onlineServer is a server of one protected image, in-process, for the
// tests of the control socket.
type onlineServer struct {
	*serveTest
	img, sock string
	cancel    context.CancelCauseFunc
}

// startOnline protects a 4 MiB image (1024 blocks of 4096+8) in a new
// folder and serves it with o (Images and Socket are set here).
func startOnline(t *testing.T, o serveOptions) *onlineServer {
	t.Helper()
	dir := t.TempDir()
	img := protectedImage(t, dir, "a.img", 4<<20)
	ctx, cancel := context.WithCancelCause(context.Background())
	o.Images, o.Socket = []string{img}, filepath.Join(dir, "a.sock")
	if o.MaxConns == 0 {
		o.MaxConns = 4
	}
	s := &onlineServer{serveTest: startServe(t, ctx, o), img: img, sock: o.Socket, cancel: cancel}
	if s.ended {
		t.Fatalf("serve: %v\n%s", s.err, s.stderr.String())
	}
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop stops the server as SIGTERM would, once.
func (s *onlineServer) stop(t *testing.T) {
	t.Helper()
	if s.cancel == nil {
		return
	}
	s.cancel(&signalError{sig: syscall.SIGTERM})
	s.cancel = nil
	if stopped, _ := s.wait(); !stopped {
		t.Fatal("serve did not stop")
	}
}

// difctlIn runs a difctl command line in-process with ctx and returns its
// exit code, stdout and stderr.
func difctlIn(ctx context.Context, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// nbdWriter writes blocks 0 to 63 of an export again and again, with a
// flush after each round, until stopped: a client using the image while
// it is checked.
type nbdWriter struct {
	rounds atomic.Int64
	stopc  chan struct{}
	done   chan error
	once   sync.Once
	err    error
}

func startNBDWriter(t *testing.T, sock, export string) *nbdWriter {
	t.Helper()
	c, err := nbdtest.Dial("unix", sock, export)
	if err != nil {
		t.Fatal(err)
	}
	w := &nbdWriter{stopc: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		defer c.Close()
		buf := make([]byte, 64*4096)
		for i := 0; ; i++ {
			select {
			case <-w.stopc:
				w.done <- nil
				return
			default:
			}
			for j := range buf {
				buf[j] = byte(i + j/4096)
			}
			if err := c.Write(0, buf); err != nil {
				w.done <- err
				return
			}
			if err := c.Flush(); err != nil {
				w.done <- err
				return
			}
			w.rounds.Add(1)
		}
	}()
	return w
}

// stop stops the writer and returns its error.
func (w *nbdWriter) stop() error {
	w.once.Do(func() {
		close(w.stopc)
		w.err = <-w.done
	})
	return w.err
}

var secondsField = regexp.MustCompile(`"(seconds|bytes_per_second)":[0-9.e+-]+`)

// TestServeOnline checks a served image while an NBD client writes to it:
// verify, scrub and inspect run on the server (the store is the
// server's), print what they print on their own and exit the same; the
// scrub finds the block corrupted behind the server's back, lists it in
// the badblocks file and records it in the findings log and the server's
// log; the writes go on meanwhile and are never reported as failures.
func TestServeOnline(t *testing.T) {
	s := startOnline(t, serveOptions{})
	ctl := s.img + ".difdb.ctl"
	if fi, err := os.Lstat(ctl); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("control socket %s: %v %v, want a socket of mode 0600", ctl, fi, err)
	}
	if !strings.Contains(s.stderr.String(), "difctl: control socket at "+ctl+" ") {
		t.Errorf("serve does not say where its control socket is:\n%s", s.stderr.String())
	}
	w := startNBDWriter(t, s.sock, "a.img")
	defer w.stop()
	ctx := context.Background()

	code, out, errs := difctlIn(ctx, "verify", s.img)
	if code != 0 || !strings.HasSuffix(out, ": 1024 blocks checked (4096+8): 1024 ok, 0 failed, 0 unwritten, 0 escaped\n") || errs != "" {
		t.Fatalf("verify of the served image: exit %d\n%s%s\nserver:\n%s", code, out, errs, s.stderr.String())
	}

	flipBlocks(t, s.img, 500*8) // block 500 of 4 KiB, behind the server's back
	before := w.rounds.Load()
	bad := filepath.Join(filepath.Dir(s.img), "bad.txt")
	code, out, errs = difctlIn(ctx, "scrub", "--rate", "8MiB/s", "--badblocks", bad, s.img)
	if code != exitUncorrected {
		t.Fatalf("scrub: exit %d, want %d\n%s%s", code, exitUncorrected, out, errs)
	}
	want := "LBA 500: guard mismatch: expected 0x"
	if !strings.HasPrefix(out, want) || strings.Count(out, "LBA ") != 2 || !strings.Contains(out, "1023 ok, 1 failed (guard 1, sector checksum 1)") ||
		!strings.Contains(out, "pass 1 complete") || !strings.HasSuffix(errs, "difctl: "+s.img+": 1 of 1024 blocks failed verification\n") {
		t.Errorf("scrub output:\n%s%s", out, errs)
	}
	if b, err := os.ReadFile(bad); err != nil || string(b) != "500\n" {
		t.Errorf("badblocks file: %q %v, want 500", b, err)
	}
	if w.rounds.Load() == before {
		t.Error("the NBD client wrote nothing while the scrub ran")
	}
	log := s.stderr.String()
	for _, l := range []string{"difctl: control: scrub " + s.img + " for process ", ": LBA 500: guard mismatch", ": exit 4 after "} {
		if !strings.Contains(log, l) {
			t.Errorf("the server's log lacks %q:\n%s", l, log)
		}
	}

	// JSON Lines, as on its own: the findings, the summary, the scrub
	// record and the error record.
	code, out, _ = difctlIn(ctx, "--json", "scrub", "--restart", s.img)
	var types []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r struct{ Type string }
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("not JSON: %q", l)
		}
		types = append(types, r.Type)
	}
	if code != exitUncorrected || strings.Join(types, ",") != "finding,finding,summary,scrub,error" || !strings.Contains(out, `"type":"finding","lba":500,"kind":"guard"`) {
		t.Errorf("scrub --json: exit %d\n%s", code, out)
	}

	code, out, _ = difctlIn(ctx, "inspect", s.img)
	if code != 0 || !regexp.MustCompile(`findings: +2 open \(guard 1, sector checksum 1\)`).MatchString(out) || !strings.Contains(out, "scrub:        2 passes complete") {
		t.Errorf("inspect of the served image: exit %d\n%s", code, out)
	}
	code, out, _ = difctlIn(ctx, "inspect", "--lba", "500", s.img)
	if code != 0 || !regexp.MustCompile(`(?m)^500 +failed +[0-9a-f]{4} !`).MatchString(out) {
		t.Errorf("inspect --lba 500: exit %d\n%s", code, out)
	}
	// A usage error found by the server is one here too.
	if code, _, errs := difctlIn(ctx, "inspect", "--lba", "5000", s.img); code != exitUsage || !strings.Contains(errs, "--lba 5000 is beyond the end") || !strings.HasSuffix(errs, "(see 'difctl inspect --help')\n") {
		t.Errorf("inspect --lba 5000: exit %d, %q", code, errs)
	}

	onlineText, onlineJSON := make([]string, 2), make([]string, 2)
	code, onlineText[0], onlineText[1] = difctlIn(ctx, "verify", s.img)
	if code != exitUncorrected {
		t.Errorf("verify after the corruption: exit %d", code)
	}
	_, onlineJSON[0], onlineJSON[1] = difctlIn(ctx, "--json", "verify", s.img)
	if err := w.stop(); err != nil {
		t.Errorf("the NBD client failed while the image was checked: %v", err)
	}
	s.stop(t)

	// On its own, verify prints the same.
	_, out, errs = difctlIn(ctx, "verify", s.img)
	if out != onlineText[0] || errs != onlineText[1] {
		t.Errorf("verify on its own:\n%s%s\nthrough the server:\n%s%s", out, errs, onlineText[0], onlineText[1])
	}
	_, out, errs = difctlIn(ctx, "--json", "verify", s.img)
	if secondsField.ReplaceAllString(out, "") != secondsField.ReplaceAllString(onlineJSON[0], "") || errs != onlineJSON[1] {
		t.Errorf("verify --json on its own:\n%s%s\nthrough the server:\n%s%s", out, errs, onlineJSON[0], onlineJSON[1])
	}
	code, out, _ = difctlIn(ctx, "inspect", s.img)
	if code != 0 || !regexp.MustCompile(`findings: +2 open`).MatchString(out) {
		t.Errorf("the findings log after serve: exit %d\n%s", code, out)
	}
	if _, err := os.Lstat(ctl); err == nil {
		t.Error("the control socket is left behind")
	}
}

// TestServeOnlineCancel: Ctrl-C of a client cancels the scrub the server
// runs for it, which stops as a scrub on its own does (exit 32, where it
// stopped said); the next scrub resumes it.
func TestServeOnlineCancel(t *testing.T) {
	s := startOnline(t, serveOptions{})
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(700*time.Millisecond, func() { cancel(&signalError{sig: os.Interrupt}) })
	t0 := time.Now()
	code, out, errs := difctlIn(ctx, "scrub", "--rate", "512KiB/s", s.img) // 8 s for the whole image
	if code != exitCancelled || !regexp.MustCompile(`scrub stopped at LBA [0-9]+ of 1024; run it again to resume\ndifctl: cancelled by the user \(SIGINT\)\n$`).MatchString(errs) {
		t.Errorf("interrupted scrub: exit %d\n%s%s", code, out, errs)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("the interrupted scrub took %v: the server did not stop it", d)
	}
	if log := s.stderr.String(); !strings.Contains(log, ": exit 32 after ") {
		t.Errorf("the server's log does not show the cancellation:\n%s", log)
	}
	code, out, errs = difctlIn(context.Background(), "scrub", s.img)
	if code != 0 || !regexp.MustCompile(`pass 1 resumed at LBA [1-9][0-9]*, complete`).MatchString(out) {
		t.Errorf("the scrub after: exit %d\n%s%s", code, out, errs)
	}
}

// controlDial connects to a control socket and reads the hello.
func controlDial(t *testing.T, path string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	if l, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(l, `{"v":1,"type":"hello",`) {
		t.Fatalf("hello: %q %v", l, err)
	}
	return c, br
}

// controlRefusal reads the server's lines up to the end of the connection
// and returns the code of the error line among them.
func controlRefusal(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	var code string
	for {
		l, err := br.ReadBytes('\n')
		if err != nil {
			return code
		}
		var f controlFrame
		if json.Unmarshal(l, &f) == nil && f.Type == "error" && f.Err != nil {
			code = f.Err.Code
		}
	}
}

// TestServeControlHostile: clients that send garbage, a line too long or
// nothing lose their connection, with the reason, and nothing else:
// meanwhile the export serves and other checks run.
func TestServeControlHostile(t *testing.T) {
	s := startOnline(t, serveOptions{ControlLimits: controlLimits{Request: 500 * time.Millisecond, MaxConns: 4}})
	ctl := s.img + ".difdb.ctl"

	silent, sbr := controlDial(t, ctl)
	defer silent.Close()
	huge, hbr := controlDial(t, ctl)
	defer huge.Close()
	sent := make(chan error, 1)
	go func() {
		_, err := huge.Write(bytes.Repeat([]byte{'x'}, 1<<20))
		sent <- err
	}()
	junk, jbr := controlDial(t, ctl)
	defer junk.Close()
	junk.Write([]byte("{\"v\":1,\"op\":\"verify\"\n\x00\xff garbage\n"))

	// Serving and checking go on.
	nc, err := nbdtest.Dial("unix", s.sock, "a.img")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := nc.Read(4096, 4096); err != nil || !bytes.Equal(b, bytes.Repeat([]byte{0x5a}, 4096)) {
		t.Errorf("NBD read beside the hostile clients: %v", err)
	}
	nc.Close()
	if code, out, errs := difctlIn(context.Background(), "verify", s.img); code != 0 || !strings.Contains(out, "1024 ok, 0 failed") {
		t.Errorf("verify beside the hostile clients: exit %d\n%s%s", code, out, errs)
	}

	if code := controlRefusal(t, jbr); code != controlErrBadRequest {
		t.Errorf("garbage: refused with %q, want %q", code, controlErrBadRequest)
	}
	if code := controlRefusal(t, hbr); code != controlErrTooLarge {
		t.Errorf("a huge line: refused with %q, want %q", code, controlErrTooLarge)
	}
	<-sent
	t0 := time.Now()
	if code := controlRefusal(t, sbr); code != controlErrTimeout {
		t.Errorf("silence: refused with %q, want %q", code, controlErrTimeout)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("the silent client was dropped after %v", d)
	}

	// Past MaxConns, a connection is refused at once and the others go on.
	for _, c := range []net.Conn{silent, huge, junk} {
		c.Close()
	}
	var held []net.Conn
	for deadline := time.Now().Add(10 * time.Second); len(held) < 4; {
		// Until the server has seen the others go, a slot may be taken.
		c, err := net.Dial("unix", ctl)
		if err != nil {
			t.Fatal(err)
		}
		l, err := bufio.NewReader(c).ReadString('\n')
		switch {
		case strings.HasPrefix(l, `{"v":1,"type":"hello",`):
			held = append(held, c)
		case time.Now().After(deadline):
			t.Fatalf("no slot: %q %v", l, err)
		default:
			c.Close()
			time.Sleep(50 * time.Millisecond)
		}
	}
	c, err := net.Dial("unix", ctl)
	if err != nil {
		t.Fatal(err)
	}
	if code := controlRefusal(t, bufio.NewReader(c)); code != controlErrTooMany {
		t.Errorf("a fifth connection: refused with %q, want %q", code, controlErrTooMany)
	}
	c.Close()
	for _, c := range held {
		c.Close()
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, _, errs := difctlIn(context.Background(), "verify", s.img)
		if code == 0 {
			break
		}
		if time.Now().After(deadline) || !strings.Contains(errs, "control connections at once") {
			t.Fatalf("verify after the connections closed: exit %d %s", code, errs)
		}
	}
}

// TestServeControlPeer: a client of another user is refused, with a line
// in the server's log, however the socket's mode came to let it connect;
// its check does not run and the command finds the store busy.
func TestServeControlPeer(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the peer's user is asked on Linux only")
	}
	other := os.Geteuid() + 1
	s := startOnline(t, serveOptions{ControlUID: &other})
	code, _, errs := difctlIn(context.Background(), "verify", s.img)
	if code != exitOperational || !strings.Contains(errs, "is busy") || !strings.Contains(errs, "refused: only user ") {
		t.Errorf("verify as another user: exit %d %s", code, errs)
	}
	if !regexp.MustCompile(`difctl: control: refused process [0-9]+ of user [0-9]+ \(only user [0-9]+ may ask\)`).MatchString(s.stderr.String()) {
		t.Errorf("the server's log:\n%s", s.stderr.String())
	}
}

// TestServeControlStale: a server killed with SIGKILL leaves its control
// socket; the image is then checked on its own, and the next server
// replaces the socket. A symbolic link where the socket goes is never
// followed: --control refuses it, the default is done without.
func TestServeControlStale(t *testing.T) {
	dir := t.TempDir()
	img := protectedImage(t, dir, "a.img", 1<<20)
	ctl := img + ".difdb.ctl"
	serve := func(args ...string) (*exec.Cmd, *syncBuffer) {
		cmd := exec.Command(difctlPath(t), append([]string{"serve"}, args...)...)
		cmd.Dir = dir
		var stderr syncBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if strings.Contains(stderr.String(), "difctl: serving ") {
				return cmd, &stderr
			}
			if time.Now().After(deadline) {
				t.Fatalf("no server: %s", stderr.String())
			}
		}
	}
	cmd, _ := serve(img)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if fi, err := os.Lstat(ctl); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("the killed server's control socket: %v", err)
	}
	if code, out, errs := runDifctl(t, dir, "verify", "a.img"); code != 0 || !strings.Contains(out, "256 ok") {
		t.Errorf("verify beside the stale socket: exit %d %s%s", code, out, errs)
	}
	cmd, stderr := serve("a.img")
	if code, out, errs := runDifctl(t, dir, "verify", "a.img"); code != 0 || !strings.Contains(out, "256 ok") || !strings.Contains(stderr.String(), "difctl: control: verify a.img for process ") {
		t.Errorf("verify through the new server: exit %d %s%s\nserver:\n%s", code, out, errs, stderr.String())
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if _, err := os.Lstat(ctl); err == nil {
		t.Error("the control socket is left behind")
	}

	// A symbolic link at the socket's place is left alone.
	target := filepath.Join(dir, "target")
	os.WriteFile(target, []byte("keep"), 0o644)
	if err := os.Symlink(target, ctl); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runDifctl(t, dir, "serve", "--control", ctl, "a.img"); code != exitOperational || !strings.Contains(errs, "is a symbolic link") {
		t.Errorf("serve --control on a symbolic link: exit %d %s", code, errs)
	}
	cmd, stderr = serve("a.img")
	if !strings.Contains(stderr.String(), "difctl: a.img: no control socket: a.img.difdb.ctl is a symbolic link") {
		t.Errorf("serve with a symbolic link at the default socket:\n%s", stderr.String())
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if b, err := os.ReadFile(target); err != nil || string(b) != "keep" {
		t.Errorf("the link's target: %q %v", b, err)
	}
	if fi, err := os.Lstat(ctl); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symbolic link is gone: %v", err)
	}
}

// TestServeSIGUSR1: SIGUSR1 scrubs the served image, its report in the
// server's log and its findings in the findings log.
func TestServeSIGUSR1(t *testing.T) {
	dir := t.TempDir()
	img := protectedImage(t, dir, "a.img", 1<<20)
	flipBlocks(t, img, 7*8)
	cmd := exec.Command(difctlPath(t), "serve", "a.img")
	cmd.Dir = dir
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	wait := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(stderr.String(), what); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the server's log:\n%s", what, stderr.String())
			}
		}
	}
	wait("difctl: serving ")
	cmd.Process.Signal(syscall.SIGUSR1)
	wait("difctl: SIGUSR1: scrub a.img: exit 4 after ")
	for _, l := range []string{
		"difctl: SIGUSR1: scrub a.img: LBA 7: guard mismatch",
		"difctl: SIGUSR1: scrub a.img: a.img: 256 blocks checked (4096+8): 255 ok, 1 failed",
		"difctl: SIGUSR1: scrub a.img: pass 1 complete",
	} {
		if !strings.Contains(stderr.String(), l) {
			t.Errorf("the server's log lacks %q:\n%s", l, stderr.String())
		}
	}
	if code, out, _ := runDifctl(t, dir, "inspect", "a.img"); code != 0 || !regexp.MustCompile(`findings: +2 open`).MatchString(out) {
		t.Errorf("inspect: exit %d\n%s", code, out)
	}
}

// TestServeOnlineKeyed: the key a client gives is checked against the
// served volume's key check value, as on its own, without leaving the
// client; the check is the server's, with the key the server was given.
func TestServeOnlineKeyed(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "k.img")
	key, wrong := filepath.Join(dir, "key"), filepath.Join(dir, "wrong")
	os.WriteFile(key, bytes.Repeat([]byte{0x3c}, 32), 0o600)
	os.WriteFile(wrong, bytes.Repeat([]byte{0x3d}, 32), 0o600)
	os.WriteFile(img, bytes.Repeat([]byte{0x5a}, 1<<20), 0o644)
	mustDifctl(t, 0, "protect", "--format", "4096+8", "--key-file", key, img)
	ctx := context.Background()
	serve := func(k keyFlags, fn func()) {
		sctx, cancel := context.WithCancelCause(ctx)
		o := serveOptions{Images: []string{img}, Socket: filepath.Join(dir, "k.sock"), MaxConns: 2}
		o.Key = k
		srv := startServe(t, sctx, o)
		if srv.ended {
			t.Fatalf("serve: %v %s", srv.err, srv.stderr.String())
		}
		fn()
		cancel(&signalError{sig: syscall.SIGTERM})
		if stopped, _ := srv.wait(); !stopped {
			t.Fatal("serve did not stop")
		}
	}
	type check struct {
		args   []string
		code   int
		output string
	}
	for _, tc := range []struct {
		name   string
		key    keyFlags
		checks []check
	}{
		{"with-key", keyFlags{File: key}, []check{
			{[]string{"verify", "--key-file", key, img}, 0, "256 ok, 0 failed, 0 unwritten, 0 escaped, keyed tags checked"},
			{[]string{"verify", img}, 0, "keyed tags checked"}, // the server's check
			{[]string{"verify", "--key-file", wrong, img}, exitOperational, "the key given is not this volume's"},
			{[]string{"verify", "--witness", filepath.Join(dir, "w"), img}, exitUsage, "--witness: "},
			{[]string{"inspect", "--key-file", key, img}, 0, "the key given matches"},
			{[]string{"inspect", img}, 0, "no key given (--key-file or --key-env): keyed check skipped"},
		}},
		{"without-key", keyFlags{}, []check{
			{[]string{"verify", img}, 0, "keyed check skipped: no key given"},
			{[]string{"verify", "--key-file", key, img}, exitOperational, "is served without its key"},
			{[]string{"inspect", "--key-file", key, img}, exitOperational, "is served without its key"},
		}},
	} {
		t.Run("serve="+tc.name, func(t *testing.T) {
			serve(tc.key, func() {
				for _, c := range tc.checks {
					code, out, errs := difctlIn(ctx, c.args...)
					if code != c.code || !strings.Contains(out+errs, c.output) {
						t.Errorf("%s: exit %d, want %d and %q:\n%s%s", strings.Join(c.args[:len(c.args)-1], " "), code, c.code, c.output, out, errs)
					}
				}
			})
		})
	}
}

// TestServeControlLongPath: a store whose control socket's path is longer
// than a socket address holds still gets one (bound through its folder),
// found by the checks and removed at exit.
func TestServeControlLongPath(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("long socket paths are bound through /proc/self/fd on Linux only")
	}
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	img := protectedImage(t, dir, "a.img", 1<<20)
	ctl := img + ".difdb.ctl"
	ctx, cancel := context.WithCancelCause(context.Background())
	srv := startServe(t, ctx, serveOptions{Images: []string{img}, Socket: filepath.Join(t.TempDir(), "a.sock"), MaxConns: 2})
	if srv.ended {
		t.Fatalf("serve: %v %s", srv.err, srv.stderr.String())
	}
	if fi, err := os.Lstat(ctl); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("no socket at %s (%d bytes): %v\n%s", ctl, len(ctl), err, srv.stderr.String())
	}
	if code, out, errs := difctlIn(context.Background(), "verify", img); code != 0 || !strings.Contains(out, "256 ok") {
		t.Errorf("verify: exit %d %s%s", code, out, errs)
	}
	cancel(&signalError{sig: syscall.SIGTERM})
	srv.wait()
	if _, err := os.Lstat(ctl); err == nil {
		t.Error("the control socket is left behind")
	}
}
