package nbd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/scrub"
)

// Defaults of [Options].
const (
	DefaultMaxPayload           = 32 << 20
	DefaultMaxInFlight          = 64
	DefaultMaxInFlightBytes     = 32 << 20
	DefaultWorkers              = 4
	DefaultSendBuffer           = 1 << 20
	DefaultMaxConnections       = 16
	DefaultMaxHandshakes        = 64
	DefaultMaxHandshakesPerPeer = 16
	DefaultHandshakeTimeout     = 10 * time.Second
	DefaultIdleTimeout          = 30 * time.Second
	DefaultDrainTimeout         = 30 * time.Second
)

// DefaultTupleCacheBytes is the tuple page cache an export gives its volume
// unless [Export.TupleCacheBytes] says otherwise: a fixed budget, whatever
// the volume's size, so that what the server holds of a volume's tuples
// stops growing once the volume's tuples exceed it.
//
// A decoded page costs 12 bytes per block (an 8-byte tuple and a 4-byte
// sector checksum), so 32 MiB holds the tuples of 2.67 Mi blocks: 1.33 GiB
// of 512-byte blocks, 10.7 GiB of 4 KiB blocks. Random reads over a volume
// up to that size read no tuple page from the store once warm; over a
// larger one, a read hits the cache in proportion (32 MiB over the
// volume's tuples), and a miss reads its page from the store (a Pebble
// data block, mostly from the kernel's page cache) and decodes it. A miss
// costs: fio random 4 KiB reads at queue depth 16 over a 1 GiB 512+8
// volume (24.25 MiB of tuples) made 53k IOPS with a 64 MiB cache against
// 21k with 4 MiB and 26k with 16 MiB, in one run each on this 2-vCPU
// machine (other builds running). Sequential reads pay when the tuples
// just exceed the cache: CLOCK keeps none of a cyclic scan, so nbdcopy of
// that volume was 0.82x as fast with a 24 MiB cache as with 64 MiB, which
// held them all; 32 MiB holds all of a 1 GiB 512+8 volume's tuples with a
// third to spare. The in-flight limits do not size it: a request's pages
// are decoded into its own scratch space whether or not the cache keeps
// them.
const DefaultTupleCacheBytes = 32 << 20

var (
	// ErrClosed is returned by Serve when it is called on a server that
	// already served.
	ErrClosed = errors.New("nbd: server already used")
	// ErrRefused matches the error reported (Options.OnConnError) for a
	// connection closed at once because the handshake limits were reached
	// (see Options.MaxHandshakes), or closed after NBD_OPT_EXPORT_NAME
	// because that export was full (Options.MaxConnections).
	ErrRefused = errors.New("nbd: connection refused by the server's limits")
	// ErrProtocol matches every violation of the protocol by a client
	// (reported through Options.OnConnError, never returned by Serve).
	ErrProtocol = errors.New("nbd: protocol violation")
)

// An Export is one volume served under a name.
type Export struct {
	// Name is the export name clients ask for. Required, unique, at most
	// 4096 bytes. The first export is also the default export (the empty
	// name).
	Name string
	// Description is shown to clients that ask (NBD_INFO_DESCRIPTION).
	// Default "".
	Description string
	// Volume is the protected volume. Required. The server never closes
	// it; the caller syncs and closes it after Serve returns.
	Volume *blockdev.Volume
	// ReadOnly refuses writes, trims and write-zeroes with EPERM and
	// advertises NBD_FLAG_READ_ONLY. Default false (it is also forced
	// when writes to the volume fail with device.ErrReadOnly).
	ReadOnly bool
	// TupleCacheBytes sizes the volume's tuple page cache
	// (store.Tuples.SetPageCache) when the server is made; it bounds the
	// decoded tuples the server keeps, whatever the volume's size. Default
	// 0: DefaultTupleCacheBytes. Negative: the volume's own setting
	// (blockdev.Options.TupleCacheBytes) is kept.
	TupleCacheBytes int
	// FindingsName is the scrub name under which read failures are
	// recorded in the volume's findings log (scrub.NewStoreState).
	// Default "nbd".
	FindingsName string
}

