// Package storetest is the conformance suite every store.KV backend runs.
//
// The Bulk tests run against store.NewBulkWriter: the backend's own
// BulkWriter when it implements store.BulkLoader, else the batched
// emulation; their subtests are named impl=native or impl=emulated.
//
// A backend's test calls RunConformance with a Backend describing how to open
// a fresh store and, when the engine is durable, how to simulate a crash:
//
//	func TestConformance(t *testing.T) {
//		storetest.RunConformance(t, storetest.Backend{
//			Open: func(t *testing.T) store.KV { ... },
//		})
//	}
package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/difctl/difctl/store"
)

// Backend describes the store under test.
type Backend struct {
	// Open returns a new, empty store. The suite closes it.
	Open func(t *testing.T) store.KV
	// Crash, if set, simulates a power failure under kv at this instant:
	// everything kv made durable survives, anything else may or may not. It
	// returns the store reopened on what survived; kv itself is abandoned
	// (Crash may close it). Backends without durability leave it nil and
	// the crash tests are skipped.
	Crash func(t *testing.T, kv store.KV) store.KV
}

// RunConformance runs every conformance test against b.
func RunConformance(t *testing.T, b Backend) {
	tests := []struct {
		name string
		fn   func(*testing.T, Backend)
	}{
		{"GetMissing", testGetMissing},
		{"SetGetDelete", testSetGetDelete},
		{"Ordering", testOrdering},
		{"Bounds", testBounds},
		{"BatchOrder", testBatchOrder},
		{"BatchAtomic", testBatchAtomic},
		{"BatchReuse", testBatchReuse},
		{"Copies", testCopies},
		{"Snapshot", testSnapshot},
		{"Limits", testLimits},
		{"Closed", testClosed},
		{"ClosedIterator", testClosedIterator},
		{"Concurrent", testConcurrent},
		{"CrashSynced", testCrashSynced},
		{"CrashAtomic", testCrashAtomic},
		{"BulkLoad", testBulkLoad},
		{"BulkOrder", testBulkOrder},
		{"BulkAbort", testBulkAbort},
		{"BulkClosed", testBulkClosed},
		{"BulkCrash", testBulkCrash},
	}
	for _, tc := range tests {
		t.Run("test="+tc.name, func(t *testing.T) { tc.fn(t, b) })
	}
}

func open(t *testing.T, b Backend) store.KV {
	t.Helper()
	kv := b.Open(t)
	t.Cleanup(func() { kv.Close() })
	return kv
}

