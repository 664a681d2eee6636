package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/difctl/difctl/store"
	"github.com/difctl/difctl/store/pebble"
)

func kvBackends() []struct {
	name string
	open func(t *testing.T) store.KV
} {
	return []struct {
		name string
		open func(t *testing.T) store.KV
	}{
		{"mem", func(t *testing.T) store.KV { kv := store.NewMem(); t.Cleanup(func() { kv.Close() }); return kv }},
		{"pebble", func(t *testing.T) store.KV {
			kv, err := pebble.Open(t.TempDir(), store.OpenOptions{Create: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { kv.Close() })
			return kv
		}},
	}
}

// model is the oracle: one tuple, sum and written flag per block.
type model struct {
	ts      int
	tuples  [][]byte
	sums    []uint32
	written []bool
}

func newModel(blocks, ts int) *model {
	m := &model{ts: ts, tuples: make([][]byte, blocks), sums: make([]uint32, blocks), written: make([]bool, blocks)}
	for i := range m.tuples {
		m.tuples[i] = bytes.Repeat([]byte{0xff}, ts)
	}
	return m
}

func (m *model) write(lba int, tuples []byte, sums []uint32) {
	for i := range len(tuples) / m.ts {
		m.tuples[lba+i] = slices.Clone(tuples[i*m.ts : (i+1)*m.ts])
		if sums != nil {
			m.sums[lba+i] = sums[i]
		}
		m.written[lba+i] = true
	}
}

func (m *model) discard(lba, n int) {
	for i := lba; i < lba+n; i++ {
		m.tuples[i] = bytes.Repeat([]byte{0xff}, m.ts)
		m.sums[i], m.written[i] = 0, false
	}
}

func randTuples(rng *rand.Rand, n, ts int, withSums bool) ([]byte, []uint32) {
	tuples := make([]byte, n*ts)
	for i := range tuples {
		tuples[i] = byte(rng.Uint32())
	}
	var sums []uint32
	if withSums {
		sums = make([]uint32, n)
		for i := range sums {
			sums[i] = rng.Uint32()
		}
	}
	return tuples, sums
}

// checkAgainst reads [lba, lba+n) and compares with the model block by block.
func checkAgainst(t *testing.T, tp *store.Tuples, m *model, lba, n int) {
	t.Helper()
	checkRead(t, tp, m, lba, n, tp.ReadRange)
}

// checkRead is checkAgainst with read for ReadRange.
func checkRead(t *testing.T, tp *store.Tuples, m *model, lba, n int, read func(int64, []byte, []uint32, store.Bitmap) (int, error)) {
	t.Helper()
	ts := tp.TupleSize()
	tuples := make([]byte, n*ts)
	for i := range tuples {
		tuples[i] = 0x5a // must be overwritten
	}
	var sums []uint32
	if tp.Manifest().SectorSums {
		sums = make([]uint32, n)
		for i := range sums {
			sums[i] = 0xdeadbeef
		}
	}
	written := store.NewBitmap(n)
	for i := range written {
		written[i] = 0xaaaaaaaaaaaaaaaa
	}
	count, err := read(int64(lba), tuples, sums, written)
	if err != nil {
		t.Fatalf("ReadRange(%d, %d): %v", lba, n, err)
	}
	want := 0
	for i := range n {
		b := lba + i
		if m.written[b] {
			want++
		}
		if written.Has(i) != m.written[b] {
			t.Fatalf("block %d: written=%v, want %v", b, written.Has(i), m.written[b])
		}
		if got := tuples[i*ts : (i+1)*ts]; !bytes.Equal(got, m.tuples[b]) {
			t.Fatalf("block %d: tuple %x, want %x", b, got, m.tuples[b])
		}
		if sums != nil && sums[i] != m.sums[b] {
			t.Fatalf("block %d: sum %08x, want %08x", b, sums[i], m.sums[b])
		}
	}
	if count != want {
		t.Fatalf("ReadRange(%d, %d) counted %d written, want %d", lba, n, count, want)
	}
	// The same read without the optional outputs counts the same.
	if c2, err := read(int64(lba), tuples, nil, nil); err != nil || c2 != want {
		t.Fatalf("ReadRange without sums/bitmap = %d, %v; want %d", c2, err, want)
	}
}

func TestTuplesRandomOps(t *testing.T) {
	ops := 300
	if testing.Short() {
		ops = 80
	}
	for _, be := range kvBackends() {
		for _, tc := range []struct {
			ts, pageTuples int
			sums           bool
		}{{8, 64, true}, {16, 128, false}, {8, 1024, false}, {16, 64, true}} {
			name := fmt.Sprintf("backend=%s/tuple=%d/page=%d/sums=%v", be.name, tc.ts, tc.pageTuples, tc.sums)
			t.Run(name, func(t *testing.T) {
				kv := be.open(t)
				const blocks = 5000
				man := store.NewManifest("test", 512, tc.ts, blocks*512, "dev")
				man.SectorSums, man.PageTuples = tc.sums, tc.pageTuples
				tp, err := store.CreateTuples(kv, "vol", man)
				if err != nil {
					t.Fatal(err)
				}
				m := newModel(blocks, tc.ts)
				rng := rand.New(rand.NewPCG(uint64(tc.ts), uint64(tc.pageTuples)))
				checkAgainst(t, tp, m, 0, blocks)
				for i := range ops {
					lba := rng.IntN(blocks)
					n := 1 + rng.IntN(min(blocks-lba, []int{3, 70, 700, 3000}[rng.IntN(4)]))
					switch rng.IntN(5) {
					case 0:
						if err := tp.Discard(int64(lba), int64(n), false); err != nil {
							t.Fatal(err)
						}
						m.discard(lba, n)
					case 1: // a multi-write transaction, with overlapping writes
						x := tp.NewTxn()
						for range 3 {
							l := rng.IntN(blocks)
							c := 1 + rng.IntN(min(blocks-l, 300))
							tu, su := randTuples(rng, c, tc.ts, tc.sums)
							if err := x.WriteRange(int64(l), tu, su); err != nil {
								t.Fatal(err)
							}
							m.write(l, tu, su)
							clear(tu) // the transaction copied it
						}
						if err := x.Commit(i%2 == 0); err != nil {
							t.Fatal(err)
						}
					default:
						tu, su := randTuples(rng, n, tc.ts, tc.sums)
						if err := tp.WriteRange(int64(lba), tu, su, false); err != nil {
							t.Fatal(err)
						}
						m.write(lba, tu, su)
					}
					rl := rng.IntN(blocks)
					checkAgainst(t, tp, m, rl, 1+rng.IntN(blocks-rl))
				}
				checkAgainst(t, tp, m, 0, blocks)
				// Reopen and read everything again.
				tp, err = store.OpenTuples(kv, "vol", &man)
				if err != nil {
					t.Fatal(err)
				}
				checkAgainst(t, tp, m, 0, blocks)
			})
		}
	}
}

func TestTuplesArgs(t *testing.T) {
	kv := store.NewMem()
	defer kv.Close()
	tp, err := store.CreateTuples(kv, "v", store.NewManifest("f", 4096, 8, 100*4096, "d"))
	if err != nil {
		t.Fatal(err)
	}
	tp16, err := store.CreateTuples(kv, "v16", store.NewManifest("f", 4096, 16, 100*4096, "d"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
		fn   func() error
	}{
		{"op=read/range=past-end", store.ErrOutOfRange, func() error { _, err := tp.ReadRange(99, make([]byte, 16), make([]uint32, 2), nil); return err }},
		{"op=read/range=huge-lba", store.ErrOutOfRange, func() error { _, err := tp.ReadRange(math.MaxInt64, make([]byte, 8), nil, nil); return err }},
		// LBAs and block counts are int64: a negative one is refused.
		{"op=read/lba=negative", store.ErrOutOfRange, func() error { _, err := tp.ReadRange(-1, make([]byte, 8), nil, nil); return err }},
		{"op=read-cached/lba=negative", store.ErrOutOfRange, func() error {
			_, err := tp16.ReadRangeCached(-1, make([]byte, 16), nil, nil)
			return err
		}},
		{"op=write/lba=negative", store.ErrOutOfRange, func() error { return tp.WriteRange(-1, make([]byte, 8), make([]uint32, 1), false) }},
		{"op=txn-write/lba=negative", store.ErrOutOfRange, func() error { return tp.NewTxn().WriteRange(-1, make([]byte, 8), make([]uint32, 1)) }},
		{"op=discard/lba=negative", store.ErrOutOfRange, func() error { return tp.Discard(-1, 1, false) }},
		{"op=discard/n=negative", store.ErrOutOfRange, func() error { return tp.Discard(1, -1, false) }},
		{"op=txn-discard/lba=negative", store.ErrOutOfRange, func() error { return tp.NewTxn().Discard(-1, 1) }},
		{"op=intent/lba=negative", store.ErrOutOfRange, func() error {
			_, err := tp.NewTxn().RecordIntent(-1, make([]byte, 8), make([]uint32, 1))
			return err
		}},
		{"op=intents/lba=negative", store.ErrOutOfRange, func() error {
			for _, err := range tp.Intents(-1, 2) {
				return err
			}
			return nil
		}},
		{"op=intents/n=negative", store.ErrOutOfRange, func() error {
			for _, err := range tp.Intents(0, -1) {
				return err
			}
			return nil
		}},
		{"op=loader/lba=negative", store.ErrOutOfRange, func() error { _, err := tp.NewLoader(-1); return err }},
		{"op=load/lba=negative", store.ErrOutOfRange, func() error { return tp.LoadRange(-1, make([]byte, 8), make([]uint32, 1), false) }},
		{"op=create/size=negative", store.ErrInvalid, func() error {
			_, err := store.CreateTuples(kv, "x", store.NewManifest("f", 512, 8, -512, "d"))
			return err
		}},
		{"op=read/tuples=ragged", store.ErrInvalid, func() error { _, err := tp.ReadRange(0, make([]byte, 9), nil, nil); return err }},
		{"op=read/sums=short", store.ErrInvalid, func() error { _, err := tp.ReadRange(0, make([]byte, 16), make([]uint32, 1), nil); return err }},
		{"op=read/bitmap=short", store.ErrInvalid, func() error { _, err := tp.ReadRange(0, make([]byte, 8*65), nil, store.NewBitmap(64)); return err }},
		{"op=read/sums=unkept", store.ErrInvalid, func() error { _, err := tp16.ReadRange(0, make([]byte, 16), make([]uint32, 1), nil); return err }},
		{"op=write/sums=missing", store.ErrInvalid, func() error { return tp.WriteRange(0, make([]byte, 8), nil, false) }},
		{"op=write/range=past-end", store.ErrOutOfRange, func() error { return tp.WriteRange(100, make([]byte, 8), make([]uint32, 1), false) }},
		{"op=discard/range=past-end", store.ErrOutOfRange, func() error { return tp.Discard(50, 51, false) }},
		{"op=intent/empty", store.ErrInvalid, func() error { _, err := tp.NewTxn().RecordIntent(0, nil, nil); return err }},
		{"op=create/exists", store.ErrExists, func() error { _, err := store.CreateTuples(kv, "v", tp.Manifest()); return err }},
		{"op=create/name=empty", store.ErrInvalid, func() error { _, err := store.CreateTuples(kv, "", tp.Manifest()); return err }},
		{"op=create/tuple=12", store.ErrInvalid, func() error {
			_, err := store.CreateTuples(kv, "x", store.NewManifest("f", 512, 12, 512, "d"))
			return err
		}},
		{"op=create/size=ragged", store.ErrInvalid, func() error {
			_, err := store.CreateTuples(kv, "x", store.NewManifest("f", 512, 8, 1000, "d"))
			return err
		}},
		{"op=open/missing", store.ErrNotFound, func() error { _, err := store.OpenTuples(kv, "nope", nil); return err }},
		{"op=txn/reuse", store.ErrClosed, func() error {
			x := tp.NewTxn()
			x.Commit(false)
			return x.WriteRange(0, make([]byte, 8), make([]uint32, 1))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.fn()
			if !errors.Is(err, tc.err) {
				t.Fatalf("got %v, want %v", err, tc.err)
			}
			if !strings.HasPrefix(err.Error(), "store: ") {
				t.Errorf("error %q lacks the \"store: \" prefix", err)
			}
		})
	}
}

func TestManifestMismatch(t *testing.T) {
	kv := store.NewMem()
	defer kv.Close()
	base := store.NewManifest("4096+8:crc16:type1:pi-last", 4096, 8, 1<<30, "serial-1")
	base.InitialRefTag, base.AppTag, base.AppTagMask = 7, 0x1234, 0xffff
	if _, err := store.CreateTuples(kv, "vol", base); err != nil {
		t.Fatal(err)
	}
	got, err := store.OpenTuples(kv, "vol", &base)
	if err != nil {
		t.Fatalf("open with the same manifest: %v", err)
	}
	if m := got.Manifest(); m.Schema != store.SchemaVersion || m.Created.IsZero() || m.PageTuples != store.DefaultPageTuples {
		t.Errorf("stored manifest %+v lacks schema/created/page defaults", m)
	}
	for _, tc := range []struct {
		field         string
		change        func(*store.Manifest)
		stored, given string
	}{
		{"format", func(m *store.Manifest) { m.Format = "4096+8:crc16:type3:pi-last" }, `"4096+8:crc16:type1:pi-last"`, `"4096+8:crc16:type3:pi-last"`},
		{"block_size", func(m *store.Manifest) { m.BlockSize = 512 }, "4096", "512"},
		{"tuple_size", func(m *store.Manifest) { m.TupleSize = 16 }, "8", "16"},
		{"sector_sums", func(m *store.Manifest) { m.SectorSums = false }, "true", "false"},
		{"page_tuples", func(m *store.Manifest) { m.PageTuples = 2048 }, "1024", "2048"},
		{"initial_ref_tag", func(m *store.Manifest) { m.InitialRefTag = 8 }, "7", "8"},
		{"app_tag", func(m *store.Manifest) { m.AppTag = 1 }, "0x1234", "0x0001"},
		{"app_tag_mask", func(m *store.Manifest) { m.AppTagMask = 0 }, "0xffff", "0x0000"},
		{"device_size", func(m *store.Manifest) { m.DeviceSize = 2 << 30 }, "1073741824", "2147483648"},
		{"device_id", func(m *store.Manifest) { m.DeviceID = "serial-2" }, `"serial-1"`, `"serial-2"`},
	} {
		t.Run("field="+tc.field, func(t *testing.T) {
			m := base
			tc.change(&m)
			_, err := store.OpenTuples(kv, "vol", &m)
			var me *store.ManifestMismatchError
			if !errors.As(err, &me) || !errors.Is(err, store.ErrMismatch) {
				t.Fatalf("OpenTuples = %v, want *ManifestMismatchError", err)
			}
			want := &store.ManifestMismatchError{Volume: "vol", Field: tc.field, Stored: tc.stored, Given: tc.given}
			if diff := cmp.Diff(want, me); diff != "" {
				t.Errorf("mismatch error (-want +got):\n%s", diff)
			}
			if !strings.Contains(err.Error(), tc.stored) || !strings.Contains(err.Error(), tc.given) {
				t.Errorf("error %q does not name both values", err)
			}
		})
	}
	t.Run("field=created", func(t *testing.T) {
		m := base
		m.Created, m.Tool = time.Unix(1, 0), "other 2.0"
		if _, err := store.OpenTuples(kv, "vol", &m); err != nil {
			t.Errorf("history fields must not be compared: %v", err)
		}
	})
}

func TestVolumesIsolated(t *testing.T) {
	for _, be := range kvBackends() {
		t.Run("backend="+be.name, func(t *testing.T) {
			kv := be.open(t)
			// Names that are prefixes of each other and contain the
			// separator bytes of the key layout.
			names := []string{"a", "ab", "a\x00", "b", "P", strings.Repeat("z", 255)}
			var vols []*store.Tuples
			for i, name := range names {
				tp, err := store.CreateTuples(kv, name, store.NewManifest("f", 512, 8, 4096*512, name))
				if err != nil {
					t.Fatal(err)
				}
				tu := bytes.Repeat([]byte{byte(i + 1)}, 8*4096)
				if err := tp.WriteRange(0, tu, make([]uint32, 4096), false); err != nil {
					t.Fatal(err)
				}
				vols = append(vols, tp)
			}
			if err := vols[1].Discard(0, 4096, true); err != nil {
				t.Fatal(err)
			}
			for i, tp := range vols {
				buf := make([]byte, 8*4096)
				n, err := tp.ReadRange(0, buf, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				want, wantN := bytes.Repeat([]byte{byte(i + 1)}, 8*4096), 4096
				if i == 1 {
					want, wantN = bytes.Repeat([]byte{0xff}, 8*4096), 0
				}
				if n != wantN || !bytes.Equal(buf, want) {
					t.Errorf("volume %q: %d written, tuples %x..., want %d, %x...", names[i], n, buf[:8], wantN, want[:8])
				}
			}
			got, err := store.Volumes(kv)
			if err != nil {
				t.Fatal(err)
			}
			if want := slices.Sorted(slices.Values(names)); !slices.Equal(got, want) {
				t.Errorf("Volumes = %q, want %q", got, want)
			}
			if err := store.DeleteVolume(kv, "a"); err != nil {
				t.Fatal(err)
			}
			if _, err := store.OpenTuples(kv, "a", nil); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("deleted volume opens: %v", err)
			}
			if _, err := store.OpenTuples(kv, "ab", nil); err != nil {
				t.Errorf("neighbour of deleted volume: %v", err)
			}
		})
	}
}

func TestIntents(t *testing.T) {
	for _, be := range kvBackends() {
		t.Run("backend="+be.name, func(t *testing.T) {
			kv := be.open(t)
			man := store.NewManifest("f", 512, 8, 100000*512, "d")
			man.PageTuples = 64 // intent records split every 256 blocks
			tp, err := store.CreateTuples(kv, "v", man)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(5, 6))
			oldT, oldS := randTuples(rng, 1000, 8, true)
			if err := tp.WriteRange(0, oldT, oldS, true); err != nil {
				t.Fatal(err)
			}
			// One group commit: three intents, one long enough to split.
			x := tp.NewTxn()
			newA, sumA := randTuples(rng, 10, 8, true)
			newB, sumB := randTuples(rng, 600, 8, true)
			newC, sumC := randTuples(rng, 5, 8, true)
			idA, err := x.RecordIntent(100, newA, sumA)
			if err != nil {
				t.Fatal(err)
			}
			idB, _ := x.RecordIntent(200, newB, sumB)
			idC, _ := x.RecordIntent(105, newC, sumC) // overlaps A, newer
			if !(idA.Seq < idB.Seq && idB.Seq < idC.Seq) || idB.N != 600 {
				t.Fatalf("ids %+v %+v %+v", idA, idB, idC)
			}
			if err := x.Commit(true); err != nil {
				t.Fatal(err)
			}
			// Committed tuples are untouched.
			checkRead := func(lba int, want []byte) {
				t.Helper()
				buf := make([]byte, len(want))
				if _, err := tp.ReadRange(int64(lba), buf, nil, nil); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf, want) {
					t.Fatalf("committed tuples at %d changed", lba)
				}
			}
			checkRead(100, oldT[800:880])
			// Block 107 is under A and C: both intended tuples are visible.
			var under []store.Intent
			for in, err := range tp.Intents(107, 1) {
				if err != nil {
					t.Fatal(err)
				}
				under = append(under, in)
			}
			if len(under) != 2 || under[0].Seq != idA.Seq || under[1].Seq != idC.Seq {
				t.Fatalf("intents over block 107: %+v", under)
			}
			if !bytes.Equal(under[0].Tuple(107), newA[7*8:8*8]) || !bytes.Equal(under[1].Tuple(107), newC[2*8:3*8]) {
				t.Fatal("intended tuples of block 107 wrong")
			}
			// Reopen (as after a crash): all intents listed in LBA order; the
			// sequence resumes above the highest.
			tp, err = store.OpenTuples(kv, "v", &man)
			if err != nil {
				t.Fatal(err)
			}
			var all []store.Intent
			for in, err := range tp.AllIntents() {
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, in)
			}
			var starts []int64
			for _, in := range all {
				starts = append(starts, in.LBA)
			}
			if want := []int64{100, 105, 200, 456, 712}; !slices.Equal(starts, want) {
				t.Fatalf("open intent records start at %v, want %v", starts, want)
			}
			x = tp.NewTxn()
			idD, _ := x.RecordIntent(0, newC, sumC)
			x.Abort()
			if idD.Seq <= idC.Seq {
				t.Errorf("sequence after reopen %d, not above %d", idD.Seq, idC.Seq)
			}
			// Recovery: fold A and B (data matched the new tuples), drop C.
			x = tp.NewTxn()
			for _, in := range all {
				switch in.Seq {
				case idA.Seq, idB.Seq:
					if err := x.FoldIntent(in); err != nil {
						t.Fatal(err)
					}
				case idC.Seq:
					if err := x.DropIntent(in.IntentID); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := x.Commit(true); err != nil {
				t.Fatal(err)
			}
			for in, err := range tp.AllIntents() {
				t.Fatalf("intent left after folding: %+v, %v", in, err)
			}
			checkRead(100, newA)
			checkRead(200, newB)
			checkRead(110, oldT[880:1600])
			// DropIntent with the ID from RecordIntent removes every record.
			x = tp.NewTxn()
			id, _ := x.RecordIntent(300, newB, sumB)
			x.Commit(false)
			x = tp.NewTxn()
			x.DropIntent(id)
			x.Commit(false)
			for in, err := range tp.AllIntents() {
				t.Fatalf("intent left after DropIntent: %+v, %v", in.IntentID, err)
			}
		})
	}
}

func TestScrubCursorAndFindings(t *testing.T) {
	kv := store.NewMem()
	defer kv.Close()
	tp, err := store.CreateTuples(kv, "v", store.NewManifest("f", 4096, 16, 1<<20*4096, "d"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.ScrubCursor("nightly"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing cursor: %v", err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := store.ScrubCursor{Next: 12345, Pass: 2, Started: now, Updated: now.Add(time.Hour)}
	if err := tp.SetScrubCursor("nightly", c, true); err != nil {
		t.Fatal(err)
	}
	if err := tp.SetScrubCursor("nightly", store.ScrubCursor{Next: 1 << 40}, true); !errors.Is(err, store.ErrOutOfRange) {
		t.Errorf("cursor past the end: %v", err)
	}
	if got, err := tp.ScrubCursor("nightly"); err != nil || !got.Started.Equal(c.Started) || got.Next != c.Next || got.Pass != c.Pass {
		t.Fatalf("ScrubCursor = %+v, %v; want %+v", got, err, c)
	}
	if _, err := tp.ScrubCursor("nightly2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("other cursor: %v", err)
	}

	rec := func(f store.Finding) store.Finding {
		t.Helper()
		got, err := tp.RecordFinding(f, false)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	f1 := rec(store.Finding{LBA: 10, N: 1, Field: "guard", Expected: []byte{1, 2}, Actual: []byte{3, 4}, LastSeen: now})
	rec(store.Finding{LBA: 10, N: 1, Field: "ref", LastSeen: now})
	rec(store.Finding{LBA: 1000, N: 500, Field: "torn", LastSeen: now})
	rec(store.Finding{LBA: 5000, Field: "app", LastSeen: now, State: store.FindingRecheckedOK})
	again := rec(store.Finding{LBA: 10, N: 1, Field: "guard", Expected: []byte{1, 2}, Actual: []byte{9, 9}, LastSeen: now.Add(time.Hour)})
	if f1.Count != 1 || again.Count != 2 || !again.FirstSeen.Equal(now) || !again.LastSeen.Equal(now.Add(time.Hour)) || !bytes.Equal(again.Actual, []byte{9, 9}) {
		t.Fatalf("update of an existing finding: first %+v, again %+v", f1, again)
	}
	if _, err := tp.SetFindingState(10, "ref", store.FindingClosed, false); err != nil {
		t.Fatal(err)
	}
	if _, err := tp.SetFindingState(11, "ref", store.FindingClosed, false); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("state of a missing finding: %v", err)
	}
	key := func(f store.Finding) string { return fmt.Sprintf("%d/%s/%s/%d", f.LBA, f.Field, f.State, f.Count) }
	for _, tc := range []struct {
		name string
		q    store.FindingQuery
		want []string
	}{
		{"query=all", store.FindingQuery{}, []string{"10/guard/open/2", "10/ref/closed/1", "1000/torn/open/1", "5000/app/rechecked-ok/1"}},
		{"query=state-open", store.FindingQuery{State: store.FindingOpen}, []string{"10/guard/open/2", "1000/torn/open/1"}},
		{"query=range-inside-torn", store.FindingQuery{LBA: 1200, N: 10}, []string{"1000/torn/open/1"}},
		{"query=range-after-torn", store.FindingQuery{LBA: 1500, N: 3500}, nil},
		{"query=range-to-end", store.FindingQuery{LBA: 1499}, []string{"1000/torn/open/1", "5000/app/rechecked-ok/1"}},
		{"query=range-and-state", store.FindingQuery{LBA: 0, N: 2000, State: store.FindingClosed}, []string{"10/ref/closed/1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for f, err := range tp.Findings(tc.q) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, key(f))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Findings(%+v) = %q, want %q", tc.q, got, tc.want)
			}
		})
	}
	// Seeing a closed finding again reopens it.
	if f := rec(store.Finding{LBA: 10, Field: "ref", LastSeen: now}); f.State != store.FindingOpen || f.Count != 2 {
		t.Errorf("reseen closed finding: %+v", f)
	}
}

// TestCorruptValues stores damaged records and checks that every read
// returns ErrCorrupt and never panics.
func TestCorruptValues(t *testing.T) {
	kv := store.NewMem()
	defer kv.Close()
	man := store.NewManifest("f", 512, 8, 4096*512, "d")
	tp, err := store.CreateTuples(kv, "v", man)
	if err != nil {
		t.Fatal(err)
	}
	tu, su := randTuples(rand.New(rand.NewPCG(1, 1)), 2048, 8, true)
	if err := tp.WriteRange(0, tu, su, false); err != nil {
		t.Fatal(err)
	}
	x := tp.NewTxn()
	x.RecordIntent(5, tu[:80], su[:10])
	x.Commit(false)
	// Find the raw records.
	raw := map[byte][]byte{} // record type -> key of the first such record
	it, _ := kv.NewIter(nil, nil)
	for it.Next() {
		k := it.Key()
		typ := k[3] // "T", len 1, "v", type
		if _, ok := raw[typ]; !ok {
			raw[typ] = slices.Clone(k)
		}
	}
	it.Close()
	put := func(k, v []byte) {
		b := kv.NewBatch()
		b.Set(k, v)
		if err := b.Commit(false); err != nil {
			t.Fatal(err)
		}
	}
	page, _ := kv.Get(raw['P'])
	for _, tc := range []struct {
		name  string
		key   []byte
		value []byte
		read  func() error
	}{
		{"record=page/damage=flip", raw['P'], func() []byte { v := slices.Clone(page); v[100] ^= 1; return v }(),
			func() error { _, err := tp.ReadRange(0, make([]byte, 8), nil, nil); return err }},
		{"record=page/damage=short", raw['P'], page[:50],
			func() error { _, err := tp.ReadRange(0, make([]byte, 8), nil, nil); return err }},
		{"record=page/damage=partial-write", raw['P'], page[:50],
			func() error { return tp.WriteRange(3, make([]byte, 8), make([]uint32, 1), false) }},
		{"record=intent/damage=truncated", raw['I'], []byte("I\x01"),
			func() error {
				for _, err := range tp.AllIntents() {
					return err
				}
				return nil
			}},
		{"record=manifest/damage=garbage", raw['M'], []byte("{not json"),
			func() error { _, err := store.OpenTuples(kv, "v", nil); return err }},
		{"record=manifest/damage=invalid", raw['M'], []byte(`{"kind":"difctl.store.manifest","schema":1,"block_size":-5}`),
			func() error { _, err := store.OpenTuples(kv, "v", nil); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			put(tc.key, tc.value)
			err := tc.read()
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("got %v, want ErrCorrupt", err)
			}
			var ce *store.CorruptError
			if !errors.As(err, &ce) || ce.Volume != "v" {
				t.Errorf("error %v is not a *CorruptError for volume v", err)
			}
		})
	}
	t.Run("record=manifest/damage=future-schema", func(t *testing.T) {
		put(raw['M'], []byte(`{"kind":"difctl.store.manifest","schema":99}`))
		if _, err := store.OpenTuples(kv, "v", nil); !errors.Is(err, store.ErrUnsupported) {
			t.Fatalf("got %v, want ErrUnsupported", err)
		}
	})
}

func TestBitmap(t *testing.T) {
	for _, n := range []int{1, 63, 64, 65, 200} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			b := store.NewBitmap(n)
			for i := 0; i < n; i += 3 {
				b.Set(i)
			}
			b.Clear(0)
			want := 0
			for i := range n {
				exp := i%3 == 0 && i != 0
				if b.Has(i) != exp {
					t.Fatalf("bit %d = %v", i, b.Has(i))
				}
				if exp {
					want++
				}
			}
			if got := b.Count(n); got != want {
				t.Errorf("Count = %d, want %d", got, want)
			}
		})
	}
}

