package nbd

import (
	"bytes"
	"cmp"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"
)

// events collects what Options.OnRequest, OnConn and OnConnError report.
type events struct {
	mu       sync.Mutex
	requests []RequestEvent
	conns    []ConnEvent
	connErrs []error
}

func (ev *events) options(o Options) Options {
	o.OnRequest = func(e RequestEvent) { ev.mu.Lock(); ev.requests = append(ev.requests, e); ev.mu.Unlock() }
	o.OnConn = func(e ConnEvent) { ev.mu.Lock(); ev.conns = append(ev.conns, e); ev.mu.Unlock() }
	o.OnConnError = func(_ string, err error) { ev.mu.Lock(); ev.connErrs = append(ev.connErrs, err); ev.mu.Unlock() }
	return o
}

// wait waits until cond holds of the events (they are reported on the
// server's goroutines, some after the client saw the outcome).
func (ev *events) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ev.mu.Lock()
		ok := cond()
		ev.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 10 s: requests %+v, connections %+v, errors %v", what, ev.requests, ev.conns, ev.connErrs)
		}
	}
}

// TestEvents checks the monitoring hooks: a RequestEvent per request with
// its command, range and outcome (ErrBadRequest for those refused
// unexecuted, the oversized write among them), and ConnEvents for a
// connection entering and leaving transmission and for the clients a full
// export refuses, by NBD_OPT_GO (NBD_REP_ERR_POLICY) and by
// NBD_OPT_EXPORT_NAME (closed, ErrRefused).
func TestEvents(t *testing.T) {
	dir := t.TempDir()
	tv := newTestVolume(t, dir, 4<<20, "4096+8")
	var ev events
	ts := startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}}, ev.options(Options{MaxConnections: 1, MaxPayload: 1 << 20}))

	rc := dialRaw(t, ts.sock)
	rc.clientFlags(nbdproto.ClientFixedNewstyle)
	rc.goExport("disk", false)
	data := bytes.Repeat([]byte{7}, 8192)
	rc.request(nbdproto.CmdWrite, 0, 1, 4096, uint32(len(data)), data)
	if r := rc.readReply(0); r.err != 0 {
		t.Fatalf("write: error %d", r.err)
	}
	rc.request(nbdproto.CmdRead, 0, 2, 4096, 8192, nil)
	if r := rc.readReply(8192); r.err != 0 || !bytes.Equal(r.payload, data) {
		t.Fatalf("read: error %d", r.err)
	}
	rc.request(nbdproto.CmdRead, 0x8000, 3, 0, 4096, nil) // an unknown flag
	if r := rc.readReply(0); r.err != nbdproto.ErrnoInval {
		t.Fatalf("read with an unknown flag: error %d", r.err)
	}
	big := make([]byte, 1<<20+4096)
	rc.request(nbdproto.CmdWrite, 0, 4, 0, uint32(len(big)), big)
	if r := rc.readReply(0); r.err != nbdproto.ErrnoInval {
		t.Fatalf("write above the maximum payload: error %d", r.err)
	}
	rc.request(42, 0, 5, 0, 0, nil)
	if r := rc.readReply(0); r.err != nbdproto.ErrnoInval {
		t.Fatalf("command 42: error %d", r.err)
	}

	// The export is full.
	rcGo := dialRaw(t, ts.sock)
	rcGo.clientFlags(nbdproto.ClientFixedNewstyle)
	rcGo.option(nbdproto.OptGo, bytes.Join([][]byte{u32(4), []byte("disk"), u16(0)}, nil))
	for {
		_, typ, msg := rcGo.optReply()
		if typ == nbdproto.RepInfo {
			continue
		}
		if typ != nbdproto.RepErrPolicy {
			t.Fatalf("NBD_OPT_GO of a full export: reply %#x %q, want NBD_REP_ERR_POLICY", typ, msg)
		}
		break
	}
	rcName := dialRaw(t, ts.sock)
	rcName.clientFlags(nbdproto.ClientFixedNewstyle)
	rcName.option(nbdproto.OptExportName, []byte("disk"))
	if !rcName.closed() {
		t.Error("NBD_OPT_EXPORT_NAME of a full export: connection not closed")
	}
	rc.request(nbdproto.CmdDisc, 0, 6, 0, 0, nil)
	ev.wait(t, "ConnLeave", func() bool { return len(ev.conns) == 4 })
	ev.wait(t, "refusal error", func() bool { return len(ev.connErrs) == 1 })

	ev.mu.Lock()
	defer ev.mu.Unlock()
	wantConns := []ConnEventKind{ConnEnter, ConnFull, ConnFull, ConnLeave}
	for i, e := range ev.conns {
		if e.Export != "disk" || e.Kind != wantConns[i] {
			t.Errorf("connection event %d: %+v, want kind %d of disk", i, e, wantConns[i])
		}
	}
	if !errors.Is(ev.connErrs[0], ErrRefused) {
		t.Errorf("NBD_OPT_EXPORT_NAME of a full export: error %v, want ErrRefused", ev.connErrs[0])
	}
	// Events of requests on different workers come in any order.
	slices.SortFunc(ev.requests, func(a, b RequestEvent) int {
		return cmp.Or(cmp.Compare(a.Op, b.Op), cmp.Compare(a.Offset, b.Offset), cmp.Compare(a.Length, b.Length))
	})
	want := []struct {
		op          Op
		name        string
		off, length int64
		err         error
	}{
		{OpRead, "read", 0, 4096, ErrBadRequest},
		{OpRead, "read", 4096, 8192, nil},
		{OpWrite, "write", 0, 1<<20 + 4096, ErrBadRequest},
		{OpWrite, "write", 4096, 8192, nil},
		{42, "other", 0, 0, ErrBadRequest},
	}
	if len(ev.requests) != len(want) {
		t.Fatalf("%d request events, want %d: %+v", len(ev.requests), len(want), ev.requests)
	}
	for i, w := range want {
		e := ev.requests[i]
		if e.Export != "disk" || e.Op != w.op || e.Op.String() != w.name || e.Offset != w.off || e.Length != w.length ||
			e.Err != w.err || e.Duration <= 0 {
			t.Errorf("request %d: %+v (%s), want %s [%d, +%d) with error %v and a duration", i, e, e.Op, w.name, w.off, w.length, w.err)
		}
	}
}
