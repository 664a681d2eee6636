package store

import "testing"

// sizedKV records the sizes of the batches asked of it.
type sizedKV struct {
	KV
	sizes []int
}

func (s *sizedKV) NewBatchWithSize(size int) Batch {
	s.sizes = append(s.sizes, size)
	return s.KV.NewBatch()
}

// TestObserveKeepsCapabilities: an observed store is a BulkLoader exactly
// when its backend is one, and asks its backend for sized batches.
func TestObserveKeepsCapabilities(t *testing.T) {
	pb, err := Open("pebble:" + t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer pb.Close()
	for _, tc := range []struct {
		name string
		kv   KV
		bulk bool
	}{{"backend=pebble", pb, true}, {"backend=mem", NewMem(), false}} {
		t.Run(tc.name, func(t *testing.T) {
			o := ObserveCommits(tc.kv, func(CommitEvent) {})
			if _, ok := o.(BulkLoader); ok != tc.bulk {
				t.Errorf("observed store is a BulkLoader: %v, want %v", ok, tc.bulk)
			}
			if _, ok := o.(BatchSizer); !ok {
				t.Error("observed store has no sized batches")
			}
		})
	}
	s := &sizedKV{KV: NewMem()}
	b := newBatch(ObserveCommits(s, func(CommitEvent) {}), 12345)
	if _, ok := b.(*observedBatch); !ok || len(s.sizes) != 1 || s.sizes[0] != 12345 {
		t.Errorf("sized batch of an observed store: %T, backend asked for %v, want an observed batch of 12345 bytes", b, s.sizes)
	}
	b.Close()
}
