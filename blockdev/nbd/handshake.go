package nbd

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"
)

// maxOptionData bounds the data of one option the server reads into
// memory; longer options are read and dropped in pieces and refused with
// NBD_REP_ERR_TOO_BIG (NBD_OPT_EXPORT_NAME, which cannot be refused,
// closes the connection).
const maxOptionData = 64 << 10

// errInternal marks a bug of this package caught while serving a
// connection (reported through Options.OnConnError; the connection ends).
var errInternal = errors.New("nbd: internal error serving a connection")

// conn is one client connection.
type conn struct {
	s   *Server
	raw net.Conn // the accepted connection
	nc  net.Conn // raw, or the TLS connection over it
	br  *bufio.Reader
	bw  *bufio.Writer // handshake phase only

	tlsDone    bool
	noZeroes   bool
	structured bool
	metaSet    bool   // base:allocation selected by the last SET_META_CONTEXT
	metaExport string // for this export name

	handshakeDone sync.Once
	act           activity // the limits' view of the connection (limits.go)

	// Transmission phase.
	x    *export
	meta bool // BLOCK_STATUS allowed
	wmu  sync.Mutex
	werr error // first write error; guarded by wmu
}

func newConn(s *Server, nc net.Conn) *conn {
	if uc, ok := nc.(*net.UnixConn); ok && s.opts.SendBuffer > 0 {
		// Best effort: a smaller buffer costs only more writes.
		_ = uc.SetWriteBuffer(s.opts.SendBuffer)
	}
	c := &conn{s: s, raw: nc, nc: nc, br: bufio.NewReaderSize(nc, 64<<10), bw: bufio.NewWriterSize(nc, 4<<10)}
	c.act.closeFn = func() { c.raw.Close() }
	return c
}

// protoErr reports a protocol violation by the client.
func protoErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
}

func (c *conn) endHandshake() { c.handshakeDone.Do(func() { c.s.hs.release(c) }) }

// serve runs the connection to its end. It returns nil for an orderly end
// (NBD_OPT_ABORT, NBD_CMD_DISC, the client hanging up between requests,
// the server shutting down).
func (c *conn) serve(ctx context.Context) (err error) {
	defer c.endHandshake()
	defer func() {
		c.nc.SetDeadline(time.Now().Add(time.Second))
		c.nc.Close()
		c.raw.Close()
	}()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", errInternal, r)
		}
	}()
	c.raw.SetDeadline(time.Now().Add(c.s.opts.HandshakeTimeout))
	stop := context.AfterFunc(ctx, func() { c.raw.SetReadDeadline(time.Now()) })
	defer stop()
	x, err := c.handshake()
	c.endHandshake()
	if err != nil || x == nil {
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && c.act.wasEvicted() {
			return fmt.Errorf("%w: still negotiating when another client needed the slot", ErrEvicted)
		}
		return err
	}
	defer x.release(c)
	if c.s.opts.OnConn != nil {
		c.connEvent(x, ConnEnter)
		defer c.connEvent(x, ConnLeave)
	}
	c.raw.SetDeadline(time.Time{})
	if ctx.Err() != nil {
		return nil
	}
	err = c.transmit(ctx, x)
	if err != nil && c.act.wasEvicted() && ctx.Err() == nil {
		return fmt.Errorf("%w: idle (export %q)", ErrEvicted, x.Name)
	}
	return err
}

// optReply sends one option reply and flushes it.
func (c *conn) optReply(opt, typ uint32, data ...[]byte) error {
	var h [20]byte
	n := 0
	for _, d := range data {
		n += len(d)
	}
	binary.BigEndian.PutUint64(h[0:], nbdproto.MagicOptReply)
	binary.BigEndian.PutUint32(h[8:], opt)
	binary.BigEndian.PutUint32(h[12:], typ)
	binary.BigEndian.PutUint32(h[16:], uint32(n))
	c.bw.Write(h[:])
	for _, d := range data {
		c.bw.Write(d)
	}
	return c.bw.Flush()
}

// optError sends an error reply with a message.
func (c *conn) optError(opt, typ uint32, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if len(msg) > nbdproto.MaxStringBytes {
		msg = msg[:nbdproto.MaxStringBytes]
	}
	return c.optReply(opt, typ, []byte(msg))
}

