// Package nbdproto holds the wire constants of the NBD protocol
// (NetworkBlockDevice/nbd doc/proto.md), shared by the server
// (blockdev/nbd) and the client (blockdev/nbdclient). Every integer on the
// wire is big-endian. Error values of replies are named Errno*: the
// protocol's own numbering, which matches Linux errno values.
package nbdproto

// Magic numbers.
const (
	MagicInit       = 0x4e42444d41474943 // "NBDMAGIC", the first 8 bytes the server sends
	MagicOpt        = 0x49484156454F5054 // "IHAVEOPT": newstyle, and the prefix of every option
	MagicOptReply   = 0x0003e889045565a9 // prefix of every option reply
	MagicRequest    = 0x25609513         // transmission request
	MagicSimple     = 0x67446698         // simple reply
	MagicStructured = 0x668e33ef         // structured reply chunk
)

// Handshake flags (server, 16 bits) and client flags (32 bits).
const (
	FlagFixedNewstyle = 1 << 0
	FlagNoZeroes      = 1 << 1

	ClientFixedNewstyle = 1 << 0
	ClientNoZeroes      = 1 << 1
)

// Transmission flags (16 bits).
const (
	FlagHasFlags        = 1 << 0
	FlagReadOnly        = 1 << 1
	FlagSendFlush       = 1 << 2
	FlagSendFUA         = 1 << 3
	FlagSendTrim        = 1 << 5
	FlagSendWriteZeroes = 1 << 6
	FlagCanMultiConn    = 1 << 8
	FlagSendFastZero    = 1 << 11
)

// Options.
const (
	OptExportName     = 1
	OptAbort          = 2
	OptList           = 3
	OptStartTLS       = 5
	OptInfo           = 6
	OptGo             = 7
	OptStructured     = 8
	OptListMetaCtx    = 9
	OptSetMetaCtx     = 10
	OptExtendedHeader = 11 // not supported: answered with repErrUnsup
)

// Option reply types. Errors have bit 31 set.
const (
	RepAck     = 1
	RepServer  = 2
	RepInfo    = 3
	RepMetaCtx = 4

	RepErrUnsup         = 1<<31 + 1
	RepErrPolicy        = 1<<31 + 2
	RepErrInvalid       = 1<<31 + 3
	RepErrTLSReqd       = 1<<31 + 5
	RepErrUnknown       = 1<<31 + 6
	RepErrShutdown      = 1<<31 + 7
	RepErrTooBig        = 1<<31 + 9
	RepErrBlockSizeReqd = 1<<31 + 8 // never sent: block sizes are advisory here
)

// Information types of NBD_OPT_INFO and NBD_OPT_GO.
const (
	InfoExport      = 0
	InfoName        = 1
	InfoDescription = 2
	InfoBlockSize   = 3
)

// Commands.
const (
	CmdRead        = 0
	CmdWrite       = 1
	CmdDisc        = 2
	CmdFlush       = 3
	CmdTrim        = 4
	CmdCache       = 5 // not advertised: answered with EINVAL
	CmdWriteZeroes = 6
	CmdBlockStatus = 7
)

// Command flags.
const (
	CmdFlagFUA      = 1 << 0
	CmdFlagNoHole   = 1 << 1
	CmdFlagDF       = 1 << 2
	CmdFlagReqOne   = 1 << 3
	CmdFlagFastZero = 1 << 4
)

// Structured reply flags and chunk types.
const (
	ReplyFlagDone = 1 << 0

	ChunkNone        = 0
	ChunkOffsetData  = 1
	ChunkOffsetHole  = 2
	ChunkBlockStatus = 5
	ChunkError       = 1<<15 + 1
	ChunkErrorOffset = 1<<15 + 2
)

// Error values of replies (the protocol's own numbering, which matches
// Linux errno values).
const (
	ErrnoPerm     = 1
	ErrnoIO       = 5
	ErrnoNoMem    = 12
	ErrnoInval    = 22
	ErrnoNoSpc    = 28
	ErrnoOverflow = 75
	ErrnoNotSup   = 95
	ErrnoShutdown = 108
)

// base:allocation status flags.
const (
	StateHole = 1 << 0
	StateZero = 1 << 1
)

// The one metadata context this server knows, and the id it gives it.
const (
	MetaBaseAllocation = "base:allocation"
	MetaBaseID         = 1
)

// Sizes on the wire.
const (
	RequestSize    = 28 // magic, flags, type, cookie, offset, length
	SimpleSize     = 16 // magic, error, cookie
	ChunkHdrSize   = 20 // magic, flags, type, cookie, length
	MaxStringBytes = 4096
)

// Protocol facts only the client needs.
const (
	MagicOldstyle  = 0x00420281861253 // oldstyle negotiation, in place of IHAVEOPT
	RepFlagError   = 1 << 31          // the bit of every error reply type
	RepErrPlatform = RepFlagError + 4
	OptReplySize   = 20 // magic, option, type, length
)
