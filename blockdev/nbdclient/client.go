package nbdclient

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"net"
	"sync"
	"time"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"

	"github.com/difctl/difctl/blockdev/device"
)

// Device is an NBD export used as a [device.Device]. Make one with [Open].
// It is safe for concurrent use: requests from any number of goroutines
// share one connection, several in flight at once.
type Device struct {
	url      string // redacted
	info     Info
	size     int64
	align    int // every request's offset and length are multiples of it
	lbs, pbs int
	maxReq   int // the longest request, a multiple of lbs
	readOnly bool
	fua      bool // writes carry NBD_CMD_FLAG_FUA (no FLUSH, FUA: see Sync)

	raw     net.Conn // the socket
	conn    net.Conn // raw, or the TLS connection over it
	timeout time.Duration
	drain   time.Duration // Close's wait for requests in flight

	wmu       sync.Mutex // serialises requests on the wire
	bw        *bufio.Writer
	discarded bool // NBD_CMD_DISC sent; guarded by wmu

	mu        sync.Mutex
	cond      sync.Cond // on mu: budget released, device failed or closing
	pending   map[uint64]*call
	cookie    uint64
	inflight  int
	inBytes   int
	maxN      int
	maxBytes  int
	closed    bool  // Close called
	err       error // the connection's end (a *ConnError), once it ended
	stopping  error // no new requests (the server is shutting down)
	readerEnd chan struct{}
}

// Info describes the export, as the server advertised it.
type Info struct {
	// Export is the export's name.
	Export string
	// Size is the export's size in bytes.
	Size int64
	// MinBlock, PreferredBlock and MaxBlock are the server's block size
	// constraints (NBD_INFO_BLOCK_SIZE), zero when it sent none.
	MinBlock, PreferredBlock, MaxBlock uint32
	// Flags are the transmission flags; the booleans below decode them.
	Flags                                              uint16
	ReadOnly, Flush, FUA, Trim, WriteZeroes, MultiConn bool
	// TLS is the TLS version in use ("TLS 1.3"), empty without TLS.
	TLS string
}

var (
	_ device.Device    = (*Device)(nil)
	_ device.Discarder = (*Device)(nil)
)

// Open connects to the export that rawURL names (see the package
// documentation for the URL forms), negotiates and returns the device.
// ctx bounds the connection and the negotiation, not the device's life.
// A URL Open cannot use is a *URLError; a refusal by the server an
// *OptionError; an export whose size or block sizes do not fit a device
// an *ExportError; something the server sent that the protocol forbids a
// *ProtocolError.
func Open(ctx context.Context, rawURL string, opts Options) (*Device, error) {
	t, cfg, err := prepare(rawURL, &opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, t.network, t.addr)
	if err != nil {
		return nil, fmt.Errorf("nbdclient: connecting to %s: %w", t.redacted, err)
	}
	return openConn(ctx, nc, t, cfg, opts)
}

// prepare parses the URL and checks the options.
func prepare(rawURL string, opts *Options) (*target, *tls.Config, error) {
	t, err := parseURL(rawURL)
	if err != nil {
		return nil, nil, err
	}
	if err := opts.normalize(); err != nil {
		return nil, nil, err
	}
	var cfg *tls.Config
	switch {
	case t.tls:
		if cfg, err = opts.tlsConfig(t); err != nil {
			return nil, nil, err
		}
	case opts.hasTLS():
		return nil, nil, fmt.Errorf("nbdclient: TLS options given with %s, which is plaintext: use an nbds:// or nbds+unix:// URL", t.redacted)
	}
	return t, cfg, nil
}

