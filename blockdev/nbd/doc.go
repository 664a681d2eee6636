// Package nbd serves protected volumes ([blockdev.Volume]) over the Network
// Block Device protocol, so that qemu, libnbd's tools (nbdcopy, nbdinfo,
// nbdfuse), nbdkit's nbd plugin and the Linux nbd driver can use a volume
// as a block device, with every read verified and every write protected.
//
// # Why a server of our own
//
// The point of serving a protected volume is what a client sees when a
// block fails verification: an I/O error, and never the unverified bytes.
// The Go NBD server libraries cannot give that. pojntfx/go-nbd writes the
// reply header of a read before it reads the data, so a read that fails
// after it can only be reported by dropping the connection, and it has no
// FLUSH, FUA or TRIM; abligh/gonbdserver has had no release since 2017 and
// has no structured replies. So this package implements the protocol from
// its specification (NetworkBlockDevice/nbd, doc/proto.md): every reply is
// built only once the volume has answered.
//
// # What it speaks
//
//   - Fixed newstyle negotiation with NBD_OPT_GO, NBD_OPT_INFO,
//     NBD_OPT_EXPORT_NAME, NBD_OPT_LIST, NBD_OPT_ABORT,
//     NBD_OPT_STRUCTURED_REPLY, NBD_OPT_LIST_META_CONTEXT and
//     NBD_OPT_SET_META_CONTEXT (base:allocation) and NBD_OPT_STARTTLS;
//     other options get NBD_REP_ERR_UNSUP, malformed ones
//     NBD_REP_ERR_INVALID, oversized ones NBD_REP_ERR_TOO_BIG.
//   - NBD_INFO_EXPORT, NBD_INFO_NAME, NBD_INFO_DESCRIPTION and
//     NBD_INFO_BLOCK_SIZE: minimum the device's logical block size,
//     preferred the volume's protection interval (whole blocks need no
//     read-modify-write), maximum [Options.MaxPayload] (32 MiB).
//   - READ, WRITE (FUA), FLUSH, TRIM, WRITE_ZEROES (NO_HOLE, FAST_ZERO),
//     BLOCK_STATUS and DISC, with many requests in flight per connection
//     ([Options.MaxInFlight]), at most [Options.Workers] of them executing
//     at once on the connection's worker goroutines (the rest wait their
//     turn), answered as each completes.
//   - Transmission flags HAS_FLAGS, SEND_FLUSH, SEND_FUA, SEND_TRIM,
//     SEND_WRITE_ZEROES, SEND_FAST_ZERO, READ_ONLY for read-only exports,
//     and CAN_MULTI_CONN: every connection to an export shares one Volume,
//     whose Sync makes the writes of all of them durable.
//
// # Semantics
//
// A READ covering a block that fails verification (after the volume's
// re-reads) sends no unverified byte. With structured replies the client
// gets the verified bytes before the first failing block in an
// NBD_REPLY_TYPE_OFFSET_DATA chunk, then NBD_REPLY_TYPE_ERROR_OFFSET with
// EIO at the first failing byte and a message naming the block and the
// field; without structured replies, a simple reply with EIO and no data.
// The failure is recorded as an open finding in the volume's findings log
// (as a scrub records one: `difctl inspect` and `difctl scrub
// --errors-only` see it) and passed to [Options.OnFailure].
//
// FLUSH replies once every write completed before it is durable with its
// tuples (Volume.Sync); FUA does the same for its write. TRIM discards the
// whole blocks of its range and WRITE_ZEROES discards them too (they
// become unwritten and read back as zeros) unless NO_HOLE asks for zeros
// to be written; partial blocks are written with zeros through the volume,
// which reads and verifies them first and refuses a failing block (EIO:
// nothing is laundered). FAST_ZERO with NO_HOLE fails at once with ENOTSUP.
// BLOCK_STATUS reports unwritten blocks as NBD_STATE_HOLE|NBD_STATE_ZERO
// and written ones as data; it syncs pending writes first, since only
// committed tuples tell which blocks are written.
//
// # Limits and bad input
//
// A client that breaks the protocol loses its own connection, nothing
// else: a request is executed only when it has been read whole, a READ or
// WRITE longer than the maximum payload gets EINVAL without its length
// being allocated, requests in flight per connection are bounded in number
// and in buffer bytes (the reader stops reading until one completes),
// connections per export and negotiations at once are bounded, and the
// negotiation (TLS included) has a deadline. Memory is therefore bounded
// by the limits, whatever the size of the volumes: per connection, the
// payloads of the WRITEs in flight (MaxInFlightBytes, or one payload of up
// to MaxPayload running alone) and the buffers of the Workers executing;
// per export, the volume's tuple page cache, which the server sets to a
// fixed budget ([DefaultTupleCacheBytes], 32 MiB, unless
// [Export.TupleCacheBytes] says otherwise) rather than to anything that
// scales with the volume.
//
// With [Options.TLS] set, TLS is mandatory (the protocol's FORCEDTLS mode):
// options before NBD_OPT_STARTTLS are refused with NBD_REP_ERR_TLS_REQD.
//
// # Monitoring
//
// [Options.OnRequest] gets a [RequestEvent] for every request once it is
// answered (export, command, range, duration, error: [ErrBadRequest] for
// a request refused unexecuted), [Options.OnConn] a [ConnEvent] when a
// connection enters or leaves an export's transmission phase or is refused
// by a full export; with OnFailure and OnConnError they are what package
// metrics (difctl serve --metrics-listen) counts. Unset, they cost a nil
// check.
//
// # Use
//
//	srv, err := nbd.NewServer([]nbd.Export{{Name: "disk", Volume: vol}}, nbd.Options{})
//	l, err := net.Listen("unix", "/run/disk.sock")
//	err = srv.Serve(ctx, l) // until ctx is cancelled; then in-flight requests finish
//	err = vol.Sync()
//
// The server never closes the volumes; Serve closes the listener when it
// returns.
package nbd
