package metrics

import (
	"errors"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/nbd"
	"github.com/prometheus/client_golang/prometheus"
)

// nbdVecs are the NBD server's metrics.
type nbdVecs struct {
	requests     *prometheus.CounterVec // export, op, result
	duration     *prometheus.HistogramVec
	readBytes    *prometheus.CounterVec
	writtenBytes *prometheus.CounterVec
	conns        *prometheus.GaugeVec
	connsTotal   *prometheus.CounterVec
	full         *prometheus.CounterVec
	connErrors   *prometheus.CounterVec // reason
}

func newNBDVecs(reg *prometheus.Registry) nbdVecs {
	v := nbdVecs{
		requests: counterVec(reg, "nbd_requests_total",
			"NBD requests answered, by command and result: ok; refused (not executed: a bad command, flag or range, a write to a read-only export); error (the volume failed it: a verification failure, an I/O error).",
			"export", "op", "result"),
		readBytes: counterVec(reg, "nbd_read_bytes_total",
			"Bytes of the NBD reads that succeeded (every one verified).", "export"),
		writtenBytes: counterVec(reg, "nbd_written_bytes_total",
			"Bytes of the NBD writes that succeeded.", "export"),
		conns: gaugeVec(reg, "nbd_connections",
			"NBD connections in the transmission phase.", "export"),
		connsTotal: counterVec(reg, "nbd_connections_total",
			"NBD connections that entered the transmission phase.", "export"),
		full: counterVec(reg, "nbd_export_full_refusals_total",
			"Clients refused because the export had its maximum of connections, none idle long enough to be evicted (NBD_REP_ERR_POLICY, or the connection closed after NBD_OPT_EXPORT_NAME).",
			"export"),
		connErrors: counterVec(reg, "nbd_connection_errors_total",
			"NBD connections ended by an error: refused (closed at once by the handshake or connection limits), evicted (closed to make room, or idle for --max-idle), protocol (the client broke the protocol), other (I/O errors, timeouts, TLS failures).",
			"reason"),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "nbd_request_duration_seconds",
			Help:    "Time from an NBD request read whole to its reply sent, by command, whatever the result.",
			Buckets: requestBuckets,
		}, []string{"export", "op"}),
	}
	reg.MustRegister(v.duration)
	return v
}

// Results of a request (the result label).
const (
	resultOK = iota
	resultRefused
	resultError
	nResults
)

var resultNames = [nResults]string{"ok", "refused", "error"}

// nbdOps are the commands whose series exist from the start; others (CACHE,
// unknown numbers) get theirs when a client sends one.
var nbdOps = []nbd.Op{nbd.OpRead, nbd.OpWrite, nbd.OpFlush, nbd.OpTrim, nbd.OpWriteZeroes, nbd.OpBlockStatus}

// exportMetrics are one export's series, resolved once so that a request
// costs no label lookup.
type exportMetrics struct {
	requests     [nbd.OpBlockStatus + 1][nResults]prometheus.Counter
	duration     [nbd.OpBlockStatus + 1]prometheus.Observer
	readBytes    prometheus.Counter
	writtenBytes prometheus.Counter
	conns        prometheus.Gauge
	connsTotal   prometheus.Counter
	full         prometheus.Counter
}

// nbdHooks count one server's events.
type nbdHooks struct {
	r       *Registry
	exports map[string]*exportMetrics // read-only once made
}

// NBD sets o's OnRequest, OnConn, OnFailure and OnConnError to count the
// events of a server of the named exports into r (functions already set
// there are called too, after the counting). Each export's volume is
// labelled volume=<export name> in the verification failures.
func (r *Registry) NBD(o *nbd.Options, exports ...string) {
	h := &nbdHooks{r: r, exports: make(map[string]*exportMetrics, len(exports))}
	v := &r.nbd
	for _, name := range exports {
		m := &exportMetrics{
			readBytes: v.readBytes.WithLabelValues(name), writtenBytes: v.writtenBytes.WithLabelValues(name),
			conns: v.conns.WithLabelValues(name), connsTotal: v.connsTotal.WithLabelValues(name),
			full: v.full.WithLabelValues(name),
		}
		for _, op := range nbdOps {
			for res := range nResults {
				m.requests[op][res] = v.requests.WithLabelValues(name, op.String(), resultNames[res])
			}
			m.duration[op] = v.duration.WithLabelValues(name, op.String())
		}
		h.exports[name] = m
		r.initFailures(name)
	}
	for _, reason := range []string{"refused", "evicted", "protocol", "other"} {
		v.connErrors.WithLabelValues(reason)
	}
	o.OnRequest = chain(h.request, o.OnRequest)
	o.OnConn = chain(h.conn, o.OnConn)
	o.OnFailure = chain(h.failure, o.OnFailure)
	prev := o.OnConnError
	o.OnConnError = func(remote string, err error) {
		h.connError(err)
		if prev != nil {
			prev(remote, err)
		}
	}
}

