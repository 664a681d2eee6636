package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/difctl/difctl/store"
	"github.com/difctl/difctl/store/pebble"
)

// countKV counts what is written to a KV: the Sets and Deletes of its
// batches, their commits, the largest batch, and bulk loads.
type countKV struct {
	store.KV
	sets, dels, commits, maxBatch int
	bulks, bulkSets               int
	hook                          func() error // if set, runs before every commit; an error fails it
}

type countBatch struct {
	store.Batch
	k *countKV
}

func (k *countKV) NewBatch() store.Batch { return &countBatch{k.KV.NewBatch(), k} }

func (b *countBatch) Set(key, value []byte) error { b.k.sets++; return b.Batch.Set(key, value) }
func (b *countBatch) Delete(key []byte) error     { b.k.dels++; return b.Batch.Delete(key) }
func (b *countBatch) Commit(sync bool) error {
	if b.k.hook != nil {
		if err := b.k.hook(); err != nil {
			b.Batch.Close()
			return err
		}
	}
	b.k.commits++
	b.k.maxBatch = max(b.k.maxBatch, b.Batch.Len())
	return b.Batch.Commit(sync)
}

// countBulkKV is a countKV of a store.BulkLoader.
type countBulkKV struct{ *countKV }

type countBulk struct {
	store.BulkWriter
	k *countKV
}

func (k countBulkKV) NewBulkWriter() (store.BulkWriter, error) {
	k.bulks++
	bw, err := k.KV.(store.BulkLoader).NewBulkWriter()
	return countBulk{bw, k.countKV}, err
}

func (w countBulk) Set(key, value []byte) error { w.k.bulkSets++; return w.BulkWriter.Set(key, value) }

// counting returns kv counted by c (a BulkLoader stays one).
func counting(kv store.KV) (store.KV, *countKV) {
	c := &countKV{KV: kv}
	if _, ok := kv.(store.BulkLoader); ok {
		return countBulkKV{c}, c
	}
	return c, c
}

