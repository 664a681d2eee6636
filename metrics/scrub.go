package metrics

import (
	"sync"

	"github.com/difctl/difctl/blockdev/scrub"
	"github.com/prometheus/client_golang/prometheus"
)

func scrubDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "scrub", name), help, []string{"volume"}, nil)
}

// scrubStat is one value of scrub.Progress.
type scrubStat struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	get  func(*scrub.Progress) float64
}

var scrubStats = []scrubStat{
	{scrubDesc("checked_bytes_total", "Data bytes the scrub checked in this run."), prometheus.CounterValue,
		func(p *scrub.Progress) float64 { return float64(p.Bytes) }},
	{scrubDesc("checked_blocks_total", "Blocks the scrub checked in this run."), prometheus.CounterValue,
		func(p *scrub.Progress) float64 { return float64(p.Blocks) }},
	{scrubDesc("findings_total", "Findings the scrub delivered in this run (transient ones and, with --errors-only, resolved ones included)."), prometheus.CounterValue,
		func(p *scrub.Progress) float64 { return float64(p.Findings) }},
	{scrubDesc("pass_done_bytes", "Data bytes of the pass checked, by this run and, when it resumed a pass, by the runs before it."), prometheus.GaugeValue,
		func(p *scrub.Progress) float64 { return float64(p.Done) }},
	{scrubDesc("pass_bytes", "Data bytes of the pass (the range scrubbed; with --errors-only, the blocks rechecked)."), prometheus.GaugeValue,
		func(p *scrub.Progress) float64 { return float64(p.Total) }},
	{scrubDesc("rate_bytes_per_second", "Data bytes checked per second of active time (not paused), capped by --rate."), prometheus.GaugeValue,
		func(p *scrub.Progress) float64 { return p.Rate }},
	{scrubDesc("eta_seconds", "Time left at the current rate; -1 while the rate is unknown."), prometheus.GaugeValue,
		func(p *scrub.Progress) float64 {
			if p.ETA < 0 {
				return -1
			}
			return p.ETA.Seconds()
		}},
	{scrubDesc("paused", "1 while the scrub is paused, else 0."), prometheus.GaugeValue,
		func(p *scrub.Progress) float64 {
			if p.Paused {
				return 1
			}
			return 0
		}},
}

// scrubCollector exports the last progress report of each scrub.
type scrubCollector struct {
	mu   sync.Mutex
	last map[string]scrub.Progress // by volume
}

func (c *scrubCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, s := range scrubStats {
		ch <- s.desc
	}
}

func (c *scrubCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for vol, p := range c.last {
		for _, s := range scrubStats {
			ch <- prometheus.MustNewConstMetric(s.desc, s.typ, s.get(&p), vol)
		}
	}
}

func (c *scrubCollector) set(volume string, p scrub.Progress) {
	c.mu.Lock()
	if c.last == nil {
		c.last = map[string]scrub.Progress{}
	}
	c.last[volume] = p
	c.mu.Unlock()
}

// Scrub sets o's Progress and OnFinding to export the progress of a scrub
// of volume (labelled volume=name) and to count its failing findings in
// the verification failures (functions already set there are called too,
// after). The scrub's series exist from this call, at zero, and follow
// its progress reports: o.ProgressInterval is how fresh they are.
func (r *Registry) Scrub(o *scrub.Options, volume string) {
	r.initFailures(volume)
	r.scr.set(volume, scrub.Progress{ETA: -1})
	o.Progress = chain(func(p scrub.Progress) { r.scr.set(volume, p) }, o.Progress)
	next := o.OnFinding
	o.OnFinding = func(f scrub.Finding) error {
		if f.Bad() {
			r.failures.WithLabelValues(volume, string(f.Kind)).Add(float64(max(f.N, 1)))
		}
		if next != nil {
			return next(f)
		}
		return nil
	}
}
