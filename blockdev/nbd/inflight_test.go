package nbd

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// gatedDevice holds every read while closed, counting the reads it holds
// and the most it held at once. It embeds only device.Device, so the
// volume finds no holes and no mapping: every read of the volume reaches
// ReadAt.
type gatedDevice struct {
	device.Device
	closed       atomic.Bool
	open         chan struct{}
	inside, peak atomic.Int64
}

func (d *gatedDevice) ReadAt(p []byte, off int64) (int, error) {
	if d.closed.Load() {
		n := d.inside.Add(1)
		for {
			old := d.peak.Load()
			if n <= old || d.peak.CompareAndSwap(old, n) {
				break
			}
		}
		<-d.open
		d.inside.Add(-1)
	}
	return d.Device.ReadAt(p, off)
}

// TestInFlightBound: a client that sends many requests without reading a
// reply gets at most MaxInFlight of them served at once; the rest wait on
// the wire, and all are answered once the volume moves again.
func TestInFlightBound(t *testing.T) {
	const maxInFlight, requests = 4, 12
	mem, err := device.NewMem(1<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	dev := &gatedDevice{Device: mem, open: make(chan struct{})}
	kv, err := store.Open("mem:")
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	vol, err := blockdev.Create(context.Background(), dev, kv, blockdev.CreateOptions{Format: dif.MustFormat("4096+8")})
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	// Workers above MaxInFlight: only the in-flight budget bounds them.
	ts := startServer(t, t.TempDir(), []Export{{Name: "disk", Volume: vol}}, Options{MaxInFlight: maxInFlight, Workers: 64})
	rc := dialRaw(t, ts.sock)
	rc.clientFlags(nbdproto.ClientFixedNewstyle)
	rc.goExport("disk", false)

	dev.closed.Store(true)
	released := false
	release := func() {
		if !released {
			released = true
			close(dev.open)
		}
	}
	defer release()
	for i := range requests {
		rc.request(nbdproto.CmdRead, 0, uint64(i), uint64(i)*4096, 4096, nil)
	}
	deadline := time.Now().Add(20 * time.Second)
	for dev.inside.Load() < maxInFlight && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // time for any request beyond the bound to start
	if in, peak := dev.inside.Load(), dev.peak.Load(); in != maxInFlight || peak != maxInFlight {
		t.Errorf("reads held at once: %d (at most %d), want %d", in, peak, maxInFlight)
	}
	release()
	for range requests {
		if r := rc.readReply(4096); r.err != 0 {
			t.Fatalf("reply %d: error %d", r.cookie, r.err)
		}
	}
	if peak := dev.peak.Load(); peak > maxInFlight {
		t.Errorf("%d requests served at once, above MaxInFlight %d", peak, maxInFlight)
	}
}

// gatedVolume is a 1 MiB 4096+8 volume on a gatedDevice.
func gatedVolume(t *testing.T) (*gatedDevice, *blockdev.Volume) {
	t.Helper()
	mem, err := device.NewMem(1<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	dev := &gatedDevice{Device: mem, open: make(chan struct{})}
	kv, err := store.Open("mem:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kv.Close() })
	vol, err := blockdev.Create(context.Background(), dev, kv, blockdev.CreateOptions{Format: dif.MustFormat("4096+8")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vol.Close() })
	return dev, vol
}

// heldReads sends requests reads of 4 KiB with the device gated and
// returns how many reach the device at once (after the server has had
// time to start any request it would start), then opens the gate and
// checks every reply.
func heldReads(t *testing.T, opts Options, requests, want int) {
	t.Helper()
	dev, vol := gatedVolume(t)
	ts := startServer(t, t.TempDir(), []Export{{Name: "disk", Volume: vol}}, opts)
	rc := dialRaw(t, ts.sock)
	rc.clientFlags(nbdproto.ClientFixedNewstyle)
	rc.goExport("disk", false)
	dev.closed.Store(true)
	released := false
	release := func() {
		if !released {
			released = true
			close(dev.open)
		}
	}
	defer release()
	for i := range requests {
		rc.request(nbdproto.CmdRead, 0, uint64(i), uint64(i)*4096, 4096, nil)
	}
	deadline := time.Now().Add(20 * time.Second)
	for dev.inside.Load() < int64(want) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // time for any request beyond the bound to start
	if in, peak := dev.inside.Load(), dev.peak.Load(); in != int64(want) || peak != int64(want) {
		t.Errorf("reads held at once: %d (at most %d), want %d", in, peak, want)
	}
	release()
	for range requests {
		if r := rc.readReply(4096); r.err != 0 {
			t.Fatalf("reply %d: error %d", r.cookie, r.err)
		}
	}
}

// TestWorkersBound: with many requests in flight, at most Workers of a
// connection execute at once (so at most Workers read buffers exist);
// the rest wait their turn and are all answered.
func TestWorkersBound(t *testing.T) {
	heldReads(t, Options{MaxInFlight: 64, Workers: 2}, 12, 2)
}

// TestInFlightBytesBound: MaxInFlightBytes bounds the bytes of the
// requests in flight (16 reads of 4 KiB in 64 KiB), and a request larger
// than the whole budget still runs, alone, once the others are done.
func TestInFlightBytesBound(t *testing.T) {
	heldReads(t, Options{MaxInFlight: 64, Workers: 64, MaxInFlightBytes: 64 << 10}, 40, 16)

	_, vol := gatedVolume(t)
	ts := startServer(t, t.TempDir(), []Export{{Name: "disk", Volume: vol}}, Options{MaxInFlightBytes: 64 << 10})
	rc := dialRaw(t, ts.sock)
	rc.clientFlags(nbdproto.ClientFixedNewstyle)
	rc.goExport("disk", false)
	for i := range 3 {
		rc.request(nbdproto.CmdRead, 0, uint64(i), 0, 1<<20, nil) // 16 times the budget
	}
	for range 3 {
		if r := rc.readReply(1 << 20); r.err != 0 || len(r.payload) != 1<<20 {
			t.Fatalf("reply %d: error %d, %d bytes", r.cookie, r.err, len(r.payload))
		}
	}
}

// recordingListener keeps the connections it accepts.
type recordingListener struct {
	net.Listener
	conns chan net.Conn
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.conns <- c
	}
	return c, err
}

// TestSendBuffer: connections on unix sockets get Options.SendBuffer as
// their SO_SNDBUF (the kernel reports twice the value set), the default
// 1 MiB included, so a 256 KiB reply is one write.
func TestSendBuffer(t *testing.T) {
	wmax, err := os.ReadFile("/proc/sys/net/core/wmem_max")
	if err != nil {
		t.Skip("no /proc/sys/net/core/wmem_max:", err)
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(string(wmax))); n < DefaultSendBuffer {
		t.Skipf("net.core.wmem_max is %d, below %d: the kernel caps SO_SNDBUF", n, DefaultSendBuffer)
	}
	for _, tc := range []struct{ set, want int }{{0, DefaultSendBuffer}, {512 << 10, 512 << 10}} {
		t.Run(fmt.Sprintf("set=%d", tc.set), func(t *testing.T) {
			_, vol := gatedVolume(t)
			srv, err := NewServer([]Export{{Name: "disk", Volume: vol}}, Options{SendBuffer: tc.set})
			if err != nil {
				t.Fatal(err)
			}
			sock := filepath.Join(t.TempDir(), "s.sock")
			ul, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			l := &recordingListener{Listener: ul, conns: make(chan net.Conn, 1)}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ctx, l) }()
			defer func() { cancel(); <-done }()
			rc := dialRaw(t, sock)
			rc.clientFlags(nbdproto.ClientFixedNewstyle)
			rc.goExport("disk", false)
			sc, err := (<-l.conns).(*net.UnixConn).SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var got int
			var gerr error
			sc.Control(func(fd uintptr) { got, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF) })
			if gerr != nil {
				t.Fatal(gerr)
			}
			if got != 2*tc.want {
				t.Errorf("SO_SNDBUF %d, want %d (twice %d)", got, 2*tc.want, tc.want)
			}
		})
	}
}
