package nbd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"

	"github.com/difctl/difctl/blockdev/device"
)

// request is one transmission request, header decoded.
type request struct {
	flags  uint16
	typ    uint16
	cookie uint64
	off    uint64
	length uint32
}

// budget bounds a connection's requests in flight: their number and the
// bytes of their buffers. Only the connection's reader acquires (one
// waiter), the requests' workers release.
type budget struct {
	mu             sync.Mutex
	n, bytes       int // in flight
	maxN, maxBytes int
	wake           chan struct{} // a release since the reader last looked
}

func newBudget(maxN, maxBytes int) *budget {
	return &budget{maxN: maxN, maxBytes: maxBytes, wake: make(chan struct{}, 1)}
}

// acquire waits until a request of size bytes fits, false when ctx ends
// first. A request larger than the whole byte budget (up to MaxPayload)
// runs alone: it waits for every other request to complete.
func (b *budget) acquire(ctx context.Context, size int) bool {
	for {
		b.mu.Lock()
		if b.n < b.maxN && (b.n == 0 || b.bytes+size <= b.maxBytes) {
			b.n++
			b.bytes += size
			b.mu.Unlock()
			return true
		}
		b.mu.Unlock()
		select {
		case <-b.wake:
		case <-ctx.Done():
			return false
		}
	}
}

