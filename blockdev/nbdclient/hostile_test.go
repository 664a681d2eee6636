package nbdclient

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"net"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"

	"github.com/difctl/difctl/blockdev/device"
)

// The tests in this file run against fake servers that break the
// protocol, or do what no real server here does.

// TestHostileReplies: whatever a server sends in the transmission phase
// that the protocol forbids, or its going silent or away, ends the
// connection with a typed error for the request in flight and every later
// one: no panic, no hang, no goroutine left behind.
func TestHostileReplies(t *testing.T) {
	for _, tc := range []struct {
		name string
		// serve answers the client's first request r.
		serve func(c net.Conn, r fakeReq)
		// first: the first request may succeed (the breach comes after
		// its reply), and the second fails.
		first bool
		want  func(*ConnError) bool
	}{
		{name: "bad-magic", serve: func(c net.Conn, r fakeReq) {
			c.Write(cat(u32(0xdeadbeef), u32(0), u64(r.cookie)))
		}, want: isProto},
		{name: "unknown-cookie", serve: func(c net.Conn, r fakeReq) {
			// An error reply, which carries no data: nothing after it
			// shows the breach but the cookie.
			c.Write(simpleReply(r.cookie+99, nbdproto.ErrnoIO, nil))
		}, want: isProto},
		{name: "structured-reply-4GiB", serve: func(c net.Conn, r fakeReq) {
			c.Write(cat(u32(nbdproto.MagicStructured), u16(1), u16(1), u64(r.cookie), u32(math.MaxUint32)))
		}, want: isProto},
		{name: "close-after-request", serve: func(c net.Conn, r fakeReq) {
			c.Close()
		}, want: isClosedByServer},
		{name: "close-inside-data", serve: func(c net.Conn, r fakeReq) {
			c.Write(simpleReply(r.cookie, 0, make([]byte, r.n/2)))
			c.Close()
		}, want: isClosedByServer},
		{name: "reply-twice", first: true, serve: func(c net.Conn, r fakeReq) {
			c.Write(simpleReply(r.cookie, 0, make([]byte, r.n)))
			c.Write(simpleReply(r.cookie, 0, make([]byte, r.n)))
		}, want: isProto},
		{name: "data-too-long", first: true, serve: func(c net.Conn, r fakeReq) {
			c.Write(simpleReply(r.cookie, 0, make([]byte, r.n+16)))
		}, want: isProto},
		{name: "stall", serve: func(c net.Conn, r fakeReq) {}, want: func(ce *ConnError) bool {
			return errors.Is(ce, ErrTimeout)
		}},
		{name: "stall-inside-data", serve: func(c net.Conn, r fakeReq) {
			c.Write(simpleReply(r.cookie, 0, make([]byte, r.n/2)))
		}, want: func(ce *ConnError) bool {
			return errors.Is(ce, ErrTimeout)
		}},
	} {
		t.Run("server="+tc.name, func(t *testing.T) {
			noLeak(t)
			d, sc, err := openFake(t, &fakeServer{size: 1 << 20, flags: nbdproto.FlagSendFlush}, fakeURL,
				Options{RequestTimeout: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				r, err := readReq(sc)
				if err == nil {
					tc.serve(sc, r)
				}
				// Drain what the client still sends, so that its writes
				// end (net.Pipe has no buffer).
				for {
					if _, err := readReq(sc); err != nil {
						return
					}
				}
			}()
			start := time.Now()
			err = d.readErr(make([]byte, 4096), 0)
			if tc.first {
				if err != nil {
					t.Fatalf("first read: %v", err)
				}
				// The breach arrives after the first reply: the next
				// request fails with it, or finds the device ended.
				err = d.readErr(make([]byte, 4096), 0)
			}
			if el := time.Since(start); el > 5*time.Second {
				t.Errorf("the failing request returned after %v", el)
			}
			if ce := isConnEnd(t, err); !tc.want(ce) {
				t.Fatalf("error %v: not the expected cause", err)
			}
			// Every later call fails with the connection's end.
			isConnEnd(t, d.writeErr(make([]byte, 512), 0))
			isConnEnd(t, d.Sync())
			if err := d.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			select {
			case <-d.readerEnd:
			default:
				t.Error("the reply reader still runs after Close")
			}
		})
	}
}

func isProto(ce *ConnError) bool {
	var pe *ProtocolError
	return errors.As(ce, &pe) && errors.Is(ce, ErrProtocol)
}

func isClosedByServer(ce *ConnError) bool {
	return strings.Contains(ce.Error(), "server closed the connection")
}

// TestHostileAllPending: when the connection breaks, every request in
// flight fails, each with the connection's error.
func TestHostileAllPending(t *testing.T) {
	noLeak(t)
	const n = 8
	d, sc, err := openFake(t, &fakeServer{size: 1 << 20}, fakeURL, Options{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range n {
			if _, err := readReq(sc); err != nil {
				return
			}
		}
		sc.Write(cat(u32(0x12345678), make([]byte, 12)))
	}()
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- d.readErr(make([]byte, 4096), int64(i)*4096) }()
	}
	for range n {
		select {
		case err := <-errs:
			if ce := isConnEnd(t, err); !isProto(ce) {
				t.Errorf("error %v, want a protocol violation", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a request in flight did not fail")
		}
	}
}

// TestErrorReplies: an error reply fails its request with a
// *device.IOError wrapping a *ReplyError (an undefined value taken as
// EINVAL) and the connection goes on.
func TestErrorReplies(t *testing.T) {
	d, sc, err := openFake(t, &fakeServer{size: 1 << 20, flags: nbdproto.FlagSendFlush}, fakeURL, Options{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for _, errno := range []uint32{nbdproto.ErrnoIO, 9999, nbdproto.ErrnoNoSpc, nbdproto.ErrnoIO} {
			r, err := readReq(sc)
			if err != nil {
				return
			}
			sc.Write(simpleReply(r.cookie, errno, nil))
		}
		serveMem(sc, make([]byte, 1<<20), nil)
	}()
	for _, c := range []struct {
		op    string
		err   error
		errno uint32
		want  error
	}{
		{"read", d.readErr(make([]byte, 512), 512), nbdproto.ErrnoIO, syscall.EIO},
		{"read", d.readErr(make([]byte, 512), 0), 9999, syscall.EINVAL},
		{"write", d.writeErr(make([]byte, 1024), 2048), nbdproto.ErrnoNoSpc, syscall.ENOSPC},
		{"sync", d.Sync(), nbdproto.ErrnoIO, syscall.EIO},
	} {
		var ioe *device.IOError
		var re *ReplyError
		if !errors.As(c.err, &ioe) || !errors.As(c.err, &re) || re.Errno != c.errno || !errors.Is(c.err, c.want) ||
			ioe.Op != c.op || errors.Is(c.err, ErrDisconnected) {
			t.Errorf("%s: %v, want a *device.IOError wrapping a *ReplyError with %d (%v)", c.op, c.err, c.errno, c.want)
		}
	}
	if err := d.readErr(make([]byte, 512), 0); err != nil {
		t.Fatalf("a request after the error replies: %v", err)
	}
}

// TestShutdownReply: after NBD_ESHUTDOWN the client sends no new request,
// lets the one in flight finish, sends NBD_CMD_DISC and ends the device.
func TestShutdownReply(t *testing.T) {
	noLeak(t)
	d, sc, err := openFake(t, &fakeServer{size: 1 << 20}, fakeURL, Options{})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan fakeReq, 2)
	proceed := make(chan struct{})
	after := make(chan fakeReq, 4)
	go func() {
		a, _ := readReq(sc)
		b, _ := readReq(sc)
		first <- a
		first <- b
		sc.Write(simpleReply(a.cookie, nbdproto.ErrnoShutdown, nil))
		<-proceed
		sc.Write(simpleReply(b.cookie, 0, make([]byte, b.n)))
		for {
			r, err := readReq(sc)
			if err != nil {
				close(after)
				return
			}
			after <- r
		}
	}()
	res := make(chan error, 2)
	for i := range 2 {
		go func() { res <- d.readErr(make([]byte, 512), int64(i)*512) }()
	}
	<-first
	<-first
	err = <-res
	var re *ReplyError
	if !errors.As(err, &re) || re.Errno != nbdproto.ErrnoShutdown {
		t.Fatalf("the request answered with NBD_ESHUTDOWN: %v", err)
	}
	// A new request is refused without being sent.
	if ce := isConnEnd(t, d.readErr(make([]byte, 512), 0)); !errors.As(ce, &re) {
		t.Errorf("new request after NBD_ESHUTDOWN: %v", ce)
	}
	close(proceed)
	if err := <-res; err != nil {
		t.Errorf("the request in flight during the shutdown: %v", err)
	}
	var got []fakeReq
	for r := range after {
		got = append(got, r)
	}
	if len(got) != 1 || got[0].typ != nbdproto.CmdDisc {
		t.Errorf("requests after NBD_ESHUTDOWN: %+v, want one NBD_CMD_DISC", got)
	}
}

// TestCloseWaits: Close lets a request in flight finish, then sends
// NBD_CMD_DISC.
func TestCloseWaits(t *testing.T) {
	noLeak(t)
	d, sc, err := openFake(t, &fakeServer{size: 1 << 20}, fakeURL, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan struct{})
	disc := make(chan bool, 1)
	go func() {
		r, _ := readReq(sc)
		close(sent)
		time.Sleep(100 * time.Millisecond)
		sc.Write(simpleReply(r.cookie, 0, make([]byte, r.n)))
		r, err := readReq(sc)
		disc <- err == nil && r.typ == nbdproto.CmdDisc
	}()
	res := make(chan error, 1)
	go func() { res <- d.readErr(make([]byte, 4096), 0) }()
	<-sent
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Errorf("the request in flight at Close: %v", err)
	}
	if !<-disc {
		t.Error("no NBD_CMD_DISC after the reply")
	}
}

// TestInflightBudget: the server never sees more requests outstanding
// than the budget allows.
func TestInflightBudget(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		size int
	}{
		{"requests=2", Options{MaxInflight: 2}, 4096},
		{"bytes=8KiB", Options{MaxInflightBytes: 8192}, 4096},
		{"bytes=8KiB/one-larger-alone", Options{MaxInflightBytes: 8192}, 16384},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeak(t)
			want := 2
			if tc.size > 8192 {
				want = 1
			}
			d, sc, err := openFake(t, &fakeServer{size: 1 << 20}, fakeURL, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			most := make(chan int, 1)
			go func() {
				top, done := 0, 0
				var queue []fakeReq
				for done < 10 {
					if len(queue) == want {
						// Room for no more: a request now breaks the budget.
						sc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
					} else {
						sc.SetReadDeadline(time.Now().Add(2 * time.Second))
					}
					r, err := readReq(sc)
					if err == nil {
						queue = append(queue, r)
						top = max(top, len(queue))
						if len(queue) < want {
							continue
						}
					} else if len(queue) == 0 {
						break
					}
					for _, q := range queue {
						sc.Write(simpleReply(q.cookie, 0, make([]byte, q.n)))
					}
					done += len(queue)
					queue = nil
				}
				most <- top
			}()
			var wg sync.WaitGroup
			for i := range 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := d.readErr(make([]byte, tc.size), int64(i)*int64(tc.size)); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			if top := <-most; top != want {
				t.Errorf("at most %d requests outstanding, want %d", top, want)
			}
		})
	}
}