func commit(t *testing.T, kv store.KV, sync bool, kvs ...string) {
	t.Helper()
	bt := kv.NewBatch()
	for i := 0; i+1 < len(kvs); i += 2 {
		if err := bt.Set([]byte(kvs[i]), []byte(kvs[i+1])); err != nil {
			t.Fatalf("Set(%q): %v", kvs[i], err)
		}
	}
	if err := bt.Commit(sync); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

// scan returns all key/value pairs in [lo, hi) as "k=v" strings.
func scan(t *testing.T, kv store.KV, lo, hi []byte) []string {
	t.Helper()
	it, err := kv.NewIter(lo, hi)
	if err != nil {
		t.Fatalf("NewIter: %v", err)
	}
	defer it.Close()
	var out []string
	for it.Next() {
		out = append(out, string(it.Key())+"="+string(it.Value()))
	}
	if err := it.Err(); err != nil {
		t.Fatalf("iterate: %v", err)
	}
	return out
}

func testGetMissing(t *testing.T, b Backend) {
	kv := open(t, b)
	if _, err := kv.Get([]byte("nope")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get(missing) = %v, want ErrNotFound", err)
	}
	if got := scan(t, kv, nil, nil); len(got) != 0 {
		t.Fatalf("empty store scans %q", got)
	}
}

func testSetGetDelete(t *testing.T, b Backend) {
	kv := open(t, b)
	big := bytes.Repeat([]byte{0xA5}, 1<<20)
	bt := kv.NewBatch()
	for _, kvp := range []struct{ k, v []byte }{{[]byte("a"), []byte("1")}, {[]byte("empty"), nil}, {[]byte("big"), big}, {[]byte{0}, []byte{0xff}}} {
		if err := bt.Set(kvp.k, kvp.v); err != nil {
			t.Fatal(err)
		}
	}
	if bt.Count() != 4 || bt.Len() < len(big) {
		t.Errorf("batch Count=%d Len=%d, want 4 and >= %d", bt.Count(), bt.Len(), len(big))
	}
	if err := bt.Commit(false); err != nil {
		t.Fatal(err)
	}
	if v, err := kv.Get([]byte("empty")); err != nil || len(v) != 0 {
		t.Errorf("Get(empty) = %q, %v; want empty value, nil", v, err)
	}
	if v, err := kv.Get([]byte("big")); err != nil || !bytes.Equal(v, big) {
		t.Errorf("Get(big) = %d bytes, %v", len(v), err)
	}
	if v, err := kv.Get([]byte{0}); err != nil || !bytes.Equal(v, []byte{0xff}) {
		t.Errorf("Get(0x00) = %x, %v", v, err)
	}
	bt = kv.NewBatch()
	bt.Delete([]byte("a"))
	bt.Delete([]byte("never-existed"))
	if err := bt.Commit(true); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get([]byte("a")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get(deleted) err = %v, want ErrNotFound", err)
	}
}

func testOrdering(t *testing.T, b Backend) {
	kv := open(t, b)
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"", "\x00", "\x00\x00", "a", "a\x00", "a\xff", "ab", "b", "\xff", "\xff\xff"}
	for range 500 {
		k := make([]byte, rng.IntN(6))
		for i := range k {
			k[i] = byte(rng.IntN(256))
		}
		keys = append(keys, string(k))
	}
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	shuffled := slices.Clone(keys)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	// Several batches, keys in random order.
	for i := 0; i < len(shuffled); i += 100 {
		bt := kv.NewBatch()
		for _, k := range shuffled[i:min(i+100, len(shuffled))] {
			if err := bt.Set([]byte(k), []byte(k)); err != nil {
				t.Fatal(err)
			}
		}
		if err := bt.Commit(false); err != nil {
			t.Fatal(err)
		}
	}
	it, err := kv.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var got []string
	for it.Next() {
		if !bytes.Equal(it.Key(), it.Value()) {
			t.Fatalf("key %x has value %x", it.Key(), it.Value())
		}
		got = append(got, string(it.Key()))
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, keys) {
		t.Fatalf("iteration order:\n got %q\nwant %q", got, keys)
	}
}

func testBounds(t *testing.T, b Backend) {
	kv := open(t, b)
	commit(t, kv, false, "a", "1", "b", "2", "b\x00", "3", "c", "4", "d", "5")
	for _, tc := range []struct {
		name   string
		lo, hi []byte
		want   []string
	}{
		{"all", nil, nil, []string{"a=1", "b=2", "b\x00=3", "c=4", "d=5"}},
		{"lo=b", []byte("b"), nil, []string{"b=2", "b\x00=3", "c=4", "d=5"}},
		{"hi=c", nil, []byte("c"), []string{"a=1", "b=2", "b\x00=3"}},
		{"lo=b/hi=b0", []byte("b"), []byte("b\x00"), []string{"b=2"}},
		{"lo=bb/hi=zz", []byte("bb"), []byte("zz"), []string{"c=4", "d=5"}},
		{"empty", []byte("c"), []byte("c"), nil},
		{"inverted", []byte("d"), []byte("a"), nil},
	} {
		t.Run("range="+tc.name, func(t *testing.T) {
			if got := scan(t, kv, tc.lo, tc.hi); !slices.Equal(got, tc.want) {
				t.Errorf("scan [%q, %q) = %q, want %q", tc.lo, tc.hi, got, tc.want)
			}
		})
	}
}

func testBatchOrder(t *testing.T, b Backend) {
	kv := open(t, b)
	bt := kv.NewBatch()
	bt.Set([]byte("x"), []byte("1"))
	bt.Delete([]byte("x"))
	bt.Delete([]byte("y"))
	bt.Set([]byte("y"), []byte("2"))
	bt.Set([]byte("z"), []byte("old"))
	bt.Set([]byte("z"), []byte("new"))
	if err := bt.Commit(false); err != nil {
		t.Fatal(err)
	}
	if got, want := scan(t, kv, nil, nil), []string{"y=2", "z=new"}; !slices.Equal(got, want) {
		t.Fatalf("after ordered ops: %q, want %q", got, want)
	}
}

