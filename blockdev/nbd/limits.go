package nbd

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Connection limits. A client that does nothing must cost only its own
// connection, so neither kind of slot is held on a first-come basis
// forever:
//
//   - Handshake slots (Options.MaxHandshakes in all,
//     Options.MaxHandshakesPerPeer per peer) are counted per peer: the IP
//     address of a TCP client (its /64 for IPv6, which a single host may
//     fill), the user id of a unix-socket client where the system reports
//     it (SO_PEERCRED), otherwise one peer for the socket. A new
//     connection over either limit takes the slot of the connection that
//     has been negotiating longest, from its own peer when that peer is at
//     its limit, else from the peer holding most slots, provided that
//     connection has negotiated for at least a tenth of
//     Options.HandshakeTimeout (an honest client's negotiation takes
//     milliseconds). Only when no slot is that old is the new connection
//     refused. So silent connections from one peer only ever push out
//     each other, and a flood of them from many peers cycles in at most
//     a tenth of the handshake timeout while honest clients finish.
//   - Transmission slots (Options.MaxConnections per export): when an
//     export is full, a client asking for it takes the slot of the
//     connection idle longest (no request being read or served) once
//     that one has been idle for Options.IdleTimeout; a connection with a
//     request in flight is never closed for it. Options.MaxIdle, if set,
//     closes a connection idle that long whatever the load.
//
// A connection closed to make room, or for idleness, ends with an error
// matching ErrEvicted (Options.OnConnError).

// ErrEvicted matches the error of a connection the server closed to make
// room for another client (it negotiated too long, or sat idle while its
// export was full) or because it sat idle for Options.MaxIdle.
var ErrEvicted = errors.New("nbd: connection closed by the server's limits")

// peerOf names the peer whose handshake slots nc counts against.
func peerOf(nc net.Conn) string {
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		if ip4 := a.IP.To4(); ip4 != nil {
			return "ip:" + ip4.String()
		}
		return "ip6:" + a.IP.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	if uc, ok := nc.(*net.UnixConn); ok {
		if id, ok := unixPeer(uc); ok {
			return id
		}
		return "unix"
	}
	return nc.RemoteAddr().Network()
}

// remoteOf names the client of nc in Options.OnConnError: its address, or
// for a unix socket (whose client address is empty) its peer (peerOf).
func remoteOf(nc net.Conn, peer string) string {
	if _, ok := nc.(*net.UnixConn); ok {
		return peer
	}
	return nc.RemoteAddr().String()
}

// handshakes is the table of connections negotiating.
type handshakes struct {
	mu      sync.Mutex
	max     int
	perPeer int
	grace   time.Duration // the least negotiation time of a connection evicted
	slots   map[*conn]hsSlot
	peers   map[string]int
}

type hsSlot struct {
	peer  string
	start time.Time
}

func newHandshakes(o *Options) *handshakes {
	return &handshakes{max: o.MaxHandshakes, perPeer: o.MaxHandshakesPerPeer, grace: o.HandshakeTimeout / 10,
		slots: make(map[*conn]hsSlot), peers: make(map[string]int)}
}

// admit gives c a slot for peer, evicting another connection's (closed
// here) if the limits say so; false if c must be refused.
func (h *handshakes) admit(c *conn, peer string, now time.Time) bool {
	h.mu.Lock()
	var victim *conn
	switch {
	case h.peers[peer] >= h.perPeer:
		victim = h.oldest(peer, now)
	case len(h.slots) >= h.max:
		busiest, n := "", 0
		for p, k := range h.peers {
			if k > n || k == n && p < busiest {
				busiest, n = p, k
			}
		}
		victim = h.oldest(busiest, now)
		if victim == nil {
			victim = h.oldest("", now)
		}
	}
	full := h.peers[peer] >= h.perPeer || len(h.slots) >= h.max
	if victim != nil {
		h.removeLocked(victim)
		full = false
	}
	if !full {
		h.slots[c] = hsSlot{peer, now}
		h.peers[peer]++
	}
	h.mu.Unlock()
	if victim != nil {
		victim.evict()
	}
	return !full
}