// A Failure is a read or write that the server refused because the
// volume's data failed verification (or could not be read): the client
// got EIO.
type Failure struct {
	Export string
	Op     string // "read" or "write"
	Offset int64  // first byte of the request that failed
	Length int64  // bytes of the request from Offset
	// Findings are the findings recorded in the store for it (empty when
	// the error was not tied to blocks, or recording failed: RecordErr).
	Findings  []scrub.Finding
	Err       error
	RecordErr error
}

// Options configure a [Server]. The zero value of each field is its
// default.
type Options struct {
	// TLS, if not nil, makes TLS mandatory (the protocol's FORCEDTLS mode):
	// every option but NBD_OPT_STARTTLS and NBD_OPT_ABORT is refused with
	// NBD_REP_ERR_TLS_REQD until the client has started TLS with this
	// configuration (a certificate; ClientAuth and ClientCAs to verify
	// client certificates). Default nil: no TLS, NBD_OPT_STARTTLS is
	// refused with NBD_REP_ERR_POLICY. Client certificates are verified
	// against ClientCAs as crypto/tls does, but the CAs are not named in
	// the certificate request, so that GnuTLS clients (qemu, libnbd) send
	// RSA certificates too (not in FIPS 140-3 mode); VerifyPeerCertificate
	// and VerifyConnection still get the verified chains. A failed
	// handshake is reported through OnConnError with an error matching
	// ErrTLSHandshake.
	TLS *tls.Config
	// MaxPayload is the largest READ or WRITE accepted, advertised as the
	// maximum block size; at least 1 MiB and at most 256 MiB. A longer
	// request gets EINVAL without its length being allocated (a write's
	// payload is read and dropped in small pieces). Default
	// DefaultMaxPayload (32 MiB).
	MaxPayload int
	// MaxInFlight bounds the requests of one connection being served at
	// once; the server reads no further request until one completes.
	// Default DefaultMaxInFlight (64).
	MaxInFlight int
	// MaxInFlightBytes bounds the buffers of one connection's requests in
	// flight, at least 64 KiB; a READ or WRITE larger than it (up to
	// MaxPayload) waits for the connection's other requests to complete
	// and runs alone. Default DefaultMaxInFlightBytes.
	MaxInFlightBytes int
	// Workers bounds the requests of one connection executing at once
	// (reading or writing the volume, sending the reply); the others of
	// the MaxInFlight wait in order. So READs hold at most Workers
	// buffers at once, and those stay in the CPU's caches from the
	// volume's read to the socket's copy. Default DefaultWorkers (4).
	Workers int
	// SendBuffer, if positive, sets the socket send buffer (SO_SNDBUF) of
	// connections on unix sockets, so that a reply of up to about this
	// size goes out in one write instead of several with waits for the
	// client in between (the kernel caps it at net.core.wmem_max; TCP
	// connections keep the kernel's autotuning). Negative keeps the
	// system's default. Default DefaultSendBuffer (1 MiB).
	SendBuffer int
	// MaxConnections bounds the connections in transmission per export. A
	// client beyond it takes the slot of a connection idle for
	// IdleTimeout, if there is one, and is refused otherwise
	// (NBD_REP_ERR_POLICY, or the connection closed after
	// NBD_OPT_EXPORT_NAME). Default DefaultMaxConnections (16).
	MaxConnections int
	// IdleTimeout is how long a connection in transmission must have had
	// no request (none being read or served) before a client refused by
	// MaxConnections may take its slot; it is closed then, never while a
	// request is in flight. Default DefaultIdleTimeout (30 s); negative:
	// idle connections keep their slots.
	IdleTimeout time.Duration
	// MaxIdle, if positive, closes every connection in transmission that
	// has had no request for that long, whatever the load. Default 0:
	// idle connections are closed only to make room (IdleTimeout), so a
	// kernel client of an idle filesystem keeps its connection.
	MaxIdle time.Duration
	// MaxHandshakes bounds the connections negotiating at once, and
	// MaxHandshakesPerPeer those of one peer (an IP address, an IPv6 /64,
	// the user of a unix-socket client). A new connection over either
	// limit takes the slot of the one negotiating longest (of its own
	// peer if that is the limit, else of the peer holding most), if that
	// one has negotiated for a tenth of HandshakeTimeout; otherwise it is
	// closed at once. Defaults DefaultMaxHandshakes (64) and
	// DefaultMaxHandshakesPerPeer (16).
	MaxHandshakes        int
	MaxHandshakesPerPeer int
	// HandshakeTimeout bounds the whole negotiation phase of a connection
	// (including a TLS handshake). Default DefaultHandshakeTimeout (10 s).
	HandshakeTimeout time.Duration
	// DrainTimeout bounds, at shutdown, the time given to the requests in
	// flight to complete and their replies to be sent. Default
	// DefaultDrainTimeout (30 s).
	DrainTimeout time.Duration
	// OnFailure, if not nil, is called for every request refused because
	// of an integrity or I/O failure of the volume, after the findings are
	// recorded. It must be safe for concurrent use.
	OnFailure func(Failure)
	// OnConnError, if not nil, is called when a connection ends because
	// of an error (a protocol violation matching ErrProtocol, a TLS
	// handshake matching ErrTLSHandshake, an I/O error, a timeout), with
	// the client's address, or uid:N for a unix-socket client on Linux
	// (its user). It must be safe for concurrent use.
	OnConnError func(remote string, err error)
	// OnRequest, if not nil, is called for every request of the
	// transmission phase once its reply is sent (see RequestEvent), and
	// OnConn when a connection enters or leaves an export's transmission
	// phase or is refused because the export is full (see ConnEvent):
	// for metrics. They must be quick and safe for concurrent use. Unset,
	// they cost nothing.
	OnRequest func(RequestEvent)
	OnConn    func(ConnEvent)
}

