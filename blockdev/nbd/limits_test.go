package nbd

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"
)

// readBlock reads the first 4 KiB of the export through rc (simple
// replies) and fails the test unless it gets them.
func readBlock(t *testing.T, rc *rawClient, cookie uint64) {
	t.Helper()
	rc.request(nbdproto.CmdRead, 0, cookie, 0, 4096, nil)
	if r := rc.readReply(4096); r.err != 0 || r.cookie != cookie || len(r.payload) != 4096 {
		t.Fatalf("read: error %d, cookie %d, %d bytes", r.err, r.cookie, len(r.payload))
	}
}

// connErrors collects what Options.OnConnError reports.
type connErrors struct {
	mu   sync.Mutex
	errs []error
}

func (ce *connErrors) add(_ string, err error) {
	ce.mu.Lock()
	ce.errs = append(ce.errs, err)
	ce.mu.Unlock()
}

func (ce *connErrors) count(target error) int {
	ce.mu.Lock()
	defer ce.mu.Unlock()
	n := 0
	for _, err := range ce.errs {
		if errors.Is(err, target) {
			n++
		}
	}
	return n
}

// TestIdleClientsDoNotLockOut: clients that complete NBD_OPT_GO and then
// send nothing hold every transmission slot of the export; a new client
// takes the slot of the one idle longest once it has been idle for the
// idle timeout, and is served. (Before the idle rules, the 17th client got
// NBD_REP_ERR_POLICY for as long as the idle ones stayed.)
func TestIdleClientsDoNotLockOut(t *testing.T) {
	dir := t.TempDir()
	tv := newTestVolume(t, dir, 1<<20, "4096+8")
	var ce connErrors
	ts := startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}},
		Options{IdleTimeout: 300 * time.Millisecond, OnConnError: ce.add})
	idle := make([]*rawClient, DefaultMaxConnections)
	for i := range idle {
		idle[i] = dialRaw(t, ts.sock)
		idle[i].clientFlags(nbdproto.ClientFixedNewstyle)
		idle[i].goExport("disk", false)
	}
	readBlock(t, idle[5], 1) // idle[5] was active last: idle[0] is idle longest
	time.Sleep(400 * time.Millisecond)
	good := dialRaw(t, ts.sock)
	good.clientFlags(nbdproto.ClientFixedNewstyle)
	good.goExport("disk", false)
	readBlock(t, good, 2)
	if !idle[0].closed() {
		t.Error("the connection idle longest is still open")
	}
	readBlock(t, idle[1], 3) // the others keep their connections
	// The evicted connection's goroutine reports it as it ends, which may
	// be after its client saw the connection close.
	deadline := time.Now().Add(10 * time.Second)
	for ce.count(ErrEvicted) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := ce.count(ErrEvicted); n != 1 {
		t.Errorf("%d connections reported as evicted, want 1", n)
	}
}

// TestIdleRulesSpareBusyConnections: a connection in the middle of a
// request (here, a write whose payload is half sent) is never idle: a new
// client takes the slot of an idle one, and when only busy or freshly
// active connections remain it is refused. The write then completes.
func TestIdleRulesSpareBusyConnections(t *testing.T) {
	dir := t.TempDir()
	tv := newTestVolume(t, dir, 1<<20, "4096+8")
	ts := startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}},
		Options{MaxConnections: 2, IdleTimeout: 200 * time.Millisecond})
	busy := dialRaw(t, ts.sock)
	busy.clientFlags(nbdproto.ClientFixedNewstyle)
	busy.goExport("disk", false)
	payload := bytes.Repeat([]byte{0x5a}, 8192)
	busy.request(nbdproto.CmdWrite, 0, 7, 0, 8192, payload[:4096])
	idle := dialRaw(t, ts.sock)
	idle.clientFlags(nbdproto.ClientFixedNewstyle)
	idle.goExport("disk", false)
	time.Sleep(300 * time.Millisecond)
	c := dialRaw(t, ts.sock)
	c.clientFlags(nbdproto.ClientFixedNewstyle)
	c.goExport("disk", false)
	if !idle.closed() {
		t.Fatal("the idle connection is still open")
	}
	d := dialRaw(t, ts.sock)
	d.clientFlags(nbdproto.ClientFixedNewstyle)
	d.option(nbdproto.OptGo, append(append(u32(4), "disk"...), 0, 0))
	for {
		_, typ, _ := d.optReply()
		if typ == nbdproto.RepInfo {
			continue
		}
		if typ != nbdproto.RepErrPolicy {
			t.Fatalf("with one busy and one fresh connection: reply %#x, want NBD_REP_ERR_POLICY", typ)
		}
		break
	}
	busy.write(payload[4096:])
	if r := busy.readReply(0); r.err != 0 || r.cookie != 7 {
		t.Fatalf("the busy connection's write: error %d, cookie %d", r.err, r.cookie)
	}
	readBlock(t, c, 8)
}