func (b *budget) release(size int) {
	b.mu.Lock()
	b.n--
	b.bytes -= size
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// transmit runs the transmission phase: one reader (this goroutine) takes
// requests off the wire, in order, and hands each to a worker goroutine,
// bounded by MaxInFlight requests and MaxInFlightBytes of buffers; replies
// go out as requests complete, in any order. A WRITE is executed only once
// its whole payload has been read.
func (c *conn) transmit(ctx context.Context, x *export) error {
	o := &c.s.opts
	bud := newBudget(o.MaxInFlight, o.MaxInFlightBytes)
	var wg sync.WaitGroup
	var rerr error
	clean := false
	acquire := func(n int) bool { return bud.acquire(ctx, n) }
	release := bud.release
	// Requests run on workers that live as long as the connection, so
	// that their stacks, grown once by the volume's read path, are reused
	// rather than grown again for every request. A worker is added when
	// none is idle, up to Options.Workers; beyond that requests wait in
	// order (the budget bounds them). Few workers keep few buffers in use
	// at once, still in the CPU's caches between the volume's read and
	// the socket write, and few threads blocked in system calls.
	type job struct {
		r     request
		buf   []byte
		need  int
		start time.Time // when the request was read whole, if Options.OnRequest is set
	}
	jobs := make(chan job, o.MaxInFlight)
	defer close(jobs)
	var idle atomic.Int32
	workers := 0
	work := func(j job) {
		defer wg.Done()
		defer c.act.end()
		defer release(j.need)
		defer func() {
			if p := recover(); p != nil {
				// A bug here must not take the other clients down:
				// this connection ends and the server reports it.
				c.wmu.Lock()
				if c.werr == nil {
					c.werr = fmt.Errorf("%w: command %d: %v", errInternal, j.r.typ, p)
				}
				c.wmu.Unlock()
				c.nc.Close()
			}
		}()
		err := c.handle(x, j.r, j.buf)
		if on := o.OnRequest; on != nil {
			on(requestEvent(x, j.r, j.start, err))
		}
	}
	worker := func(j job) {
		for {
			work(j)
			idle.Add(1)
			var ok bool
			j, ok = <-jobs
			idle.Add(-1)
			if !ok {
				return
			}
		}
	}
	for {
		var h [nbdproto.RequestSize]byte
		if _, err := io.ReadFull(c.br, h[:]); err != nil {
			if err == io.EOF {
				clean = true // the client hung up between requests
			}
			rerr = err
			break
		}
		if m := binary.BigEndian.Uint32(h[0:]); m != nbdproto.MagicRequest {
			rerr = protoErr("request magic %#x", m)
			break
		}
		r := request{
			flags: binary.BigEndian.Uint16(h[4:]), typ: binary.BigEndian.Uint16(h[6:]),
			cookie: binary.BigEndian.Uint64(h[8:]), off: binary.BigEndian.Uint64(h[16:]),
			length: binary.BigEndian.Uint32(h[24:]),
		}
		if r.typ == nbdproto.CmdDisc {
			clean = true
			break
		}
		// From here the request counts as in flight for the idle rules
		// (limits.go) until its reply is sent: a connection reading a
		// write's payload is not idle.
		if !c.act.begin() {
			rerr = net.ErrClosed // evicted as idle just as the request came
			break
		}
		need := 0
		if (r.typ == nbdproto.CmdRead || r.typ == nbdproto.CmdWrite) && int64(r.length) <= int64(x.maxPay) {
			need = int(r.length)
		}
		if !acquire(need) {
			c.act.end()
			rerr = ctx.Err()
			break
		}
		var buf []byte
		if r.typ == nbdproto.CmdWrite {
			if need != int(r.length) {
				// Refused without allocating its length: the payload is
				// read and dropped in small pieces.
				if _, err := io.CopyN(io.Discard, c.br, int64(r.length)); err != nil {
					release(need)
					c.act.end()
					rerr = err
					break
				}
				var start time.Time
				if o.OnRequest != nil {
					start = time.Now()
				}
				err := c.refuse(r, nbdproto.ErrnoInval, "write of %d bytes, above the maximum of %d", r.length, x.maxPay)
				if on := o.OnRequest; on != nil {
					on(requestEvent(x, r, start, err))
				}
				release(need)
				c.act.end()
				continue
			}
			buf = getBuf(need)
			if _, err := io.ReadFull(c.br, buf); err != nil {
				putBuf(buf)
				release(need)
				c.act.end()
				rerr = err // a partial write is never executed
				break
			}
		}
		j := job{r: r, buf: buf, need: need}
		if o.OnRequest != nil {
			j.start = time.Now()
		}
		wg.Add(1)
		if idle.Load() == 0 && workers < o.Workers {
			workers++
			go worker(j)
		} else {
			jobs <- j // never blocks: the budget holds at most MaxInFlight
		}
	}
	// Let the requests in flight finish and reply, within the drain time.
	c.nc.SetWriteDeadline(time.Now().Add(o.DrainTimeout))
	wg.Wait()
	c.wmu.Lock()
	werr := c.werr
	c.wmu.Unlock()
	switch {
	case errors.Is(werr, errInternal):
		return werr
	case clean || ctx.Err() != nil:
		return nil
	case isTimeout(rerr) || errors.Is(rerr, net.ErrClosed):
		return fmt.Errorf("nbd: reading requests: %w", rerr)
	case errors.Is(rerr, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: connection closed inside a request", ErrProtocol)
	}
	return rerr
}

// handle executes one request and sends its reply; it returns the error
// the reply reported (see RequestEvent.Err).
func (c *conn) handle(x *export, r request, buf []byte) error {
	if buf != nil {
		defer putBuf(buf)
	}
	allowed := uint16(nbdproto.CmdFlagFUA)
	switch r.typ {
	case nbdproto.CmdWriteZeroes:
		allowed |= nbdproto.CmdFlagNoHole | nbdproto.CmdFlagFastZero
	case nbdproto.CmdBlockStatus:
		allowed |= nbdproto.CmdFlagReqOne
	}
	switch {
	case r.typ > nbdproto.CmdBlockStatus || r.typ == nbdproto.CmdCache || r.typ == nbdproto.CmdDisc:
		return c.refuse(r, nbdproto.ErrnoInval, "command %d is not supported", r.typ)
	case r.flags&^allowed != 0:
		return c.refuse(r, nbdproto.ErrnoInval, "command flags %#x not valid for command %d", r.flags, r.typ)
	case x.ReadOnly && (r.typ == nbdproto.CmdWrite || r.typ == nbdproto.CmdTrim || r.typ == nbdproto.CmdWriteZeroes):
		return c.refuse(r, nbdproto.ErrnoPerm, "export %q is read-only", x.Name)
	case r.typ == nbdproto.CmdFlush:
		if r.off != 0 || r.length != 0 {
			return c.refuse(r, nbdproto.ErrnoInval, "flush with offset or length")
		}
		return c.replyResult(r, x.sync())
	}
	// Range checks for every other command.
	if r.off > uint64(x.size) || uint64(r.length) > uint64(x.size)-r.off {
		code := uint32(nbdproto.ErrnoInval)
		if r.typ == nbdproto.CmdWrite || r.typ == nbdproto.CmdWriteZeroes {
			code = nbdproto.ErrnoNoSpc
		}
		return c.refuse(r, code, "request [%d, +%d) beyond the export's %d bytes", r.off, r.length, x.size)
	}
	off, n := int64(r.off), int64(r.length)
	fua := r.flags&nbdproto.CmdFlagFUA != 0
	switch r.typ {
	case nbdproto.CmdRead:
		return c.read(x, r)
	case nbdproto.CmdWrite:
		_, err := x.Volume.WriteAt(buf, off)
		x.wrote()
		if err != nil && isDataError(err) {
			x.failure("write", off, n, err)
		}
		if err == nil && fua {
			err = x.sync()
		}
		return c.replyResult(r, err)
	case nbdproto.CmdTrim:
		return c.replyResult(r, x.trim(off, n))
	case nbdproto.CmdWriteZeroes:
		if r.flags&nbdproto.CmdFlagFastZero != 0 && r.flags&nbdproto.CmdFlagNoHole != 0 {
			return c.refuse(r, nbdproto.ErrnoNotSup, "writing zeros without a hole is no faster than a write")
		}
		err := x.writeZeroes(off, n, r.flags&nbdproto.CmdFlagNoHole != 0)
		if err == nil && fua {
			err = x.sync()
		}
		return c.replyResult(r, err)
	}
	return c.blockStatus(x, r) // the only command left
}

// read answers NBD_CMD_READ. Only verified bytes are sent: on a failure,
// with structured replies, the bytes before the first failing one and an
// error chunk with that offset; without them, EIO alone.
func (c *conn) read(x *export, r request) error {
	if r.length > uint32(x.maxPay) {
		return c.refuse(r, nbdproto.ErrnoInval, "read of %d bytes, above the maximum of %d", r.length, x.maxPay)
	}
	if r.length == 0 {
		return c.replyResult(r, nil)
	}
	buf := getBuf(int(r.length))
	defer putBuf(buf)
	off := int64(r.off)
	n, err := x.Volume.ReadAt(buf, off)
	if err == nil {
		if c.structured {
			h := chunkHeader(r.cookie, nbdproto.ReplyFlagDone, nbdproto.ChunkOffsetData, 8+len(buf))
			binary.BigEndian.PutUint64(h[nbdproto.ChunkHdrSize:], r.off)
			c.send(h, buf)
		} else {
			c.send(simpleHeader(r.cookie, 0), buf)
		}
		return nil
	}
	n = max(0, min(n, len(buf)))
	if isDataError(err) {
		x.failure("read", off+int64(n), int64(len(buf)-n), err)
	}
	code := errCode(err)
	if !c.structured {
		c.send(simpleHeader(r.cookie, code))
		return err
	}
	if !isDataError(err) {
		return c.replyResult(r, err)
	}
	var bufs [][]byte
	if n > 0 {
		h := chunkHeader(r.cookie, 0, nbdproto.ChunkOffsetData, 8+n)
		binary.BigEndian.PutUint64(h[nbdproto.ChunkHdrSize:], r.off)
		bufs = append(bufs, h, buf[:n])
	}
	bufs = append(bufs, errorChunk(r.cookie, code, uint64(off)+uint64(n), true, oneLine(err)))
	c.send(bufs...)
	return err
}

// blockStatus answers NBD_CMD_BLOCK_STATUS for base:allocation.
func (c *conn) blockStatus(x *export, r request) error {
	if !c.meta {
		return c.refuse(r, nbdproto.ErrnoInval, "no metadata context was negotiated")
	}
	if r.length == 0 {
		return c.refuse(r, nbdproto.ErrnoInval, "block status of no bytes")
	}
	sc := statusPool.Get().(*statusScratch)
	exts, err := x.status(int64(r.off), int64(r.length), r.flags&nbdproto.CmdFlagReqOne != 0, sc)
	statusPool.Put(sc)
	if err != nil {
		return c.replyResult(r, err)
	}
	h := chunkHeader(r.cookie, nbdproto.ReplyFlagDone, nbdproto.ChunkBlockStatus, 4+8*len(exts))
	binary.BigEndian.PutUint32(h[nbdproto.ChunkHdrSize:], nbdproto.MetaBaseID)
	body := make([]byte, 8*len(exts))
	for i, e := range exts {
		binary.BigEndian.PutUint32(body[8*i:], e.length)
		binary.BigEndian.PutUint32(body[8*i+4:], e.flags)
	}
	c.send(h[:nbdproto.ChunkHdrSize+4], body)
	return nil
}

var statusPool = sync.Pool{New: func() any { return new(statusScratch) }}

// trim discards the whole blocks of [off, off+n); the partial blocks at
// either end are left alone, as the protocol allows.
func (x *export) trim(off, n int64) error {
	bs := int64(x.bs)
	start := (off + bs - 1) / bs * bs
	end := (off + n) / bs * bs
	if end <= start {
		return nil
	}
	// Discard syncs the volume and is durable when it returns: the
	// committed tuples that BLOCK_STATUS reads show it at once.
	return x.Volume.Discard(start, end-start)
}

// zeros is the source of zero writes; the volume never writes into it.
var zeros = make([]byte, 1<<20)

// writeZeroes makes [off, off+n) read as zeros: whole blocks are
// discarded (unwritten, read back as zeros) unless noHole asks for them
// to be written, and partial blocks are written with zeros through the
// volume (read, verified, modified).
func (x *export) writeZeroes(off, n int64, noHole bool) error {
	bs := int64(x.bs)
	end := off + n
	start, stop := (off+bs-1)/bs*bs, end/bs*bs
	if noHole || stop <= start {
		return x.writeZeroRange(off, end)
	}
	if err := x.writeZeroRange(off, start); err != nil {
		return err
	}
	if err := x.writeZeroRange(stop, end); err != nil {
		return err
	}
	return x.trim(start, stop-start)
}

func (x *export) writeZeroRange(off, end int64) error {
	for off < end {
		k := min(end-off, int64(len(zeros)))
		_, err := x.Volume.WriteAt(zeros[:k], off)
		x.wrote()
		if err != nil {
			if isDataError(err) {
				x.failure("write", off, end-off, err)
			}
			return err
		}
		off += k
	}
	return nil
}

// errCode maps an error of the volume to a protocol error value.
func errCode(err error) uint32 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, device.ErrReadOnly):
		return nbdproto.ErrnoPerm
	case errors.Is(err, device.ErrOutOfRange), errors.Is(err, device.ErrUnaligned):
		return nbdproto.ErrnoInval
	case errors.Is(err, device.ErrClosed):
		return nbdproto.ErrnoShutdown
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), errors.Is(err, syscall.EFBIG):
		return nbdproto.ErrnoNoSpc
	}
	return nbdproto.ErrnoIO
}

