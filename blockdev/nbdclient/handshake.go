package nbdclient

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"unicode"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"
)

// negotiated is what the handshake learned of the export.
type negotiated struct {
	size                   uint64
	flags                  uint16
	haveBS                 bool // NBD_INFO_BLOCK_SIZE received
	minBS, prefBS, maxBS   uint32
	exportName, tlsVersion string
}

// negotiate runs the fixed newstyle negotiation on nc: NBD_OPT_STARTTLS
// first when tlsCfg is set (an error reply or a failed TLS handshake ends
// it: there is no falling back to plaintext), then NBD_OPT_GO asking for
// NBD_INFO_BLOCK_SIZE, or NBD_OPT_EXPORT_NAME if the server does not know
// NBD_OPT_GO. It returns the connection to use from then on (nc, or the
// TLS connection over it). The caller bounds it with nc's deadline.
func negotiate(ctx context.Context, nc net.Conn, t *target, tlsCfg *tls.Config) (net.Conn, negotiated, error) {
	var ng negotiated
	var g [18]byte
	if _, err := io.ReadFull(nc, g[:]); err != nil {
		return nil, ng, readErr("the greeting", err)
	}
	if m := binary.BigEndian.Uint64(g[0:]); m != nbdproto.MagicInit {
		return nil, ng, protoErr("not an NBD server: its greeting begins %#016x", m)
	}
	switch m := binary.BigEndian.Uint64(g[8:]); m {
	case nbdproto.MagicOpt:
	case nbdproto.MagicOldstyle:
		return nil, ng, protoErr("the server speaks oldstyle negotiation, which this client does not")
	default:
		return nil, ng, protoErr("greeting magic %#016x", m)
	}
	hf := binary.BigEndian.Uint16(g[16:])
	if hf&nbdproto.FlagFixedNewstyle == 0 {
		// Plain newstyle allows NBD_OPT_EXPORT_NAME alone: no TLS, no
		// block sizes, no error replies. No server of this century.
		return nil, ng, protoErr("the server does not speak fixed newstyle negotiation")
	}
	cf := uint32(nbdproto.ClientFixedNewstyle)
	noZeroes := hf&nbdproto.FlagNoZeroes != 0
	if noZeroes {
		cf |= nbdproto.ClientNoZeroes
	}
	if err := write(nc, binary.BigEndian.AppendUint32(nil, cf)); err != nil {
		return nil, ng, err
	}
	conn := nc
	if tlsCfg != nil {
		if err := sendOption(conn, nbdproto.OptStartTLS, nil); err != nil {
			return nil, ng, err
		}
		typ, data, err := readOptReply(conn, nbdproto.OptStartTLS)
		if err != nil {
			return nil, ng, err
		}
		if typ != nbdproto.RepAck {
			if typ&nbdproto.RepFlagError != 0 {
				abort(conn)
				return nil, ng, &OptionError{URL: t.redacted, Option: "NBD_OPT_STARTTLS", Reply: typ,
					Message: message(data) + " (the URL requires TLS, so the client does not go on in plaintext)"}
			}
			return nil, ng, protoErr("reply type %#x to NBD_OPT_STARTTLS", typ)
		}
		tc := tls.Client(nc, tlsCfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, ng, fmt.Errorf("%w with %s: %w", ErrTLS, t.redacted, err)
		}
		conn = tc
		ng.tlsVersion = tls.VersionName(tc.ConnectionState().Version)
	}
	if err := goExport(conn, t, &ng); err != nil {
		if err != errNoOptGo {
			// In TLS 1.3 the server checks the client's certificate
			// after the client's handshake has returned: its refusal
			// comes as an alert on the first read, or as the
			// connection closed under the first write or read.
			if tlsCfg != nil && !errors.Is(err, ErrProtocol) && !errors.Is(err, ErrRefused) && !errors.Is(err, ErrTimeout) {
				return nil, ng, fmt.Errorf("%w with %s: the server ended the session after the TLS handshake, before answering NBD_OPT_GO (did it refuse the client's certificate?): %w", ErrTLS, t.redacted, err)
			}
			return nil, ng, err
		}
		if err := exportNameOpt(conn, t, noZeroes, &ng); err != nil {
			return nil, ng, err
		}
	}
	return conn, ng, nil
}

// errNoOptGo reports a server that answered NBD_OPT_GO with
// NBD_REP_ERR_UNSUP.
var errNoOptGo = errors.New("nbdclient: NBD_OPT_GO unsupported")