// TestMaxIdle closes a connection idle for Options.MaxIdle even with
// free slots, and keeps one that sends requests.
func TestMaxIdle(t *testing.T) {
	dir := t.TempDir()
	tv := newTestVolume(t, dir, 1<<20, "4096+8")
	ts := startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}}, Options{MaxIdle: 300 * time.Millisecond})
	idle := dialRaw(t, ts.sock)
	idle.clientFlags(nbdproto.ClientFixedNewstyle)
	idle.goExport("disk", false)
	active := dialRaw(t, ts.sock)
	active.clientFlags(nbdproto.ClientFixedNewstyle)
	active.goExport("disk", false)
	for i := range 8 {
		time.Sleep(100 * time.Millisecond)
		readBlock(t, active, uint64(i))
	}
	if !idle.closed() {
		t.Error("a connection idle for longer than MaxIdle is still open")
	}
	readBlock(t, active, 99)
}

// TestSilentHandshakesDoNotLockOut: connections that open and never
// answer the greeting fill the handshake slots; a client that comes
// while they keep coming still negotiates and is served. (Before the
// handshake slots were counted per peer and reclaimed, 64 such
// connections made the server close every new one until they timed
// out, and the attacker could repeat it forever.)
func TestSilentHandshakesDoNotLockOut(t *testing.T) {
	dir := t.TempDir()
	tv := newTestVolume(t, dir, 1<<20, "4096+8")
	var ce connErrors
	ts := startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}},
		Options{HandshakeTimeout: 2 * time.Second, OnConnError: ce.add})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the attack: silent connections, as fast as it can
		defer wg.Done()
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for ctx.Err() == nil {
			if len(held) == 1000 { // enough: hold them until the test ends
				<-ctx.Done()
				return
			}
			c, err := net.Dial("unix", ts.sock)
			if err != nil {
				time.Sleep(time.Millisecond)
				continue
			}
			held = append(held, c)
		}
	}()
	defer func() { cancel(); wg.Wait() }()
	time.Sleep(500 * time.Millisecond) // the slots are full, and old enough to reclaim
	for i := range 3 {
		good := dialRaw(t, ts.sock)
		good.clientFlags(nbdproto.ClientFixedNewstyle)
		good.goExport("disk", false)
		readBlock(t, good, uint64(i))
		good.request(nbdproto.CmdDisc, 0, 0, 0, 0, nil)
	}
	if ce.count(ErrEvicted)+ce.count(ErrRefused) == 0 {
		t.Error("no silent connection was evicted or refused")
	}
}

// TestHandshakeSlotsPerPeer: over TCP, one address's silent connections
// hold at most MaxHandshakesPerPeer slots, so a client from another
// address negotiates at once, with no wait for slots to be reclaimed.
func TestHandshakeSlotsPerPeer(t *testing.T) {
	dir := t.TempDir()
	tv := newTestVolume(t, dir, 1<<20, "4096+8")
	srv, err := NewServer([]Export{{Name: "disk", Volume: tv.vol}}, Options{HandshakeTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	attacker := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	for range 2 * DefaultMaxHandshakes {
		c, err := attacker.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Skipf("cannot dial from 127.0.0.2: %v", err)
		}
		defer c.Close()
	}
	time.Sleep(50 * time.Millisecond) // every attack connection accepted
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	good := greet(t, c)
	good.clientFlags(nbdproto.ClientFixedNewstyle)
	good.goExport("disk", false)
	readBlock(t, good, 1)
	good.request(nbdproto.CmdDisc, 0, 0, 0, 0, nil)
}
