package nbdclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/nbd"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// open opens rawURL with a short dial timeout and closes the device when
// the test ends (a second Close is harmless there).
func open(t testing.TB, rawURL string, opts Options) *Device {
	t.Helper()
	if opts.DialTimeout == 0 {
		opts.DialTimeout = 20 * time.Second
	}
	d, err := Open(context.Background(), rawURL, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", rawURL, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// repoServer is the repository's own NBD server (blockdev/nbd), in this
// process, serving one protected in-memory volume.
type repoServer struct {
	sock string // the unix socket
	addr string // host:port, when serving TCP
	dev  *device.Mem
	vol  *blockdev.Volume
	reqs *requestLog
	errs *connErrors
	stop func()
}

// requestLog records the server's OnRequest events.
type requestLog struct {
	mu sync.Mutex
	ev []nbd.RequestEvent
}

func (l *requestLog) add(e nbd.RequestEvent) { l.mu.Lock(); l.ev = append(l.ev, e); l.mu.Unlock() }

func (l *requestLog) take() []nbd.RequestEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	ev := l.ev
	l.ev = nil
	return ev
}

// waitFor waits until an event of op has been recorded, and returns and
// forgets the events recorded so far. The server reports a request only
// after its reply is sent: a client that has its reply may look before
// the report.
func (l *requestLog) waitFor(t testing.TB, op nbd.Op) []nbd.RequestEvent {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var ev []nbd.RequestEvent
	for {
		for _, e := range l.take() {
			ev = append(ev, e)
			if e.Op == op {
				return append(ev, l.take()...)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server reported no %v request", op)
		}
		time.Sleep(time.Millisecond)
	}
}

// connErrors records the server's OnConnError calls.
type connErrors struct {
	mu   sync.Mutex
	errs []error
}

func (c *connErrors) add(_ string, err error) {
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
}

func (c *connErrors) get() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.errs...)
}

// startRepoServer serves a fresh volume of size bytes (format 4096+8 on a
// 512-byte device) as the export "disk" (and "ro", read-only), on a unix
// socket, and on TCP 127.0.0.1 too when tcp is set, until the test ends.
func startRepoServer(t testing.TB, size int64, tcp bool, opts nbd.Options) *repoServer {
	t.Helper()
	dev, err := device.NewMem(size, 512)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := store.Open("mem:")
	if err != nil {
		t.Fatal(err)
	}
	vol, err := blockdev.Create(context.Background(), dev, kv, blockdev.CreateOptions{Format: dif.MustFormat("4096+8")})
	if err != nil {
		t.Fatal(err)
	}
	rs := &repoServer{dev: dev, vol: vol, reqs: &requestLog{}, errs: &connErrors{}}
	opts.OnRequest = rs.reqs.add
	opts.OnConnError = rs.errs.add
	srv, err := nbd.NewServer([]nbd.Export{{Name: "disk", Volume: vol}, {Name: "ro", Volume: vol, ReadOnly: true}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	rs.sock = filepath.Join(t.TempDir(), "nbd.sock")
	ln, err := net.Listen("unix", rs.sock)
	if err != nil {
		t.Fatal(err)
	}
	var l net.Listener = ln
	if tcp {
		tl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		rs.addr = tl.Addr().String()
		l = newMultiListener(ln, tl)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	stopped := false
	rs.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Serve did not return 30 s after its context ended")
		}
		vol.Close()
		kv.Close()
	}
	t.Cleanup(rs.stop)
	return rs
}

func (rs *repoServer) unixURL(export string) string {
	return fmt.Sprintf("nbd+unix:///%s?socket=%s", export, rs.sock)
}

// multiListener accepts on several listeners at once (the server takes
// one).
type multiListener struct {
	ls    []net.Listener
	conns chan net.Conn
	done  chan struct{}
}

func newMultiListener(ls ...net.Listener) *multiListener {
	m := &multiListener{ls: ls, conns: make(chan net.Conn), done: make(chan struct{})}
	for _, l := range ls {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				select {
				case m.conns <- c:
				case <-m.done:
					c.Close()
					return
				}
			}
		}()
	}
	return m
}