// replyResult sends the reply of a request without payload: success, or
// err's code and message. It returns err.
func (c *conn) replyResult(r request, err error) error {
	if err == nil {
		c.send(simpleHeader(r.cookie, 0))
		return nil
	}
	c.replyError(r, errCode(err), 0, false, "%s", oneLine(err))
	return err
}

// replyError sends an error reply: an error chunk with the message when
// structured replies were negotiated (with offset, if withOff), else a
// simple reply.
func (c *conn) replyError(r request, code uint32, off uint64, withOff bool, format string, args ...any) {
	if !c.structured {
		c.send(simpleHeader(r.cookie, code))
		return
	}
	msg := fmt.Sprintf(format, args...)
	if withOff {
		c.send(errorChunk(r.cookie, code, off, true, msg))
		return
	}
	if len(msg) > nbdproto.MaxStringBytes {
		msg = msg[:nbdproto.MaxStringBytes]
	}
	h := chunkHeader(r.cookie, nbdproto.ReplyFlagDone, nbdproto.ChunkError, 6+len(msg))
	binary.BigEndian.PutUint32(h[nbdproto.ChunkHdrSize:], code)
	binary.BigEndian.PutUint16(h[nbdproto.ChunkHdrSize+4:], uint16(len(msg)))
	c.send(h[:nbdproto.ChunkHdrSize+6], []byte(msg))
}