// testBatchAtomic commits large batches while readers check that every
// snapshot holds all of a batch or none of it.
func testBatchAtomic(t *testing.T, b Backend) {
	kv := open(t, b)
	const n = 200
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				it, err := kv.NewIter(nil, nil)
				if err != nil {
					errc <- err
					return
				}
				vals := map[string]int{}
				count := 0
				for it.Next() {
					vals[string(it.Value())]++
					count++
				}
				err = it.Err()
				it.Close()
				if err != nil {
					errc <- err
					return
				}
				if count != 0 && count != n || len(vals) > 1 {
					errc <- fmt.Errorf("snapshot saw a partial batch: %d keys, values %v", count, vals)
					return
				}
			}
		})
	}
	for r := range rounds {
		bt := kv.NewBatch()
		for i := range n {
			bt.Set(fmt.Appendf(nil, "k%04d", i), fmt.Appendf(nil, "round%d", r))
		}
		if err := bt.Commit(false); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

func testBatchReuse(t *testing.T, b Backend) {
	kv := open(t, b)
	bt := kv.NewBatch()
	bt.Set([]byte("a"), []byte("1"))
	if err := bt.Commit(false); err != nil {
		t.Fatal(err)
	}
	if err := bt.Set([]byte("b"), nil); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Set after Commit = %v, want ErrClosed", err)
	}
	if err := bt.Commit(false); !errors.Is(err, store.ErrClosed) {
		t.Errorf("second Commit = %v, want ErrClosed", err)
	}
	if err := bt.Close(); err != nil {
		t.Errorf("Close after Commit = %v", err)
	}
	// An abandoned batch writes nothing.
	bt = kv.NewBatch()
	bt.Set([]byte("c"), []byte("3"))
	bt.Close()
	if got, want := scan(t, kv, nil, nil), []string{"a=1"}; !slices.Equal(got, want) {
		t.Errorf("after abandoned batch: %q, want %q", got, want)
	}
}

func testCopies(t *testing.T, b Backend) {
	kv := open(t, b)
	k, v := []byte("key"), []byte("value")
	bt := kv.NewBatch()
	bt.Set(k, v)
	k[0], v[0] = 'X', 'X' // before commit
	if err := bt.Commit(false); err != nil {
		t.Fatal(err)
	}
	got, err := kv.Get([]byte("key"))
	if err != nil || string(got) != "value" {
		t.Fatalf("Get = %q, %v; batch did not copy its arguments", got, err)
	}
	got[0] = 'Y'
	if again, _ := kv.Get([]byte("key")); string(again) != "value" {
		t.Fatalf("Get returned the store's own memory: now %q", again)
	}
}

func testSnapshot(t *testing.T, b Backend) {
	kv := open(t, b)
	commit(t, kv, false, "a", "1", "b", "2", "c", "3")
	it, err := kv.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	if !it.Next() || string(it.Key()) != "a" {
		t.Fatalf("first key %q", it.Key())
	}
	bt := kv.NewBatch()
	bt.Delete([]byte("b"))
	bt.Set([]byte("c"), []byte("changed"))
	bt.Set([]byte("bb"), []byte("new"))
	if err := bt.Commit(false); err != nil {
		t.Fatal(err)
	}
	got := []string{"a=1"}
	for it.Next() {
		got = append(got, string(it.Key())+"="+string(it.Value()))
	}
	if want := []string{"a=1", "b=2", "c=3"}; !slices.Equal(got, want) {
		t.Errorf("iterator saw later writes: %q, want %q", got, want)
	}
	if got, want := scan(t, kv, nil, nil), []string{"a=1", "bb=new", "c=changed"}; !slices.Equal(got, want) {
		t.Errorf("new iterator: %q, want %q", got, want)
	}
}