func (m *multiListener) Accept() (net.Conn, error) {
	select {
	case c := <-m.conns:
		return c, nil
	case <-m.done:
		return nil, net.ErrClosed
	}
}

func (m *multiListener) Close() error {
	select {
	case <-m.done:
	default:
		close(m.done)
	}
	for _, l := range m.ls {
		l.Close()
	}
	return nil
}

func (m *multiListener) Addr() net.Addr { return m.ls[0].Addr() }

// workload runs goroutines concurrent workers over d, each in its own
// region of the device, writing, reading back, discarding and syncing at
// random, each checked against the model (what the device must hold,
// updated as the workers go: a worker touches its region of it only).
// Then one read of the whole device is checked against the model.
func workload(t testing.TB, d *Device, model []byte, goroutines, ops int, seed uint64) {
	t.Helper()
	size := d.Size()
	if int64(len(model)) != size {
		t.Fatalf("model of %d bytes for a device of %d", len(model), size)
	}
	align := int64(d.LogicalBlockSize())
	region := size / int64(goroutines) / align * align
	if region < align {
		t.Fatalf("device of %d bytes too small for %d workers", size, goroutines)
	}
	discard := d.Info().WriteZeroes && !d.readOnly
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(g)))
			base := int64(g) * region
			buf := make([]byte, region)
			for i := range ops {
				n := align * (1 + r.Int64N(min(region, 256<<10)/align))
				off := base + align*r.Int64N((region-n)/align+1)
				p := buf[:n]
				switch k := r.IntN(100); {
				case k < 45:
					for j := range p {
						p[j] = byte(r.Uint32())
					}
					if _, err := d.WriteAt(p, off); err != nil {
						errs <- fmt.Errorf("worker %d op %d: write of %d at %d: %w", g, i, n, off, err)
						return
					}
					copy(model[off:], p)
				case k < 88:
					if _, err := d.ReadAt(p, off); err != nil {
						errs <- fmt.Errorf("worker %d op %d: read of %d at %d: %w", g, i, n, off, err)
						return
					}
					if !bytes.Equal(p, model[off:off+n]) {
						errs <- fmt.Errorf("worker %d op %d: read of %d at %d differs from what was written", g, i, n, off)
						return
					}
				case k < 96 && discard:
					if err := d.Discard(off, n); err != nil {
						errs <- fmt.Errorf("worker %d op %d: discard of %d at %d: %w", g, i, n, off, err)
						return
					}
					clear(model[off : off+n])
				default:
					if err := d.Sync(); err != nil {
						errs <- fmt.Errorf("worker %d op %d: sync: %w", g, i, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	all := make([]byte, size)
	if _, err := d.ReadAt(all, 0); err != nil {
		t.Fatalf("reading the whole device: %v", err)
	}
	if i := firstDiff(all, model); i >= 0 {
		t.Fatalf("the whole device differs from the model from byte %d", i)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// pattern is n bytes of seeded pseudo-random data.
func pattern(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// noLeak fails the test if, once it has ended, more goroutines run than
// when it started (waiting up to 5 s for them to finish).
func noLeak(t testing.TB) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Errorf("%d goroutines, %d before the test:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// need skips the test when a program is not installed.
func need(t testing.TB, progs ...string) {
	t.Helper()
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed (Debian: qemu-utils, nbdkit)", p)
		}
	}
}

// startProcess runs a server program until the test ends, and waits
// until the unix socket sock, if not empty, accepts connections (the
// file appears between bind and listen). The probe connects and hangs
// up: qemu-nbd must run with -t (--persistent), or it would exit.
func startProcess(t testing.TB, sock string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	if sock == "" {
		return
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			t.Fatalf("%s exited before serving:\n%s", name, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s made no socket in 20 s:\n%s", name, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitTCP waits until something listens on addr.
func waitTCP(t testing.TB, addr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// isConnEnd checks the classification of an error that ended a connection.
func isConnEnd(t testing.TB, err error) *ConnError {
	t.Helper()
	var ce *ConnError
	if !errors.As(err, &ce) || !errors.Is(err, ErrDisconnected) || !errors.Is(err, device.ErrClosed) {
		t.Fatalf("error %v (%T): want a *ConnError matching ErrDisconnected and device.ErrClosed", err, err)
	}
	return ce
}