// TestCreateMaxVolume: creating a volume of store.MaxPages pages (2^38
// blocks of 512 bytes, 128 TiB), keyed or not, writes one batch of at
// most three records (the manifest, the empty run, the seal), with no
// bulk load, in bounded memory and time; the volume then works, and
// Coverage and CheckSeal read only what the store holds. (Before the
// empty runs, creation wrote a record per page: 2^28 of them, 2^29 keyed,
// about a minute and a quarter of an hour.)
func TestCreateMaxVolume(t *testing.T) {
	for _, be := range kvBackends() {
		for _, keyed := range []bool{false, true} {
			t.Run(fmt.Sprintf("backend=%s/keyed=%v", be.name, keyed), func(t *testing.T) {
				kv, c := counting(be.open(t))
				const P = store.DefaultPageTuples
				blocks := int64(store.MaxPages) * P
				m := store.NewManifest("512+8:crc16:type1:pi-last", 512, 8, blocks*512, "d")
				if keyed {
					m.KeyCheck, m.VolumeUID = testCheck, testUID
				}
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				t0 := time.Now()
				var tp *store.Tuples
				var err error
				if keyed {
					tp, err = store.CreateKeyedTuples(kv, "v", m, macKey)
				} else {
					tp, err = store.CreateTuples(kv, "v", m)
				}
				d := time.Since(t0)
				runtime.ReadMemStats(&after)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("created in %v: %d sets, %d commits, %d bytes allocated", d, c.sets, c.commits, after.TotalAlloc-before.TotalAlloc)
				if c.commits != 1 || c.sets > 3 || c.dels != 0 || c.bulks != 0 || c.maxBatch > 4096 {
					t.Errorf("creation wrote %d sets and %d deletes in %d commits (largest %d bytes) and %d bulk loads; want one small batch",
						c.sets, c.dels, c.commits, c.maxBatch, c.bulks)
				}
				if a := after.TotalAlloc - before.TotalAlloc; a > 16<<20 {
					t.Errorf("creation allocated %d bytes", a)
				}
				if d > 5*time.Second {
					t.Errorf("creation took %v", d)
				}
				// It works: write the first, a middle and the last block,
				// read them back, count them.
				t0 = time.Now()
				x := tp.NewTxn()
				for _, lba := range []int64{0, blocks / 2, blocks - 1} {
					if err := x.WriteRange(lba, bytes.Repeat([]byte{byte(lba)}, 8), []uint32{7}); err != nil {
						t.Fatal(err)
					}
					if keyed {
						if err := x.WriteTags(lba, tagsFor(int(lba%1000), 1, 3)); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := x.Commit(true); err != nil {
					t.Fatal(err)
				}
				tuples := make([]byte, 8*3*P)
				written := store.NewBitmap(3 * P)
				if n, err := tp.ReadRange(blocks-3*P, tuples, make([]uint32, 3*P), written); err != nil || n != 1 || !written.Has(3*P-1) {
					t.Fatalf("ReadRange of the last pages = %d, %v", n, err)
				}
				tp, err = store.OpenTuples(kv, "v", nil)
				if err != nil {
					t.Fatal(err)
				}
				if n, err := tp.Coverage(nil); err != nil || n != 3 {
					t.Fatalf("Coverage = %d, %v; want 3", n, err)
				}
				if keyed {
					if err := tp.SetPageMACKey(macKey); err != nil {
						t.Fatal(err)
					}
					checkSeal(t, tp, 2)
					tags := make([]store.KeyedTag, 2*P)
					if err := tp.ReadTags(blocks/2-P, tags); err != nil || tags[P].Gen != 3 {
						t.Fatalf("ReadTags = %v, %+v", err, tags[P])
					}
				}
				if d := time.Since(t0); d > 5*time.Second {
					t.Errorf("writing, reading and counting took %v", d)
				}
			})
		}
	}
}

// TestWalkRetry: a read that meets a commit splitting an empty run between
// its snapshot of the page records and its snapshot of the runs sees the
// page missing, reads again, and returns the volume as after the commit,
// without an error.
func TestWalkRetry(t *testing.T) {
	const blocks = 64 * 64
	for _, read := range []string{"ReadRange", "ReadRangeCached", "Coverage", "ReadTags"} {
		t.Run("read="+read, func(t *testing.T) {
			kv := store.NewMem()
			defer kv.Close()
			tp := newKeyed(t, kv, "v", keyedManifest(blocks))
			tp.SetPageCache(1 << 20)
			w := reopenKeyed(t, kv, "v") // the writer (its commits do not wait for tp's lock)
			gaps, retries := 0, 0
			store.SetWalkHooks(func() {
				if gaps++; gaps == 1 {
					x := w.NewTxn()
					if err := x.WriteRange(7*64+3, make([]byte, 8), make([]uint32, 1)); err != nil {
						t.Error(err)
					}
					if err := x.WriteTags(7*64+3, tagsFor(7*64+3, 1, 9)); err != nil {
						t.Error(err)
					}
					if err := x.Commit(false); err != nil {
						t.Error(err)
					}
				}
			}, func() { retries++ })
			defer store.SetWalkHooks(nil, nil)
			lba, n := int64(5*64), 5*64 // pages 5-9
			var got int
			var err error
			switch read {
			case "ReadRange":
				got, err = tp.ReadRange(lba, make([]byte, 8*n), make([]uint32, n), store.NewBitmap(n))
			case "ReadRangeCached":
				got, err = tp.ReadRangeCached(lba, make([]byte, 8*n), make([]uint32, n), store.NewBitmap(n))
			case "Coverage":
				var c int64
				c, err = tp.Coverage(nil)
				got = int(c)
			case "ReadTags":
				tags := make([]store.KeyedTag, n)
				err = tp.ReadTags(lba, tags)
				for _, g := range tags {
					if g.Gen != 0 {
						got++
					}
				}
			}
			if err != nil || got != 1 || retries != 1 {
				t.Fatalf("%s = %d, %v after %d retries; want the block written during the read, and one retry", read, got, err, retries)
			}
		})
	}
}

// TestRunDamage: damaged or overlapping empty runs, and a page recorded
// inside a run, are *CorruptErrors (never unwritten blocks), also after a
// write into such a page.
func TestRunDamage(t *testing.T) {
	runKey := func(last uint64) []byte { return volKey("v", 'R', u64(last)...) }
	run := func(first, end uint64) []byte {
		v := []byte{'R', 1, 0, 0}
		v = append(v, u64(first)...)
		v = append(v, u64(end)...)
		return resealCRC(append(v, 0, 0, 0, 0))
	}
	for _, tc := range []struct {
		name string
		edit func(t *testing.T, kv store.KV)
		want string
	}{
		{"damage=checksum", func(t *testing.T, kv store.KV) {
			v := kvGet(t, kv, runKey(3))
			v[5] ^= 1
			kvPut(t, kv, runKey(3), v)
		}, "checksum"},
		{"damage=key", func(t *testing.T, kv store.KV) {
			kvPut(t, kv, runKey(3), nil)
			kvPut(t, kv, runKey(2), run(0, 4))
		}, "under the key of page 2"},
		{"damage=beyond", func(t *testing.T, kv store.KV) {
			kvPut(t, kv, runKey(3), nil)
			kvPut(t, kv, runKey(4), run(0, 5))
		}, "volume of 4 pages"},
		{"damage=overlap", func(t *testing.T, kv store.KV) {
			kvPut(t, kv, runKey(3), run(2, 4))
			kvPut(t, kv, runKey(2), run(0, 3))
		}, "overlaps"},
		{"damage=page-in-run", func(t *testing.T, kv store.KV) {
			kvPut(t, kv, volKey("v", 'P', u64(2)...), kvGet(t, kv, volKey("v", 'P', u64(0)...)))
		}, "overlaps the record of page 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := store.NewMem()
			defer kv.Close()
			man := store.NewManifest("f", 512, 8, 4*64*512, "d")
			man.PageTuples = 64
			tp, err := store.CreateTuples(kv, "v", man)
			if err != nil {
				t.Fatal(err)
			}
			// Page 0 written and emptied again: its empty-page record stays,
			// and the run holds pages [1, 4).
			if err := tp.WriteRange(0, make([]byte, 8), make([]uint32, 1), true); err != nil {
				t.Fatal(err)
			}
			if err := tp.Discard(0, 1, true); err != nil {
				t.Fatal(err)
			}
			if tc.name != "damage=page-in-run" {
				kvPut(t, kv, volKey("v", 'P', u64(0)...), nil)
				kvPut(t, kv, runKey(3), run(0, 4))
				if _, err := tp.Coverage(nil); err != nil {
					t.Fatalf("before the damage: %v", err)
				}
			}
			tc.edit(t, kv)
			var ce *store.CorruptError
			if _, err := tp.ReadRange(0, make([]byte, 8*256), nil, nil); !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReadRange: %v, want a *CorruptError saying %q", err, tc.want)
			}
			if _, err := tp.Coverage(nil); !errors.As(err, &ce) {
				t.Errorf("Coverage: %v, want a *CorruptError", err)
			}
			if tc.name == "damage=page-in-run" {
				// A write into that page takes its record and leaves the run:
				// the damage stays visible.
				if err := tp.WriteRange(2*64+1, make([]byte, 8), make([]uint32, 1), true); err != nil {
					t.Fatal(err)
				}
				if _, err := tp.ReadRange(0, make([]byte, 8*256), nil, nil); !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("ReadRange after a write into the page recorded inside a run: %v, want a *CorruptError saying %q", err, tc.want)
				}
			}
		})
	}
}