func testLimits(t *testing.T, b Backend) {
	kv := open(t, b)
	l := kv.Limits()
	if l.MaxKeyBytes < 1024 || l.MaxValueBytes < 1<<20 || l.MaxBatchBytes < l.MaxValueBytes {
		t.Fatalf("Limits %+v: want keys >= 1 KiB, values >= 1 MiB, batch >= value", l)
	}
	if l.MaxValueBytes > 256<<20 {
		t.Skipf("MaxValueBytes %d too large to exercise", l.MaxValueBytes)
	}
	bt := kv.NewBatch()
	defer bt.Close()
	if err := bt.Set([]byte("big"), make([]byte, l.MaxValueBytes+1)); !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("Set(MaxValueBytes+1) = %v, want ErrTooLarge", err)
	}
	if err := bt.Set(make([]byte, l.MaxKeyBytes+1), nil); !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("Set(key MaxKeyBytes+1) = %v, want ErrTooLarge", err)
	}
}

func testClosed(t *testing.T, b Backend) {
	kv := b.Open(t)
	commit(t, kv, true, "a", "1")
	pending := kv.NewBatch()
	pending.Set([]byte("b"), []byte("2"))
	if err := kv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := kv.Get([]byte("a")); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Get after Close = %v, want ErrClosed", err)
	}
	if _, err := kv.NewIter(nil, nil); !errors.Is(err, store.ErrClosed) {
		t.Errorf("NewIter after Close = %v, want ErrClosed", err)
	}
	if err := pending.Commit(true); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Commit after Close = %v, want ErrClosed", err)
	}
	bt := kv.NewBatch()
	bt.Set([]byte("c"), []byte("3"))
	if err := bt.Commit(false); !errors.Is(err, store.ErrClosed) {
		t.Errorf("new batch Commit after Close = %v, want ErrClosed", err)
	}
	if err := kv.Close(); !errors.Is(err, store.ErrClosed) {
		t.Errorf("second Close = %v, want ErrClosed", err)
	}
}

func testClosedIterator(t *testing.T, b Backend) {
	kv := b.Open(t)
	commit(t, kv, false, "a", "1", "b", "2")
	it, err := kv.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !it.Next() {
		t.Fatal("no first key")
	}
	if err := kv.Close(); err != nil {
		t.Fatalf("Close with an open iterator: %v", err)
	}
	if it.Next() {
		t.Error("iterator advanced after its store closed")
	}
	if err := it.Err(); !errors.Is(err, store.ErrClosed) {
		t.Errorf("iterator Err after store Close = %v, want ErrClosed", err)
	}
	it.Close()
}

