package nbdclient

import (
	"errors"
	"fmt"
	"strconv"
	"syscall"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"

	"github.com/difctl/difctl/blockdev/device"
)

var (
	// ErrBadURL matches every *URLError.
	ErrBadURL = errors.New("nbdclient: bad NBD URL")
	// ErrDisconnected matches every error of a connection that has ended
	// (a *ConnError: the device is unusable from then on), and a server
	// that closed the connection during the negotiation.
	ErrDisconnected = errors.New("nbdclient: disconnected")
	// ErrProtocol matches every *ProtocolError.
	ErrProtocol = errors.New("nbdclient: protocol violation by the server")
	// ErrTimeout reports a request that had no reply within
	// Options.RequestTimeout, or a negotiation that did not finish within
	// Options.DialTimeout.
	ErrTimeout = errors.New("nbdclient: timed out")
	// ErrRefused matches every *OptionError: the server refused the
	// negotiation (an unknown export, TLS required or refused, ...).
	ErrRefused = errors.New("nbdclient: refused by the server")
	// ErrBadExport matches every *ExportError.
	ErrBadExport = errors.New("nbdclient: export unusable as a device")
	// ErrTLS reports a TLS handshake that failed; the error wraps the
	// cause from crypto/tls (a *tls.CertificateVerificationError for a
	// server certificate that does not verify, for example).
	ErrTLS = errors.New("nbdclient: TLS handshake failed")
)

// A URLError is a URL that Open cannot use. URL is the URL with any
// credentials removed.
type URLError struct {
	URL    string
	Reason string
}

func (e *URLError) Error() string {
	return fmt.Sprintf("nbdclient: bad NBD URL %q: %s", e.URL, e.Reason)
}

// Unwrap returns ErrBadURL.
func (e *URLError) Unwrap() error { return ErrBadURL }

// A ProtocolError is something the server sent that the protocol does not
// allow (a bad magic number, a reply to no request, a malformed option
// reply, ...). It ends the connection.
type ProtocolError struct {
	Msg string
}

func (e *ProtocolError) Error() string {
	return "nbdclient: protocol violation by the server: " + e.Msg
}

// Is reports whether target is ErrProtocol.
func (e *ProtocolError) Is(target error) bool { return target == ErrProtocol }

func protoErr(format string, args ...any) error {
	return &ProtocolError{Msg: fmt.Sprintf(format, args...)}
}

// A ConnError ends a connection: the server closed it or broke the
// protocol (Err is a *ProtocolError), a request timed out (Err matches
// ErrTimeout), the network failed, or the server is shutting down (Err is
// a *ReplyError with NBD_ESHUTDOWN). Every request pending then, and every
// later call but Close, fails with it.
//
// It matches ErrDisconnected, and device.ErrClosed too: a device whose
// connection is gone serves nothing more, as after Close, and a verifier
// must stop (blockdev/internal/check.Fatal) rather than record every block
// it could not read as unreadable.
type ConnError struct {
	URL string
	Err error
}

func (e *ConnError) Error() string {
	return fmt.Sprintf("nbdclient: connection to %s lost: %v", e.URL, e.Err)
}

func (e *ConnError) Unwrap() error { return e.Err }

// Is reports whether target is ErrDisconnected or device.ErrClosed.
func (e *ConnError) Is(target error) bool {
	return target == ErrDisconnected || target == device.ErrClosed
}

// A ReplyError is an error reply of the server to a request. Errno is the
// protocol's error value (NBD_EIO is 5, as EIO on Linux). The device's
// methods return it inside a *device.IOError naming the range. It unwraps
// to the matching syscall.Errno (syscall.EIO, ...), and an error value the
// protocol does not define to syscall.EINVAL, as the protocol asks.
type ReplyError struct {
	Op    string // the request: "read", "write", "flush", "write-zeroes", "trim"
	Errno uint32
}

func (e *ReplyError) Error() string {
	return fmt.Sprintf("nbdclient: server failed the %s: %s", e.Op, errnoName(e.Errno))
}

