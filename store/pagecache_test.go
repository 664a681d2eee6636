package store_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/difctl/difctl/store"
)

// readCached is checkAgainst through ReadRangeCached.
func readCached(t *testing.T, tp *store.Tuples, m *model, lba, n int) {
	t.Helper()
	checkRead(t, tp, m, lba, n, tp.ReadRangeCached)
}

// pageBytes is what SetPageCache counts for one page of tp.
func pageBytes(tp *store.Tuples) int {
	m := tp.Manifest()
	b := m.PageTuples*m.TupleSize + m.PageTuples/8
	if m.SectorSums {
		b += 4 * m.PageTuples
	}
	return b
}

// TestPageCacheRandomOps runs random writes, transactions, discards and
// bulk loads, reading random ranges through the page cache after each (each
// range twice, so the second read hits) and comparing with the model. The
// cache holds a few pages (evicting all the time) or all of them.
func TestPageCacheRandomOps(t *testing.T) {
	ops := 200
	if testing.Short() {
		ops = 60
	}
	for _, be := range kvBackends() {
		for _, tc := range []struct {
			ts, pageTuples, cachePages int
			sums                       bool
		}{{8, 64, 3, true}, {16, 128, 1000, false}, {8, 1024, 2, true}, {16, 64, 1000, true}} {
			name := fmt.Sprintf("backend=%s/tuple=%d/page=%d/sums=%v/cache=%d", be.name, tc.ts, tc.pageTuples, tc.sums, tc.cachePages)
			t.Run(name, func(t *testing.T) {
				kv := be.open(t)
				const blocks = 5000
				man := store.NewManifest("test", 512, tc.ts, blocks*512, "dev")
				man.SectorSums, man.PageTuples = tc.sums, tc.pageTuples
				tp, err := store.CreateTuples(kv, "vol", man)
				if err != nil {
					t.Fatal(err)
				}
				tp.SetPageCache(tc.cachePages * pageBytes(tp))
				m := newModel(blocks, tc.ts)
				rng := rand.New(rand.NewPCG(uint64(tc.ts), uint64(tc.cachePages)))
				readCached(t, tp, m, 0, blocks)
				for i := range ops {
					lba := rng.IntN(blocks)
					n := 1 + rng.IntN(min(blocks-lba, []int{3, 70, 700, 3000}[rng.IntN(4)]))
					switch rng.IntN(6) {
					case 0:
						if err := tp.Discard(int64(lba), int64(n), false); err != nil {
							t.Fatal(err)
						}
						m.discard(lba, n)
					case 1:
						x := tp.NewTxn()
						for range 3 {
							l := rng.IntN(blocks)
							c := 1 + rng.IntN(min(blocks-l, 300))
							tu, su := randTuples(rng, c, tc.ts, tc.sums)
							if err := x.WriteRange(int64(l), tu, su); err != nil {
								t.Fatal(err)
							}
							m.write(l, tu, su)
						}
						if err := x.Commit(i%2 == 0); err != nil {
							t.Fatal(err)
						}
					case 2:
						tu, su := randTuples(rng, n, tc.ts, tc.sums)
						if err := tp.LoadRange(int64(lba), tu, su, false); err != nil {
							t.Fatal(err)
						}
						m.write(lba, tu, su)
					default:
						tu, su := randTuples(rng, n, tc.ts, tc.sums)
						if err := tp.WriteRange(int64(lba), tu, su, false); err != nil {
							t.Fatal(err)
						}
						m.write(lba, tu, su)
					}
					for range 2 {
						rl := rng.IntN(blocks)
						rn := 1 + rng.IntN(min(blocks-rl, 2*tc.pageTuples))
						readCached(t, tp, m, rl, rn)
						readCached(t, tp, m, rl, rn)
					}
					if st := tp.PageCacheStats(); st.Pages > tc.cachePages {
						t.Fatalf("%d pages resident, the cache holds %d", st.Pages, tc.cachePages)
					}
				}
				readCached(t, tp, m, 0, blocks)
				checkAgainst(t, tp, m, 0, blocks)
				st := tp.PageCacheStats()
				if st.Hits == 0 || st.Misses == 0 {
					t.Fatalf("cache stats %+v: the test did not exercise both paths", st)
				}
			})
		}
	}
}

// TestPageCacheRemap: a remap step rewrites pages, and a cached read after
// it sees the new tuples.
func TestPageCacheRemap(t *testing.T) {
	for _, be := range kvBackends() {
		t.Run("backend="+be.name, func(t *testing.T) {
			kv := be.open(t)
			const blocks = 1000
			man := store.NewManifest("512+8:dix", 512, 8, blocks*512, "d")
			man.PageTuples = 64
			man.InitialRefTag = 5
			tp, err := store.CreateTuples(kv, "v", man)
			if err != nil {
				t.Fatal(err)
			}
			tp.SetPageCache(1 << 20)
			m := newModel(blocks, 8)
			rng := rand.New(rand.NewPCG(1, 2))
			tu, su := randTuples(rng, blocks, 8, true)
			if err := tp.WriteRange(0, tu, su, false); err != nil {
				t.Fatal(err)
			}
			m.write(0, tu, su)
			readCached(t, tp, m, 0, blocks)
			if err := tp.BeginJournal(store.Journal{Op: store.OpRemap, From: 5, To: 9}); err != nil {
				t.Fatal(err)
			}
			nu, _ := randTuples(rng, blocks, 8, false)
			if err := tp.RemapRange(0, nu, false); err != nil {
				t.Fatal(err)
			}
			for i := range blocks {
				m.tuples[i] = nu[i*8 : (i+1)*8]
			}
			readCached(t, tp, m, 0, blocks)
		})
	}
}

