package nbdclient

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"
)

// fakeServer is a server written by the test, for what real servers do
// not do: a configurable negotiation, then whatever the test sends. It
// runs on one end of a net.Pipe, the device on the other.
type fakeServer struct {
	hsFlags  uint16   // handshake flags; 0 means fixed newstyle and no zeroes
	size     uint64   // the export's size
	flags    uint16   // transmission flags (HAS_FLAGS is added)
	bs       []uint32 // NBD_INFO_BLOCK_SIZE: minimum, preferred, maximum; nil: not sent
	noGo     bool     // NBD_OPT_GO gets NBD_REP_ERR_UNSUP
	rawFlags bool     // send flags exactly, without HAS_FLAGS
	options  []uint32 // the options received, in order
}

var errAborted = errors.New("fake: client sent NBD_OPT_ABORT")

// handshake runs the server's side of the negotiation.
func (fs *fakeServer) handshake(c net.Conn) error {
	hf := fs.hsFlags
	if hf == 0 {
		hf = nbdproto.FlagFixedNewstyle | nbdproto.FlagNoZeroes
	}
	if _, err := c.Write(cat(u64(nbdproto.MagicInit), u64(nbdproto.MagicOpt), u16(hf))); err != nil {
		return err
	}
	var cf [4]byte
	if _, err := io.ReadFull(c, cf[:]); err != nil {
		return err
	}
	noZeroes := binary.BigEndian.Uint32(cf[:])&nbdproto.ClientNoZeroes != 0
	flags := fs.flags | nbdproto.FlagHasFlags
	if fs.rawFlags {
		flags = fs.flags
	}
	for {
		var h [16]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return err
		}
		opt := binary.BigEndian.Uint32(h[8:])
		data := make([]byte, binary.BigEndian.Uint32(h[12:]))
		if _, err := io.ReadFull(c, data); err != nil {
			return err
		}
		fs.options = append(fs.options, opt)
		switch opt {
		case nbdproto.OptAbort:
			return errAborted
		case nbdproto.OptExportName:
			b := cat(u64(fs.size), u16(flags))
			if !noZeroes {
				b = append(b, make([]byte, 124)...)
			}
			_, err := c.Write(b)
			return err
		case nbdproto.OptGo:
			if fs.noGo {
				if err := optReply(c, opt, nbdproto.RepErrUnsup, nil); err != nil {
					return err
				}
				continue
			}
			if err := optReply(c, opt, nbdproto.RepInfo, cat(u16(nbdproto.InfoExport), u64(fs.size), u16(flags))); err != nil {
				return err
			}
			if fs.bs != nil {
				if err := optReply(c, opt, nbdproto.RepInfo, cat(u16(nbdproto.InfoBlockSize), u32(fs.bs[0]), u32(fs.bs[1]), u32(fs.bs[2]))); err != nil {
					return err
				}
			}
			return optReply(c, opt, nbdproto.RepAck, nil)
		default:
			if err := optReply(c, opt, nbdproto.RepErrPolicy, []byte("not here")); err != nil {
				return err
			}
		}
	}
}

func optReply(c net.Conn, opt, typ uint32, data []byte) error {
	_, err := c.Write(cat(u64(nbdproto.MagicOptReply), u32(opt), u32(typ), u32(uint32(len(data))), data))
	return err
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
func u16(v uint16) []byte        { return binary.BigEndian.AppendUint16(nil, v) }
func u32(v uint32) []byte        { return binary.BigEndian.AppendUint32(nil, v) }
func u64(v uint64) []byte        { return binary.BigEndian.AppendUint64(nil, v) }

const fakeURL = "nbd+unix:///disk?socket=/fake"

// socketPair returns the two ends of a connected unix socket pair:
// unlike net.Pipe, a write returns once the kernel has buffered it, as on
// a real connection.
func socketPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	return conns[0], conns[1]
}

// openFake negotiates with fs over a socket pair and returns the device
// and the server's end, in the transmission phase. The server's end is
// closed when the test ends.
func openFake(t testing.TB, fs *fakeServer, rawURL string, opts Options) (*Device, net.Conn, error) {
	t.Helper()
	sc, cc := socketPair(t)
	t.Cleanup(func() { sc.Close() })
	hs := make(chan error, 1)
	go func() { hs <- fs.handshake(sc) }()
	d, err := openPipe(t.Context(), cc, rawURL, opts)
	if err != nil {
		sc.Close()
		<-hs
		return nil, nil, err
	}
	if err := <-hs; err != nil {
		t.Fatalf("fake server handshake: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d, sc, nil
}

// openPipe opens a device over nc as Open would over its connection.
func openPipe(ctx context.Context, nc net.Conn, rawURL string, opts Options) (*Device, error) {
	if opts.DialTimeout == 0 {
		opts.DialTimeout = 10 * time.Second
	}
	t, cfg, err := prepare(rawURL, &opts)
	if err != nil {
		nc.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer cancel()
	return openConn(ctx, nc, t, cfg, opts)
}

// fakeReq is a request as the server reads it.
type fakeReq struct {
	flags, typ uint16
	cookie     uint64
	off        uint64
	n          uint32
	payload    []byte
}

func readReq(c net.Conn) (fakeReq, error) {
	var h [nbdproto.RequestSize]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return fakeReq{}, err
	}
	if m := binary.BigEndian.Uint32(h[0:]); m != nbdproto.MagicRequest {
		return fakeReq{}, fmt.Errorf("request magic %#x", m)
	}
	r := fakeReq{flags: binary.BigEndian.Uint16(h[4:]), typ: binary.BigEndian.Uint16(h[6:]),
		cookie: binary.BigEndian.Uint64(h[8:]), off: binary.BigEndian.Uint64(h[16:]), n: binary.BigEndian.Uint32(h[24:])}
	if r.typ == nbdproto.CmdWrite {
		r.payload = make([]byte, r.n)
		if _, err := io.ReadFull(c, r.payload); err != nil {
			return r, err
		}
	}
	return r, nil
}

// simpleReply is a simple reply's bytes.
func simpleReply(cookie uint64, errno uint32, data []byte) []byte {
	return cat(u32(nbdproto.MagicSimple), u32(errno), u64(cookie), data)
}

// serveMem answers requests from mem, like a correct server, sending each
// request on log (if not nil), until the connection ends or a DISC.
func serveMem(c net.Conn, mem []byte, log chan<- fakeReq) {
	for {
		r, err := readReq(c)
		if err != nil {
			return
		}
		if log != nil {
			log <- r
		}
		end := r.off + uint64(r.n)
		var out []byte
		switch {
		case r.typ == nbdproto.CmdDisc:
			c.Close()
			return
		case end > uint64(len(mem)):
			out = simpleReply(r.cookie, nbdproto.ErrnoInval, nil)
		case r.typ == nbdproto.CmdRead:
			out = simpleReply(r.cookie, 0, mem[r.off:end])
		case r.typ == nbdproto.CmdWrite:
			copy(mem[r.off:], r.payload)
			out = simpleReply(r.cookie, 0, nil)
		case r.typ == nbdproto.CmdWriteZeroes:
			clear(mem[r.off:end])
			out = simpleReply(r.cookie, 0, nil)
		default:
			out = simpleReply(r.cookie, 0, nil)
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}