// TestRecordFindingsBatch: a batch of findings updates the findings
// already stored whether it is dense (read with one iterator) or sparse
// over a crowded range (the iterator gives up and reads the rest one by
// one), and adds the new ones.
func TestRecordFindingsBatch(t *testing.T) {
	kv := store.NewMem()
	defer kv.Close()
	tp, err := store.CreateTuples(kv, "v", store.NewManifest("f", 4096, 16, 1<<20*4096, "d"))
	if err != nil {
		t.Fatal(err)
	}
	first := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var old []store.Finding
	for lba := range int64(5000) {
		old = append(old, store.Finding{LBA: lba, Field: "guard", LastSeen: first}, store.Finding{LBA: lba, Field: "ref", LastSeen: first})
	}
	if _, err := tp.RecordFindings(old, false); err != nil {
		t.Fatal(err)
	}
	later := first.Add(time.Hour)
	for _, c := range []struct {
		name string
		lbas []int64
	}{
		{"sparse", []int64{4999, 10, 2500}},
		{"dense", func() (l []int64) {
			for lba := int64(1000); lba < 1100; lba++ {
				l = append(l, lba)
			}
			return l
		}()},
		{"new", []int64{7000, 3000, 9000}},
	} {
		var fs []store.Finding
		for _, lba := range c.lbas {
			fs = append(fs, store.Finding{LBA: lba, Field: "guard", LastSeen: later, Expected: []byte{1}})
		}
		// The same finding twice: one sighting, the later's.
		fs = append(fs, store.Finding{LBA: c.lbas[0], Field: "guard", LastSeen: later, Expected: []byte{2}})
		if _, err := tp.RecordFindings(fs, false); err != nil {
			t.Fatal(err)
		}
		for _, lba := range c.lbas {
			var got *store.Finding
			for f, err := range tp.Findings(store.FindingQuery{LBA: lba, N: 1}) {
				if err != nil {
					t.Fatal(err)
				}
				if f.Field == "guard" {
					got = &f
				}
			}
			want, seen := uint64(2), first
			if lba >= 5000 {
				want, seen = 1, later
			}
			wantExp := byte(1)
			if lba == c.lbas[0] {
				wantExp = 2
			}
			if got == nil || got.Count != want || !got.FirstSeen.Equal(seen) || !got.LastSeen.Equal(later) || len(got.Expected) != 1 || got.Expected[0] != wantExp {
				t.Errorf("%s: finding at %d: %+v, want count %d first seen %v expected %d", c.name, lba, got, want, seen, wantExp)
			}
		}
	}
}

