package metrics

import (
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Histogram buckets, in seconds.
var (
	// requestBuckets: 10 µs (a 4 KiB read of cached data) doubling to
	// 5.2 s (a FLUSH behind a large batch of writes).
	requestBuckets = prometheus.ExponentialBuckets(10e-6, 2, 20)
	// commitBuckets: 100 µs (an fdatasync on fast flash) doubling to
	// 3.3 s (a commit stuck behind a slow disk).
	commitBuckets = prometheus.ExponentialBuckets(100e-6, 2, 16)
)

// Registry holds the metrics of one process. Make one with [New], wire
// hooks into it ([Registry.NBD], [Registry.Volume], [Registry.StoreCommits],
// [Registry.Scrub]) and serve it ([Registry.Listen] or [Registry.Handler]).
// Its methods are safe for concurrent use.
type Registry struct {
	reg *prometheus.Registry
	nbd nbdVecs
	vol *volumeCollector
	scr *scrubCollector
	// verification failures by kind, and store commits, per volume
	failures        *prometheus.CounterVec
	commits         *prometheus.CounterVec
	commitFailures  *prometheus.CounterVec
	syncedCommitDur *prometheus.HistogramVec
}

// New returns a registry with difctl's metrics and the Go runtime's and
// the process's (go_*, process_*).
func New() *Registry {
	r := &Registry{reg: prometheus.NewRegistry()}
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r.nbd = newNBDVecs(r.reg)
	r.vol = &volumeCollector{}
	r.scr = &scrubCollector{}
	r.reg.MustRegister(r.vol, r.scr)
	r.failures = counterVec(r.reg, "verification_failures_total",
		"Blocks that failed a check, by kind (the findings' kinds: guard, app-tag, ref-tag, storage-tag, sector-crc, torn, io, unwritten-data, keyed-tag), as reads through the NBD server and scrubs found them; transient failures are not counted.",
		"volume", "kind")
	r.commits = counterVec(r.reg, "store_commits_total",
		"Batch commits to the volume's store, synced or not.", "volume", "sync")
	r.commitFailures = counterVec(r.reg, "store_commit_failures_total",
		"Batch commits to the volume's store that failed.", "volume")
	r.syncedCommitDur = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "store_synced_commit_duration_seconds",
		Help:    "Time of the synced batch commits to the volume's store (the write intents and the folds of a Sync).",
		Buckets: commitBuckets,
	}, []string{"volume"})
	r.reg.MustRegister(r.syncedCommitDur)
	return r
}

// namespace prefixes every metric of difctl's own.
const namespace = "difctl"

func counterVec(reg *prometheus.Registry, name, help string, labels ...string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	reg.MustRegister(v)
	return v
}

func gaugeVec(reg *prometheus.Registry, name, help string, labels ...string) *prometheus.GaugeVec {
	v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, labels)
	reg.MustRegister(v)
	return v
}

// Gatherer returns the registry's metrics, for other exporters and tests.
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// Handler serves the registry's metrics in the Prometheus exposition
// formats (promhttp).
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{Registry: r.reg})
}

// A Server serves a registry's metrics over HTTP at /metrics.
type Server struct {
	l    net.Listener
	srv  *http.Server
	done chan error
}

// Listen listens on the TCP address addr (HOST:PORT; port 0 picks one)
// and serves the registry at /metrics until Close.
func (r *Registry) Listen(addr string) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", r.Handler())
	s := &Server{l: l, done: make(chan error, 1), srv: &http.Server{
		Handler: mux,
		// A server runs for months: a scraper that stalls must not hold
		// a connection for as long.
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}}
	go func() { s.done <- s.srv.Serve(l) }()
	return s, nil
}

// Addr returns the address the server listens on.
func (s *Server) Addr() net.Addr { return s.l.Addr() }

// Close stops listening, closes the connections (a scrape in progress is
// cut short) and returns once the server has stopped.
func (s *Server) Close() error {
	err := s.srv.Close()
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