// Unwrap returns the syscall.Errno of e.Errno.
func (e *ReplyError) Unwrap() error {
	switch e.Errno {
	case nbdproto.ErrnoPerm:
		return syscall.EPERM
	case nbdproto.ErrnoIO:
		return syscall.EIO
	case nbdproto.ErrnoNoMem:
		return syscall.ENOMEM
	case nbdproto.ErrnoNoSpc:
		return syscall.ENOSPC
	case nbdproto.ErrnoOverflow:
		return syscall.EOVERFLOW
	case nbdproto.ErrnoNotSup:
		return syscall.ENOTSUP
	case nbdproto.ErrnoShutdown:
		return syscall.ESHUTDOWN
	}
	return syscall.EINVAL
}

func errnoName(n uint32) string {
	switch n {
	case nbdproto.ErrnoPerm:
		return "NBD_EPERM (operation not permitted)"
	case nbdproto.ErrnoIO:
		return "NBD_EIO (input/output error)"
	case nbdproto.ErrnoNoMem:
		return "NBD_ENOMEM (cannot allocate memory)"
	case nbdproto.ErrnoInval:
		return "NBD_EINVAL (invalid argument)"
	case nbdproto.ErrnoNoSpc:
		return "NBD_ENOSPC (no space left on device)"
	case nbdproto.ErrnoOverflow:
		return "NBD_EOVERFLOW (value too large)"
	case nbdproto.ErrnoNotSup:
		return "NBD_ENOTSUP (operation not supported)"
	case nbdproto.ErrnoShutdown:
		return "NBD_ESHUTDOWN (server shutting down)"
	}
	return "error value " + strconv.FormatUint(uint64(n), 10) + " (undefined, taken as NBD_EINVAL)"
}

// An OptionError is the server's refusal of an option of the negotiation:
// Reply is the NBD_REP_ERR_* value, Message what the server said (cut to
// 4096 bytes, control characters replaced).
type OptionError struct {
	URL     string
	Option  string // "NBD_OPT_STARTTLS", "NBD_OPT_GO", ...
	Reply   uint32
	Message string
}

func (e *OptionError) Error() string {
	s := fmt.Sprintf("nbdclient: %s refused %s with %s", e.URL, e.Option, repName(e.Reply))
	if e.Message != "" {
		s += ": " + e.Message
	}
	switch e.Reply {
	case nbdproto.RepErrTLSReqd:
		s += " (the server requires TLS: use an nbds:// or nbds+unix:// URL)"
	case nbdproto.RepErrUnknown:
		s += " (the export name is the URL's path after its first slash)"
	}
	return s
}

// Is reports whether target is ErrRefused.
func (e *OptionError) Is(target error) bool { return target == ErrRefused }

func repName(t uint32) string {
	switch t {
	case nbdproto.RepErrUnsup:
		return "NBD_REP_ERR_UNSUP"
	case nbdproto.RepErrPolicy:
		return "NBD_REP_ERR_POLICY"
	case nbdproto.RepErrInvalid:
		return "NBD_REP_ERR_INVALID"
	case nbdproto.RepErrPlatform:
		return "NBD_REP_ERR_PLATFORM"
	case nbdproto.RepErrTLSReqd:
		return "NBD_REP_ERR_TLS_REQD"
	case nbdproto.RepErrUnknown:
		return "NBD_REP_ERR_UNKNOWN"
	case nbdproto.RepErrShutdown:
		return "NBD_REP_ERR_SHUTDOWN"
	case nbdproto.RepErrBlockSizeReqd:
		return "NBD_REP_ERR_BLOCK_SIZE_REQD"
	case nbdproto.RepErrTooBig:
		return "NBD_REP_ERR_TOO_BIG"
	}
	return fmt.Sprintf("reply type %#x", t)
}

// An ExportError is an export the device cannot present: a size that is
// not a multiple of the logical block size, block size constraints
// outside the protocol's rules, or a maximum request smaller than a block.
type ExportError struct {
	URL    string
	Reason string
}

func (e *ExportError) Error() string {
	return fmt.Sprintf("nbdclient: export %s: %s", e.URL, e.Reason)
}

// Is reports whether target is ErrBadExport.
func (e *ExportError) Is(target error) bool { return target == ErrBadExport }