// iterFailKV is a KV whose iterators stop with err after after steps (and
// whose NewIter fails if after < 0).
type iterFailKV struct {
	store.KV
	after int
	err   error
}

type failIter struct {
	store.Iterator
	left int
	err  error
}

func (k *iterFailKV) NewIter(lo, hi []byte) (store.Iterator, error) {
	if k.after < 0 {
		return nil, k.err
	}
	it, err := k.KV.NewIter(lo, hi)
	if err != nil {
		return nil, err
	}
	return &failIter{Iterator: it, left: k.after, err: k.err}, nil
}

func (it *failIter) Next() bool {
	if it.left == 0 {
		return false
	}
	it.left--
	return it.Iterator.Next()
}

func (it *failIter) Err() error {
	if it.left == 0 {
		return it.err
	}
	return it.Iterator.Err()
}

// TestRecordFindingsIterError breaks the iterator that RecordFindings
// reads the findings it updates with (store.getAll): at its creation and
// part way through its walk. The store's error is returned, wrapped so
// that it still matches, and nothing of the batch is committed.
func TestRecordFindingsIterError(t *testing.T) {
	errBroken := errors.New("iterator broken")
	for _, after := range []int{-1, 0, 5} {
		t.Run(fmt.Sprintf("after=%d", after), func(t *testing.T) {
			mem := store.NewMem()
			defer mem.Close()
			kv := &iterFailKV{KV: mem, after: 1 << 30, err: errBroken}
			tp, err := store.CreateTuples(kv, "v", store.NewManifest("f", 4096, 16, 1<<20*4096, "d"))
			if err != nil {
				t.Fatal(err)
			}
			first := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			var old []store.Finding
			for lba := range int64(50) {
				old = append(old, store.Finding{LBA: lba, Field: "guard", LastSeen: first})
			}
			if _, err := tp.RecordFindings(old, false); err != nil {
				t.Fatal(err)
			}
			kv.after = after
			later := first.Add(time.Hour)
			var fs []store.Finding
			for lba := int64(10); lba < 30; lba++ {
				fs = append(fs, store.Finding{LBA: lba, Field: "guard", LastSeen: later})
			}
			if _, err := tp.RecordFindings(fs, false); !errors.Is(err, errBroken) {
				t.Fatalf("RecordFindings over a broken iterator: %v, want %v", err, errBroken)
			}
			kv.after = 1 << 30
			seen := 0
			for f, err := range tp.Findings(store.FindingQuery{LBA: 20, N: 1}) {
				if err != nil {
					t.Fatal(err)
				}
				seen++
				if f.Count != 1 || !f.LastSeen.Equal(first) {
					t.Fatalf("finding of block 20 after the failed batch: count %d, last seen %v; want the first sighting only", f.Count, f.LastSeen)
				}
			}
			if seen != 1 {
				t.Fatalf("%d findings of block 20, want 1", seen)
			}
		})
	}
}