// TestLoadRuns: a bulk load takes its pages out of the empty runs in the
// load itself: a load inside a run leaves the runs before and after it, a
// load through a run's last page leaves a null run under its key, and the
// volume reads and writes on as before.
func TestLoadRuns(t *testing.T) {
	for _, be := range kvBackends() {
		t.Run("backend="+be.name, func(t *testing.T) {
			kv := be.open(t)
			const P, pages = 64, 10
			man := store.NewManifest("f", 512, 8, P*pages*512, "d")
			man.PageTuples = P
			tp, err := store.CreateTuples(kv, "v", man)
			if err != nil {
				t.Fatal(err)
			}
			m := newModel(P*pages, 8)
			load := func(lba, n int) {
				t.Helper()
				tu, su := randTuples(rand.New(rand.NewPCG(uint64(lba), 1)), n, 8, true)
				if err := tp.LoadRange(int64(lba), tu, su, true); err != nil {
					t.Fatal(err)
				}
				m.write(lba, tu, su)
				checkAgainst(t, tp, m, 0, P*pages)
				if _, err := tp.Coverage(nil); err != nil {
					t.Fatal(err)
				}
			}
			runs := func() (keys []uint64, nulls int) {
				it, err := kv.NewIter(volKey("v", 'R'), volKey("v", 'S'))
				if err != nil {
					t.Fatal(err)
				}
				defer it.Close()
				for it.Next() {
					k, v := it.Key(), it.Value()
					keys = append(keys, uint64(k[len(k)-1]))
					if bytes.Equal(v[4:12], v[12:20]) {
						nulls++
					}
				}
				return keys, nulls
			}
			load(3*P+5, 2*P) // pages 3-5: runs [0, 3) and [6, 10)
			if keys, nulls := runs(); !slices.Equal(keys, []uint64{2, 9}) || nulls != 0 {
				t.Fatalf("runs %v (%d null) after a load inside the run", keys, nulls)
			}
			load(P, P*2) // pages 1-2: runs [0, 1), a null run at 2, [6, 10)
			if keys, nulls := runs(); !slices.Equal(keys, []uint64{0, 2, 9}) || nulls != 1 {
				t.Fatalf("runs %v (%d null) after a load through a run's end", keys, nulls)
			}
			tu, su := randTuples(rand.New(rand.NewPCG(9, 9)), 3, 8, true)
			if err := tp.WriteRange(2*P+7, tu, su, true); err != nil { // next to the null run
				t.Fatal(err)
			}
			m.write(2*P+7, tu, su)
			if err := tp.WriteRange(9*P, tu, su, true); err != nil { // in the last run
				t.Fatal(err)
			}
			m.write(9*P, tu, su)
			checkAgainst(t, tp, m, 0, P*pages)
			load(0, P*pages) // all of it
			if keys, nulls := runs(); len(keys) != nulls {
				t.Fatalf("runs %v (%d null) after loading every block", keys, nulls)
			}
		})
	}
}