// TestPageCacheStaleFill: a commit lands between a miss's KV read and its
// fill. The miss returns what it read (it began first), but must not cache
// it: the next read sees the commit.
func TestPageCacheStaleFill(t *testing.T) {
	for _, be := range kvBackends() {
		t.Run("backend="+be.name, func(t *testing.T) {
			kv := be.open(t)
			const blocks = 256
			man := store.NewManifest("test", 512, 8, blocks*512, "dev")
			man.PageTuples = 64
			tp, err := store.CreateTuples(kv, "vol", man)
			if err != nil {
				t.Fatal(err)
			}
			tp.SetPageCache(1 << 20)
			m := newModel(blocks, 8)
			rng := rand.New(rand.NewPCG(3, 4))
			old, osu := randTuples(rng, blocks, 8, true)
			if err := tp.WriteRange(0, old, osu, false); err != nil {
				t.Fatal(err)
			}
			m.write(0, old, osu)
			nu, nsu := randTuples(rng, 10, 8, true)
			var once sync.Once
			store.SetCacheMissHook(func() {
				once.Do(func() {
					if err := tp.WriteRange(70, nu, nsu, false); err != nil {
						t.Error(err)
					}
				})
			})
			defer store.SetCacheMissHook(nil)
			readCached(t, tp, m, 0, blocks) // the old tuples: the read began first
			m.write(70, nu, nsu)
			readCached(t, tp, m, 0, blocks)
			readCached(t, tp, m, 60, 20)
		})
	}
}

// TestPageCacheConcurrent: readers through the cache and a writer replacing
// every tuple with a new version, one commit each. Every read must see one
// version for all its blocks (a snapshot), never older than the last it
// saw. Run with -race.
func TestPageCacheConcurrent(t *testing.T) {
	versions := 200
	if testing.Short() {
		versions = 40
	}
	for _, be := range kvBackends() {
		t.Run("backend="+be.name, func(t *testing.T) {
			kv := be.open(t)
			const blocks = 640
			man := store.NewManifest("test", 512, 8, blocks*512, "dev")
			man.PageTuples = 64
			tp, err := store.CreateTuples(kv, "vol", man)
			if err != nil {
				t.Fatal(err)
			}
			tp.SetPageCache(4 * pageBytes(tp)) // fewer pages than the volume: evictions too
			version := func(v uint32) ([]byte, []uint32) {
				tu := make([]byte, blocks*8)
				su := make([]uint32, blocks)
				for i := range blocks {
					binary.BigEndian.PutUint32(tu[i*8:], v)
					binary.BigEndian.PutUint32(tu[i*8+4:], uint32(i))
					su[i] = v ^ uint32(i)
				}
				return tu, su
			}
			tu, su := version(1)
			if err := tp.WriteRange(0, tu, su, false); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			var wg sync.WaitGroup
			for r := range 3 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(r), 9))
					last := uint32(0)
					buf := make([]byte, blocks*8)
					sums := make([]uint32, blocks)
					for {
						select {
						case <-done:
							return
						default:
						}
						lba := rng.IntN(blocks)
						n := 1 + rng.IntN(min(blocks-lba, 200))
						if _, err := tp.ReadRangeCached(int64(lba), buf[:n*8], sums[:n], nil); err != nil {
							t.Error(err)
							return
						}
						v := binary.BigEndian.Uint32(buf)
						for i := range n {
							got := binary.BigEndian.Uint32(buf[i*8:])
							if got != v || binary.BigEndian.Uint32(buf[i*8+4:]) != uint32(lba+i) || sums[i] != v^uint32(lba+i) {
								t.Errorf("read [%d, +%d): block %d has version %d, block %d version %d", lba, n, lba, v, lba+i, got)
								return
							}
						}
						if v < last {
							t.Errorf("read version %d after %d", v, last)
							return
						}
						last = v
					}
				})
			}
			for v := uint32(2); v <= uint32(versions); v++ {
				tu, su := version(v)
				if err := tp.WriteRange(0, tu, su, false); err != nil {
					t.Fatal(err)
				}
			}
			close(done)
			wg.Wait()
			m := newModel(blocks, 8)
			tu, su = version(uint32(versions))
			m.write(0, tu, su)
			readCached(t, tp, m, 0, blocks)
		})
	}
}

// TestPageCacheFillKeepsItsPages: a miss that fills a full cache evicts
// older pages, not the ones it is filling, so reading the same range again
// hits.
func TestPageCacheFillKeepsItsPages(t *testing.T) {
	kv := store.NewMem()
	defer kv.Close()
	const blocks = 64 * 16
	man := store.NewManifest("test", 512, 8, blocks*512, "dev")
	man.PageTuples = 64
	tp, err := store.CreateTuples(kv, "vol", man)
	if err != nil {
		t.Fatal(err)
	}
	tp.SetPageCache(4 * pageBytes(tp))
	m := newModel(blocks, 8)
	for _, lba := range []int{0, 4 * 64, 8 * 64, 4 * 64, 12 * 64, 12 * 64} {
		readCached(t, tp, m, lba, 4*64)
	}
	st := tp.PageCacheStats()
	if st.Pages != 4 {
		t.Fatalf("%d pages resident, want 4", st.Pages)
	}
	// readCached reads each range twice, 4 pages a read: the second read
	// of every range hits.
	if st.Hits < 4*6 {
		t.Fatalf("stats %+v: the fills evicted their own pages", st)
	}
}
