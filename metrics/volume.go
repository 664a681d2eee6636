package metrics

import (
	"fmt"
	"sync"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/store"
	"github.com/prometheus/client_golang/prometheus"
)

// volumeStat is one counter of blockdev.Stats.
type volumeStat struct {
	desc *prometheus.Desc
	get  func(*blockdev.Stats) int64
}

func volumeDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "volume", name), help, []string{"volume"}, nil)
}

// volumeStats are the counters the volume collector reads from
// Volume.Stats at each scrape.
var volumeStats = []volumeStat{
	{volumeDesc("read_blocks_total", "Blocks verified by reads and checks (NBD reads, scrubs)."),
		func(s *blockdev.Stats) int64 { return s.ReadBlocks }},
	{volumeDesc("written_blocks_total", "Blocks written (a partial block counts once)."),
		func(s *blockdev.Stats) int64 { return s.WrittenBlocks }},
	{volumeDesc("rereads_total", "Re-reads of blocks that failed verification, before they were reported."),
		func(s *blockdev.Stats) int64 { return s.Rereads }},
	{volumeDesc("transient_blocks_total", "Blocks that failed verification and then passed a re-read (not reported as failures)."),
		func(s *blockdev.Stats) int64 { return s.Transient }},
	{volumeDesc("failed_blocks_total", "Blocks reported as failing verification, after their re-reads."),
		func(s *blockdev.Stats) int64 { return s.Failed }},
	{volumeDesc("flushes_total", "Staged batches of writes written out (one synced store commit of their intents each)."),
		func(s *blockdev.Stats) int64 { return s.Flushes }},
	{volumeDesc("syncs_total", "Completed syncs (FLUSH, FUA, and those the volume did by itself)."),
		func(s *blockdev.Stats) int64 { return s.Syncs }},
	{volumeDesc("tuple_cache_hits_total", "Tuple page reads found in the volume's tuple cache."),
		func(s *blockdev.Stats) int64 { return s.TupleCacheHits }},
	{volumeDesc("tuple_cache_misses_total", "Tuple page reads that read the page from the store (and decoded)."),
		func(s *blockdev.Stats) int64 { return s.TupleCacheMisses }},
	{volumeDesc("repairs_total", "Failing blocks repaired from a verified copy (a mirror leg, a repair source), by reads and checks."),
		func(s *blockdev.Stats) int64 { return s.Repaired }},
	{volumeDesc("unrepairable_blocks_total", "Failing blocks for which no mirror leg or repair source had a copy that verifies."),
		func(s *blockdev.Stats) int64 { return s.Unrepairable }},
}

// volumeCollector exports the Stats of the registered volumes, read at
// each scrape: no goroutine polls them.
type volumeCollector struct {
	mu   sync.Mutex
	vols []namedVolume
}

type namedVolume struct {
	name string
	v    *blockdev.Volume
}

func (c *volumeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, s := range volumeStats {
		ch <- s.desc
	}
}

func (c *volumeCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	vols := c.vols
	c.mu.Unlock()
	for _, nv := range vols {
		st := nv.v.Stats()
		for _, s := range volumeStats {
			ch <- prometheus.MustNewConstMetric(s.desc, prometheus.CounterValue, float64(s.get(&st)), nv.name)
		}
	}
}

// Volume exports v's counters (Volume.Stats, read at each scrape) labelled
// volume=name, and makes its verification failure series exist at zero. A
// name given twice is refused.
func (r *Registry) Volume(name string, v *blockdev.Volume) error {
	c := r.vol
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, nv := range c.vols {
		if nv.name == name {
			return fmt.Errorf("metrics: volume %q registered twice", name)
		}
	}
	c.vols = append(c.vols[:len(c.vols):len(c.vols)], namedVolume{name, v})
	r.initFailures(name)
	return nil
}

// StoreCommits returns a hook that counts the batch commits of volume's
// store, for store.OpenOptions.OnCommit or store.ObserveCommits: commits
// by sync flag, failed commits, and the time of the synced ones.
func (r *Registry) StoreCommits(volume string) func(store.CommitEvent) {
	synced, unsynced := r.commits.WithLabelValues(volume, "true"), r.commits.WithLabelValues(volume, "false")
	failed := r.commitFailures.WithLabelValues(volume)
	dur := r.syncedCommitDur.WithLabelValues(volume)
	return func(e store.CommitEvent) {
		switch {
		case e.Err != nil:
			failed.Inc()
		case e.Sync:
			dur.Observe(e.Duration.Seconds())
		}
		if e.Sync {
			synced.Inc()
		} else {
			unsynced.Inc()
		}
	}
}