// testConcurrent runs readers (Get and scans) beside a writer; each writer
// batch sets every key to the same generation, so any snapshot must be
// uniform and Get must never see a generation go backwards.
func testConcurrent(t *testing.T, b Backend) {
	kv := open(t, b)
	const keys = 64
	gens := 200
	if testing.Short() {
		gens = 40
	}
	write := func(g int) error {
		bt := kv.NewBatch()
		for i := range keys {
			bt.Set(fmt.Appendf(nil, "key%03d", i), fmt.Appendf(nil, "%08d", g))
		}
		return bt.Commit(g%16 == 0)
	}
	if err := write(0); err != nil {
		t.Fatal(err)
	}
	var done atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for r := range 4 {
		wg.Go(func() {
			last := ""
			for !done.Load() {
				if r%2 == 0 {
					v, err := kv.Get(fmt.Appendf(nil, "key%03d", r))
					if err != nil {
						errc <- err
						return
					}
					if string(v) < last {
						errc <- fmt.Errorf("get went backwards: %s after %s", v, last)
						return
					}
					last = string(v)
					continue
				}
				it, err := kv.NewIter([]byte("key"), []byte("kez"))
				if err != nil {
					errc <- err
					return
				}
				n, first, ok := 0, "", true
				for it.Next() {
					if n == 0 {
						first = string(it.Value())
					} else if string(it.Value()) != first {
						ok = false
					}
					n++
				}
				err = it.Err()
				it.Close()
				if err != nil || !ok || n != keys {
					errc <- fmt.Errorf("inconsistent scan: %d keys, uniform=%v, err=%v", n, ok, err)
					return
				}
			}
		})
	}
	for g := 1; g <= gens; g++ {
		if err := write(g); err != nil {
			t.Fatal(err)
		}
	}
	done.Store(true)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

func testCrashSynced(t *testing.T, b Backend) {
	if b.Crash == nil {
		t.Skip("backend is not durable")
	}
	kv := b.Open(t)
	commit(t, kv, true, "synced1", "a")
	commit(t, kv, false, "unsynced", "b")
	commit(t, kv, true, "synced2", "c") // syncs everything before it too
	bt := kv.NewBatch()
	bt.Delete([]byte("synced1"))
	if err := bt.Commit(true); err != nil {
		t.Fatal(err)
	}
	commit(t, kv, false, "maybe", "d")
	kv = b.Crash(t, kv)
	t.Cleanup(func() { kv.Close() })
	got := scan(t, kv, nil, nil)
	want := []string{"synced2=c", "unsynced=b"}
	got = slices.DeleteFunc(got, func(s string) bool { return s == "maybe=d" })
	if !slices.Equal(got, want) {
		t.Fatalf("after crash: %q, want %q (plus maybe=d)", got, want)
	}
}

// testCrashAtomic crashes at several points of a stream of unsynced batches
// and checks each survives whole or not at all, and in order.
func testCrashAtomic(t *testing.T, b Backend) {
	if b.Crash == nil {
		t.Skip("backend is not durable")
	}
	kv := b.Open(t)
	defer func() { kv.Close() }()
	const perBatch = 50
	batches := 0
	for round := range 3 {
		for range 20 {
			bt := kv.NewBatch()
			for i := range perBatch {
				bt.Set(fmt.Appendf(nil, "b%04d/k%03d", batches, i), bytes.Repeat([]byte{byte(batches)}, 300))
			}
			if err := bt.Commit(batches%7 == 6); err != nil {
				t.Fatal(err)
			}
			batches++
		}
		kv = b.Crash(t, kv)
		count := map[int]int{}
		it, err := kv.NewIter(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for it.Next() {
			var bn, k int
			fmt.Sscanf(string(it.Key()), "b%04d/k%03d", &bn, &k)
			count[bn]++
		}
		it.Close()
		// Every batch up to the last synced one survived in full; later
		// batches form a prefix of whole batches.
		lastSynced := -1
		for i := range batches {
			if i%7 == 6 {
				lastSynced = i
			}
		}
		gap := false
		for i := range batches {
			switch c := count[i]; {
			case c == perBatch && gap:
				t.Errorf("round %d: batch %d survived but an earlier one did not", round, i)
			case c == perBatch:
			case c == 0 && i <= lastSynced:
				t.Errorf("round %d: synced batch %d lost", round, i)
			case c == 0:
				gap = true
			default:
				t.Errorf("round %d: batch %d survived partly: %d of %d keys", round, i, c, perBatch)
			}
		}
		// Continue from what survived.
		for i := range batches {
			if count[i] == 0 {
				batches = i
				break
			}
		}
	}
}

// bulk returns a bulk writer on kv and the name of its implementation.
func bulk(t *testing.T, kv store.KV) (store.BulkWriter, string) {
	t.Helper()
	impl := "emulated"
	if _, ok := kv.(store.BulkLoader); ok {
		impl = "native"
	}
	bw, err := store.NewBulkWriter(kv)
	if err != nil {
		t.Fatalf("NewBulkWriter (%s): %v", impl, err)
	}
	return bw, impl
}

func bulkKey(i int) []byte { return fmt.Appendf(nil, "bulk%06d", i) }

// bulkValue is a page-sized value, partly compressible like a tuple page.
func bulkValue(i, gen int) []byte {
	v := make([]byte, 4096+i%7)
	rng := rand.New(rand.NewPCG(uint64(i), uint64(gen)))
	for j := range v {
		if j%8 < 3 {
			v[j] = byte(rng.Uint32())
		} else {
			v[j] = byte(j/8 + gen)
		}
	}
	return v
}

// testBulkLoad loads keys over, between and beside stored ones (some only
// in the memtable, some synced) and checks that the load is invisible until
// Finish, then replaces exactly the keys it wrote; a snapshot taken before
// Finish keeps the old values, and later batches win over loaded keys.
func testBulkLoad(t *testing.T, b Backend) {
	kv := open(t, b)
	const n = 3000
	// Old values on every third key, synced, and on every fifth, not.
	for i := 0; i < n; i += 3 {
		commit(t, kv, true, string(bulkKey(i)), "synced")
	}
	for i := 0; i < n; i += 5 {
		commit(t, kv, false, string(bulkKey(i)), "recent")
	}
	commit(t, kv, false, "a-before", "1", "z-after", "2")
	want := map[string]string{"a-before": "1", "z-after": "2"}
	for i := 0; i < n; i += 3 {
		want[string(bulkKey(i))] = "synced"
	}
	for i := 0; i < n; i += 5 {
		want[string(bulkKey(i))] = "recent"
	}
	check := func(what string, got []string, want map[string]string) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d keys, want %d", what, len(got), len(want))
		}
		for _, kvs := range got {
			k, v, _ := strings.Cut(kvs, "=")
			if w, ok := want[k]; !ok || w != v {
				t.Fatalf("%s: %q has a value of %d bytes, want %d", what, k, len(v), len(w))
			}
		}
	}
	bw, impl := bulk(t, kv)
	t.Run("impl="+impl, func(t *testing.T) {
		loaded := maps.Clone(want)
		for i := 0; i < n; i++ {
			if i%2 == 1 {
				continue // leave gaps: every odd key keeps its old value
			}
			v := bulkValue(i, 1)
			if err := bw.Set(bulkKey(i), v); err != nil {
				t.Fatalf("Set(%d): %v", i, err)
			}
			loaded[string(bulkKey(i))] = string(v)
		}
		check("before Finish", scan(t, kv, nil, nil), want)
		before, err := kv.NewIter(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer before.Close()
		if err := bw.Finish(true); err != nil {
			t.Fatalf("Finish: %v", err)
		}
		check("after Finish", scan(t, kv, nil, nil), loaded)
		var old []string
		for before.Next() {
			old = append(old, string(before.Key())+"="+string(before.Value()))
		}
		check("snapshot from before Finish", old, want)
		if v, err := kv.Get(bulkKey(6)); err != nil || !bytes.Equal(v, bulkValue(6, 1)) {
			t.Fatalf("Get(loaded key) = %d bytes, %v", len(v), err)
		}
		if err := bw.Finish(true); !errors.Is(err, store.ErrClosed) {
			t.Errorf("second Finish = %v, want ErrClosed", err)
		}
		if err := bw.Set(bulkKey(n+1), nil); !errors.Is(err, store.ErrClosed) {
			t.Errorf("Set after Finish = %v, want ErrClosed", err)
		}
		// Batches after the load win over it; a second load wins again.
		commit(t, kv, false, string(bulkKey(0)), "later")
		if v, err := kv.Get(bulkKey(0)); err != nil || string(v) != "later" {
			t.Fatalf("Get after a later batch = %q, %v", v, err)
		}
		bw2, _ := bulk(t, kv)
		bw2.Set(bulkKey(0), []byte("again"))
		bw2.Set(bulkKey(1), nil)
		if err := bw2.Finish(false); err != nil {
			t.Fatal(err)
		}
		for i, w := range []string{"again", ""} {
			if v, err := kv.Get(bulkKey(i)); err != nil || string(v) != w {
				t.Fatalf("Get(%d) after the second load = %q, %v; want %q", i, v, err, w)
			}
		}
		// An empty load is fine.
		bw3, _ := bulk(t, kv)
		if err := bw3.Finish(true); err != nil {
			t.Fatalf("empty Finish: %v", err)
		}
	})
}

func testBulkOrder(t *testing.T, b Backend) {
	kv := open(t, b)
	commit(t, kv, true, "b", "old")
	bw, impl := bulk(t, kv)
	t.Run("impl="+impl, func(t *testing.T) {
		if err := bw.Set([]byte("b"), []byte("new")); err != nil {
			t.Fatal(err)
		}
		if err := bw.Set([]byte("b"), []byte("dup")); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Set(same key) = %v, want ErrInvalid", err)
		}
		if err := bw.Set([]byte("c"), []byte("x")); err == nil {
			t.Errorf("Set after a failed Set succeeded; the writer should stay failed")
		}
		if err := bw.Finish(true); err == nil {
			t.Errorf("Finish of a failed writer succeeded")
		}
		bw.Abort()
		if got, want := scan(t, kv, nil, nil), []string{"b=old"}; !slices.Equal(got, want) {
			t.Errorf("after a failed load: %q, want %q", got, want)
		}
		bw, _ = bulk(t, kv)
		bw.Set([]byte("m"), nil)
		if err := bw.Set([]byte("a"), nil); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Set(smaller key) = %v, want ErrInvalid", err)
		}
		bw.Abort()
		l := kv.Limits()
		if l.MaxValueBytes <= 256<<20 {
			bw, _ = bulk(t, kv)
			if err := bw.Set([]byte("big"), make([]byte, l.MaxValueBytes+1)); !errors.Is(err, store.ErrTooLarge) {
				t.Errorf("Set(MaxValueBytes+1) = %v, want ErrTooLarge", err)
			}
			bw.Abort()
		}
	})
}

