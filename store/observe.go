package store

import "time"

// A CommitEvent is one batch commit of a KV made by ObserveCommits (or
// opened with OpenOptions.OnCommit).
type CommitEvent struct {
	Sync     bool          // Commit(true): durable when it returned
	Ops      int           // the batch's Count
	Bytes    int           // the batch's Len
	Duration time.Duration // the time Commit took
	Err      error         // what Commit returned
}

// ObserveCommits returns kv with fn called after every batch Commit, for
// metrics. Bulk loads (BulkLoader) are not reported. The KV returned has
// kv's capabilities (a BulkLoader stays one, and sized batches stay
// sized), and closing it closes kv. fn must be quick and safe for
// concurrent use.
func ObserveCommits(kv KV, fn func(CommitEvent)) KV {
	o := &observedKV{KV: kv, fn: fn}
	if _, ok := kv.(BulkLoader); ok {
		return observedBulkKV{o}
	}
	return o
}

type observedKV struct {
	KV
	fn func(CommitEvent)
}

func (o *observedKV) NewBatch() Batch { return &observedBatch{Batch: o.KV.NewBatch(), fn: o.fn} }

func (o *observedKV) NewBatchWithSize(size int) Batch {
	return &observedBatch{Batch: newBatch(o.KV, size), fn: o.fn}
}

// observedBulkKV is an observedKV of a BulkLoader.
type observedBulkKV struct{ *observedKV }

func (o observedBulkKV) NewBulkWriter() (BulkWriter, error) {
	return o.KV.(BulkLoader).NewBulkWriter()
}

type observedBatch struct {
	Batch
	fn func(CommitEvent)
}

func (b *observedBatch) Commit(sync bool) error {
	ops, n := b.Batch.Count(), b.Batch.Len()
	start := time.Now()
	err := b.Batch.Commit(sync)
	b.fn(CommitEvent{Sync: sync, Ops: ops, Bytes: n, Duration: time.Since(start), Err: err})
	return err
}