// openConn negotiates on nc, which it closes on failure, and starts the
// device. ctx must carry a deadline.
func openConn(ctx context.Context, nc net.Conn, t *target, cfg *tls.Config, opts Options) (*Device, error) {
	dl, _ := ctx.Deadline()
	nc.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Now()) })
	conn, ng, err := negotiate(ctx, nc, t, cfg)
	interrupted := !stop()
	if err == nil && interrupted {
		err = ctx.Err()
	}
	if err != nil {
		nc.Close()
		if ctx.Err() != nil && !errors.Is(err, ErrRefused) && !errors.Is(err, ErrProtocol) {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("%w: negotiating with %s: %w", ErrTimeout, t.redacted, ctx.Err())
			}
			return nil, fmt.Errorf("nbdclient: negotiating with %s: %w", t.redacted, ctx.Err())
		}
		return nil, err
	}
	d, err := newDevice(t, ng, opts)
	if err != nil {
		// The negotiation is over: leave as the transmission phase asks.
		var h [nbdproto.RequestSize]byte
		putRequest(h[:], nbdproto.CmdDisc, 0, 0, 0, 0)
		nc.SetWriteDeadline(time.Now().Add(time.Second))
		conn.Write(h[:])
		conn.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	d.raw, d.conn = nc, conn
	d.bw = bufio.NewWriterSize(conn, 64<<10)
	go d.readLoop(bufio.NewReaderSize(conn, 64<<10))
	return d, nil
}

// newDevice checks what the negotiation learned and derives the device's
// geometry.
func newDevice(t *target, ng negotiated, opts Options) (*Device, error) {
	bad := func(format string, args ...any) (*Device, error) {
		return nil, &ExportError{URL: t.redacted, Reason: fmt.Sprintf(format, args...)}
	}
	flags := ng.flags
	if flags&nbdproto.FlagHasFlags == 0 {
		// The protocol requires the bit; without it no other bit can be
		// trusted to mean what it says.
		flags = 0
	}
	info := Info{Export: ng.exportName, MinBlock: ng.minBS, PreferredBlock: ng.prefBS, MaxBlock: ng.maxBS,
		Flags: ng.flags, ReadOnly: flags&nbdproto.FlagReadOnly != 0, Flush: flags&nbdproto.FlagSendFlush != 0,
		FUA: flags&nbdproto.FlagSendFUA != 0, Trim: flags&nbdproto.FlagSendTrim != 0, WriteZeroes: flags&nbdproto.FlagSendWriteZeroes != 0,
		MultiConn: flags&nbdproto.FlagCanMultiConn != 0, TLS: ng.tlsVersion}
	if ng.size > math.MaxInt64 {
		return bad("size %d is beyond what a device can address", ng.size)
	}
	info.Size = int64(ng.size)
	// Requests are aligned to the server's minimum block size, or to 512
	// bytes when it advertised none (the protocol's advice to clients
	// that want to work with any server).
	align := 512
	maxReq := opts.MaxPayload
	pref := 0
	if ng.haveBS {
		if !pow2(ng.minBS) || ng.minBS > 1<<16 {
			return bad("minimum block size %d is not a power of two up to 65536", ng.minBS)
		}
		align = int(ng.minBS)
		if ng.maxBS != math.MaxUint32 {
			if ng.maxBS < ng.minBS || ng.maxBS%ng.minBS != 0 {
				return bad("maximum block size %d is not a multiple of the minimum, %d", ng.maxBS, ng.minBS)
			}
			maxReq = int(min(uint64(maxReq), uint64(ng.maxBS)))
		}
		// The preferred size is a hint; one that breaks the protocol's
		// rules (a power of two, at least the minimum and 512) is
		// ignored rather than refused.
		if pow2(ng.prefBS) && ng.prefBS >= max(ng.minBS, 512) {
			pref = int(min(ng.prefBS, 1<<16))
		}
	}
	lbs := max(512, align, opts.BlockSize)
	pbs := max(lbs, pref)
	maxReq = maxReq / lbs * lbs
	if maxReq == 0 {
		return bad("the server's maximum request (%d bytes) is smaller than the %d-byte logical block", ng.maxBS, lbs)
	}
	if info.Size%int64(lbs) != 0 {
		return bad("size %d is not a multiple of the %d-byte logical block size", info.Size, lbs)
	}
	drain := opts.RequestTimeout
	if drain <= 0 {
		drain = DefaultRequestTimeout
	}
	d := &Device{url: t.redacted, info: info, size: info.Size, align: align, lbs: lbs, pbs: pbs, maxReq: maxReq,
		readOnly: opts.ReadOnly || info.ReadOnly, fua: !info.Flush && info.FUA,
		timeout: opts.RequestTimeout, drain: drain, pending: make(map[uint64]*call),
		maxN: opts.MaxInflight, maxBytes: opts.MaxInflightBytes, readerEnd: make(chan struct{})}
	d.cond.L = &d.mu
	return d, nil
}