// goExport sends NBD_OPT_GO for t's export with one information request,
// NBD_INFO_BLOCK_SIZE, and reads the replies up to the final one.
func goExport(conn net.Conn, t *target, ng *negotiated) error {
	var data []byte
	data = binary.BigEndian.AppendUint32(data, uint32(len(t.export)))
	data = append(data, t.export...)
	data = binary.BigEndian.AppendUint16(data, 1)
	data = binary.BigEndian.AppendUint16(data, nbdproto.InfoBlockSize)
	if err := sendOption(conn, nbdproto.OptGo, data); err != nil {
		return err
	}
	gotExport := false
	for range maxOptReplies {
		typ, data, err := readOptReply(conn, nbdproto.OptGo)
		if err != nil {
			return err
		}
		switch {
		case typ == nbdproto.RepInfo:
			if len(data) < 2 {
				return protoErr("NBD_REP_INFO of %d bytes", len(data))
			}
			switch it := binary.BigEndian.Uint16(data); it {
			case nbdproto.InfoExport:
				if len(data) != 12 {
					return protoErr("NBD_INFO_EXPORT of %d bytes, want 12", len(data))
				}
				ng.size, ng.flags = binary.BigEndian.Uint64(data[2:]), binary.BigEndian.Uint16(data[10:])
				gotExport = true
			case nbdproto.InfoBlockSize:
				if len(data) != 14 {
					return protoErr("NBD_INFO_BLOCK_SIZE of %d bytes, want 14", len(data))
				}
				ng.haveBS = true
				ng.minBS = binary.BigEndian.Uint32(data[2:])
				ng.prefBS = binary.BigEndian.Uint32(data[6:])
				ng.maxBS = binary.BigEndian.Uint32(data[10:])
			}
			// Other information types are ignored, as the protocol asks.
		case typ == nbdproto.RepAck:
			if !gotExport {
				return protoErr("NBD_OPT_GO acknowledged without NBD_INFO_EXPORT")
			}
			ng.exportName = t.export
			return nil
		case typ == nbdproto.RepErrUnsup:
			return errNoOptGo
		case typ&nbdproto.RepFlagError != 0:
			abort(conn)
			return &OptionError{URL: t.redacted, Option: "NBD_OPT_GO", Reply: typ, Message: message(data)}
		default:
			return protoErr("reply type %#x to NBD_OPT_GO", typ)
		}
	}
	return protoErr("more than %d replies to NBD_OPT_GO", maxOptReplies)
}

// exportNameOpt enters transmission with NBD_OPT_EXPORT_NAME, for servers
// without NBD_OPT_GO. A server that refuses the export can only close the
// connection.
func exportNameOpt(conn net.Conn, t *target, noZeroes bool, ng *negotiated) error {
	if err := sendOption(conn, nbdproto.OptExportName, []byte(t.export)); err != nil {
		return err
	}
	n := 10
	if !noZeroes {
		n += 124
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(conn, b); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: %s closed the connection after NBD_OPT_EXPORT_NAME: an unknown export, or one that needs TLS", ErrRefused, t.redacted)
		}
		return readErr("the reply to NBD_OPT_EXPORT_NAME", err)
	}
	ng.size, ng.flags = binary.BigEndian.Uint64(b[0:]), binary.BigEndian.Uint16(b[8:])
	ng.exportName = t.export
	return nil
}

// sendOption sends one option.
func sendOption(conn net.Conn, opt uint32, data []byte) error {
	var msg []byte
	msg = binary.BigEndian.AppendUint64(msg, nbdproto.MagicOpt)
	msg = binary.BigEndian.AppendUint32(msg, opt)
	msg = binary.BigEndian.AppendUint32(msg, uint32(len(data)))
	return write(conn, append(msg, data...))
}

// readOptReply reads one reply to opt. Its data is read into memory only
// up to maxOptReply bytes; a longer reply is a protocol error.
func readOptReply(conn net.Conn, opt uint32) (typ uint32, data []byte, err error) {
	var h [nbdproto.OptReplySize]byte
	if _, err := io.ReadFull(conn, h[:]); err != nil {
		return 0, nil, readErr("an option reply", err)
	}
	if m := binary.BigEndian.Uint64(h[0:]); m != nbdproto.MagicOptReply {
		return 0, nil, protoErr("option reply magic %#016x", m)
	}
	if o := binary.BigEndian.Uint32(h[8:]); o != opt {
		return 0, nil, protoErr("reply to option %d while option %d was asked", o, opt)
	}
	typ = binary.BigEndian.Uint32(h[12:])
	n := binary.BigEndian.Uint32(h[16:])
	if n > maxOptReply {
		return 0, nil, protoErr("option reply of %d bytes, more than the %d this client accepts", n, maxOptReply)
	}
	data = make([]byte, n)
	if _, err := io.ReadFull(conn, data); err != nil {
		return 0, nil, readErr("an option reply", err)
	}
	return typ, data, nil
}

// abort ends the negotiation the way the protocol asks of a client, with
// NBD_OPT_ABORT (its reply is not awaited); the caller closes the
// connection.
func abort(conn net.Conn) { _ = sendOption(conn, nbdproto.OptAbort, nil) }

func write(conn net.Conn, b []byte) error {
	_, err := conn.Write(b)
	var ne net.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.ErrClosedPipe):
		return fmt.Errorf("%w: the server closed the connection during the negotiation: %w", ErrDisconnected, err)
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("%w: negotiation: %w", ErrTimeout, err)
	}
	return fmt.Errorf("nbdclient: negotiating: %w", err)
}

// readErr describes a failed read of what during the negotiation.
func readErr(what string, err error) error {
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: the server closed the connection while sending %s", ErrDisconnected, what)
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("%w: negotiation, waiting for %s: %w", ErrTimeout, what, err)
	}
	return fmt.Errorf("nbdclient: negotiating, reading %s: %w", what, err)
}

// message is the server's text of an error reply, made safe to print: at
// most 4096 bytes, control characters replaced.
func message(b []byte) string {
	if len(b) > nbdproto.MaxStringBytes {
		b = b[:nbdproto.MaxStringBytes]
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(string(b), "?"))
}
