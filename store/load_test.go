package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/difctl/difctl/store"
)

// pageRecords returns the raw page records of volume, keyed by page number.
func pageRecords(t *testing.T, kv store.KV, volume string) map[string][]byte {
	t.Helper()
	prefix := append([]byte{'T', byte(len(volume))}, volume...)
	prefix = append(prefix, 'P')
	it, err := kv.NewIter(prefix, append(slices.Clone(prefix[:len(prefix)-1]), 'P'+1))
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := map[string][]byte{}
	for it.Next() {
		out[string(it.Key()[len(prefix):])] = slices.Clone(it.Value())
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// allRecords returns every key and value in kv.
func allRecords(t *testing.T, kv store.KV) []string {
	t.Helper()
	it, err := kv.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []string
	for it.Next() {
		out = append(out, fmt.Sprintf("%x=%x", it.Key(), it.Value()))
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// load bulk-loads tuples at lba in random-sized Writes (or one LoadRange).
func load(t *testing.T, rng *rand.Rand, tp *store.Tuples, lba int, tuples []byte, sums []uint32, sync bool) error {
	t.Helper()
	if rng.IntN(4) == 0 {
		return tp.LoadRange(int64(lba), tuples, sums, sync)
	}
	l, err := tp.NewLoader(int64(lba))
	if err != nil {
		return err
	}
	ts := tp.TupleSize()
	n := len(tuples) / ts
	for i := 0; i < n; {
		c := min(n-i, 1+rng.IntN([]int{5, 100, 2000}[rng.IntN(3)]))
		var s []uint32
		if sums != nil {
			s = sums[i : i+c]
		}
		if err := l.Write(tuples[i*ts:(i+c)*ts], s); err != nil {
			l.Abort()
			return err
		}
		i += c
		if l.Next() != int64(lba+i) {
			t.Fatalf("Next = %d, want %d", l.Next(), lba+i)
		}
	}
	return l.Finish(sync)
}

// TestLoadMatchesWriteRange bulk-loads random ranges (unaligned starts and
// ends, over written, discarded and never-written pages) into one volume
// and writes the same ranges with WriteRange into a twin: both read back
// like the model and hold byte-identical pages.
func TestLoadMatchesWriteRange(t *testing.T) {
	rounds := 40
	if testing.Short() {
		rounds = 12
	}
	for _, be := range kvBackends() {
		for _, tc := range []struct {
			ts, pageTuples int
			sums           bool
		}{{8, 64, true}, {16, 128, false}, {8, 1024, false}, {16, 64, true}} {
			name := fmt.Sprintf("backend=%s/tuple=%d/page=%d/sums=%v", be.name, tc.ts, tc.pageTuples, tc.sums)
			t.Run(name, func(t *testing.T) {
				kv := be.open(t)
				const blocks = 6000
				man := store.NewManifest("test", 512, tc.ts, blocks*512, "dev")
				man.SectorSums, man.PageTuples = tc.sums, tc.pageTuples
				tp, err := store.CreateTuples(kv, "load", man)
				if err != nil {
					t.Fatal(err)
				}
				twin, err := store.CreateTuples(kv, "twin", man)
				if err != nil {
					t.Fatal(err)
				}
				m := newModel(blocks, tc.ts)
				rng := rand.New(rand.NewPCG(uint64(tc.ts), uint64(tc.pageTuples)+7))
				for r := range rounds {
					lba := rng.IntN(blocks)
					n := rng.IntN(min(blocks-lba, []int{3, 200, 3000, blocks}[rng.IntN(4)]) + 1)
					tu, su := randTuples(rng, n, tc.ts, tc.sums)
					switch {
					case r%5 == 4: // background churn through the normal path
						if err := tp.Discard(int64(lba), int64(n), false); err != nil {
							t.Fatal(err)
						}
						if err := twin.Discard(int64(lba), int64(n), false); err != nil {
							t.Fatal(err)
						}
						m.discard(lba, n)
					case r%5 == 3:
						for _, v := range []*store.Tuples{tp, twin} {
							if err := v.WriteRange(int64(lba), tu, su, false); err != nil {
								t.Fatal(err)
							}
						}
						m.write(lba, tu, su)
					default:
						if err := load(t, rng, tp, lba, tu, su, r%2 == 0); err != nil {
							t.Fatalf("load [%d, +%d): %v", lba, n, err)
						}
						if err := twin.WriteRange(int64(lba), tu, su, false); err != nil {
							t.Fatal(err)
						}
						m.write(lba, tu, su)
					}
					checkAgainst(t, tp, m, 0, blocks)
					rl := rng.IntN(blocks)
					checkAgainst(t, tp, m, rl, 1+rng.IntN(blocks-rl))
				}
				checkAgainst(t, twin, m, 0, blocks)
				got, want := pageRecords(t, kv, "load"), pageRecords(t, kv, "twin")
				if len(got) != len(want) {
					t.Fatalf("%d pages loaded, %d written", len(got), len(want))
				}
				for k, v := range want {
					if !bytes.Equal(got[k], v) {
						t.Fatalf("page %x differs between load and WriteRange", k)
					}
				}
			})
		}
	}
}

func TestLoadArgs(t *testing.T) {
	for _, be := range kvBackends() {
		t.Run("backend="+be.name, func(t *testing.T) {
			kv := be.open(t)
			man := store.NewManifest("f", 512, 8, 1000*512, "d")
			tp, err := store.CreateTuples(kv, "v", man)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tp.NewLoader(1001); !errors.Is(err, store.ErrOutOfRange) {
				t.Errorf("NewLoader(beyond) = %v, want ErrOutOfRange", err)
			}
			l, err := tp.NewLoader(990)
			if err != nil {
				t.Fatal(err)
			}
			tu, su := randTuples(rand.New(rand.NewPCG(1, 1)), 20, 8, true)
			if err := l.Write(tu, su); !errors.Is(err, store.ErrOutOfRange) {
				t.Errorf("Write past the end = %v, want ErrOutOfRange", err)
			}
			if err := l.Write(tu[:80], nil); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("Write without sums = %v, want ErrInvalid", err)
			}
			if err := l.Write(tu[:7], su); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("Write of a partial tuple = %v, want ErrInvalid", err)
			}
			// Bad arguments do not fail the loader.
			if err := l.Write(tu[:80], su[:10]); err != nil {
				t.Fatal(err)
			}
			if err := l.Finish(true); err != nil {
				t.Fatal(err)
			}
			if err := l.Write(tu[:8], su[:1]); !errors.Is(err, store.ErrClosed) {
				t.Errorf("Write after Finish = %v, want ErrClosed", err)
			}
			if err := l.Finish(true); !errors.Is(err, store.ErrClosed) {
				t.Errorf("second Finish = %v, want ErrClosed", err)
			}
			if err := l.Abort(); err != nil {
				t.Errorf("Abort after Finish = %v", err)
			}
			got := make([]byte, 80)
			if c, err := tp.ReadRange(990, got, nil, nil); err != nil || c != 10 || !bytes.Equal(got, tu[:80]) {
				t.Errorf("ReadRange after load = %d, %v", c, err)
			}
		})
	}
}

// TestLoadConflict: a load is refused, writing nothing, over an open
// intent or when a page it shares with outside blocks changed meanwhile.
func TestLoadConflict(t *testing.T) {
	for _, be := range kvBackends() {
		t.Run("backend="+be.name, func(t *testing.T) {
			kv := be.open(t)
			man := store.NewManifest("f", 512, 8, 10000*512, "d")
			man.PageTuples = 64
			tp, err := store.CreateTuples(kv, "v", man)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(3, 4))
			tu, su := randTuples(rng, 1000, 8, true)

			// An open intent over blocks [500, 510).
			x := tp.NewTxn()
			it, is := randTuples(rng, 10, 8, true)
			id, err := x.RecordIntent(500, it, is)
			if err != nil {
				t.Fatal(err)
			}
			if err := x.Commit(true); err != nil {
				t.Fatal(err)
			}
			before := allRecords(t, kv)
			if err := tp.LoadRange(10, tu, su, true); !errors.Is(err, store.ErrConflict) {
				t.Fatalf("load over an intent = %v, want ErrConflict", err)
			}
			if err := tp.LoadRange(509, tu[:8], su[:1], true); !errors.Is(err, store.ErrConflict) {
				t.Fatalf("load of the intent's last block = %v, want ErrConflict", err)
			}
			if !slices.Equal(allRecords(t, kv), before) {
				t.Fatal("a refused load changed the store")
			}
			// Beside the intent is fine.
			if err := tp.LoadRange(510, tu[:80], su[:10], true); err != nil {
				t.Fatalf("load beside an intent: %v", err)
			}
			if err := tp.LoadRange(0, tu[:500*8], su[:500], true); err != nil {
				t.Fatalf("load ending at an intent: %v", err)
			}
			x = tp.NewTxn()
			x.DropIntent(id)
			if err := x.Commit(true); err != nil {
				t.Fatal(err)
			}

			// The first page (blocks 64..127) changes outside the range
			// after the loader wrote it.
			l, err := tp.NewLoader(100)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Write(tu[:8*200], su[:200]); err != nil {
				t.Fatal(err)
			}
			other, osum := randTuples(rng, 1, 8, true)
			if err := tp.WriteRange(70, other, osum, false); err != nil {
				t.Fatal(err)
			}
			before = allRecords(t, kv)
			if err := l.Finish(true); !errors.Is(err, store.ErrConflict) {
				t.Fatalf("Finish after a commit to the first page = %v, want ErrConflict", err)
			}
			if !slices.Equal(allRecords(t, kv), before) {
				t.Fatal("a refused load changed the store")
			}
			// A commit to the last page while loading is merged, not lost.
			l, _ = tp.NewLoader(128)
			l.Write(tu[:8*100], su[:100]) // ends in page 3 (192..255) at 228
			if err := tp.WriteRange(240, other, osum, false); err != nil {
				t.Fatal(err)
			}
			if err := l.Finish(true); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 8)
			if c, err := tp.ReadRange(240, got, nil, nil); err != nil || c != 1 || !bytes.Equal(got, other) {
				t.Fatalf("block beside the load's last page lost: %x, %d, %v", got, c, err)
			}
		})
	}
}