func pow2(v uint32) bool { return v != 0 && bits.OnesCount32(v) == 1 }

// Size implements [device.Device]: the export's size.
func (d *Device) Size() int64 { return d.size }

// LogicalBlockSize implements [device.Device]: the larger of 512, the
// server's minimum block size and Options.BlockSize.
func (d *Device) LogicalBlockSize() int { return d.lbs }

// PhysicalBlockSize implements [device.Device]: the server's preferred
// block size (the smallest request it serves without read-modify-write),
// capped at 64 KiB, and at least the logical block size.
func (d *Device) PhysicalBlockSize() int { return d.pbs }

// Info returns what the server advertised of the export.
func (d *Device) Info() Info { return d.info }

// URL returns the device's URL without credentials.
func (d *Device) URL() string { return d.url }

// String returns the device's URL without credentials.
func (d *Device) String() string { return d.url }

// call is one request in flight.
type call struct {
	op     string // for errors: "read", "write", ...
	typ    uint16
	off    int64
	n      int
	buf    []byte // a READ's destination: exactly n bytes
	cost   int    // its share of the in-flight byte budget
	timer  *time.Timer
	done   chan struct{}
	err    error // set before done is closed
	cookie uint64
}

// ReadAt implements [device.Device]. off and len(p) must be multiples of
// the server's minimum block size (512 if it advertised none), else the
// error matches device.ErrUnaligned. Reads longer than the maximum
// request are split, and the pieces are in flight together.
func (d *Device) ReadAt(p []byte, off int64) (int, error) {
	if err := d.check("read", off, int64(len(p)), false); err != nil {
		return 0, err
	}
	return d.transfer(nbdproto.CmdRead, "read", p, off)
}

// WriteAt implements [device.Device], with ReadAt's alignment rule.
func (d *Device) WriteAt(p []byte, off int64) (int, error) {
	if err := d.check("write", off, int64(len(p)), true); err != nil {
		return 0, err
	}
	return d.transfer(nbdproto.CmdWrite, "write", p, off)
}

// Discard implements [device.Discarder] with NBD_CMD_WRITE_ZEROES, which
// lets the server deallocate the range (it may punch a hole) and requires
// the range to read back as zeros, as the Discarder contract does.
// NBD_CMD_TRIM is not used for it: after a trim the protocol leaves the
// contents undefined (see [Device.Trim]). Without NBD_FLAG_SEND_WRITE_ZEROES
// the error wraps errors.ErrUnsupported (a Volume then writes zeros).
func (d *Device) Discard(off, n int64) error {
	if err := d.check("discard", off, n, true); err != nil {
		return err
	}
	if err := device.CheckAligned("discard", off, n, d.lbs); err != nil {
		return err
	}
	if !d.info.WriteZeroes {
		return fmt.Errorf("nbdclient: discard on %s: the server does not advertise NBD_CMD_WRITE_ZEROES: %w", d.url, errors.ErrUnsupported)
	}
	return d.ranged(nbdproto.CmdWriteZeroes, "discard", off, n)
}

// Trim sends NBD_CMD_TRIM for [off, off+n): a hint that the range is no
// longer needed, which the server may act on or not. Its contents are
// undefined afterwards, until written again. The alignment rule is
// Discard's. Without NBD_FLAG_SEND_TRIM the error wraps
// errors.ErrUnsupported.
func (d *Device) Trim(off, n int64) error {
	if err := d.check("trim", off, n, true); err != nil {
		return err
	}
	if err := device.CheckAligned("trim", off, n, d.lbs); err != nil {
		return err
	}
	if !d.info.Trim {
		return fmt.Errorf("nbdclient: trim on %s: the server does not advertise NBD_CMD_TRIM: %w", d.url, errors.ErrUnsupported)
	}
	return d.ranged(nbdproto.CmdTrim, "trim", off, n)
}

