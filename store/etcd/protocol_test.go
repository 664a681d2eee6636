package etcd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/difctl/difctl/store"
)

var errCrash = errors.New("test: crashed here")

// crashAfter makes k fail every write transaction after the first n, as a
// process killed between transactions would stop sending.
func crashAfter(k *kv, n int) *[]string {
	var kinds []string
	count := 0
	var mu sync.Mutex
	k.hook = func(kind string) error {
		mu.Lock()
		defer mu.Unlock()
		count++
		if count > n {
			return errCrash
		}
		kinds = append(kinds, kind)
		return nil
	}
	return &kinds
}

func bigValue(i, gen int) []byte {
	return bytes.Repeat(fmt.Appendf(nil, "%d/%d;", i, gen), 40)
}

// TestCrashBetweenTransactions commits a batch that takes many
// transactions over an older one, crashes after each possible number of
// transactions, and checks after reopening that the store holds exactly
// the old batch (crash before the commit record) or exactly the new one
// (after it), never a mix, and that readers never see a mix either while
// the half-done commit sits in etcd.
func TestCrashBetweenTransactions(t *testing.T) {
	c := startCluster(t, 1, 0)
	o := testOptions()
	o.MaxTxnOps, o.InFlight = 8, 1 // 1 in flight: one crash point per transaction
	const n = 40                   // keys: 5 staging transactions of 8
	url := c.URL(newPrefix(t))
	k := openT(t, url, o)
	defer func() { k.Close() }()
	write := func(k *kv, gen int) error {
		b := k.NewBatch()
		for i := range n {
			if gen > 0 && i%10 == 9 {
				b.Delete(fmt.Appendf(nil, "k%03d", i))
				continue
			}
			b.Set(fmt.Appendf(nil, "k%03d", i), bigValue(i, gen))
		}
		return b.Commit(true)
	}
	state := func(k *kv) (int, error) {
		it, err := k.NewIter(nil, nil)
		if err != nil {
			return 0, err
		}
		defer it.Close()
		gens := map[int]int{}
		for it.Next() {
			var i int
			fmt.Sscanf(string(it.Key()), "k%03d", &i)
			gen := -1
			for g := range 2 {
				if bytes.Equal(it.Value(), bigValue(i, g)) {
					gen = g
				}
			}
			gens[gen]++
			if v, err := k.Get(it.Key()); err != nil || !bytes.Equal(v, it.Value()) {
				return 0, fmt.Errorf("Get(%s) disagrees with the iterator: %v", it.Key(), err)
			}
		}
		if err := it.Err(); err != nil {
			return 0, err
		}
		switch {
		case len(gens) == 1 && gens[0] == n:
			return 0, nil
		case len(gens) == 1 && gens[1] == n-n/10:
			for i := 9; i < n; i += 10 {
				if _, err := k.Get(fmt.Appendf(nil, "k%03d", i)); !errors.Is(err, store.ErrNotFound) {
					return 0, fmt.Errorf("deleted key %d: %v", i, err)
				}
			}
			return 1, nil
		}
		return 0, fmt.Errorf("a mix of generations: %v", gens)
	}
	if err := write(k, 0); err != nil {
		t.Fatal(err)
	}
	// Learn the transactions of a full commit, then undo it.
	kinds := crashAfter(k, 1<<30)
	if err := write(k, 1); err != nil {
		t.Fatal(err)
	}
	all := *kinds
	k.hook = nil
	if err := write(k, 0); err != nil {
		t.Fatal(err)
	}
	commitAt := -1
	for i, kind := range all {
		if kind == "commit-record" {
			commitAt = i
		}
	}
	if len(all) < 8 || commitAt < 4 || all[len(all)-1] != "retire" {
		t.Fatalf("a commit of %d keys in transactions of 8 ran %q; want staging, the record, applying, retiring", n, all)
	}
	for crashAt := range len(all) {
		t.Run(fmt.Sprintf("crash=%d-of-%d", crashAt, len(all)), func(t *testing.T) {
			crashAfter(k, crashAt)
			if err := write(k, 1); !errors.Is(err, errCrash) {
				t.Fatalf("commit with a crash after %d transactions: %v", crashAt, err)
			}
			// Readers of the half-done commit (another process could be
			// one) see all or nothing.
			k.hook = nil
			peek := openReader(t, c, url)
			got, err := peek.state(state)
			if err != nil {
				t.Fatalf("reader of a half-done commit: %v", err)
			}
			want := 0
			if crashAt > commitAt {
				want = 1
			}
			if got != want {
				t.Fatalf("reader of a commit crashed after %d transactions (record at %d) sees generation %d, want %d", crashAt, commitAt, got, want)
			}
			k = crash(t, c, k)
			got, err = state(k)
			if err != nil {
				t.Fatalf("after the crash and reopen: %v", err)
			}
			if got != want {
				t.Fatalf("after a crash after %d transactions (record at %d): generation %d, want %d", crashAt, commitAt, got, want)
			}
			// Open removed every staged key and commit record.
			if n := countPrefix(t, c, k.base+string(tagStage)) + countPrefix(t, c, k.base+string(tagCommit)); n != 0 {
				t.Fatalf("%d staged keys or commit records left after recovery", n)
			}
			if err := write(k, 0); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// reader reads a store's keys without its lock, as the store's own
// readers do, for a check from outside the writer.
type reader struct{ k *kv }

func openReader(t *testing.T, c *cluster, url string) reader {
	tg, _ := parseURL(url)
	cli := adminClient(t, c)
	k := &kv{cli: cli, t: tg, o: testOptions(), base: tg.prefix + "/", ctx: context.Background(), iters: map[*iter]int64{}}
	k.o.normalize()
	return reader{k}
}

func (r reader) state(f func(*kv) (int, error)) (int, error) { return f(r.k) }

func countPrefix(t *testing.T, c *cluster, p string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := adminClient(t, c).Get(ctx, p, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return r.Count
}

// TestBulkCrashBetweenTransactions crashes a bulk load after its staging
// and after its commit record: before, nothing of it is visible after the
// reopen; after, all of it.
func TestBulkCrashBetweenTransactions(t *testing.T) {
	c := startCluster(t, 1, 0)
	o := testOptions()
	o.MaxTxnOps, o.InFlight = 8, 2
	k := openT(t, c.URL(newPrefix(t)), o)
	defer func() { k.Close() }()
	for _, tc := range []struct {
		stopAt  string
		visible bool
	}{{"commit-record", false}, {"apply", true}, {"retire", true}} {
		t.Run("crash-before="+tc.stopAt, func(t *testing.T) {
			var seen atomic.Bool
			k.hook = func(kind string) error {
				if kind == tc.stopAt || seen.Load() && kind != "bulk-stage" {
					seen.Store(true)
					return errCrash
				}
				return nil
			}
			bw, _ := k.NewBulkWriter()
			for i := range 100 {
				if err := bw.Set(fmt.Appendf(nil, "%s/%03d", tc.stopAt, i), bigValue(i, 7)); err != nil {
					t.Fatal(err)
				}
			}
			if err := bw.Finish(true); !errors.Is(err, errCrash) {
				t.Fatalf("Finish = %v, want the crash", err)
			}
			k = crash(t, c, k)
			it, _ := k.NewIter([]byte(tc.stopAt+"/"), []byte(tc.stopAt+"0"))
			count := 0
			for it.Next() {
				count++
			}
			it.Close()
			if want := map[bool]int{false: 0, true: 100}[tc.visible]; count != want {
				t.Fatalf("after a crash before %s: %d keys of the load, want %d", tc.stopAt, count, want)
			}
		})
	}
}

func TestLock(t *testing.T) {
	if testing.Short() {
		t.Skip("short: waits for lease expiry")
	}
	c := startCluster(t, members(), 0)
	url := c.URL(newPrefix(t))
	o := testOptions()
	o.Holder = "host=first"
	a := openT(t, url, o)
	o2 := testOptions()
	o2.Holder = "host=second"
	_, err := Open(url, o2)
	var le *LockedError
	if !errors.As(err, &le) || !errors.Is(err, ErrLocked) || !strings.Contains(le.Holder, "host=first") {
		t.Fatalf("second Open = %v, want a *LockedError naming host=first", err)
	}
	// A clean Close releases the lock at once.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b := openT(t, url, o2)
	// A holder that dies keeps the lock until its lease expires, then the
	// next opener (waiting for it) gets in.
	lease := b.sess.Lease()
	b.abandon()
	start := time.Now()
	o.LockWait = 10 * time.Second
	a = openT(t, url, o)
	if d := time.Since(start); d < 2*time.Second {
		t.Errorf("opened %v after the holder died, before its 3s lease could expire", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if r, err := adminClient(t, c).TimeToLive(ctx, lease); err != nil || r.TTL > 0 {
		t.Errorf("dead holder's lease still alive: TTL %d, %v", r.TTL, err)
	}
	a.Close()
}

// TestFenced revokes a writer's lease behind its back and lets another
// host take the store: the old writer's next commit must be refused by
// the cluster (the transaction's revision comparison), with its local
// lease check switched off so that only the server decides.
func TestFenced(t *testing.T) {
	c := startCluster(t, members(), 0)
	url := c.URL(newPrefix(t))
	old := openT(t, url, testOptions())
	defer old.Close()
	old.noLocalFence = true
	b := old.NewBatch()
	b.Set([]byte("a"), []byte("old"))
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := adminClient(t, c).Revoke(ctx, old.sess.Lease()); err != nil {
		t.Fatal(err)
	}
	for _, takeover := range []bool{false, true} {
		var nw *kv
		if takeover {
			o := testOptions()
			o.Holder = "host=new"
			nw = openT(t, url, o)
		}
		for _, big := range []bool{false, true} {
			b := old.NewBatch()
			n := 1
			if big {
				n = 300 // beyond one transaction: refused at its first
			}
			for i := range n {
				b.Set(fmt.Appendf(nil, "k%d", i), []byte("fenced"))
			}
			err := b.Commit(true)
			if !errors.Is(err, ErrFenced) || takeover && !strings.Contains(err.Error(), "host=new") {
				t.Fatalf("takeover=%v big=%v: commit of a fenced writer = %v, want ErrFenced naming the new holder", takeover, big, err)
			}
		}
		bw, _ := old.NewBulkWriter()
		bw.Set([]byte("bulk"), []byte("fenced"))
		if err := bw.Finish(true); !errors.Is(err, ErrFenced) {
			t.Fatalf("bulk Finish of a fenced writer = %v", err)
		}
		if nw != nil {
			if v, err := nw.Get([]byte("a")); err != nil || string(v) != "old" {
				t.Fatalf("new holder reads a = %q, %v", v, err)
			}
			if n := countPrefix(t, c, nw.base+string(tagData)); n != 1 {
				t.Fatalf("%d data keys after the fenced writes, want 1", n)
			}
			nw.Close()
		}
	}
}

// TestReaders: readers (ReadOnly) open together, see every commit, and
// cannot write; a writer and readers exclude each other, each refused
// with a *LockedError naming the other, until the other closes. Before
// readers had their own keys, every opener took the writer's lock, and
// of three parallel verifies two failed as "locked by another writer".
func TestReaders(t *testing.T) {
	c := startCluster(t, members(), 0)
	url := c.URL(newPrefix(t))
	o := testOptions()
	o.Holder = "host=writer"
	w := openT(t, url, o)
	b := w.NewBatch()
	b.Set([]byte("k"), []byte("v1"))
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	ro := testOptions()
	ro.ReadOnly = true
	ro.Holder = "host=reader"
	if _, err := Open(url, ro); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "host=writer") {
		t.Fatalf("reader while a writer holds the store: %v, want ErrLocked naming the writer", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var rs []*kv
	for range 3 {
		r := openT(t, url, ro)
		rs = append(rs, r)
		if v, err := r.Get([]byte("k")); err != nil || string(v) != "v1" {
			t.Fatalf("reader Get = %q, %v", v, err)
		}
		rb := r.NewBatch()
		rb.Set([]byte("k"), []byte("x"))
		if err := rb.Commit(true); !errors.Is(err, store.ErrReadOnly) {
			t.Fatalf("reader commit: %v, want ErrReadOnly", err)
		}
		if _, err := r.NewBulkWriter(); !errors.Is(err, store.ErrReadOnly) {
			t.Fatalf("reader bulk load: %v, want ErrReadOnly", err)
		}
	}
	_, err := Open(url, o)
	var le *LockedError
	if !errors.As(err, &le) || !le.Reader || !strings.Contains(err.Error(), "open for reading") {
		t.Fatalf("writer while readers hold the store: %v, want a *LockedError naming a reader", err)
	}
	for _, r := range rs {
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	w = openT(t, url, o)
	w.Close()
}