// TestKeyedRunNeedsKey: a write into a page of an empty run of a keyed
// volume splits the run, whose parts must carry the key's MAC: without
// the key the commit is refused, and writes outside the runs are not.
func TestKeyedRunNeedsKey(t *testing.T) {
	kv := store.NewMem()
	defer kv.Close()
	newKeyed(t, kv, "v", keyedManifest(256))
	at, err := store.OpenTuples(kv, "v", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := at.WriteRange(70, make([]byte, 8), make([]uint32, 1), true); !errors.Is(err, store.ErrKeyed) {
		t.Fatalf("a write into a run without the key: %v, want ErrKeyed", err)
	}
	if err := at.Discard(70, 1, true); err != nil {
		t.Fatalf("a discard of unwritten blocks: %v", err)
	}
	if _, err := at.NewLoader(0); !errors.Is(err, store.ErrKeyed) {
		t.Fatalf("a bulk load of a keyed volume: %v, want ErrKeyed", err)
	}
}

// TestLegacyVolumes: volumes made before the empty runs (a record of every
// page; schema 2, keyed 5) open, read, write, discard, load, count and
// check as before, without an empty run ever written, and a page record
// deleted from them is still corruption (keyed: a missing tag page).
func TestLegacyVolumes(t *testing.T) {
	for _, be := range kvBackends() {
		for _, keyed := range []bool{false, true} {
			t.Run(fmt.Sprintf("backend=%s/keyed=%v", be.name, keyed), func(t *testing.T) {
				kv := be.open(t)
				const blocks = 250
				m, schema := keyedManifest(blocks), store.SealedSchemaVersion
				if !keyed {
					m.KeyCheck, m.VolumeUID, schema = "", "", store.DenseSchemaVersion
				}
				if _, err := store.CreateLegacy(kv, "v", m, macKey, schema); err != nil {
					t.Fatal(err)
				}
				open := func() *store.Tuples {
					tp, err := store.OpenTuples(kv, "v", nil)
					if err != nil {
						t.Fatal(err)
					}
					if keyed {
						if err := tp.SetPageMACKey(macKey); err != nil {
							t.Fatal(err)
						}
					}
					return tp
				}
				tp := open()
				if got := tp.Manifest().Schema; got != schema || !tp.Dense() {
					t.Fatalf("schema %d (dense %v), want %d", got, tp.Dense(), schema)
				}
				md := newModel(blocks, 8)
				rng := rand.New(rand.NewPCG(3, 4))
				checkAgainst(t, tp, md, 0, blocks)
				for i, op := range []struct {
					lba, n  int
					discard bool
				}{{3, 10, false}, {64, 64, false}, {100, 120, false}, {64, 64, true}, {240, 10, false}, {0, 5, true}} {
					x := tp.NewTxn()
					if op.discard {
						if err := x.Discard(int64(op.lba), int64(op.n)); err != nil {
							t.Fatal(err)
						}
						md.discard(op.lba, op.n)
					} else {
						tu, su := randTuples(rng, op.n, 8, true)
						if err := x.WriteRange(int64(op.lba), tu, su); err != nil {
							t.Fatal(err)
						}
						md.write(op.lba, tu, su)
					}
					if keyed {
						tags := tagsFor(op.lba, op.n, uint64(i+1))
						if op.discard {
							tags = make([]store.KeyedTag, op.n)
						}
						if err := x.WriteTags(int64(op.lba), tags); err != nil {
							t.Fatal(err)
						}
					}
					if err := x.Commit(true); err != nil {
						t.Fatal(err)
					}
					checkAgainst(t, tp, md, 0, blocks)
				}
				if !keyed {
					tu, su := randTuples(rng, 90, 8, true)
					if err := tp.LoadRange(150, tu, su, true); err != nil {
						t.Fatal(err)
					}
					md.write(150, tu, su)
				}
				tp = open()
				checkAgainst(t, tp, md, 0, blocks)
				want := 0
				for _, w := range md.written {
					if w {
						want++
					}
				}
				if n, err := tp.Coverage(nil); err != nil || n != int64(want) {
					t.Fatalf("Coverage = %d, %v; want %d", n, err, want)
				}
				if keyed {
					if err := tp.ReadTags(0, make([]store.KeyedTag, blocks)); err != nil {
						t.Fatal(err)
					}
					checkSeal(t, tp, 7)
				}
				if it, _ := kv.NewIter(volKey("v", 'R'), volKey("v", 'S')); it.Next() {
					t.Fatalf("an empty run %x in a legacy volume", it.Key())
				} else {
					it.Close()
				}
				if got := tp.Manifest().Schema; got != schema {
					t.Fatalf("schema %d after the writes, want %d", got, schema)
				}
				// A lost page is corruption, as before.
				kvPut(t, kv, volKey("v", 'P', u64(3)...), nil)
				if _, err := tp.Coverage(nil); !errors.Is(err, store.ErrCorrupt) {
					t.Fatalf("Coverage after a page was lost: %v", err)
				}
				if keyed {
					kvPut(t, kv, volKey("v", 'K', u64(1)...), nil)
					var pe *store.PageMACError
					if err := tp.ReadTags(64, make([]store.KeyedTag, 64)); !errors.As(err, &pe) || !pe.IsMissing(1) {
						t.Fatalf("ReadTags after a tag page was lost: %v", err)
					}
				}
			})
		}
	}
}

// TestSchemaFeatures: volumes are created with schema version 7; a newer
// version, or a feature this version does not know, is refused at open
// (ErrUnsupported), and features in a manifest older than version 7 are
// damage. Mirror legs are the feature "mirror-legs" from version 7 on,
// and version 6 on older volumes.
func TestSchemaFeatures(t *testing.T) {
	kv := store.NewMem()
	defer kv.Close()
	man := store.NewManifest("f", 512, 8, 64*512, "d")
	tp, err := store.CreateTuples(kv, "v", man)
	if err != nil {
		t.Fatal(err)
	}
	if s := tp.Manifest().Schema; s != store.SchemaVersion || store.SchemaVersion != 7 {
		t.Fatalf("new volume of schema %d", s)
	}
	mk := volKey("v", 'M')
	mv := kvGet(t, kv, mk)
	for _, tc := range []struct {
		name, from, to string
		want           error
	}{
		{"schema=8", `"schema":7`, `"schema":8`, store.ErrUnsupported},
		{"feature=unknown", `"created"`, `"features":["mirror-legs","shards"],"created"`, store.ErrUnsupported},
		{"feature=twice", `"created"`, `"features":["mirror-legs","mirror-legs"],"created"`, store.ErrCorrupt},
		{"schema=6/features", `"schema":7,`, `"schema":6,"features":["mirror-legs"],`, store.ErrCorrupt},
	} {
		v := bytes.Replace(mv, []byte(tc.from), []byte(tc.to), 1)
		if bytes.Equal(v, mv) {
			t.Fatalf("%s: manifest %s has no %s", tc.name, mv, tc.from)
		}
		kvPut(t, kv, mk, v)
		if _, err := store.OpenTuples(kv, "v", nil); !errors.Is(err, tc.want) {
			t.Errorf("%s: open = %v, want %v", tc.name, err, tc.want)
		}
	}
	kvPut(t, kv, mk, mv)
	legs := store.Mirrors{Legs: []store.Leg{{Name: "m1"}}}
	for _, tc := range []struct {
		name   string
		create func() (*store.Tuples, error)
		schema int // with legs
	}{
		{"schema=7", func() (*store.Tuples, error) { return store.CreateTuples(kv, "w", man) }, store.SchemaVersion},
		{"schema=2", func() (*store.Tuples, error) {
			return store.CreateLegacy(kv, "w", man, nil, store.DenseSchemaVersion)
		}, store.MirrorSchemaVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := store.DeleteVolume(kv, "w"); err != nil {
				t.Fatal(err)
			}
			tp, err := tc.create()
			if err != nil {
				t.Fatal(err)
			}
			was := tp.Manifest().Schema
			if err := tp.SetMirrors(legs, true); err != nil {
				t.Fatal(err)
			}
			reopened := func() store.Manifest {
				tp, err := store.OpenTuples(kv, "w", nil)
				if err != nil {
					t.Fatal(err)
				}
				return tp.Manifest()
			}
			if m := reopened(); m.Schema != tc.schema || !m.HasFeature(store.FeatureMirrorLegs) {
				t.Fatalf("with legs: schema %d, features %q", m.Schema, m.Features)
			}
			ms := volKey("w", 'X', []byte("mirrors")...)
			saved := kvGet(t, kv, ms)
			kvPut(t, kv, ms, nil)
			if _, err := tp.Mirrors(); !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("legs without their record: %v, want ErrCorrupt", err)
			}
			kvPut(t, kv, ms, saved)
			if err := tp.SetMirrors(store.Mirrors{}, true); err != nil {
				t.Fatal(err)
			}
			if m := reopened(); m.Schema != was || m.HasFeature(store.FeatureMirrorLegs) || m.Features != nil {
				t.Fatalf("without legs: schema %d, features %q; want %d and none", m.Schema, m.Features, was)
			}
		})
	}
}