// TestFlagRules: what the client sends, and what Sync, Discard and Trim
// do, according to the flags the export advertises.
func TestFlagRules(t *testing.T) {
	for _, tc := range []struct {
		name      string
		flags     uint16
		rawFlags  bool
		syncSends bool
		syncErr   error
		fua       bool
		discard   bool // Discard sends NBD_CMD_WRITE_ZEROES
		trim      bool
	}{
		{name: "flags=flush", flags: nbdproto.FlagSendFlush, syncSends: true},
		{name: "flags=fua", flags: nbdproto.FlagSendFUA | nbdproto.FlagSendWriteZeroes, fua: true, discard: true},
		{name: "flags=none", syncErr: errors.ErrUnsupported},
		{name: "flags=read-only", flags: nbdproto.FlagReadOnly},
		{name: "flags=flush,write-zeroes,trim", flags: nbdproto.FlagSendFlush | nbdproto.FlagSendWriteZeroes | nbdproto.FlagSendTrim, syncSends: true, discard: true, trim: true},
		{name: "flags=without-HAS_FLAGS", flags: nbdproto.FlagSendFlush | nbdproto.FlagSendTrim, rawFlags: true, syncErr: errors.ErrUnsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, sc, err := openFake(t, &fakeServer{size: 1 << 20, flags: tc.flags, rawFlags: tc.rawFlags}, fakeURL, Options{})
			if err != nil {
				t.Fatal(err)
			}
			log := make(chan fakeReq, 16)
			go serveMem(sc, make([]byte, 1<<20), log)
			next := func() *fakeReq {
				select {
				case r := <-log:
					return &r
				case <-time.After(100 * time.Millisecond):
					return nil
				}
			}
			readOnly := tc.flags&nbdproto.FlagReadOnly != 0
			if !readOnly {
				if err := d.writeErr(make([]byte, 1024), 0); err != nil {
					t.Fatal(err)
				}
				if r := next(); r == nil || r.typ != nbdproto.CmdWrite || (r.flags&nbdproto.CmdFlagFUA != 0) != tc.fua {
					t.Errorf("write request %+v, want FUA %v", r, tc.fua)
				}
			}
			err = d.Sync()
			if !errors.Is(err, tc.syncErr) || (tc.syncErr == nil) != (err == nil) {
				t.Errorf("Sync: %v, want %v", err, tc.syncErr)
			}
			if r := next(); (r != nil) != tc.syncSends || r != nil && (r.typ != nbdproto.CmdFlush || r.off != 0 || r.n != 0) {
				t.Errorf("Sync sent %+v, want a flush: %v", r, tc.syncSends)
			}
			if readOnly {
				return
			}
			err = d.Discard(4096, 8192)
			if tc.discard != (err == nil) || !tc.discard && !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("Discard: %v", err)
			}
			if r := next(); (r != nil) != tc.discard || r != nil && (r.typ != nbdproto.CmdWriteZeroes || r.off != 4096 || r.n != 8192 ||
				r.flags&^nbdproto.CmdFlagFUA != 0 || (r.flags&nbdproto.CmdFlagFUA != 0) != tc.fua) {
				t.Errorf("Discard sent %+v", r)
			}
			err = d.Trim(0, 4096)
			if tc.trim != (err == nil) || !tc.trim && !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("Trim: %v", err)
			}
			if r := next(); (r != nil) != tc.trim || r != nil && r.typ != nbdproto.CmdTrim {
				t.Errorf("Trim sent %+v", r)
			}
		})
	}
}

