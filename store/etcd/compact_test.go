package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestCompaction checks that the writer compacts etcd's history as it
// writes, but never past the snapshot of one of its open iterators.
func TestCompaction(t *testing.T) {
	if testing.Short() {
		t.Skip("short: waits for revision samples")
	}
	c := startCluster(t, 1, 0)
	o := testOptions()
	o.CompactEvery, o.CompactRetention = 10, time.Nanosecond
	k := openT(t, c.URL(newPrefix(t)), o)
	defer k.Close()
	set := func(i int) {
		b := k.NewBatch()
		b.Set([]byte("a"), fmt.Appendf(nil, "%d", i))
		b.Set([]byte("b"), fmt.Appendf(nil, "%d", i))
		if err := b.Commit(true); err != nil {
			t.Fatal(err)
		}
	}
	set(0)
	it, err := k.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	k.mu.Lock()
	snap := k.iters[it.(*iter)]
	k.mu.Unlock()
	for i := 1; i <= 60; i++ {
		set(i)
		time.Sleep(20 * time.Millisecond) // one revision sample a second
		if i == 30 {
			time.Sleep(1100 * time.Millisecond)
		}
	}
	var got []string
	for it.Next() {
		got = append(got, string(it.Key())+"="+string(it.Value()))
	}
	if err := it.Err(); err != nil || len(got) != 2 || got[0] != "a=0" || got[1] != "b=0" {
		t.Fatalf("iterator over a snapshot kept through compactions: %q, %v", got, err)
	}
	it.Close()
	admin := adminClient(t, c)
	compacted := func(rev int64) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := admin.Get(ctx, k.dataKey([]byte("a")), clientv3.WithRev(rev))
		return errors.Is(err, rpctypes.ErrCompacted)
	}
	if compacted(snap) {
		t.Fatalf("revision %d of an open iterator was compacted", snap)
	}
	// With the iterator closed, later writes compact past it.
	for i := 61; i <= 100 && !compacted(snap); i++ {
		set(i)
		time.Sleep(50 * time.Millisecond)
		if i%20 == 0 {
			time.Sleep(1100 * time.Millisecond)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for !compacted(snap) {
		if time.Now().After(deadline) {
			t.Fatalf("revision %d never compacted after its iterator closed", snap)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
