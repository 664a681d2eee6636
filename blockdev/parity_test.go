package blockdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/blockdev/parity"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// addTestParity gives tv's volume k+m parity of depth depth on a memory
// device, computes it, and returns the device.
func addTestParity(t testing.TB, tv *testVol, k, m int, depth int64) *device.Mem {
	t.Helper()
	pm := addMemParity(t, tv.v, ParitySpec{Data: k, Parity: m, Depth: depth, Path: "test.difpar"})
	rep, err := tv.v.ComputeParity(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Unprotected != 0 || rep.Computed != tv.v.par.l.Stripes() {
		t.Fatalf("ComputeParity: %+v, want all %d stripes computed", rep, tv.v.par.l.Stripes())
	}
	return pm
}

// addMemParity gives v the parity spec describes (its Dev left nil) on a
// new memory device of the right size, not computed, and returns the
// device.
func addMemParity(t testing.TB, v *Volume, spec ParitySpec) *device.Mem {
	t.Helper()
	size, err := v.ParityFileSize(spec)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := device.NewMem(size, min(v.BlockSize(), 4096))
	if err != nil {
		t.Fatal(err)
	}
	spec.Dev = pm
	if err := v.AddParity(spec); err != nil {
		t.Fatal(err)
	}
	return pm
}

// wantParity checks that the parity file pm holds, for every stripe, the
// encoding of the model's blocks (zeros for the unwritten ones, which the
// model holds as zeros only once discarded: unwritten lists them), and
// that every stripe is recorded with the file's checksums.
func wantParity(t testing.TB, v *Volume, pm device.Device, model []byte, unwritten map[int64]bool) {
	t.Helper()
	pv := v.par
	l := pv.l
	k, m, bs := l.DataShards(), l.ParityShards(), l.BlockSize()
	codec, err := l.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	file := make([]byte, l.ParitySize())
	if _, err := pm.ReadAt(file, 0); err != nil {
		t.Fatal(err)
	}
	pv.mu.Lock()
	defer pv.mu.Unlock()
	for s := range l.Stripes() {
		shards := make([][]byte, k+m)
		for pos, b := range l.StripeBlocks(nil, s) {
			if b >= 0 && !unwritten[b] {
				shards[pos] = model[b*int64(bs) : (b+1)*int64(bs)]
			}
		}
		for j := range m {
			shards[k+j] = make([]byte, bs)
		}
		if err := codec.Encode(shards); err != nil {
			t.Fatal(err)
		}
		sums, ok, err := pv.sums(s)
		if err != nil || !ok {
			t.Fatalf("stripe %d: recorded %v, %v", s, ok, err)
		}
		for j := range m {
			got := file[l.ParityOffset(s, j) : l.ParityOffset(s, j)+int64(bs)]
			if !bytes.Equal(got, shards[k+j]) {
				t.Fatalf("stripe %d parity block %d: not the encoding of the data", s, j)
			}
			if sums[j] != parity.Checksum(s, j, got) {
				t.Fatalf("stripe %d parity block %d: checksum %08x recorded, %08x computed", s, j, sums[j], parity.Checksum(s, j, got))
			}
		}
	}
}

// reopenParity closes tv's volume and opens it again with the parity
// device pm (and opts), replacing tv.v.
func reopenParity(t testing.TB, tv *testVol, pm device.Device, opts Options) {
	t.Helper()
	if err := tv.v.Close(); err != nil {
		t.Fatal(err)
	}
	openParityVol(t, tv, pm, opts)
}

// openParityVol opens tv's volume with the parity device pm (and opts),
// replacing tv.v, closed at the end of the test.
func openParityVol(t testing.TB, tv *testVol, pm device.Device, opts Options) {
	t.Helper()
	opts.OpenParity = func(string) (device.Device, error) { return keepOpen{pm}, nil }
	v, err := Open(context.Background(), tv.fault, tv.kv, opts)
	if err != nil {
		t.Fatal(err)
	}
	tv.v = v
	t.Cleanup(func() { v.Close() })
}

// keepOpen is a device whose Close does nothing (the test keeps it).
type keepOpen struct{ device.Device }

func (keepOpen) Close() error { return nil }

// TestParityWrites: after writes of every shape (a block, runs across
// stripes, a whole group, overwrites in one batch, discards) the parity
// file holds the encoding of the data, every stripe recorded with its
// checksums, before and after a reopen; for every layout shape.
func TestParityWrites(t *testing.T) {
	for _, tc := range []struct {
		format      string
		k, m        int
		depth       int64
		blocks, stg int
	}{
		{"512+8", 4, 2, 3, 203, 16 << 10},
		{"4096+16:crc64", 4, 1, parity.Consecutive, 64, 64 << 10},
		{"512+8", 3, 3, parity.WholeVolume, 100, 8 << 10},
		{"4096+8", 16, 2, 0, 300, 1 << 20},
	} {
		t.Run(fmt.Sprintf("format=%s/k=%d/m=%d/depth=%d", tc.format, tc.k, tc.m, tc.depth), func(t *testing.T) {
			tv := newTestVol(t, tc.format, tc.blocks, CreateOptions{Options: Options{StagingBytes: tc.stg}})
			bs := tv.v.BlockSize()
			r := rand.New(rand.NewPCG(uint64(tc.blocks), 41))
			unwritten := map[int64]bool{}
			// Discard some before the parity exists, some after.
			if err := tv.v.Discard(int64(5*bs), int64(3*bs)); err != nil {
				t.Fatal(err)
			}
			clear(tv.model[5*bs : 8*bs])
			for b := int64(5); b < 8; b++ {
				unwritten[b] = true
			}
			pm := addTestParity(t, tv, tc.k, tc.m, tc.depth)
			wantParity(t, tv.v, pm, tv.model, unwritten)
			g := int(tv.v.par.l.Depth()) * tc.k
			for i := range 40 {
				var lba, n int
				switch i % 8 {
				case 0: // a whole group
					if g <= tc.blocks {
						lba, n = 0, g
					} else {
						lba, n = 0, tc.blocks
					}
				case 7: // a discard
					lba, n = r.IntN(tc.blocks-4), 1+r.IntN(4)
					if err := tv.v.Discard(int64(lba*bs), int64(n*bs)); err != nil {
						t.Fatal(err)
					}
					clear(tv.model[lba*bs : (lba+n)*bs])
					for b := lba; b < lba+n; b++ {
						unwritten[int64(b)] = true
					}
					continue
				default:
					n = 1 + r.IntN(min(40, tc.blocks))
					lba = r.IntN(tc.blocks - n + 1)
				}
				tv.write(blocktest.Pattern(n*bs, r.Uint64()), int64(lba*bs))
				for b := lba; b < lba+n; b++ {
					delete(unwritten, int64(b))
				}
				if i%5 == 0 {
					if err := tv.v.Sync(); err != nil {
						t.Fatal(err)
					}
				}
			}
			tv.check()
			if err := tv.v.Sync(); err != nil {
				t.Fatal(err)
			}
			wantParity(t, tv.v, pm, tv.model, unwritten)
			if d, err := tv.v.Tuples().ParityDirty(); err != nil || len(d) != 0 {
				t.Fatalf("after Sync: parity intents %v, %v", d, err)
			}
			reopenParity(t, tv, pm, Options{StagingBytes: tc.stg})
			wantParity(t, tv.v, pm, tv.model, unwritten)
			if st, ok, err := tv.v.Parity(); err != nil || !ok || st.Recorded != st.Stripes || st.Dropped != 0 {
				t.Fatalf("Parity() = %+v, %v, %v", st, ok, err)
			}
		})
	}
}

// parityCampaign damages data and parity blocks of a volume with parity,
// seeded: some stripes get at most m erasures (data blocks, parity blocks
// or both), others more. Repair (with no other source) must heal every
// data block of the first kind byte-identical to the model, recorded
// repaired from "parity", and report every damaged data block of the
// second kind unrepairable, leaving those stripes exactly as they were,
// parity included; ScrubParity must then rewrite every damaged parity
// block of the first kind and report those of the second unfixable.
func parityCampaign(t *testing.T, format string, seed uint64, key *Key, withLeg bool) {
	const blocks = 240
	const k, m, depth = 4, 2, 5
	r := rand.New(rand.NewPCG(seed, 41))
	tv := newTestVol(t, format, blocks, CreateOptions{Options: Options{StagingBytes: 32 << 10, Key: key}})
	bs := tv.v.BlockSize()
	unwritten := map[int64]bool{}
	pm := addTestParity(t, tv, k, m, depth)
	var leg *device.Mem
	if withLeg {
		var err error
		if leg, err = device.NewMem(tv.mem.Size(), tv.mem.LogicalBlockSize()); err != nil {
			t.Fatal(err)
		}
		if err := tv.v.AddMirror(Mirror{Dev: leg, Name: "leg"}); err != nil {
			t.Fatal(err)
		}
		if _, err := tv.v.Resync(context.Background(), ResyncOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 24 {
		lba := r.IntN(blocks - 8)
		n := 1 + r.IntN(8)
		if i%6 == 5 {
			if err := tv.v.Discard(int64(lba*bs), int64(n*bs)); err != nil {
				t.Fatal(err)
			}
			clear(tv.model[lba*bs : (lba+n)*bs])
			for b := lba; b < lba+n; b++ {
				unwritten[int64(b)] = true
			}
			continue
		}
		tv.write(blocktest.Pattern(n*bs, r.Uint64()), int64(lba*bs))
		for b := lba; b < lba+n; b++ {
			delete(unwritten, int64(b))
		}
	}
	if err := tv.v.Sync(); err != nil {
		t.Fatal(err)
	}
	wantParity(t, tv.v, pm, tv.model, unwritten)
	l := tv.v.par.l
	parBefore := devBytes(t, pm)

	// Damage: per stripe, 0 to m+2 erasures among its k+m blocks.
	devs := []device.Device{tv.mem}
	if withLeg {
		devs = append(devs, leg)
	}
	// An unwritten block is zeros whatever the device holds: damage there
	// is no erasure of its stripe, and the block is always repaired.
	wantUnfixable := map[int64]bool{} // stripes beyond m
	damagedPar := map[[2]int64]bool{}
	erasures := map[int64]int{}
	for s := range l.Stripes() {
		e := r.IntN(m + 3)
		if r.IntN(3) == 0 {
			e = 0
		}
		present := []int{}
		for pos, b := range l.StripeBlocks(nil, s) {
			if b >= 0 {
				present = append(present, pos)
			}
		}
		shards := append(present, []int{k, k + 1}...)
		r.Shuffle(len(shards), func(i, j int) { shards[i], shards[j] = shards[j], shards[i] })
		e = min(e, len(shards))
		for _, sh := range shards[:e] {
			if sh >= k {
				j := sh - k
				off := l.ParityOffset(s, j)
				buf := make([]byte, bs)
				pm.ReadAt(buf, off)
				buf[r.IntN(bs)] ^= 1 << r.IntN(8)
				pm.WriteAt(buf, off)
				damagedPar[[2]int64{s, int64(j)}] = true
				erasures[s]++
				continue
			}
			b, _ := l.Block(s, sh)
			for _, d := range devs {
				buf := blocktest.Pattern(bs, r.Uint64())
				d.WriteAt(buf, b*int64(bs))
			}
			if !unwritten[b] {
				erasures[s]++
			}
		}
		if erasures[s] > m {
			wantUnfixable[s] = true
		}
	}
	before := devBytes(t, tv.mem)
	parDamaged := devBytes(t, pm)
	wantRepaired, wantLeft := map[int64]bool{}, map[int64]bool{}
	for lba := range int64(blocks) {
		o := lba * int64(bs)
		if bytes.Equal(before[o:o+int64(bs)], tv.model[o:o+int64(bs)]) {
			continue
		}
		if s, _ := l.Locate(lba); wantUnfixable[s] && !unwritten[lba] {
			wantLeft[lba] = true
		} else {
			wantRepaired[lba] = true
		}
	}
	if len(wantRepaired) == 0 || len(wantLeft) == 0 {
		t.Fatalf("campaign damaged %d repairable and %d unrepairable blocks: pick another seed", len(wantRepaired), len(wantLeft))
	}
	gotRepaired, gotLeft := map[int64]bool{}, map[int64]bool{}
	rep, err := tv.v.Repair(context.Background(), nil, RepairOptions{OnProblem: func(p Problem) {
		switch p.Repair {
		case RepairRepaired:
			gotRepaired[p.LBA] = true
			if p.Source != ParitySource {
				t.Errorf("block %d repaired from %q, want %q", p.LBA, p.Source, ParitySource)
			}
		case RepairUnavailable:
			gotLeft[p.LBA] = true
			if !strings.Contains(p.Source, ParitySource) {
				t.Errorf("block %d: unrepairable, tried %q", p.LBA, p.Source)
			}
		default:
			t.Errorf("block %d: outcome %q", p.LBA, p.Repair)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Repaired != int64(len(wantRepaired)) || rep.Unrepairable != int64(len(wantLeft)) {
		t.Errorf("report: %d repaired, %d unrepairable; want %d, %d", rep.Repaired, rep.Unrepairable, len(wantRepaired), len(wantLeft))
	}
	for lba := range wantRepaired {
		if !gotRepaired[lba] {
			t.Errorf("block %d: not repaired", lba)
		}
	}
	for lba := range wantLeft {
		if !gotLeft[lba] {
			t.Errorf("block %d: not reported unrepairable", lba)
		}
	}
	after := devBytes(t, tv.mem)
	for lba := range int64(blocks) {
		o := lba * int64(bs)
		want := before[o : o+int64(bs)]
		if wantRepaired[lba] {
			want = tv.model[o : o+int64(bs)]
		}
		if !bytes.Equal(after[o:o+int64(bs)], want) {
			t.Errorf("block %d (repaired %v): wrong bytes after the repair", lba, wantRepaired[lba])
		}
	}
	if withLeg {
		legAfter := devBytes(t, leg)
		for lba := range wantRepaired {
			o := lba * int64(bs)
			if !bytes.Equal(legAfter[o:o+int64(bs)], tv.model[o:o+int64(bs)]) {
				t.Errorf("block %d: not repaired on the leg", lba)
			}
		}
	}
	// Stripes beyond m: their parity unchanged too.
	parAfter := devBytes(t, pm)
	for s := range wantUnfixable {
		o, e := l.ParityOffset(s, 0), l.ParityOffset(s, m-1)+int64(bs)
		if !bytes.Equal(parAfter[o:e], parDamaged[o:e]) {
			t.Errorf("stripe %d (beyond m): parity changed", s)
		}
	}
	// The damaged parity: rewritten by ScrubParity where its stripe can be
	// computed, unfixable beyond m.
	sr, err := tv.v.ScrubParity(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	var wantFixable, wantUnfix int64
	for sj := range damagedPar {
		if wantUnfixable[sj[0]] {
			wantUnfix++
		} else {
			wantFixable++
		}
	}
	// Some damaged parity blocks were rewritten already by the repair of
	// their stripe's data.
	if sr.Unfixable != wantUnfix || sr.Damaged != sr.Rewritten+sr.Unfixable || sr.Damaged > wantFixable+wantUnfix {
		t.Errorf("ScrubParity: %+v; want %d unfixable of %d damaged", sr, wantUnfix, wantFixable+wantUnfix)
	}
	parAfter = devBytes(t, pm)
	for s := range l.Stripes() {
		o, e := l.ParityOffset(s, 0), l.ParityOffset(s, m-1)+int64(bs)
		want := parBefore[o:e]
		if wantUnfixable[s] {
			want = parDamaged[o:e]
		}
		if !bytes.Equal(parAfter[o:e], want) {
			t.Errorf("stripe %d (beyond m %v): wrong parity after the scrub", s, wantUnfixable[s])
		}
	}
	// The findings log.
	for f, err := range tv.v.Tuples().Findings(store.FindingQuery{}) {
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case wantRepaired[f.LBA] && (f.State != store.FindingRepaired || f.Source != ParitySource):
			t.Errorf("finding of block %d: %v from %q, want repaired from parity", f.LBA, f.State, f.Source)
		case wantLeft[f.LBA] && f.State != store.FindingUnrepairable:
			t.Errorf("finding of block %d: %v, want unrepairable", f.LBA, f.State)
		}
	}
}

// TestParityCampaign runs the damage campaign on several formats, a keyed
// volume, and a volume with a mirror leg damaged alike (the leg is tried
// first, then the parity).
func TestParityCampaign(t *testing.T) {
	seeds := 4
	if testing.Short() {
		seeds = 2
	}
	for _, format := range []string{"512+8", "4096+16:crc64", "4096+8/keyed", "512+8/leg"} {
		for seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed=%d", format, seed), func(t *testing.T) {
				var key *Key
				f, keyed := strings.CutSuffix(format, "/keyed")
				f, leg := strings.CutSuffix(f, "/leg")
				if keyed {
					key = testKey(t, byte(seed))
				}
				parityCampaign(t, f, uint64(seed), key, leg)
			})
		}
	}
}

// TestParityBurst: a run of m·D neighbouring blocks zeroed behind the
// volume's back is read back whole, each block rebuilt from its own
// stripe; one block more than that is not all healed.
func TestParityBurst(t *testing.T) {
	const blocks, k, m, depth = 400, 8, 2, 16
	tv := newTestVol(t, "512+8", blocks, CreateOptions{})
	bs := tv.v.BlockSize()
	addTestParity(t, tv, k, m, depth)
	start := 37
	burst := m * depth
	tv.mem.WriteAt(make([]byte, burst*bs), int64(start*bs))
	tv.check()
	if st := tv.v.Stats(); st.Repaired != int64(burst) {
		t.Fatalf("%d blocks repaired, want %d", st.Repaired, burst)
	}
	// One block longer: some stripe meets the run m+1 times.
	tv.mem.WriteAt(make([]byte, (burst+1)*bs), int64(start*bs))
	got := make([]byte, len(tv.model))
	if _, err := tv.v.ReadAt(got, 0); !errors.Is(err, dif.ErrIntegrity) {
		t.Fatalf("a burst of m·D+1 blocks: read error %v, want an integrity error", err)
	}
}

// TestParityStale: parity that no longer describes the data (here the
// parity and checksums of before a write, put back behind the volume's
// back, as a crash could never leave them but a bug or an attacker
// might) never repairs a block into wrong data: the rebuilt block fails
// its tuple and the block is reported unrepairable, unchanged.
func TestParityStale(t *testing.T) {
	const blocks, k, m = 64, 4, 1
	tv := newTestVol(t, "4096+8", blocks, CreateOptions{})
	bs := tv.v.BlockSize()
	pm := addTestParity(t, tv, k, m, parity.Consecutive)
	oldPar := devBytes(t, pm)
	oldSums, err := tv.v.Tuples().ParitySums(0)
	if err != nil {
		t.Fatal(err)
	}
	tv.write(blocktest.Pattern(bs, 99), 1*int64(bs)) // stripe 0, position 1
	if err := tv.v.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := tv.v.Close(); err != nil {
		t.Fatal(err)
	}
	pm.WriteAt(oldPar, 0)
	tup, err := store.OpenTuples(tv.kv, DefaultVolumeName, nil)
	if err != nil {
		t.Fatal(err)
	}
	tx := tup.NewTxn()
	if err := tx.SetParitySums(0, oldSums); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(true); err != nil {
		t.Fatal(err)
	}
	openParityVol(t, tv, pm, Options{})
	// Block 0 damaged: its stripe rebuilds it from block 1's new data and
	// the old parity, which is wrong, and fails its tuple.
	tv.mem.WriteAt(make([]byte, bs), 0)
	damaged := devBytes(t, tv.mem)
	got := make([]byte, bs)
	if _, err := tv.v.ReadAt(got, 0); !errors.Is(err, dif.ErrIntegrity) {
		t.Fatalf("read of block 0 with stale parity: %v, want an integrity error", err)
	}
	if !bytes.Equal(devBytes(t, tv.mem), damaged) {
		t.Fatal("stale parity changed the device")
	}
	if st := tv.v.Stats(); st.Repaired != 0 {
		t.Fatalf("%d blocks repaired from stale parity", st.Repaired)
	}
}
