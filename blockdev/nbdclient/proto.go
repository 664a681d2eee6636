package nbdclient

// The client's limits; the protocol's constants are in
// blockdev/internal/nbdproto.
const (
	defaultPort = "10809"
	// maxOptReply bounds the data of one option reply the client reads
	// into memory; a longer one is a protocol error, refused before its
	// length is allocated.
	maxOptReply = 64 << 10
	// maxOptReplies bounds the replies to one option (NBD_REP_INFO
	// repeats), so that a server cannot keep the negotiation going
	// forever within its deadline.
	maxOptReplies = 256
)