// Sync implements [device.Device] with NBD_CMD_FLUSH: when it returns nil,
// every write and discard that completed before the call is durable.
//
// A server that does not advertise FLUSH gets no flush, and the rule is:
//   - a read-only device (the export's flag or Options.ReadOnly) has no
//     writes of its own to make durable: Sync returns nil;
//   - a server that advertises FUA without FLUSH gets every write and
//     discard with NBD_CMD_FLAG_FUA, so each is durable when it completes
//     and Sync returns nil;
//   - a writable export with neither: Sync fails with an error wrapping
//     errors.ErrUnsupported, since nothing the client can send makes the
//     writes durable, and saying so would be a lie.
func (d *Device) Sync() error {
	if err := d.usable(); err != nil {
		return err
	}
	switch {
	case d.info.Flush:
	case d.readOnly || d.fua:
		return nil
	default:
		return fmt.Errorf("nbdclient: sync of %s: the server advertises neither NBD_CMD_FLUSH nor FUA, so no write can be made durable: %w", d.url, errors.ErrUnsupported)
	}
	c, err := d.start(nbdproto.CmdFlush, 0, "sync", 0, 0, nil, nil)
	if err != nil {
		return err
	}
	<-c.done
	return d.callErr(c, 0, d.size)
}

// check validates a request of n bytes at off.
func (d *Device) check(op string, off, n int64, write bool) error {
	if err := d.usable(); err != nil {
		return err
	}
	if write && d.readOnly {
		return fmt.Errorf("nbdclient: %s on %s: %w", op, d.url, device.ErrReadOnly)
	}
	if err := device.CheckRange(op, off, n, d.size); err != nil {
		return err
	}
	return device.CheckAligned(op, off, n, d.align)
}

// usable returns the error of a device that takes no more requests.
func (d *Device) usable() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stateLocked()
}

func (d *Device) stateLocked() error {
	switch {
	case d.closed:
		return fmt.Errorf("nbdclient: %s: %w", d.url, device.ErrClosed)
	case d.err != nil:
		return d.err
	}
	return d.stopping
}

// transfer reads into or writes from p at off, in requests of at most
// maxReq bytes, all in flight together (within the budget). It returns
// once every request sent has completed, so that no reply writes into p
// after it returns.
func (d *Device) transfer(typ uint16, op string, p []byte, off int64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var flags uint16
	if typ == nbdproto.CmdWrite && d.fua {
		flags = nbdproto.CmdFlagFUA
	}
	calls := make([]*call, 0, (len(p)+d.maxReq-1)/d.maxReq)
	var serr error
	for pos := 0; pos < len(p); pos += d.maxReq {
		piece := p[pos:min(pos+d.maxReq, len(p))]
		var c *call
		if typ == nbdproto.CmdRead {
			c, serr = d.start(typ, flags, op, off+int64(pos), len(piece), piece, nil)
		} else {
			c, serr = d.start(typ, flags, op, off+int64(pos), len(piece), nil, piece)
		}
		if serr != nil {
			break
		}
		calls = append(calls, c)
	}
	n, ok := 0, true
	var err error
	for _, c := range calls {
		<-c.done
		if c.err != nil && ok {
			ok = false
			err = d.callErr(c, c.off, int64(c.n))
		}
		if ok {
			n += c.n
		}
	}
	if ok && serr != nil {
		err = serr
	}
	return n, err
}

// ranged sends requests without payload (WRITE_ZEROES, TRIM) over
// [off, off+n), split as transfer splits. It keeps at most MaxInflight of
// them waiting, whatever n, and sends no more after one fails.
func (d *Device) ranged(typ uint16, op string, off, n int64) error {
	var flags uint16
	if d.fua {
		flags = nbdproto.CmdFlagFUA
	}
	var queue []*call
	var err error
	wait := func(c *call) {
		<-c.done
		if c.err != nil && err == nil {
			err = d.callErr(c, c.off, int64(c.n))
		}
	}
	for pos := int64(0); pos < n && err == nil; pos += int64(d.maxReq) {
		if len(queue) == d.maxN {
			wait(queue[0])
			queue = queue[1:]
			if err != nil {
				break
			}
		}
		c, serr := d.start(typ, flags, op, off+pos, int(min(int64(d.maxReq), n-pos)), nil, nil)
		if serr != nil {
			err = serr
			break
		}
		queue = append(queue, c)
	}
	for _, c := range queue {
		wait(c)
	}
	return err
}

