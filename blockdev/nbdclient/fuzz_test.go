package nbdclient

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"
)

// The fuzz targets feed arbitrary server bytes to the client: it must
// neither panic nor hang, must fail (if it fails) with its typed errors,
// and must allocate nothing the server's numbers ask for. They run the
// client's own code on one goroutine over a scripted connection, so that
// an input covers the same code every time (the fuzzer keeps and
// minimises inputs by coverage, which scheduling would otherwise vary).
// Run them with, for example,
//
//	go test -run '^$' -fuzz FuzzClientReplies -fuzztime 30s ./blockdev/nbdclient/

// scriptConn is a connection whose reads return script and then EOF, and
// whose writes are counted and dropped.
type scriptConn struct {
	r       *bytes.Reader
	written int
}

func (c *scriptConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *scriptConn) Write(p []byte) (int, error)      { c.written += len(p); return len(p), nil }
func (c *scriptConn) Close() error                     { return nil }
func (c *scriptConn) LocalAddr() net.Addr              { return &net.UnixAddr{Name: "client", Net: "unix"} }
func (c *scriptConn) RemoteAddr() net.Addr             { return &net.UnixAddr{Name: "server", Net: "unix"} }
func (c *scriptConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptConn) SetWriteDeadline(time.Time) error { return nil }
func newScriptConn(script []byte) *scriptConn          { return &scriptConn{r: bytes.NewReader(script)} }

// FuzzClientReplies: four requests in flight (cookies 1 to 4: READ 512 at
// 0, WRITE 512 at 512, FLUSH, READ 1024 at 1024), then the fuzzed bytes
// as everything the server sends, and the end of the connection. Every
// request must have completed when the reply reader stops, with success,
// a *ReplyError or the connection's end.
func FuzzClientReplies(f *testing.F) {
	ok := func(cookie uint64, n int) []byte { return simpleReply(cookie, 0, make([]byte, n)) }
	f.Add(cat(ok(1, 512), ok(2, 0), ok(3, 0), ok(4, 1024)))
	f.Add(cat(ok(4, 1024), ok(3, 0), ok(2, 0), ok(1, 512)))
	f.Add(cat(simpleReply(1, nbdproto.ErrnoIO, nil), simpleReply(2, nbdproto.ErrnoShutdown, nil), ok(3, 0), ok(4, 1024)))
	f.Add(cat(ok(1, 512), ok(1, 512)))
	f.Add(cat(ok(1, 100)))
	f.Add(cat(u32(nbdproto.MagicStructured), u16(1), u16(1), u64(1), u32(0xffffffff)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		tg, err := parseURL(fakeURL)
		if err != nil {
			t.Fatal(err)
		}
		opts := Options{RequestTimeout: -1}
		if err := opts.normalize(); err != nil {
			t.Fatal(err)
		}
		d, err := newDevice(tg, negotiated{size: 1 << 20, flags: nbdproto.FlagHasFlags | nbdproto.FlagSendFlush}, opts)
		if err != nil {
			t.Fatal(err)
		}
		conn := newScriptConn(data)
		d.raw, d.conn, d.bw = conn, conn, bufio.NewWriter(conn)
		var calls []*call
		for _, r := range []struct {
			typ uint16
			off int64
			n   int
		}{{nbdproto.CmdRead, 0, 512}, {nbdproto.CmdWrite, 512, 512}, {nbdproto.CmdFlush, 0, 0}, {nbdproto.CmdRead, 1024, 1024}} {
			var buf, payload []byte
			if r.typ == nbdproto.CmdRead {
				buf = make([]byte, r.n)
			} else {
				payload = make([]byte, r.n)
			}
			c, err := d.start(r.typ, 0, "fuzz", r.off, r.n, buf, payload)
			if err != nil {
				t.Fatal(err)
			}
			calls = append(calls, c)
		}
		d.readLoop(bufio.NewReader(conn))
		for i, c := range calls {
			select {
			case <-c.done:
			default:
				t.Fatalf("request %d pending when the reply reader stopped", i+1)
			}
			var re *ReplyError
			if c.err != nil && !errors.As(c.err, &re) {
				isConnEnd(t, c.err)
			}
		}
		if err := d.usable(); err == nil {
			t.Fatal("the device is usable after the connection ended")
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzHandshake: the fuzzed bytes are everything the server says during
// the negotiation (with or without TLS asked for). Open must return, a
// device only if every rule held.
func FuzzHandshake(f *testing.F) {
	greeting := cat(u64(nbdproto.MagicInit), u64(nbdproto.MagicOpt), u16(nbdproto.FlagFixedNewstyle|nbdproto.FlagNoZeroes))
	info := func(d []byte) []byte {
		return cat(u64(nbdproto.MagicOptReply), u32(nbdproto.OptGo), u32(nbdproto.RepInfo), u32(uint32(len(d))), d)
	}
	ack := cat(u64(nbdproto.MagicOptReply), u32(nbdproto.OptGo), u32(nbdproto.RepAck), u32(0))
	f.Add(cat(greeting, info(cat(u16(nbdproto.InfoExport), u64(1<<20), u16(1))), ack), false)
	f.Add(cat(greeting, info(cat(u16(nbdproto.InfoExport), u64(1<<20), u16(0x1ff))),
		info(cat(u16(nbdproto.InfoBlockSize), u32(512), u32(4096), u32(1<<20))), ack), false)
	f.Add(cat(greeting, u64(nbdproto.MagicOptReply), u32(nbdproto.OptGo), u32(nbdproto.RepErrUnsup), u32(0), u64(1<<20), u16(1)), false)
	f.Add(cat(greeting, u64(nbdproto.MagicOptReply), u32(nbdproto.OptGo), u32(nbdproto.RepErrUnknown), u32(4), []byte("gone")), false)
	f.Add(cat(greeting, u64(nbdproto.MagicOptReply), u32(nbdproto.OptStartTLS), u32(nbdproto.RepErrPolicy), u32(0)), true)
	f.Add(cat(greeting, u64(nbdproto.MagicOptReply), u32(nbdproto.OptStartTLS), u32(nbdproto.RepAck), u32(0), []byte("\x16\x03\x01\x00\x05hello")), true)
	f.Add(cat(greeting, u64(nbdproto.MagicOptReply), u32(nbdproto.OptGo), u32(nbdproto.RepInfo), u32(0xffffffff)), false)
	f.Fuzz(func(t *testing.T, data []byte, useTLS bool) {
		url := fakeURL
		if useTLS {
			url = "nbds+unix:///disk?socket=/fake&tls-hostname=localhost"
		}
		opts := Options{}
		tg, cfg, err := prepare(url, &opts)
		if err != nil {
			t.Fatal(err)
		}
		conn := newScriptConn(data)
		_, ng, err := negotiate(context.Background(), conn, tg, cfg)
		if err != nil {
			return
		}
		if _, err := newDevice(tg, ng, opts); err != nil && !errors.Is(err, ErrBadExport) {
			t.Fatalf("newDevice: %v, want an *ExportError", err)
		}
	})
}