func (o *Options) normalize() error {
	if o.MaxPayload == 0 {
		o.MaxPayload = DefaultMaxPayload
	}
	if o.MaxPayload < 1<<20 || o.MaxPayload > 256<<20 {
		return fmt.Errorf("nbd: max payload of %d bytes, want 1 MiB to 256 MiB", o.MaxPayload)
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.MaxInFlight < 1 || o.MaxInFlight > 4096 {
		return fmt.Errorf("nbd: %d requests in flight, want 1 to 4096", o.MaxInFlight)
	}
	if o.MaxInFlightBytes == 0 {
		o.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	if o.MaxInFlightBytes < 64<<10 {
		return fmt.Errorf("nbd: %d bytes in flight, want at least 64 KiB", o.MaxInFlightBytes)
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.Workers < 1 || o.Workers > 4096 {
		return fmt.Errorf("nbd: %d workers per connection, want 1 to 4096", o.Workers)
	}
	if o.SendBuffer == 0 {
		o.SendBuffer = DefaultSendBuffer
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.MaxConnections < 1 {
		return fmt.Errorf("nbd: %d connections per export", o.MaxConnections)
	}
	if o.MaxHandshakes == 0 {
		o.MaxHandshakes = DefaultMaxHandshakes
	}
	if o.MaxHandshakes < 1 {
		return fmt.Errorf("nbd: %d handshakes at once", o.MaxHandshakes)
	}
	if o.MaxHandshakesPerPeer == 0 {
		o.MaxHandshakesPerPeer = min(DefaultMaxHandshakesPerPeer, o.MaxHandshakes)
	}
	if o.MaxHandshakesPerPeer < 1 || o.MaxHandshakesPerPeer > o.MaxHandshakes {
		return fmt.Errorf("nbd: %d handshakes per peer, want 1 to MaxHandshakes (%d)", o.MaxHandshakesPerPeer, o.MaxHandshakes)
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxIdle < 0 {
		return errors.New("nbd: negative MaxIdle")
	}
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	if o.HandshakeTimeout < 0 || o.DrainTimeout < 0 {
		return errors.New("nbd: negative timeout")
	}
	if o.TLS != nil && len(o.TLS.Certificates) == 0 && o.TLS.GetCertificate == nil && o.TLS.GetConfigForClient == nil {
		return errors.New("nbd: TLS configuration without a certificate")
	}
	o.TLS = serverTLS(o.TLS)
	return nil
}

// Server serves exports over NBD. Make one with [NewServer] and call
// [Server.Serve] once.
type Server struct {
	opts    Options
	exports []*export
	byName  map[string]*export
	used    atomic.Bool

	hs *handshakes // the connections negotiating (limits.go)
}

// NewServer checks the exports and options and returns a server.
func NewServer(exports []Export, opts Options) (*Server, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	if len(exports) == 0 {
		return nil, errors.New("nbd: no export")
	}
	s := &Server{opts: opts, byName: make(map[string]*export, len(exports))}
	s.hs = newHandshakes(&s.opts)
	for i, e := range exports {
		if e.Volume == nil {
			return nil, fmt.Errorf("nbd: export %q: nil volume", e.Name)
		}
		if e.Name == "" || len(e.Name) > nbdproto.MaxStringBytes || len(e.Description) > nbdproto.MaxStringBytes {
			return nil, fmt.Errorf("nbd: export %d: name %q must be 1 to %d bytes (and a description at most as long)", i, e.Name, nbdproto.MaxStringBytes)
		}
		if _, dup := s.byName[e.Name]; dup {
			return nil, fmt.Errorf("nbd: export name %q given twice", e.Name)
		}
		x, err := newExport(e, &s.opts)
		if err != nil {
			return nil, err
		}
		s.exports = append(s.exports, x)
		s.byName[e.Name] = x
	}
	return s, nil
}

// lookup returns the export called name; the empty name is the first.
func (s *Server) lookup(name string) *export {
	if name == "" {
		return s.exports[0]
	}
	return s.byName[name]
}

// Serve accepts connections on l and serves them until ctx is done or
// Accept fails. Then it stops accepting (closing l), stops reading new
// requests, lets the requests in flight complete and send their replies
// (within Options.DrainTimeout), closes every connection and returns:
// nil when ctx ended it, otherwise the Accept error. The volumes stay
// open: the caller syncs and closes them.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	if !s.used.CompareAndSwap(false, true) {
		return ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	if s.opts.MaxIdle > 0 {
		done := make(chan struct{})
		defer close(done)
		go s.reaper(done, s.opts.MaxIdle)
	}
	var err error
	for {
		nc, aerr := l.Accept()
		if aerr != nil {
			if ctx.Err() == nil {
				// Out of descriptors (a flood of connections, ours or
				// another process's) or a connection aborted before it
				// was accepted: wait and accept again, as net/http does,
				// rather than stop serving everyone.
				var ne net.Error
				if errors.As(aerr, &ne) && ne.Timeout() || errors.Is(aerr, syscall.EMFILE) ||
					errors.Is(aerr, syscall.ENFILE) || errors.Is(aerr, syscall.ECONNABORTED) {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				err = fmt.Errorf("nbd: accept: %w", aerr)
			}
			break
		}
		c := newConn(s, nc)
		peer := peerOf(nc)
		remote := remoteOf(nc, peer)
		if !s.hs.admit(c, peer, time.Now()) {
			nc.Close()
			if s.opts.OnConnError != nil {
				s.opts.OnConnError(remote, fmt.Errorf("%w: %s has every handshake slot it may hold, none negotiating long enough to be closed", ErrRefused, peer))
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if cerr := c.serve(ctx); cerr != nil && s.opts.OnConnError != nil {
				s.opts.OnConnError(remote, cerr)
			}
		}()
	}
	cancel()
	l.Close()
	wg.Wait()
	return err
}
