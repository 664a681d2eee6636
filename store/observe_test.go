package store_test

import (
	"sync/atomic"
	"testing"

	"github.com/difctl/difctl/store"
	"github.com/difctl/difctl/store/storetest"
)

// TestObserveConformance runs the conformance suite on observed stores,
// made by ObserveCommits and by OpenOptions.OnCommit: the wrapper changes
// nothing a backend promises, and sees the commits.
func TestObserveConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T, fn func(store.CommitEvent)) store.KV
	}{
		{"backend=mem", func(t *testing.T, fn func(store.CommitEvent)) store.KV {
			return store.ObserveCommits(store.NewMem(), fn)
		}},
		{"backend=pebble", func(t *testing.T, fn func(store.CommitEvent)) store.KV {
			kv, err := store.OpenWith("pebble:"+t.TempDir(), store.OpenOptions{Create: true, OnCommit: fn})
			if err != nil {
				t.Fatal(err)
			}
			return kv
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var commits atomic.Int64
			count := func(store.CommitEvent) { commits.Add(1) }
			storetest.RunConformance(t, storetest.Backend{
				Open: func(t *testing.T) store.KV { return tc.open(t, count) },
			})
			if commits.Load() == 0 {
				t.Error("no commit was observed")
			}
		})
	}
}

// TestObserveCommits checks the events: one per Commit, with its batch's
// size, its sync flag and its error.
func TestObserveCommits(t *testing.T) {
	var got []store.CommitEvent
	kv := store.ObserveCommits(store.NewMem(), func(e store.CommitEvent) { got = append(got, e) })
	defer kv.Close()
	b := kv.NewBatch()
	b.Set([]byte("a"), []byte("1"))
	b.Set([]byte("b"), []byte("22"))
	n := b.Len()
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	b = kv.NewBatch()
	b.Delete([]byte("a"))
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(false); err == nil {
		t.Fatal("a batch committed twice")
	}
	if len(got) != 3 {
		t.Fatalf("%d events, want 3: %+v", len(got), got)
	}
	if e := got[0]; !e.Sync || e.Ops != 2 || e.Bytes != n || e.Err != nil || e.Duration < 0 {
		t.Errorf("first commit: %+v, want synced, 2 ops, %d bytes, no error", e, n)
	}
	if e := got[1]; e.Sync || e.Ops != 1 || e.Err != nil {
		t.Errorf("second commit: %+v, want not synced, 1 op, no error", e)
	}
	if got[2].Err == nil {
		t.Errorf("third commit: %+v, want its error", got[2])
	}
	if v, err := kv.Get([]byte("b")); err != nil || string(v) != "22" {
		t.Errorf("Get through the observed store: %q, %v", v, err)
	}
}
