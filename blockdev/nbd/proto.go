package nbd

// Wire constants of the NBD protocol, as the protocol document
// (NetworkBlockDevice/nbd doc/proto.md) defines them. Every integer on the
// wire is big-endian.

// Magic numbers.
const (
	magicInit       = 0x4e42444d41474943 // "NBDMAGIC", the first 8 bytes the server sends
	magicOpt        = 0x49484156454F5054 // "IHAVEOPT": newstyle, and the prefix of every option
	magicOptReply   = 0x0003e889045565a9 // prefix of every option reply
	magicRequest    = 0x25609513         // transmission request
	magicSimple     = 0x67446698         // simple reply
	magicStructured = 0x668e33ef         // structured reply chunk
)

// Handshake flags (server, 16 bits) and client flags (32 bits).
const (
	flagFixedNewstyle = 1 << 0
	flagNoZeroes      = 1 << 1

	clientFixedNewstyle = 1 << 0
	clientNoZeroes      = 1 << 1
)

// Transmission flags (16 bits).
const (
	flagHasFlags        = 1 << 0
	flagReadOnly        = 1 << 1
	flagSendFlush       = 1 << 2
	flagSendFUA         = 1 << 3
	flagSendTrim        = 1 << 5
	flagSendWriteZeroes = 1 << 6
	flagCanMultiConn    = 1 << 8
	flagSendFastZero    = 1 << 11
)

// Options.
const (
	optExportName     = 1
	optAbort          = 2
	optList           = 3
	optStartTLS       = 5
	optInfo           = 6
	optGo             = 7
	optStructured     = 8
	optListMetaCtx    = 9
	optSetMetaCtx     = 10
	optExtendedHeader = 11 // not supported: answered with repErrUnsup
)

// Option reply types. Errors have bit 31 set.
const (
	repAck     = 1
	repServer  = 2
	repInfo    = 3
	repMetaCtx = 4

	repErrUnsup         = 1<<31 + 1
	repErrPolicy        = 1<<31 + 2
	repErrInvalid       = 1<<31 + 3
	repErrTLSReqd       = 1<<31 + 5
	repErrUnknown       = 1<<31 + 6
	repErrShutdown      = 1<<31 + 7
	repErrTooBig        = 1<<31 + 9
	repErrBlockSizeReqd = 1<<31 + 8 // never sent: block sizes are advisory here
)

// Information types of NBD_OPT_INFO and NBD_OPT_GO.
const (
	infoExport      = 0
	infoName        = 1
	infoDescription = 2
	infoBlockSize   = 3
)

// Commands.
const (
	cmdRead        = 0
	cmdWrite       = 1
	cmdDisc        = 2
	cmdFlush       = 3
	cmdTrim        = 4
	cmdCache       = 5 // not advertised: answered with EINVAL
	cmdWriteZeroes = 6
	cmdBlockStatus = 7
)

// Command flags.
const (
	cmdFlagFUA      = 1 << 0
	cmdFlagNoHole   = 1 << 1
	cmdFlagDF       = 1 << 2
	cmdFlagReqOne   = 1 << 3
	cmdFlagFastZero = 1 << 4
)

// Structured reply flags and chunk types.
const (
	replyFlagDone = 1 << 0

	chunkNone        = 0
	chunkOffsetData  = 1
	chunkOffsetHole  = 2
	chunkBlockStatus = 5
	chunkError       = 1<<15 + 1
	chunkErrorOffset = 1<<15 + 2
)

// Error values of replies (the protocol's own numbering, which matches
// Linux errno values).
const (
	errPerm     = 1
	errIO       = 5
	errNoMem    = 12
	errInval    = 22
	errNoSpc    = 28
	errOverflow = 75
	errNotSup   = 95
	errShutdown = 108
)

// base:allocation status flags.
const (
	stateHole = 1 << 0
	stateZero = 1 << 1
)

// The one metadata context this server knows, and the id it gives it.
const (
	metaBaseAllocation = "base:allocation"
	metaBaseID         = 1
)

// Sizes on the wire.
const (
	requestSize    = 28 // magic, flags, type, cookie, offset, length
	simpleSize     = 16 // magic, error, cookie
	chunkHdrSize   = 20 // magic, flags, type, cookie, length
	maxStringBytes = 4096
)
