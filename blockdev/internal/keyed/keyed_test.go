package keyed

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// testEngine opens the engine of a new keyed volume of format (DIX,
// metadata = tuple) and the given blocks in a memory store, verified in
// runs of chunk blocks.
func testEngine(t *testing.T, format string, blocks int64, chunk int) *Engine {
	t.Helper()
	f := dif.MustFormat(format).WithLayout(dif.Separate)
	uid := make([]byte, 16)
	for i := range uid {
		uid[i] = byte(i * 7)
	}
	keys, err := Derive([]byte("a secret of thirty-two bytes....."[:32]), uid)
	if err != nil {
		t.Fatal(err)
	}
	m := store.NewManifest(f.String(), f.BlockSize(), f.TupleSize(), blocks*int64(f.BlockSize()), "")
	m.KeyCheck, m.VolumeUID = keys.Check(), hex.EncodeToString(uid)
	kv := store.NewMem()
	t.Cleanup(func() { kv.Close() })
	tup, err := store.CreateKeyedTuples(kv, "v", m, keys.PageKey())
	if err != nil {
		t.Fatal(err)
	}
	e, err := Open(keys, tup, f.BlockSize(), chunk)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// The partials a copy hook computes in dif's copying pass (where dif
// reports the single pass: the separate layout, 16-bit guard checked) give
// the tags Keys.Tags computes from the data: for runs classified in one
// dif call and in two (the second hook at its base), by each worker's
// hook.
func TestHookPartials(t *testing.T) {
	rng := rand.NewChaCha8([32]byte{60, 61})
	for _, format := range []string{"512+8", "4096+8"} {
		f := dif.MustFormat(format).WithLayout(dif.Separate)
		bs := f.BlockSize()
		for _, n := range []int{1, 7, 64, 300} {
			t.Run(fmt.Sprintf("format=%s/n=%d", format, n), func(t *testing.T) {
				e := testEngine(t, format, 1024, 512)
				ks := e.NewScratch(2, true)
				if ks.Hook(0, 0) == nil {
					t.Skip("the keyedcopy kernel is not fused")
				}
				src, md := make([]byte, n*bs), make([]byte, n*f.TupleSize())
				rng.Read(src)
				p := dif.Params{RefTag: 9, AppMask: 0xFFFF}
				if err := f.Generate(src, md, p); err != nil {
					t.Fatal(err)
				}
				data, sums, states := make([]byte, len(src)), make([]uint32, n), make([]dif.State, n)
				ks.Unmark(0, n)
				half := n / 2
				for w, r := range [][2]int{{0, half}, {half, n}} {
					i, j := r[0], r[1]
					if i == j {
						continue
					}
					c := dif.Classification{States: states[i:j], Sums: sums[i:j], Src: src[i*bs : j*bs], Copy: ks.Hook(w, i)}
					rp := p
					rp.RefTag += uint64(i)
					sum, err := f.Classify(&c, data[i*bs:j*bs], md[i*f.TupleSize():j*f.TupleSize()], rp)
					if err != nil || !c.Single || sum.OK != j-i {
						t.Fatalf("blocks [%d, %d): %+v %v, single %v", i, j, sum, err, c.Single)
					}
					ks.Mark(i, j-i)
				}
				const lba, gen = 100, 77
				before := FusedRuns()
				got, want := make([]store.KeyedTag, n), make([]store.KeyedTag, n)
				if err := ks.runTags(got, kRun{0, n, gen}, lba, data, 0, ks.Transient(n)); err != nil {
					t.Fatal(err)
				}
				if FusedRuns() == before {
					t.Fatal("the tags were not computed from the partials")
				}
				if err := e.Tags(want, lba, gen, src, bs); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Fatal("the tags from the partials differ from those of the data")
				}
			})
		}
	}
}

// Stage with no data computes the tags of zero blocks under the one
// generation it takes, across the pieces of its zero buffer; each Stage
// takes a new generation.
func TestStageZeros(t *testing.T) {
	e := testEngine(t, "512+8", 1024, 512)
	n := 300 // more than the 128 blocks of the zero buffer
	got, want := make([]store.KeyedTag, n), make([]store.KeyedTag, n)
	if err := e.Stage(got, 10, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Tags(want, 10, got[0].Gen, make([]byte, n*512), 512); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatal("Stage of zeros differs from the tags of zero blocks")
	}
	next, w := make([]store.KeyedTag, 1), make([]store.KeyedTag, 1)
	if err := e.Stage(next, 10, make([]byte, 512)); err != nil || next[0].Gen == got[0].Gen {
		t.Fatalf("a second Stage: generation %d, %v (first %d)", next[0].Gen, err, got[0].Gen)
	}
	if err := e.Tags(w, 10, next[0].Gen, make([]byte, 512), 512); err != nil || w[0] != next[0] {
		t.Fatalf("a second Stage: %+v, want %+v (%v)", next[0], w[0], err)
	}
}

// Check reports each kind of keyed failure at its block, once, and passes
// the others: tags committed, or staged (Run.Have) over committed ones.
func TestCheck(t *testing.T) {
	const n, bs = 64, 512
	e := testEngine(t, "512+8", 1024, 128)
	data := make([]byte, n*bs)
	rand.NewChaCha8([32]byte{3, 4}).Read(data)
	tags := make([]store.KeyedTag, n)
	if err := e.Stage(tags, 0, data); err != nil {
		t.Fatal(err)
	}
	tags[5] = store.KeyedTag{} // written, no tag
	x := e.tup.NewTxn()
	if err := x.WriteTags(0, tags); err != nil {
		t.Fatal(err)
	}
	if err := x.Commit(true); err != nil {
		t.Fatal(err)
	}
	data[3*bs] ^= 1 // mismatch
	written := store.NewBitmap(n)
	for i := range n {
		if i != 9 {
			written.Set(i)
		}
	}
	// Block 9: unwritten per its tuple, with a tag. Block 12: staged, its
	// tag in Tags (of other data: a mismatch). Block 20 failed before: not
	// checked.
	states := make([]dif.State, n)
	states[20] = dif.StateFailed
	data[20*bs] ^= 1
	have := make([]uint64, 1)
	have[0] = 1 << 12
	runTags := make([]store.KeyedTag, n)
	runTags[12] = store.KeyedTag{Gen: tags[12].Gen, Tag: [16]byte{1}}
	ks := e.NewScratch(1, false)
	r := Run{LBA: 0, N: n, Data: data, States: states, Written: written, IOBad: make([]uint64, 1), Have: have, Tags: runTags}
	if err := ks.LoadTags(&r); err != nil {
		t.Fatal(err)
	}
	r.Transient = ks.Transient(n)
	fails, err := ks.Check(&r)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]string{}
	for _, f := range fails {
		if _, dup := got[f.I]; dup {
			t.Errorf("block %d failed twice", f.I)
		}
		got[f.I] = f.Reason
	}
	want := map[int]string{3: "mismatch", 5: "missing", 9: "unwritten", 12: "mismatch"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("failures %v, want %v", got, want)
	}
}