// chain returns a function calling first, then next if there is one.
func chain[E any](first, next func(E)) func(E) {
	if next == nil {
		return first
	}
	return func(e E) { first(e); next(e) }
}

// request counts one request. It allocates nothing for the commands whose
// series exist from the start.
func (h *nbdHooks) request(e nbd.RequestEvent) {
	res := resultOK
	switch {
	case e.Err == nil:
	case errors.Is(e.Err, nbd.ErrBadRequest):
		res = resultRefused
	default:
		res = resultError
	}
	m := h.exports[e.Export]
	if m == nil || int(e.Op) >= len(m.duration) || m.duration[e.Op] == nil {
		// CACHE, an unknown command, or an export not given to NBD.
		op := e.Op.String()
		h.r.nbd.requests.WithLabelValues(e.Export, op, resultNames[res]).Inc()
		h.r.nbd.duration.WithLabelValues(e.Export, op).Observe(e.Duration.Seconds())
		m = nil
	} else {
		m.requests[e.Op][res].Inc()
		m.duration[e.Op].Observe(e.Duration.Seconds())
	}
	if res != resultOK {
		return
	}
	switch e.Op {
	case nbd.OpRead:
		h.bytes(m, e.Export, false).Add(float64(e.Length))
	case nbd.OpWrite:
		h.bytes(m, e.Export, true).Add(float64(e.Length))
	}
}

// bytes returns the read or written bytes counter of export.
func (h *nbdHooks) bytes(m *exportMetrics, export string, write bool) prometheus.Counter {
	switch {
	case m != nil && write:
		return m.writtenBytes
	case m != nil:
		return m.readBytes
	case write:
		return h.r.nbd.writtenBytes.WithLabelValues(export)
	}
	return h.r.nbd.readBytes.WithLabelValues(export)
}

func (h *nbdHooks) conn(e nbd.ConnEvent) {
	m := h.exports[e.Export]
	if m == nil {
		v := &h.r.nbd
		m = &exportMetrics{conns: v.conns.WithLabelValues(e.Export), connsTotal: v.connsTotal.WithLabelValues(e.Export),
			full: v.full.WithLabelValues(e.Export)}
	}
	switch e.Kind {
	case nbd.ConnEnter:
		m.conns.Inc()
		m.connsTotal.Inc()
	case nbd.ConnLeave:
		m.conns.Dec()
	case nbd.ConnFull:
		m.full.Inc()
	}
}

func (h *nbdHooks) failure(f nbd.Failure) {
	for _, fd := range f.Findings {
		h.r.failures.WithLabelValues(f.Export, string(fd.Kind)).Add(float64(max(fd.N, 1)))
	}
}

func (h *nbdHooks) connError(err error) {
	reason := "other"
	switch {
	case errors.Is(err, nbd.ErrRefused):
		reason = "refused"
	case errors.Is(err, nbd.ErrEvicted):
		reason = "evicted"
	case errors.Is(err, nbd.ErrProtocol):
		reason = "protocol"
	}
	h.r.nbd.connErrors.WithLabelValues(reason).Inc()
}

// kinds are the failure kinds whose series exist from the start.
var kinds = []blockdev.Kind{blockdev.KindGuard, blockdev.KindAppTag, blockdev.KindRefTag, blockdev.KindStorageTag,
	blockdev.KindSectorSum, blockdev.KindTorn, blockdev.KindIO, blockdev.KindUnwrittenData, blockdev.KindKeyedTag}

// initFailures makes volume's verification failure series exist at zero,
// so that their rate is known from the first scrape.
func (r *Registry) initFailures(volume string) {
	for _, k := range kinds {
		r.failures.WithLabelValues(volume, string(k))
	}
}