// errorChunk builds an NBD_REPLY_TYPE_ERROR_OFFSET chunk.
func errorChunk(cookie uint64, code uint32, off uint64, done bool, msg string) []byte {
	if len(msg) > nbdproto.MaxStringBytes {
		msg = msg[:nbdproto.MaxStringBytes]
	}
	var fl uint16
	if done {
		fl = nbdproto.ReplyFlagDone
	}
	b := make([]byte, nbdproto.ChunkHdrSize+6+len(msg)+8)
	putChunkHeader(b, cookie, fl, nbdproto.ChunkErrorOffset, 6+len(msg)+8)
	binary.BigEndian.PutUint32(b[nbdproto.ChunkHdrSize:], code)
	binary.BigEndian.PutUint16(b[nbdproto.ChunkHdrSize+4:], uint16(len(msg)))
	copy(b[nbdproto.ChunkHdrSize+6:], msg)
	binary.BigEndian.PutUint64(b[nbdproto.ChunkHdrSize+6+len(msg):], off)
	return b
}

// chunkHeader returns a structured chunk header with 8 spare bytes after it
// (for an offset or the start of the payload).
func chunkHeader(cookie uint64, flags, typ uint16, length int) []byte {
	b := make([]byte, nbdproto.ChunkHdrSize+8)
	putChunkHeader(b, cookie, flags, typ, length)
	return b
}