// TestHandshake: negotiations that work (NBD_OPT_EXPORT_NAME when the
// server lacks NBD_OPT_GO) and exports the device cannot present.
func TestHandshake(t *testing.T) {
	for _, tc := range []struct {
		name           string
		fs             fakeServer
		opts           Options
		lbs, pbs, max  int
		exportErr      bool
		wantExportName bool
	}{
		{name: "go/no-block-sizes", fs: fakeServer{size: 1 << 20}, lbs: 512, pbs: 512, max: 32 << 20},
		{name: "go/min=1", fs: fakeServer{size: 1 << 20, bs: []uint32{1, 4096, 32 << 20}}, lbs: 512, pbs: 4096, max: 32 << 20},
		{name: "go/min=4096,max=1MiB", fs: fakeServer{size: 1 << 20, bs: []uint32{4096, 65536, 1 << 20}}, lbs: 4096, pbs: 65536, max: 1 << 20},
		{name: "go/max=unlimited", fs: fakeServer{size: 1 << 20, bs: []uint32{512, 1 << 20, math.MaxUint32}}, lbs: 512, pbs: 65536, max: 32 << 20},
		{name: "go/max=not-a-block-multiple-of-512", fs: fakeServer{size: 1 << 20, bs: []uint32{1, 4096, 1000}}, lbs: 512, pbs: 4096, max: 512},
		{name: "go/BlockSize=4096", fs: fakeServer{size: 1 << 20, bs: []uint32{512, 512, 1 << 20}}, opts: Options{BlockSize: 4096}, lbs: 4096, pbs: 4096, max: 1 << 20},
		{name: "go/preferred=bad-ignored", fs: fakeServer{size: 1 << 20, bs: []uint32{512, 3, 1 << 20}}, lbs: 512, pbs: 512, max: 1 << 20},
		{name: "export-name/zeroes", fs: fakeServer{size: 1 << 20, noGo: true, hsFlags: nbdproto.FlagFixedNewstyle}, lbs: 512, pbs: 512, max: 32 << 20, wantExportName: true},
		{name: "export-name/no-zeroes", fs: fakeServer{size: 1 << 20, noGo: true}, lbs: 512, pbs: 512, max: 32 << 20, wantExportName: true},
		{name: "bad/size-not-a-block-multiple", fs: fakeServer{size: 1000}, exportErr: true},
		{name: "bad/size-beyond-int64", fs: fakeServer{size: math.MaxUint64 &^ 511}, exportErr: true},
		{name: "bad/minimum-not-a-power-of-two", fs: fakeServer{size: 1 << 20, bs: []uint32{3, 4096, 1 << 20}}, exportErr: true},
		{name: "bad/minimum-zero", fs: fakeServer{size: 1 << 20, bs: []uint32{0, 4096, 1 << 20}}, exportErr: true},
		{name: "bad/minimum-128KiB", fs: fakeServer{size: 1 << 20, bs: []uint32{128 << 10, 128 << 10, 1 << 20}}, exportErr: true},
		{name: "bad/maximum-not-a-multiple", fs: fakeServer{size: 1 << 20, bs: []uint32{4096, 4096, 6000}}, exportErr: true},
		{name: "bad/maximum-below-a-block", fs: fakeServer{size: 1 << 20, bs: []uint32{1, 256, 256}}, exportErr: true},
		{name: "bad/size-not-a-BlockSize-multiple", fs: fakeServer{size: 1<<20 + 512}, opts: Options{BlockSize: 4096}, exportErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeak(t)
			fs := tc.fs
			d, sc, err := openFake(t, &fs, fakeURL, tc.opts)
			if tc.exportErr {
				var ee *ExportError
				if !errors.As(err, &ee) || !errors.Is(err, ErrBadExport) {
					t.Fatalf("Open: %v, want an *ExportError", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.LogicalBlockSize() != tc.lbs || d.PhysicalBlockSize() != tc.pbs || d.maxReq != tc.max {
				t.Errorf("block sizes %d/%d, max request %d, want %d/%d, %d", d.LogicalBlockSize(), d.PhysicalBlockSize(), d.maxReq, tc.lbs, tc.pbs, tc.max)
			}
			wantOpts := []uint32{nbdproto.OptGo}
			if tc.wantExportName {
				wantOpts = []uint32{nbdproto.OptGo, nbdproto.OptExportName}
			}
			if !slicesEqual(fs.options, wantOpts) {
				t.Errorf("options sent %v, want %v", fs.options, wantOpts)
			}
			go serveMem(sc, make([]byte, 1<<20), nil)
			p := pattern(64<<10, 2)
			if _, err := d.WriteAt(p, 0); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(p))
			if _, err := d.ReadAt(got, 0); err != nil || firstDiff(got, p) >= 0 {
				t.Fatalf("read back: %v", err)
			}
		})
	}
}

func slicesEqual(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestHandshakeHostile: a server that breaks the negotiation gets a typed
// error at once (no allocation of what it claims), one that refuses gets
// an *OptionError and a soft disconnect, one that stalls a timeout.
func TestHandshakeHostile(t *testing.T) {
	greeting := cat(u64(nbdproto.MagicInit), u64(nbdproto.MagicOpt), u16(nbdproto.FlagFixedNewstyle|nbdproto.FlagNoZeroes))
	goInfo := func(typ uint16, data ...[]byte) []byte {
		d := cat(append([][]byte{u16(typ)}, data...)...)
		return cat(u64(nbdproto.MagicOptReply), u32(nbdproto.OptGo), u32(nbdproto.RepInfo), u32(uint32(len(d))), d)
	}
	ack := cat(u64(nbdproto.MagicOptReply), u32(nbdproto.OptGo), u32(nbdproto.RepAck), u32(0))
	for _, tc := range []struct {
		name string
		send []byte // the server's bytes; then it reads until the client closes
		url  string
		opts Options
		want func(error) bool
		// abort: the client's last option must be NBD_OPT_ABORT.
		abort bool
	}{
		{name: "not-nbd", send: []byte("HTTP/1.1 400 Bad Request\r\n\r\n"), want: isProtoErr},
		{name: "oldstyle", send: cat(u64(nbdproto.MagicInit), u64(nbdproto.MagicOldstyle), u64(1<<20), u32(1), make([]byte, 124)), want: isProtoErr},
		{name: "not-fixed-newstyle", send: cat(u64(nbdproto.MagicInit), u64(nbdproto.MagicOpt), u16(0)), want: isProtoErr},
		{name: "reply-4GiB", send: cat(greeting, u64(nbdproto.MagicOptReply), u32(nbdproto.OptGo), u32(nbdproto.RepInfo), u32(math.MaxUint32)), want: isProtoErr},
		{name: "reply-magic", send: cat(greeting, u64(0x1122334455667788), u32(nbdproto.OptGo), u32(nbdproto.RepAck), u32(0)), want: isProtoErr},
		{name: "reply-to-another-option", send: cat(greeting, u64(nbdproto.MagicOptReply), u32(nbdproto.OptExportName), u32(nbdproto.RepAck), u32(0)), want: isProtoErr},
		{name: "ack-without-export-info", send: cat(greeting, ack), want: isProtoErr},
		{name: "export-info-short", send: cat(greeting, goInfo(nbdproto.InfoExport, u64(1<<20)), ack), want: isProtoErr},
		{name: "block-size-info-long", send: cat(greeting, goInfo(nbdproto.InfoBlockSize, make([]byte, 14)), ack), want: isProtoErr},
		{name: "info-empty", send: cat(greeting, u64(nbdproto.MagicOptReply), u32(nbdproto.OptGo), u32(nbdproto.RepInfo), u32(0)), want: isProtoErr},
		{name: "info-forever", send: cat(greeting, bytesRepeat(goInfo(99), 300)), want: isProtoErr},
		{name: "unknown-reply-type", send: cat(greeting, u64(nbdproto.MagicOptReply), u32(nbdproto.OptGo), u32(2), u32(0)), want: isProtoErr},
		{name: "refused", send: cat(greeting, u64(nbdproto.MagicOptReply), u32(nbdproto.OptGo), u32(nbdproto.RepErrUnknown), u32(9), []byte("no\x00such\x1b[")), abort: true,
			want: func(err error) bool {
				var oe *OptionError
				return errors.As(err, &oe) && oe.Reply == nbdproto.RepErrUnknown && oe.Message == "no?such?[" && errors.Is(err, ErrRefused)
			}},
		{name: "starttls-refused", url: "nbds+unix:///disk?socket=/fake&tls-hostname=x",
			send: cat(greeting, u64(nbdproto.MagicOptReply), u32(nbdproto.OptStartTLS), u32(nbdproto.RepErrPolicy), u32(0)), abort: true,
			want: func(err error) bool {
				var oe *OptionError
				return errors.As(err, &oe) && oe.Option == "NBD_OPT_STARTTLS"
			}},
		{name: "close", send: greeting[:10], want: func(err error) bool { return errors.Is(err, ErrDisconnected) }},
		{name: "close-after-greeting", send: greeting, want: func(err error) bool { return errors.Is(err, ErrDisconnected) }},
		{name: "stall", send: greeting, opts: Options{DialTimeout: 300 * time.Millisecond}, want: func(err error) bool {
			return errors.Is(err, ErrTimeout)
		}},
	} {
		t.Run("server="+tc.name, func(t *testing.T) {
			noLeak(t)
			sc, cc := net.Pipe()
			defer sc.Close()
			var opts []uint32
			srv := make(chan struct{})
			go func() {
				sc.Write(tc.send)
				if tc.name == "close" || tc.name == "close-after-greeting" {
					sc.Close()
				}
			}()
			go func() {
				defer close(srv)
				// Read what the client sends until it closes.
				var cf [4]byte
				if _, err := ioReadFull(sc, cf[:]); err != nil {
					return
				}
				for {
					var h [16]byte
					if _, err := ioReadFull(sc, h[:]); err != nil {
						return
					}
					opts = append(opts, binary.BigEndian.Uint32(h[8:]))
					data := make([]byte, min(binary.BigEndian.Uint32(h[12:]), 4096))
					if _, err := ioReadFull(sc, data); err != nil {
						return
					}
				}
			}()
			url := tc.url
			if url == "" {
				url = fakeURL
			}
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			d, err := openPipe(t.Context(), cc, url, tc.opts)
			if d != nil {
				d.Close()
				t.Fatal("Open succeeded")
			}
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if el := time.Since(start); el > 5*time.Second {
				t.Errorf("Open returned after %v", el)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
				t.Errorf("Open allocated %d bytes", grew)
			}
			if !tc.want(err) {
				t.Fatalf("Open: %v (%T)", err, err)
			}
			cc.Close()
			<-srv
			if tc.abort && (len(opts) == 0 || opts[len(opts)-1] != nbdproto.OptAbort) {
				t.Errorf("options %v: want NBD_OPT_ABORT last", opts)
			}
			if tc.name == "starttls-refused" && slicesEqual(opts, []uint32{nbdproto.OptStartTLS, nbdproto.OptGo}) {
				t.Error("went on in plaintext")
			}
		})
	}
}

func isProtoErr(err error) bool {
	var pe *ProtocolError
	return errors.As(err, &pe) && errors.Is(err, ErrProtocol)
}

func bytesRepeat(b []byte, n int) []byte {
	out := make([]byte, 0, len(b)*n)
	for range n {
		out = append(out, b...)
	}
	return out
}

func ioReadFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// TestOpenCancel: cancelling Open's context ends a negotiation at once.
func TestOpenCancel(t *testing.T) {
	noLeak(t)
	sc, cc := net.Pipe()
	defer sc.Close()
	go sc.Write(cat(u64(nbdproto.MagicInit), u64(nbdproto.MagicOpt), u16(nbdproto.FlagFixedNewstyle)))
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := openPipe(ctx, cc, fakeURL, Options{})
	if !errors.Is(err, context.Canceled) || time.Since(start) > 5*time.Second {
		t.Fatalf("Open: %v after %v, want context.Canceled at once", err, time.Since(start))
	}
}