// TestRunsCrash crashes a Pebble store on a crashable file system at each
// commit of a workload that writes into the empty runs of a new volume (in
// part, whole pages, several ranges at once, discards, a bulk load; keyed:
// with tags), keeping none, a random half or all of what was not synced:
// the volume reopens as it was after one of the ops before the crash (the
// last synced one or a later one), with every page recorded or in a run,
// and, keyed, its seal matching its tag pages and runs. A run split in a
// commit of its own, before the page, fails it.
func TestRunsCrash(t *testing.T) {
	const P, pages = 64, 12
	const blocks = P * pages
	type op struct {
		lba, n  int
		discard bool
		load    bool
		spans   [][2]int // a transaction of several writes
		sync    bool
	}
	ops := []op{
		{lba: 5*P + 3, n: 1},                                      // inside the run: [0, 5) and [6, 12)
		{lba: 8 * P, n: 2 * P, sync: true},                        // whole pages 8, 9
		{spans: [][2]int{{0, 3}, {2*P + 10, 20}, {11*P + 63, 1}}}, // three runs touched at once
		{lba: 3 * P, n: P, discard: true},                         // unwritten: no record written
		{lba: 5*P + 3, n: 1, discard: true},                       // page 5 keeps an empty record
		{lba: 6*P + 30, n: P + 10, load: true},                    // pages 6, 7 by bulk load
		{lba: 10 * P, n: 2*P - 1},                                 // pages 10, 11 but their last block
		{lba: 4*P - 2, n: 4, sync: true},                          // pages 3, 4: the run [3, 5) is used up
	}
	errCrash := errors.New("crash")
	for _, keyed := range []bool{false, true} {
		t.Run(fmt.Sprintf("keyed=%v", keyed), func(t *testing.T) {
			m := keyedManifest(blocks)
			if !keyed {
				m.KeyCheck, m.VolumeUID = "", ""
			}
			// apply applies op i to md and, if tp is not nil, to tp.
			apply := func(tp *store.Tuples, i int, o op, md *model) error {
				rng := rand.New(rand.NewPCG(uint64(i), 5))
				var x *store.Txn
				if tp != nil {
					x = tp.NewTxn()
				}
				spans := o.spans
				if spans == nil {
					spans = [][2]int{{o.lba, o.n}}
				}
				for _, s := range spans {
					tags := tagsFor(s[0], s[1], uint64(i+1))
					if o.discard {
						tags = make([]store.KeyedTag, s[1])
						md.discard(s[0], s[1])
						if x != nil {
							if err := x.Discard(int64(s[0]), int64(s[1])); err != nil {
								return err
							}
						}
					} else {
						tu, su := randTuples(rng, s[1], 8, true)
						md.write(s[0], tu, su)
						switch {
						case x == nil:
						case o.load && !keyed: // a keyed volume has no bulk load
							if err := tp.LoadRange(int64(s[0]), tu, su, false); err != nil {
								return err
							}
							continue
						default:
							if err := x.WriteRange(int64(s[0]), tu, su); err != nil {
								return err
							}
						}
					}
					if x != nil && keyed {
						if err := x.WriteTags(int64(s[0]), tags); err != nil {
							return err
						}
					}
				}
				if x == nil {
					return nil
				}
				return x.Commit(o.sync)
			}
			states := []*model{newModel(blocks, 8)}
			for i, o := range ops {
				md := states[i].clone()
				apply(nil, i, o, md)
				states = append(states, md)
			}
			points := 0
			for k := 0; ; k++ { // crash at commit k after creation
				crashed := false
				for _, keep := range []int{0, 50, 100} {
					fs := vfs.NewCrashableMem()
					kv0, err := pebble.OpenOnFS("db", fs)
					if err != nil {
						t.Fatal(err)
					}
					kv, c := counting(kv0)
					var tp *store.Tuples
					if keyed {
						tp, err = store.CreateKeyedTuples(kv, "v", m, macKey)
					} else {
						tp, err = store.CreateTuples(kv, "v", m)
					}
					if err != nil {
						t.Fatal(err)
					}
					var clone *vfs.MemFS
					step := 0
					c.hook = func() error {
						if step == k {
							clone = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: keep, RNG: rand.New(rand.NewPCG(uint64(k), uint64(keep)))})
							return errCrash
						}
						step++
						return nil
					}
					synced, at := 0, len(ops)
					for i, o := range ops {
						err := apply(tp, i, o, states[i].clone())
						if clone != nil {
							at = i
							break
						}
						if err != nil {
							t.Fatal(err)
						}
						if o.sync || o.load && !keyed {
							synced = i + 1
						}
					}
					kv0.Close()
					if clone == nil {
						break // no commit k: every crash point done
					}
					crashed = true
					kv, err = pebble.OpenOnFS("db", clone)
					if err != nil {
						t.Fatalf("crash at commit %d (keep %d%%): reopen: %v", k, keep, err)
					}
					where := fmt.Sprintf("crash at commit %d, in op %d (keep %d%%)", k, at, keep)
					tp, err = store.OpenTuples(kv, "v", nil)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := tp.Coverage(nil); err != nil {
						t.Fatalf("%s: %v", where, err)
					}
					got, err := readVolumeModel(tp)
					if err != nil {
						t.Fatalf("%s: %v", where, err)
					}
					if !slices.ContainsFunc(states[synced:at+1], got.equal) {
						t.Fatalf("%s: the volume is none of the states after ops %d..%d", where, synced, at)
					}
					if keyed {
						if err := tp.SetPageMACKey(macKey); err != nil {
							t.Fatal(err)
						}
						if err := tp.ReadTags(0, make([]store.KeyedTag, blocks)); err != nil {
							t.Fatalf("%s: %v", where, err)
						}
						if _, ok, err := tp.CheckSeal(); err != nil || !ok {
							t.Fatalf("%s: seal %v, %v", where, ok, err)
						}
					}
					kv.Close()
				}
				if !crashed {
					break
				}
				points++
			}
			t.Logf("%d crash points", points)
		})
	}
}

func (m *model) clone() *model {
	c := &model{ts: m.ts, tuples: make([][]byte, len(m.tuples)), sums: slices.Clone(m.sums), written: slices.Clone(m.written)}
	for i, tu := range m.tuples {
		c.tuples[i] = slices.Clone(tu)
	}
	return c
}

func (m *model) equal(o *model) bool {
	return slices.EqualFunc(m.tuples, o.tuples, bytes.Equal) && slices.Equal(m.sums, o.sums) && slices.Equal(m.written, o.written)
}

// readVolumeModel reads every block of tp (keeping sector sums) into a
// model.
func readVolumeModel(tp *store.Tuples) (*model, error) {
	n, ts := int(tp.Blocks()), tp.TupleSize()
	tuples, sums, written := make([]byte, n*ts), make([]uint32, n), store.NewBitmap(n)
	if _, err := tp.ReadRange(0, tuples, sums, written); err != nil {
		return nil, err
	}
	m := newModel(n, ts)
	for i := range n {
		m.tuples[i] = tuples[i*ts : (i+1)*ts]
		m.sums[i], m.written[i] = sums[i], written.Has(i)
	}
	return m, nil
}
