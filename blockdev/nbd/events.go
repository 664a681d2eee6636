package nbd

import (
	"errors"
	"time"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"
)

// Events for monitoring (Options.OnRequest, Options.OnConn). The hooks are
// called synchronously on the connection's goroutines, so they must be
// quick and safe for concurrent use; unset, they cost a nil check.

// ErrBadRequest is the RequestEvent.Err of a request the server refused
// without executing it: an unknown command or flag, a write to a
// read-only export, a range beyond the export, a payload above the
// maximum, FAST_ZERO with NO_HOLE, BLOCK_STATUS without a metadata
// context. The client got EINVAL, EPERM, ENOSPC or ENOTSUP.
var ErrBadRequest = errors.New("nbd: request refused")

// Op is a transmission command (NBD_CMD_*), numbered as on the wire.
type Op uint16

// The commands a client may send; others are refused (ErrBadRequest)
// and reported with their number.
const (
	OpRead        Op = nbdproto.CmdRead
	OpWrite       Op = nbdproto.CmdWrite
	OpFlush       Op = nbdproto.CmdFlush
	OpTrim        Op = nbdproto.CmdTrim
	OpCache       Op = nbdproto.CmdCache
	OpWriteZeroes Op = nbdproto.CmdWriteZeroes
	OpBlockStatus Op = nbdproto.CmdBlockStatus
)

var opNames = [...]string{OpRead: "read", OpWrite: "write", nbdproto.CmdDisc: "disc", OpFlush: "flush", OpTrim: "trim",
	OpCache: "cache", OpWriteZeroes: "write_zeroes", OpBlockStatus: "block_status"}

// String returns the command's name in lower case ("read",
// "write_zeroes"), or "other" for a number the protocol does not define.
func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return "other"
}

// A RequestEvent is one request of the transmission phase, reported to
// Options.OnRequest once its reply has been sent. It is passed by value
// and holds nothing allocated for it.
type RequestEvent struct {
	Export string // the export's name
	Op     Op
	// Offset and Length are the request's range as the client sent it
	// (Length is the payload of a READ or WRITE).
	Offset, Length int64
	// Duration runs from the request read whole (a WRITE's payload
	// included) to its reply written to the socket: waiting for one of the
	// connection's workers, executing, replying.
	Duration time.Duration
	// Err is nil when the reply reported success. Otherwise it is the
	// volume's error (matching dif.ErrIntegrity for a verification
	// failure, which Options.OnFailure also gets), or ErrBadRequest.
	Err error
}

// ConnEventKind says what a ConnEvent reports.
type ConnEventKind uint8

const (
	// ConnEnter: the connection finished negotiating and holds one of
	// the export's transmission slots (Options.MaxConnections).
	ConnEnter ConnEventKind = iota + 1
	// ConnLeave: a connection reported by ConnEnter ended, for whatever
	// reason; each ConnEnter is followed by exactly one ConnLeave.
	ConnLeave
	// ConnFull: a client asked for the export while it had
	// Options.MaxConnections connections, none idle for IdleTimeout. It
	// got NBD_REP_ERR_POLICY (NBD_OPT_GO) and may ask again, or its
	// connection was closed (NBD_OPT_EXPORT_NAME, which cannot be
	// refused).
	ConnFull
)

// A ConnEvent is a change in a connection's standing with an export,
// reported to Options.OnConn.
type ConnEvent struct {
	Export string
	Remote string // the client's address (net.Conn.RemoteAddr)
	Kind   ConnEventKind
}

// refuse answers a request the server does not execute with code (and a
// message for structured replies); it returns ErrBadRequest for
// Options.OnRequest.
func (c *conn) refuse(r request, code uint32, format string, args ...any) error {
	c.replyError(r, code, 0, false, format, args...)
	return ErrBadRequest
}

// connEvent reports kind of c with x to Options.OnConn, if set.
func (c *conn) connEvent(x *export, kind ConnEventKind) {
	if on := c.s.opts.OnConn; on != nil {
		on(ConnEvent{Export: x.Name, Remote: c.raw.RemoteAddr().String(), Kind: kind})
	}
}
