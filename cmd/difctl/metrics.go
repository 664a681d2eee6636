package main

import (
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/nbd"
	"github.com/difctl/difctl/blockdev/scrub"
	"github.com/difctl/difctl/metrics"
	"github.com/difctl/difctl/store"
	"github.com/spf13/cobra"
)

// metricsOptions are --metrics-listen (serve, scrub) and its test hooks.
type metricsOptions struct {
	MetricsListen string // HOST:PORT; "" for no metrics
	// MetricsReady and MetricsDone, if not nil, get the metrics server's
	// address once it listens and just before it closes (tests).
	MetricsReady, MetricsDone func(net.Addr)
}

func addMetricsFlag(cmd *cobra.Command, o *metricsOptions) {
	cmd.Flags().StringVar(&o.MetricsListen, "metrics-listen", "", "serve Prometheus metrics at http://`HOST:PORT`/metrics while the command runs")
}

// commandMetrics are the metrics of a command run with --metrics-listen.
// A nil *commandMetrics (no --metrics-listen) sets no hook and serves
// nothing: every method is then a no-op.
type commandMetrics struct {
	reg  *metrics.Registry
	srv  *metrics.Server
	done func(net.Addr)
}

// startMetrics serves the command's metrics at o.MetricsListen, saying
// where on stderr unless quiet; nil without --metrics-listen. An address
// that is not HOST:PORT is a usage error.
func startMetrics(o metricsOptions, quiet bool, stderr io.Writer) (*commandMetrics, error) {
	if o.MetricsListen == "" {
		return nil, nil
	}
	_, port, err := net.SplitHostPort(o.MetricsListen)
	if err != nil {
		return nil, usageErrorf("--metrics-listen %q: want HOST:PORT", o.MetricsListen)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return nil, usageErrorf("--metrics-listen %q: the port must be a number from 0 to 65535", o.MetricsListen)
	}
	m := &commandMetrics{reg: metrics.New(), done: o.MetricsDone}
	if m.srv, err = m.reg.Listen(o.MetricsListen); err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	a := m.srv.Addr()
	if !quiet {
		host := a.String()
		if ta, ok := a.(*net.TCPAddr); ok && ta.IP.IsUnspecified() {
			host = net.JoinHostPort("localhost", strconv.Itoa(ta.Port))
		}
		fmt.Fprintf(stderr, "difctl: metrics at http://%s/metrics\n", host)
	}
	if o.MetricsReady != nil {
		o.MetricsReady(a)
	}
	return m, nil
}

// close stops serving the metrics.
func (m *commandMetrics) close() {
	if m == nil {
		return
	}
	if m.done != nil {
		m.done(m.srv.Addr())
	}
	m.srv.Close()
}

// storeOptions returns so with the commits of volume's store counted.
func (m *commandMetrics) storeOptions(volume string, so store.OpenOptions) store.OpenOptions {
	if m != nil {
		so.OnCommit = m.reg.StoreCommits(volume)
	}
	return so
}

// volume exports v's counters.
func (m *commandMetrics) volume(name string, v *blockdev.Volume) {
	if m != nil {
		m.reg.Volume(name, v) // names are unique: serve refuses two exports of one name
	}
}

// nbdOptions returns o with the hooks of the server of exports set.
func (m *commandMetrics) nbdOptions(exports []nbd.Export, o nbd.Options) nbd.Options {
	if m != nil {
		names := make([]string, len(exports))
		for i, e := range exports {
			names[i] = e.Name
		}
		m.reg.NBD(&o, names...)
	}
	return o
}

// scrub sets o's hooks for a scrub of src, named name, and exports its
// volume's counters if it is a volume.
func (m *commandMetrics) scrub(o *scrub.Options, name string, src blockdev.CheckSource) {
	if m == nil {
		return
	}
	m.reg.Scrub(o, name)
	if v, ok := src.(*blockdev.Volume); ok {
		m.volume(name, v)
	}
}