func putChunkHeader(b []byte, cookie uint64, flags, typ uint16, length int) {
	binary.BigEndian.PutUint32(b[0:], nbdproto.MagicStructured)
	binary.BigEndian.PutUint16(b[4:], flags)
	binary.BigEndian.PutUint16(b[6:], typ)
	binary.BigEndian.PutUint64(b[8:], cookie)
	binary.BigEndian.PutUint32(b[16:], uint32(length))
}

func simpleHeader(cookie uint64, code uint32) []byte {
	b := make([]byte, nbdproto.SimpleSize)
	binary.BigEndian.PutUint32(b[0:], nbdproto.MagicSimple)
	binary.BigEndian.PutUint32(b[4:], code)
	binary.BigEndian.PutUint64(b[8:], cookie)
	return b
}

// send writes one whole reply (its pieces in one writev where the
// connection allows). A failed write closes the connection, which ends
// the reader; later replies are dropped.
func (c *conn) send(bufs ...[]byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return
	}
	nb := net.Buffers(bufs)
	if _, err := nb.WriteTo(c.nc); err != nil {
		c.werr = err
		c.nc.Close()
	}
}

// oneLine is err's message on one line, for error chunks.
func oneLine(err error) string {
	b := []byte(err.Error())
	for i, ch := range b {
		if ch == '\n' || ch == '\r' {
			b[i] = ' '
		}
	}
	return string(b)
}

// Buffers for reads and writes come from pools by power-of-two size class,
// from 4 KiB up, so that a connection's steady state allocates nothing.
const minClass = 12

var bufPools [29]sync.Pool

func sizeClass(n int) int {
	if n <= 1<<minClass {
		return minClass
	}
	return bits.Len(uint(n - 1))
}

func getBuf(n int) []byte {
	cl := sizeClass(n)
	if cl >= len(bufPools) {
		return make([]byte, n)
	}
	if p, ok := bufPools[cl].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, 1<<cl)
}

func putBuf(b []byte) {
	cl := sizeClass(cap(b))
	if cap(b) != 1<<cl || cl >= len(bufPools) {
		return
	}
	b = b[:cap(b)]
	bufPools[cl].Put(&b)
}

// requestEvent describes r, read whole at start and answered with err, for
// Options.OnRequest.
func requestEvent(x *export, r request, start time.Time, err error) RequestEvent {
	return RequestEvent{Export: x.Name, Op: Op(r.typ), Offset: int64(r.off), Length: int64(r.length),
		Duration: time.Since(start), Err: err}
}