// callErr is the error a method returns for a failed call: an error
// reply becomes a *device.IOError naming the range.
func (d *Device) callErr(c *call, off, n int64) error {
	var re *ReplyError
	if errors.As(c.err, &re) {
		return &device.IOError{Op: c.op, Off: off, Len: n, Err: c.err}
	}
	return c.err
}

// start sends one request and returns its call, to be waited for on
// call.done. buf is a READ's destination, payload a WRITE's data. It
// waits for room in the in-flight budget first.
func (d *Device) start(typ, flags uint16, op string, off int64, n int, buf, payload []byte) (*call, error) {
	cost := len(buf) + len(payload)
	d.mu.Lock()
	for {
		if err := d.stateLocked(); err != nil {
			d.mu.Unlock()
			return nil, err
		}
		if d.inflight < d.maxN && (d.inflight == 0 || d.inBytes+cost <= d.maxBytes) {
			break
		}
		d.cond.Wait()
	}
	d.inflight++
	d.inBytes += cost
	d.cookie++
	c := &call{op: op, typ: typ, off: off, n: n, buf: buf, cost: cost, done: make(chan struct{}), cookie: d.cookie}
	d.pending[c.cookie] = c
	if d.timeout > 0 {
		// The timer runs until the call completes, its reply's data
		// included: a server that stalls inside a READ's data ends the
		// connection too.
		c.timer = time.AfterFunc(d.timeout, func() {
			select {
			case <-c.done:
				return // completed as the timer fired
			default:
			}
			d.fail(fmt.Errorf("%w: no reply to a %s of %d bytes at offset %d within %v", ErrTimeout, op, n, off, d.timeout))
		})
	}
	d.mu.Unlock()

	d.wmu.Lock()
	var h [nbdproto.RequestSize]byte
	putRequest(h[:], typ, flags, c.cookie, uint64(off), uint32(n))
	d.bw.Write(h[:])
	d.bw.Write(payload)
	err := d.bw.Flush()
	d.wmu.Unlock()
	if err != nil {
		// The call is completed by fail, with the connection's error,
		// unless a reply or an earlier failure completed it.
		d.fail(fmt.Errorf("sending a request: %w", err))
	}
	return c, nil
}

func putRequest(h []byte, typ, flags uint16, cookie, off uint64, n uint32) {
	binary.BigEndian.PutUint32(h[0:], nbdproto.MagicRequest)
	binary.BigEndian.PutUint16(h[4:], flags)
	binary.BigEndian.PutUint16(h[6:], typ)
	binary.BigEndian.PutUint64(h[8:], cookie)
	binary.BigEndian.PutUint64(h[16:], off)
	binary.BigEndian.PutUint32(h[24:], n)
}

// complete ends c with err and releases its budget.
func (d *Device) complete(c *call, err error) {
	if c.timer != nil {
		c.timer.Stop()
	}
	d.mu.Lock()
	d.inflight--
	d.inBytes -= c.cost
	d.cond.Broadcast()
	d.mu.Unlock()
	c.err = err
	close(c.done)
}

// fail ends the connection with cause, unless it has ended already:
// every pending call, and every later request, fails with a *ConnError.
// It returns the connection's error.
func (d *Device) fail(cause error) error {
	d.mu.Lock()
	if d.err != nil {
		err := d.err
		d.mu.Unlock()
		return err
	}
	d.err = &ConnError{URL: d.url, Err: cause}
	err := d.err
	calls := d.pending
	d.pending = nil
	d.cond.Broadcast()
	d.mu.Unlock()
	// Closing the socket (not the TLS layer, whose Close may wait to
	// send an alert) ends the reader's read and any write in progress.
	d.raw.Close()
	for _, c := range calls {
		d.complete(c, err)
	}
	return err
}