func testBulkAbort(t *testing.T, b Backend) {
	kv := open(t, b)
	commit(t, kv, true, string(bulkKey(10)), "old")
	bw, impl := bulk(t, kv)
	t.Run("impl="+impl, func(t *testing.T) {
		for i := range 2000 {
			if err := bw.Set(bulkKey(i), bulkValue(i, 2)); err != nil {
				t.Fatal(err)
			}
		}
		if err := bw.Abort(); err != nil {
			t.Fatalf("Abort: %v", err)
		}
		if err := bw.Abort(); err != nil {
			t.Errorf("second Abort: %v", err)
		}
		if err := bw.Set(bulkKey(5000), nil); !errors.Is(err, store.ErrClosed) {
			t.Errorf("Set after Abort = %v, want ErrClosed", err)
		}
		if err := bw.Finish(true); !errors.Is(err, store.ErrClosed) {
			t.Errorf("Finish after Abort = %v, want ErrClosed", err)
		}
		if got, want := scan(t, kv, nil, nil), []string{string(bulkKey(10)) + "=old"}; !slices.Equal(got, want) {
			t.Errorf("after Abort: %d keys, want %q", len(got), want)
		}
	})
}

func testBulkClosed(t *testing.T, b Backend) {
	kv := b.Open(t)
	bw, impl := bulk(t, kv)
	t.Run("impl="+impl, func(t *testing.T) {
		bw.Set([]byte("a"), []byte("1"))
		if err := kv.Close(); err != nil {
			t.Fatal(err)
		}
		if err := bw.Finish(true); !errors.Is(err, store.ErrClosed) {
			t.Errorf("Finish after store Close = %v, want ErrClosed", err)
		}
		bw.Abort()
		if _, err := store.NewBulkWriter(kv); !errors.Is(err, store.ErrClosed) {
			t.Errorf("NewBulkWriter after Close = %v, want ErrClosed", err)
		}
	})
}