// handshake runs the fixed newstyle negotiation. It returns the export
// chosen for transmission, or nil (and nil) after NBD_OPT_ABORT.
func (c *conn) handshake() (*export, error) {
	var h [18]byte
	binary.BigEndian.PutUint64(h[0:], nbdproto.MagicInit)
	binary.BigEndian.PutUint64(h[8:], nbdproto.MagicOpt)
	binary.BigEndian.PutUint16(h[16:], nbdproto.FlagFixedNewstyle|nbdproto.FlagNoZeroes)
	c.bw.Write(h[:])
	if err := c.bw.Flush(); err != nil {
		return nil, err
	}
	var cf [4]byte
	if _, err := io.ReadFull(c.br, cf[:]); err != nil {
		return nil, err
	}
	flags := binary.BigEndian.Uint32(cf[:])
	if flags&^(nbdproto.ClientFixedNewstyle|nbdproto.ClientNoZeroes) != 0 {
		return nil, protoErr("unknown client flags %#x", flags)
	}
	if flags&nbdproto.ClientFixedNewstyle == 0 {
		// Plain newstyle allows only NBD_OPT_EXPORT_NAME; TLS and every
		// other option need fixed newstyle, which every client of this
		// century speaks. Refuse the rest rather than half-support it.
		return nil, protoErr("client does not speak fixed newstyle")
	}
	c.noZeroes = flags&nbdproto.ClientNoZeroes != 0
	for {
		var oh [16]byte
		if _, err := io.ReadFull(c.br, oh[:]); err != nil {
			return nil, err
		}
		if m := binary.BigEndian.Uint64(oh[0:]); m != nbdproto.MagicOpt {
			return nil, protoErr("option magic %#x", m)
		}
		opt := binary.BigEndian.Uint32(oh[8:])
		n := binary.BigEndian.Uint32(oh[12:])
		if n > maxOptionData {
			if _, err := io.CopyN(io.Discard, c.br, int64(n)); err != nil {
				return nil, err
			}
			if opt == nbdproto.OptExportName {
				return nil, protoErr("export name of %d bytes", n)
			}
			if err := c.optError(opt, nbdproto.RepErrTooBig, "option data of %d bytes, at most %d", n, maxOptionData); err != nil {
				return nil, err
			}
			continue
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(c.br, data); err != nil {
			return nil, err
		}
		if c.s.opts.TLS != nil && !c.tlsDone && opt != nbdproto.OptStartTLS && opt != nbdproto.OptAbort {
			if opt == nbdproto.OptExportName {
				return nil, protoErr("NBD_OPT_EXPORT_NAME before TLS on a server that requires it")
			}
			if err := c.optError(opt, nbdproto.RepErrTLSReqd, "this server requires TLS: start it with NBD_OPT_STARTTLS"); err != nil {
				return nil, err
			}
			continue
		}
		x, done, err := c.option(opt, data)
		if err != nil || done {
			return x, err
		}
	}
}

// option answers one option. done means the negotiation is over: x is the
// export to serve, or nil after NBD_OPT_ABORT.
func (c *conn) option(opt uint32, data []byte) (x *export, done bool, err error) {
	switch opt {
	case nbdproto.OptExportName:
		x := c.s.lookup(string(data))
		if x == nil {
			return nil, true, protoErr("unknown export %q (NBD_OPT_EXPORT_NAME)", data)
		}
		if !x.acquire(c) {
			c.connEvent(x, ConnFull)
			return nil, true, fmt.Errorf("%w: export %q has its maximum of %d connections, none idle for the idle timeout", ErrRefused, x.Name, x.maxConns)
		}
		var r [10 + 124]byte
		binary.BigEndian.PutUint64(r[0:], uint64(x.size))
		binary.BigEndian.PutUint16(r[8:], x.flags)
		out := r[:]
		if c.noZeroes {
			out = r[:10]
		}
		c.bw.Write(out)
		if err := c.bw.Flush(); err != nil {
			x.release(c)
			return nil, true, err
		}
		c.enter(x, string(data))
		return x, true, nil

	case nbdproto.OptAbort:
		c.optReply(opt, nbdproto.RepAck)
		return nil, true, nil

	case nbdproto.OptList:
		if len(data) != 0 {
			return nil, false, c.optError(opt, nbdproto.RepErrInvalid, "NBD_OPT_LIST takes no data")
		}
		for _, x := range c.s.exports {
			var l [4]byte
			binary.BigEndian.PutUint32(l[:], uint32(len(x.Name)))
			if err := c.optReply(opt, nbdproto.RepServer, l[:], []byte(x.Name), []byte(x.Description)); err != nil {
				return nil, true, err
			}
		}
		return nil, false, c.optReply(opt, nbdproto.RepAck)

	case nbdproto.OptStartTLS:
		switch {
		case len(data) != 0:
			return nil, false, c.optError(opt, nbdproto.RepErrInvalid, "NBD_OPT_STARTTLS takes no data")
		case c.s.opts.TLS == nil:
			return nil, false, c.optError(opt, nbdproto.RepErrPolicy, "TLS is not configured on this server")
		case c.tlsDone:
			return nil, false, c.optError(opt, nbdproto.RepErrInvalid, "TLS is already started")
		}
		if err := c.optReply(opt, nbdproto.RepAck); err != nil {
			return nil, true, err
		}
		if c.br.Buffered() != 0 {
			return nil, true, protoErr("data sent after NBD_OPT_STARTTLS before its reply")
		}
		tc := tls.Server(c.raw, c.s.opts.TLS)
		if err := tc.Handshake(); err != nil {
			return nil, true, fmt.Errorf("%w: %w", ErrTLSHandshake, err)
		}
		c.nc, c.tlsDone = tc, true
		c.br = bufio.NewReaderSize(tc, 64<<10)
		c.bw = bufio.NewWriterSize(tc, 4<<10)
		// No negotiation state survives STARTTLS.
		c.structured, c.metaSet, c.metaExport = false, false, ""
		return nil, false, nil

	case nbdproto.OptInfo, nbdproto.OptGo:
		return c.infoGo(opt, data)

	case nbdproto.OptStructured:
		if len(data) != 0 {
			return nil, false, c.optError(opt, nbdproto.RepErrInvalid, "NBD_OPT_STRUCTURED_REPLY takes no data")
		}
		c.structured = true
		return nil, false, c.optReply(opt, nbdproto.RepAck)

	case nbdproto.OptListMetaCtx, nbdproto.OptSetMetaCtx:
		return nil, false, c.metaContext(opt, data)
	}
	return nil, false, c.optError(opt, nbdproto.RepErrUnsup, "option %d is not supported", opt)
}

// enter records what the negotiation chose for transmission.
func (c *conn) enter(x *export, name string) {
	c.x = x
	c.meta = c.structured && c.metaSet && c.metaExport == name
}

// infoGo answers NBD_OPT_INFO and NBD_OPT_GO.
func (c *conn) infoGo(opt uint32, data []byte) (*export, bool, error) {
	if len(data) < 6 {
		return nil, false, c.optError(opt, nbdproto.RepErrInvalid, "option data of %d bytes is too short", len(data))
	}
	nl := binary.BigEndian.Uint32(data)
	if uint64(nl) > uint64(len(data)-6) {
		return nil, false, c.optError(opt, nbdproto.RepErrInvalid, "export name of %d bytes in option data of %d", nl, len(data))
	}
	name := string(data[4 : 4+nl])
	rest := data[4+nl:]
	nreq := int(binary.BigEndian.Uint16(rest))
	if len(rest) != 2+2*nreq {
		return nil, false, c.optError(opt, nbdproto.RepErrInvalid, "%d information requests in %d bytes", nreq, len(rest)-2)
	}
	var wantName, wantDesc bool
	for i := range nreq {
		switch binary.BigEndian.Uint16(rest[2+2*i:]) {
		case nbdproto.InfoName:
			wantName = true
		case nbdproto.InfoDescription:
			wantDesc = true
		}
	}
	x := c.s.lookup(name)
	if x == nil {
		return nil, false, c.optError(opt, nbdproto.RepErrUnknown, "no export named %q", name)
	}
	var ex [12]byte
	binary.BigEndian.PutUint16(ex[0:], nbdproto.InfoExport)
	binary.BigEndian.PutUint64(ex[2:], uint64(x.size))
	binary.BigEndian.PutUint16(ex[10:], x.flags)
	if err := c.optReply(opt, nbdproto.RepInfo, ex[:]); err != nil {
		return nil, true, err
	}
	var bsz [14]byte
	mn, pref, mx := x.blockSizes()
	binary.BigEndian.PutUint16(bsz[0:], nbdproto.InfoBlockSize)
	binary.BigEndian.PutUint32(bsz[2:], mn)
	binary.BigEndian.PutUint32(bsz[6:], pref)
	binary.BigEndian.PutUint32(bsz[10:], mx)
	if err := c.optReply(opt, nbdproto.RepInfo, bsz[:]); err != nil {
		return nil, true, err
	}
	if wantName {
		if err := c.optReply(opt, nbdproto.RepInfo, []byte{0, nbdproto.InfoName}, []byte(x.Name)); err != nil {
			return nil, true, err
		}
	}
	if wantDesc && x.Description != "" {
		if err := c.optReply(opt, nbdproto.RepInfo, []byte{0, nbdproto.InfoDescription}, []byte(x.Description)); err != nil {
			return nil, true, err
		}
	}
	if opt == nbdproto.OptInfo {
		return nil, false, c.optReply(opt, nbdproto.RepAck)
	}
	if !x.acquire(c) {
		c.connEvent(x, ConnFull)
		return nil, false, c.optError(opt, nbdproto.RepErrPolicy, "export %q has its maximum of %d connections, none idle for the idle timeout", x.Name, x.maxConns)
	}
	if err := c.optReply(opt, nbdproto.RepAck); err != nil {
		x.release(c)
		return nil, true, err
	}
	c.enter(x, name)
	return x, true, nil
}

// metaContext answers NBD_OPT_LIST_META_CONTEXT and
// NBD_OPT_SET_META_CONTEXT. The server knows one context,
// base:allocation.
func (c *conn) metaContext(opt uint32, data []byte) error {
	if opt == nbdproto.OptSetMetaCtx {
		// A SET replaces the selection, even when it fails.
		c.metaSet, c.metaExport = false, ""
	}
	if !c.structured {
		return c.optError(opt, nbdproto.RepErrInvalid, "negotiate structured replies first")
	}
	bad := func() error {
		return c.optError(opt, nbdproto.RepErrInvalid, "malformed meta context request")
	}
	if len(data) < 8 {
		return bad()
	}
	nl := binary.BigEndian.Uint32(data)
	if uint64(nl) > uint64(len(data)-8) {
		return bad()
	}
	name := string(data[4 : 4+nl])
	rest := data[4+nl:]
	nq := binary.BigEndian.Uint32(rest)
	rest = rest[4:]
	var queries []string
	for range nq {
		if len(rest) < 4 {
			return bad()
		}
		ql := binary.BigEndian.Uint32(rest)
		if uint64(ql) > uint64(len(rest)-4) {
			return bad()
		}
		queries = append(queries, string(rest[4:4+ql]))
		rest = rest[4+ql:]
	}
	if len(rest) != 0 {
		return bad()
	}
	if c.s.lookup(name) == nil {
		return c.optError(opt, nbdproto.RepErrUnknown, "no export named %q", name)
	}
	match := false
	if opt == nbdproto.OptListMetaCtx && len(queries) == 0 {
		match = true
	}
	for _, q := range queries {
		if q == nbdproto.MetaBaseAllocation || opt == nbdproto.OptListMetaCtx && q == "base:" {
			match = true
		}
	}
	if match {
		var id [4]byte
		if opt == nbdproto.OptSetMetaCtx {
			binary.BigEndian.PutUint32(id[:], nbdproto.MetaBaseID)
		}
		if err := c.optReply(opt, nbdproto.RepMetaCtx, id[:], []byte(nbdproto.MetaBaseAllocation)); err != nil {
			return err
		}
		if opt == nbdproto.OptSetMetaCtx {
			c.metaSet, c.metaExport = true, name
		}
	}
	return c.optReply(opt, nbdproto.RepAck)
}

// isTimeout reports whether err is a deadline passing.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