// readLoop reads the replies and hands each to its call, until the
// connection ends. A READ's data is read straight into its caller's
// buffer: the caller is waiting for the call, which fail never completes
// while this loop holds it (it is no longer pending), so the buffer is
// not given back before the read into it has ended.
func (d *Device) readLoop(br *bufio.Reader) {
	defer close(d.readerEnd)
	var h [nbdproto.SimpleSize]byte
	for {
		if _, err := io.ReadFull(br, h[:]); err != nil {
			d.fail(lost(err))
			return
		}
		switch m := binary.BigEndian.Uint32(h[0:]); m {
		case nbdproto.MagicSimple:
		case nbdproto.MagicStructured:
			d.fail(protoErr("a structured reply, which was not negotiated"))
			return
		default:
			d.fail(protoErr("reply magic %#08x", m))
			return
		}
		errno := binary.BigEndian.Uint32(h[4:])
		cookie := binary.BigEndian.Uint64(h[8:])
		d.mu.Lock()
		c := d.pending[cookie]
		delete(d.pending, cookie)
		d.mu.Unlock()
		if c == nil {
			d.fail(protoErr("a reply with cookie %#x, which no request in flight has", cookie))
			return
		}
		var err error
		if errno != 0 {
			err = &ReplyError{Op: c.op, Errno: errno}
		} else if c.typ == nbdproto.CmdRead {
			if _, rerr := io.ReadFull(br, c.buf); rerr != nil {
				d.complete(c, d.fail(lost(rerr)))
				return
			}
		}
		if errno == nbdproto.ErrnoShutdown {
			// Before the caller sees the error: no request it makes
			// after may be sent.
			d.shutdown()
		}
		d.complete(c, err)
		if d.drained() {
			return
		}
	}
}

// lost describes a read error of the transmission phase.
func lost(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("the server closed the connection: %w", err)
	}
	return fmt.Errorf("reading replies: %w", err)
}

// shutdown handles NBD_ESHUTDOWN: the protocol asks the client to
// disconnect, which it does once the requests in flight are answered.
func (d *Device) shutdown() {
	d.mu.Lock()
	if d.stopping == nil && d.err == nil {
		d.stopping = &ConnError{URL: d.url, Err: &ReplyError{Op: "request", Errno: nbdproto.ErrnoShutdown}}
		d.cond.Broadcast()
	}
	d.mu.Unlock()
}

// drained reports whether the server is shutting down and nothing is in
// flight any more; it then disconnects.
func (d *Device) drained() bool {
	d.mu.Lock()
	done := d.stopping != nil && d.inflight == 0 && !d.closed && d.err == nil
	stopping := d.stopping
	d.mu.Unlock()
	if !done {
		return false
	}
	d.disconnect()
	var ce *ConnError
	errors.As(stopping, &ce)
	d.fail(ce.Err)
	return true
}

// disconnect sends NBD_CMD_DISC, once.
func (d *Device) disconnect() {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if d.discarded {
		return
	}
	d.discarded = true
	var h [nbdproto.RequestSize]byte
	putRequest(h[:], nbdproto.CmdDisc, 0, 0, 0, 0)
	d.raw.SetWriteDeadline(time.Now().Add(5 * time.Second))
	d.bw.Write(h[:])
	d.bw.Flush()
}

// Close implements [device.Device]. It waits for the requests in flight to
// complete (at most the request timeout), sends NBD_CMD_DISC, closes the
// connection (ending TLS first) and waits for the reader to finish. A
// second Close fails with device.ErrClosed.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return fmt.Errorf("nbdclient: %s: %w", d.url, device.ErrClosed)
	}
	d.closed = true
	d.cond.Broadcast()
	t := time.AfterFunc(d.drain, func() {
		d.fail(fmt.Errorf("%w: requests still in flight %v after Close", ErrTimeout, d.drain))
	})
	for d.inflight > 0 && d.err == nil {
		d.cond.Wait()
	}
	ended := d.err != nil
	d.mu.Unlock()
	t.Stop()
	if !ended {
		d.disconnect()
		if tc, ok := d.conn.(*tls.Conn); ok {
			tc.Close() // close_notify, then the socket
		}
	}
	d.fail(fmt.Errorf("closed: %w", device.ErrClosed))
	<-d.readerEnd
	return nil
}
