package nbdclient

// Wire constants of the NBD protocol (NetworkBlockDevice/nbd doc/proto.md).
// Every integer on the wire is big-endian. Only what the client sends or
// must recognise is here.

// Magic numbers.
const (
	magicInit       = 0x4e42444d41474943 // "NBDMAGIC", the server's first 8 bytes
	magicOpt        = 0x49484156454F5054 // "IHAVEOPT": newstyle, and the prefix of every option
	magicOldstyle   = 0x00420281861253   // oldstyle negotiation, in place of IHAVEOPT
	magicOptReply   = 0x0003e889045565a9 // prefix of every option reply
	magicRequest    = 0x25609513         // transmission request
	magicSimple     = 0x67446698         // simple reply
	magicStructured = 0x668e33ef         // structured reply chunk (never negotiated here)
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
)

// Options.
const (
	optExportName = 1
	optAbort      = 2
	optStartTLS   = 5
	optGo         = 7
)

// Option reply types. Errors have bit 31 set.
const (
	repAck  = 1
	repInfo = 3

	repFlagError        = 1 << 31
	repErrUnsup         = repFlagError + 1
	repErrPolicy        = repFlagError + 2
	repErrInvalid       = repFlagError + 3
	repErrPlatform      = repFlagError + 4
	repErrTLSReqd       = repFlagError + 5
	repErrUnknown       = repFlagError + 6
	repErrShutdown      = repFlagError + 7
	repErrBlockSizeReqd = repFlagError + 8
	repErrTooBig        = repFlagError + 9
)

// Information types of NBD_OPT_GO.
const (
	infoExport    = 0
	infoBlockSize = 3
)

// Commands.
const (
	cmdRead        = 0
	cmdWrite       = 1
	cmdDisc        = 2
	cmdFlush       = 3
	cmdTrim        = 4
	cmdWriteZeroes = 6
)

// Command flags.
const (
	cmdFlagFUA = 1 << 0
)

// Error values of replies.
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

// Sizes and limits.
const (
	defaultPort    = "10809"
	requestSize    = 28 // magic, flags, type, cookie, offset, length
	simpleSize     = 16 // magic, error, cookie
	optReplySize   = 20 // magic, option, type, length
	maxStringBytes = 4096
	// maxOptReply bounds the data of one option reply the client reads
	// into memory; a longer one is a protocol error, refused before its
	// length is allocated.
	maxOptReply = 64 << 10
	// maxOptReplies bounds the replies to one option (NBD_REP_INFO
	// repeats), so that a server cannot keep the negotiation going
	// forever within its deadline.
	maxOptReplies = 256
)