// TestSetFindingStates changes the state of many findings in one commit,
// as SetFindingState does one at a time, and changes nothing when a key
// has no finding.
func TestSetFindingStates(t *testing.T) {
	kv := &countKV{KV: store.NewMem()}
	defer kv.Close()
	tp, err := store.CreateTuples(kv, "v", store.NewManifest("f", 4096, 16, 1<<20*4096, "d"))
	if err != nil {
		t.Fatal(err)
	}
	seen := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var fs []store.Finding
	for lba := range int64(300) {
		fs = append(fs, store.Finding{LBA: lba, Field: "guard", LastSeen: seen}, store.Finding{LBA: lba, Field: "ref", LastSeen: seen})
	}
	if _, err := tp.RecordFindings(fs, false); err != nil {
		t.Fatal(err)
	}
	var keys []store.FindingKey
	for lba := int64(100); lba < 200; lba += 3 {
		keys = append(keys, store.FindingKey{LBA: lba, Field: "guard"})
	}
	keys = append(keys, store.FindingKey{LBA: 5, Field: "ref"}, store.FindingKey{LBA: 5, Field: "ref"})
	state := func(lba int64, field string) store.FindingState {
		t.Helper()
		for f, err := range tp.Findings(store.FindingQuery{LBA: lba, N: 1}) {
			if err != nil {
				t.Fatal(err)
			}
			if f.Field == field {
				return f.State
			}
		}
		t.Fatalf("no finding (%d, %s)", lba, field)
		return 0
	}
	// A key with no finding: an error, and nothing changes.
	missing := append(slices.Clone(keys), store.FindingKey{LBA: 400, Field: "guard"})
	if err := tp.SetFindingStates(missing, store.FindingRecheckedOK, false); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("SetFindingStates with a missing finding: %v, want ErrNotFound", err)
	}
	if st := state(100, "guard"); st != store.FindingOpen {
		t.Fatalf("after the failed call, finding (100, guard) is in state %v", st)
	}
	commits := kv.commits
	if err := tp.SetFindingStates(keys, store.FindingRecheckedOK, false); err != nil {
		t.Fatal(err)
	}
	if n := kv.commits - commits; n != 1 {
		t.Fatalf("%d commits for %d findings, want 1", n, len(keys))
	}
	for _, k := range keys {
		if st := state(k.LBA, k.Field); st != store.FindingRecheckedOK {
			t.Fatalf("finding (%d, %s) in state %v, want rechecked-ok", k.LBA, k.Field, st)
		}
	}
	for _, k := range []store.FindingKey{{101, "guard"}, {100, "ref"}, {5, "guard"}} {
		if st := state(k.LBA, k.Field); st != store.FindingOpen {
			t.Fatalf("finding (%d, %s) not in the batch is in state %v", k.LBA, k.Field, st)
		}
	}
}