// testBulkCrash crashes before Finish (the store is as before) and after
// Finish(true) (the load, and every commit before it, survives).
func testBulkCrash(t *testing.T, b Backend) {
	if b.Crash == nil {
		t.Skip("backend is not durable")
	}
	kv := b.Open(t)
	defer func() { kv.Close() }()
	const n = 2000
	commit(t, kv, true, string(bulkKey(0)), "synced")
	bw, impl := bulk(t, kv)
	t.Run("impl="+impl, func(t *testing.T) {
		for i := range n {
			if err := bw.Set(bulkKey(i), bulkValue(i, 3)); err != nil {
				t.Fatal(err)
			}
		}
		kv = b.Crash(t, kv) // bw is abandoned with the crashed store
		if got, want := scan(t, kv, nil, nil), []string{string(bulkKey(0)) + "=synced"}; !slices.Equal(got, want) {
			t.Fatalf("crash before Finish: %d keys, want %q", len(got), want)
		}
		commit(t, kv, false, "unsynced-before", "1")
		bw, _ = bulk(t, kv)
		for i := range n {
			if err := bw.Set(bulkKey(i), bulkValue(i, 4)); err != nil {
				t.Fatal(err)
			}
		}
		if err := bw.Finish(true); err != nil {
			t.Fatal(err)
		}
		kv = b.Crash(t, kv)
		got := scan(t, kv, nil, nil)
		if len(got) != n+1 || got[len(got)-1] != "unsynced-before=1" {
			t.Fatalf("crash after Finish(true): %d keys (want %d), last %.20q", len(got), n+1, got[len(got)-1])
		}
		for i := range n {
			if v, err := kv.Get(bulkKey(i)); err != nil || !bytes.Equal(v, bulkValue(i, 4)) {
				t.Fatalf("crash after Finish(true): key %d: %d bytes, %v", i, len(v), err)
			}
		}
	})
}