// oldest returns the connection of peer (any peer if "") that has
// negotiated longest, if that is at least the grace time. Caller holds mu.
func (h *handshakes) oldest(peer string, now time.Time) *conn {
	var old *conn
	var at time.Time
	for c, s := range h.slots {
		if (peer == "" || s.peer == peer) && (old == nil || s.start.Before(at)) {
			old, at = c, s.start
		}
	}
	if old == nil || now.Sub(at) < h.grace {
		return nil
	}
	return old
}

// release frees c's slot, if it still has one.
func (h *handshakes) release(c *conn) {
	h.mu.Lock()
	h.removeLocked(c)
	h.mu.Unlock()
}

func (h *handshakes) removeLocked(c *conn) {
	s, ok := h.slots[c]
	if !ok {
		return
	}
	delete(h.slots, c)
	if h.peers[s.peer]--; h.peers[s.peer] == 0 {
		delete(h.peers, s.peer)
	}
}

// activity is a connection's state for the idle rules: requests being read
// or served, and when the last one started or ended.
type activity struct {
	mu      sync.Mutex
	busy    int
	last    time.Time
	evicted bool
	closeFn func()
}

// begin marks a request read off the wire (its header); false if the
// connection was evicted, and the request must not run.
func (a *activity) begin() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.evicted {
		return false
	}
	a.busy++
	a.last = time.Now()
	return true
}

// end marks a request done (replied, or refused).
func (a *activity) end() {
	a.mu.Lock()
	a.busy--
	a.last = time.Now()
	a.mu.Unlock()
}

// idleFor returns how long the connection has had no request, 0 if it has
// one.
func (a *activity) idleFor(now time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.busy > 0 || a.evicted {
		return 0
	}
	return now.Sub(a.last)
}

// evictIdle closes the connection if it is still idle (no request began
// since idleFor looked); it reports whether it did.
func (a *activity) evictIdle() bool {
	a.mu.Lock()
	if a.busy > 0 || a.evicted {
		a.mu.Unlock()
		return false
	}
	a.evicted = true
	a.mu.Unlock()
	a.closeFn()
	return true
}

func (a *activity) wasEvicted() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.evicted
}

// evict closes a connection in negotiation to make room (handshakes).
func (c *conn) evict() {
	c.act.mu.Lock()
	c.act.evicted = true
	c.act.mu.Unlock()
	c.raw.Close()
}

// acquire gives c one of the export's transmission slots: a free one, or
// that of the connection idle longest if it has been idle for the
// export's idle timeout (closed here). false when the export is full.
func (x *export) acquire(c *conn) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	for len(x.active) >= int(x.maxConns) {
		if x.idleTimeout <= 0 {
			return false
		}
		now := time.Now()
		var victim *conn
		var most time.Duration
		for v := range x.active {
			if d := v.act.idleFor(now); d >= x.idleTimeout && d > most {
				victim, most = v, d
			}
		}
		if victim == nil {
			return false
		}
		if victim.act.evictIdle() {
			delete(x.active, victim)
		}
	}
	x.active[c] = struct{}{}
	c.act.mu.Lock()
	c.act.last = time.Now()
	c.act.mu.Unlock()
	return true
}

// release frees c's transmission slot, if it still has one.
func (x *export) release(c *conn) {
	x.mu.Lock()
	delete(x.active, c)
	x.mu.Unlock()
}

// reapIdle closes every connection of x idle for maxIdle or longer.
func (x *export) reapIdle(maxIdle time.Duration) {
	now := time.Now()
	x.mu.Lock()
	defer x.mu.Unlock()
	for c := range x.active {
		if c.act.idleFor(now) >= maxIdle && c.act.evictIdle() {
			delete(x.active, c)
		}
	}
}

// reaper closes the connections idle for Options.MaxIdle until done is
// closed.
func (s *Server) reaper(done <-chan struct{}, maxIdle time.Duration) {
	t := time.NewTicker(max(maxIdle/8, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			for _, x := range s.exports {
				x.reapIdle(maxIdle)
			}
		}
	}
}
