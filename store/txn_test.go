package store_test

import (
	"testing"

	"github.com/difctl/difctl/store"
)

// sizingKV records the largest batch asked for through store.BatchSizer.
type sizingKV struct {
	store.KV
	largest int
}

func (k *sizingKV) NewBatchWithSize(size int) store.Batch {
	k.largest = max(k.largest, size)
	return k.KV.NewBatch()
}

// TestTxnSizedByPages checks that a transaction of many small writes is
// sized by the pages it writes, not by its writes: Len counts a page once
// for a run of writes in it, and Commit asks for a batch of about the pages'
// size. A fold of random 4 KiB writes stages hundreds of writes per page;
// sized per write, its batches asked for gigabytes.
func TestTxnSizedByPages(t *testing.T) {
	const pages, perPage = 8, 64
	for _, tc := range []struct {
		format   string
		bs, ts   int
		pageSize int // the page value's bytes, at most
	}{
		{"512+8", 512, 8, 1024*12 + 256},
		{"4096+16", 4096, 16, 1024*16 + 256},
	} {
		t.Run("format="+tc.format, func(t *testing.T) {
			kv := &sizingKV{KV: store.NewMem()}
			defer kv.Close()
			m := store.NewManifest(tc.format, tc.bs, tc.ts, pages*1024*int64(tc.bs), "d")
			tp, err := store.CreateTuples(kv, "v", m)
			if err != nil {
				t.Fatal(err)
			}
			var sums []uint32
			if m.SectorSums {
				sums = make([]uint32, 1)
			}
			x := tp.NewTxn()
			// perPage one-block writes, 16 blocks apart, in each page, in
			// ascending order as a fold stages them.
			for p := range int64(pages) {
				for i := range int64(perPage) {
					if err := x.WriteRange(p*1024+i*16, make([]byte, tc.ts), sums); err != nil {
						t.Fatal(err)
					}
				}
			}
			limit := pages * (tc.pageSize + 64)
			if x.Len() > limit {
				t.Errorf("Len %d after %d writes into %d pages, want at most %d", x.Len(), pages*perPage, pages, limit)
			}
			kv.largest = 0
			if err := x.Commit(false); err != nil {
				t.Fatal(err)
			}
			if kv.largest > limit {
				t.Errorf("Commit asked for a batch of %d bytes for %d pages, want at most %d", kv.largest, pages, limit)
			}
			if kv.largest < pages*tc.pageSize/2 {
				t.Errorf("Commit asked for a batch of %d bytes for %d pages: too small to hold them", kv.largest, pages)
			}
			bm := store.NewBitmap(1)
			if _, err := tp.ReadRange(3*1024+16, make([]byte, tc.ts), sums, bm); err != nil || !bm.Has(0) {
				t.Errorf("read back: %v, written %v", err, bm.Has(0))
			}
		})
	}
	// Dropped intents count what they hold until Commit, not only what
	// they add to the batch: a transaction filled to a size by them holds
	// about that size.
	t.Run("drops", func(t *testing.T) {
		kv := store.NewMem()
		defer kv.Close()
		tp, err := store.CreateTuples(kv, "v", store.NewManifest("512+8", 512, 8, 1<<20, "d"))
		if err != nil {
			t.Fatal(err)
		}
		x := tp.NewTxn()
		const n = 1000
		for i := range int64(n) {
			if err := x.DropIntent(store.IntentID{LBA: i, N: 1, Seq: uint64(i + 1)}); err != nil {
				t.Fatal(err)
			}
		}
		if x.Len() < n*100 {
			t.Errorf("Len %d after %d dropped intents, want at least %d (what each staged deletion holds)", x.Len(), n, n*100)
		}
		x.Abort()
	})
}
