// Package nbdclient is a Network Block Device client whose [Device] is a
// [device.Device]: an NBD export (served by difctl serve, qemu-nbd, nbdkit,
// nbd-server) used as a local disk, as a mirror leg or a repair source.
//
// # Why a client of our own
//
// A device must transfer all or fail, report the server's errors as typed
// errors, fail (never hang or panic) when the server misbehaves, keep
// memory bounded whatever the server sends, make Sync mean durable, and
// make Discard read back as zeros; and difctl needs TLS. The Go module
// list this project can draw on names no NBD module, and the public ones
// do not fit: libguestfs.org/libnbd is cgo bindings of libnbd;
// pojntfx/go-nbd's client hands a socket to the Linux kernel's nbd driver
// rather than doing I/O itself, and has no TLS; go-volumes/nbd (a young
// module with no tagged release) has no TLS nor block size negotiation,
// and discards with NBD_CMD_TRIM, which promises no zeros. So this package
// implements the client side of the protocol from its specification
// (NetworkBlockDevice/nbd, doc/proto.md and doc/uri.md), in pure Go.
//
// # URLs
//
//	nbd://HOST[:PORT]/[EXPORT]                  TCP, port 10809 by default
//	nbds://HOST[:PORT]/[EXPORT]                 TCP, TLS required
//	nbd+unix:///[EXPORT]?socket=PATH            unix socket
//	nbds+unix:///[EXPORT]?socket=PATH           unix socket, TLS required
//
// The export name is the path after the first slash (percent-decoded; an
// empty name is the server's default export). TLS URLs may carry
// tls-hostname=NAME (the name the server's certificate must bear, which a
// unix-socket URL needs), tls-certificates=DIR (ca-cert.pem, and
// client-cert.pem with client-key.pem, as qemu and libnbd name them),
// tls-type=x509 and tls-verify-peer=1. Anything else (an unknown
// parameter, tls-verify-peer=0, a password) is refused with a *URLError
// rather than ignored. [Device.String] and every error print the URL
// without its userinfo.
//
// # What it speaks
//
//   - Fixed newstyle negotiation. With a TLS URL, NBD_OPT_STARTTLS comes
//     first; an error reply or a failed handshake ends the connection
//     (there is no falling back to plaintext), and a plaintext URL never
//     starts TLS (TLS options with one are an error).
//   - NBD_OPT_GO with an NBD_INFO_BLOCK_SIZE request, so the client
//     commits to the server's block sizes; NBD_OPT_EXPORT_NAME only when
//     the server answers NBD_OPT_GO with NBD_REP_ERR_UNSUP.
//   - Simple replies only. Structured replies are not negotiated: the
//     device transfers all or fails, so their partial reads would be
//     thrown away, and every server must speak simple replies. A server
//     that fails a read after sending its reply header must then drop the
//     connection, which the client reports as a *ConnError.
//   - READ, WRITE, FLUSH, WRITE_ZEROES (Discard), TRIM (Trim) and DISC,
//     many requests in flight on the one connection with distinct
//     cookies, one goroutine reading the replies and handing each to its
//     caller.
//
// # Geometry
//
// LogicalBlockSize is the largest of 512, the server's minimum block size
// and [Options.BlockSize]; the export's size must be a multiple of it (an
// *ExportError at Open otherwise). ReadAt and WriteAt take requests
// aligned to the server's minimum (512 when it advertises none, the
// protocol's advice) and refuse others with device.ErrUnaligned rather
// than read-modify-write behind the caller's back. PhysicalBlockSize is
// the server's preferred block size, capped at 64 KiB. Requests longer
// than the server's maximum, or [Options.MaxPayload] (32 MiB), are split,
// and the pieces are in flight together.
//
// # Errors
//
//   - An error reply is a *device.IOError (Op, Off, Len of the request)
//     wrapping a *ReplyError, whose Errno is the protocol's value (NBD_EIO
//     is 5) and which unwraps to the syscall.Errno.
//   - The end of the connection (the server closed it, sent a bad magic
//     number, a reply to no request in flight or a structured reply, a
//     request had no reply within [Options.RequestTimeout], the network
//     failed) is a *ConnError: every request pending then fails with it,
//     and so does every later call but Close. It matches ErrDisconnected
//     and device.ErrClosed, so that a verifier stops instead of recording
//     blocks as unreadable; its Err says why (a *ProtocolError, ErrTimeout,
//     ...). The server's NBD_ESHUTDOWN ends the device the same way, once
//     the requests in flight are answered.
//   - Out of range: device.ErrOutOfRange, nothing sent. After Close:
//     device.ErrClosed.
//
// Memory does not grow with anything the server sends: a READ's data is
// read into its caller's buffer, an option reply's data is refused beyond
// 64 KiB before being allocated, and the requests in flight are bounded
// in number and bytes ([Options.MaxInflight], [Options.MaxInflightBytes]).
//
// # Durability
//
// Sync sends NBD_CMD_FLUSH. Against a server that does not advertise
// flush, Sync returns nil only when that is true: for a read-only device,
// or when the server advertises FUA, which every write then carries;
// otherwise it fails with an error wrapping errors.ErrUnsupported. Discard
// uses NBD_CMD_WRITE_ZEROES, which the server may satisfy by punching a
// hole but must read back as zeros; NBD_CMD_TRIM, after which the
// protocol leaves the contents undefined, is only [Device.Trim].
//
// # Use
//
//	dev, err := nbdclient.Open(ctx, "nbds://backup:10809/disk?tls-certificates=/etc/difctl/pki", nbdclient.Options{})
//	n, err := dev.ReadAt(buf, 0)
//	err = dev.Sync()
//	err = dev.Close() // NBD_CMD_DISC
package nbdclient
