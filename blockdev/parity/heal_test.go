package parity

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// The tests here play the repair stage that will use the package: a
// volume (fx.data, the model, and vol, the medium), the bad data blocks as
// PI reports them (damaged), and the parity file. heal rebuilds each
// stripe from what is good, as the Volume will.

type healVol struct {
	*parityFixture
	vol [][]byte // the medium: fx.data with damage
}

func newHealVol(t testing.TB, o Options, seed uint64) *healVol {
	fx := newParityFixture(t, o, seed)
	return &healVol{parityFixture: fx, vol: cloneBlocks(fx.data)}
}

// damage overwrites data block b on the medium with garbage.
func (v *healVol) damage(r *rand.Rand, b int64) {
	v.vol[b] = randBlocks(r, 1, v.l.BlockSize())[0]
}

// damageParity flips a bit of parity block j of stripe s in the file.
func (v *healVol) damageParity(t testing.TB, s int64, j int) {
	t.Helper()
	if err := v.dev.FlipBit(v.l.ParityOffset(s, j)+int64(j*7), uint(j%8)); err != nil {
		t.Fatal(err)
	}
}

// healStripe rebuilds stripe s, whose bad data blocks are in bad: it
// reads its parity (a block that fails its checksum is an erasure), erases
// the bad data blocks, rebuilds them and every bad parity block, writes
// them back, and checks the rebuilt data against the model (the tuple).
// It returns Rebuild's error; on error nothing was written.
func (v *healVol) healStripe(t testing.TB, s int64, bad map[int64]bool) error {
	t.Helper()
	k, m := v.l.DataShards(), v.l.ParityShards()
	buf, errs, _ := v.read(t, s)
	shards := make([][]byte, k+m)
	erased := make([]bool, k+m)
	blocks := v.l.StripeBlocks(nil, s)
	for pos, b := range blocks {
		if b < 0 {
			continue // missing: zeros
		}
		shards[pos] = bytes.Clone(v.vol[b])
		erased[pos] = bad[b]
	}
	parity := v.split(buf)
	for j := range m {
		shards[k+j] = parity[j]
		erased[k+j] = errs[j] != nil
	}
	if err := v.c.Rebuild(shards, erased); err != nil {
		return err
	}
	for pos, b := range blocks {
		if b >= 0 && erased[pos] {
			if !bytes.Equal(shards[pos], v.data[b]) {
				t.Fatalf("stripe %d: block %d rebuilt into wrong data", s, b)
			}
			v.vol[b] = shards[pos]
		}
	}
	if slices.ContainsFunc(errs, func(e error) bool { return e != nil }) {
		sums := make([]uint32, m)
		if err := v.f.Write(s, buf, sums); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(sums) != fmt.Sprint(v.sums[s]) {
			t.Fatalf("stripe %d: rebuilt parity has other checksums", s)
		}
	}
	return nil
}

// heal heals every stripe that holds a bad block or bad parity, and
// returns the stripes it refused.
func (v *healVol) heal(t testing.TB, bad map[int64]bool, badParity map[int64]bool) map[int64]bool {
	t.Helper()
	stripes := map[int64]bool{}
	for b := range bad {
		s, _ := v.l.Locate(b)
		stripes[s] = true
	}
	for s := range badParity {
		stripes[s] = true
	}
	refused := map[int64]bool{}
	for s := range stripes {
		if err := v.healStripe(t, s, bad); err != nil {
			if !errors.Is(err, ErrTooManyErasures) {
				t.Fatalf("stripe %d: %v", s, err)
			}
			refused[s] = true
		}
	}
	return refused
}

// check compares the medium and the parity file with the model, except
// the blocks of the refused stripes, which must be as damaged.
func (v *healVol) check(t testing.TB, refused map[int64]bool, damaged [][]byte) {
	t.Helper()
	for b := range v.vol {
		s, _ := v.l.Locate(int64(b))
		want := v.data[b]
		if refused[s] {
			want = damaged[b]
		}
		if !bytes.Equal(v.vol[b], want) {
			t.Fatalf("block %d (stripe %d, refused %v) is not as it should be", b, s, refused[s])
		}
	}
	for s := range v.l.Stripes() {
		if refused[s] {
			continue
		}
		if _, errs, bad := v.read(t, s); bad != 0 {
			t.Fatalf("stripe %d: parity still bad: %v", s, errs)
		}
	}
}

// TestHealCampaign damages, seeded, 0 to m+1 shards of every stripe (data
// and parity mixed) and heals: up to m erasures end byte-identical to the
// model, more are refused with nothing changed.
func TestHealCampaign(t *testing.T) {
	for _, o := range []Options{
		{Data: 4, Parity: 2, BlockSize: 512, Blocks: 203, Depth: WholeVolume},
		{Data: 4, Parity: 2, BlockSize: 512, Blocks: 203, Depth: Consecutive},
		{Data: 8, Parity: 1, BlockSize: 4096, Blocks: 500, Depth: 5},
		{Data: 16, Parity: 2, BlockSize: 512, Blocks: 1000, Depth: 7},
		{Data: 32, Parity: 4, BlockSize: 512, Blocks: 2000},
	} {
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("km=%d+%d/depth=%d/seed=%d", o.Data, o.Parity, o.Depth, seed), func(t *testing.T) {
				v := newHealVol(t, o, seed)
				r := rand.New(rand.NewPCG(seed, 7))
				k, m := v.l.DataShards(), v.l.ParityShards()
				bad, badParity := map[int64]bool{}, map[int64]bool{}
				wantRefused := map[int64]bool{}
				for s := range v.l.Stripes() {
					n := r.IntN(m + 2)
					for _, i := range r.Perm(k + m)[:n] {
						if i >= k {
							v.damageParity(t, s, i-k)
							badParity[s] = true
						} else if b, ok := v.l.Block(s, i); ok {
							v.damage(r, b)
							bad[b] = true
						} else {
							n-- // a missing block cannot be damaged
						}
					}
					if n > m {
						wantRefused[s] = true
					}
				}
				damaged := cloneBlocks(v.vol)
				refused := v.heal(t, bad, badParity)
				if fmt.Sprint(refused) != fmt.Sprint(wantRefused) {
					t.Fatalf("refused %v, want %v", refused, wantRefused)
				}
				v.check(t, refused, damaged)
				t.Logf("%d stripes, %d bad blocks, %d with bad parity, %d refused", v.l.Stripes(), len(bad), len(badParity), len(refused))
			})
		}
	}
}

// burst damages blocks [start, start+n) and heals.
func burst(t testing.TB, v *healVol, start, n int64) map[int64]bool {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(start), uint64(n)))
	bad := map[int64]bool{}
	for b := start; b < start+n; b++ {
		v.damage(r, b)
		bad[b] = true
	}
	damaged := cloneBlocks(v.vol)
	refused := v.heal(t, bad, nil)
	v.check(t, refused, damaged)
	return refused
}

// TestBurstInterleaved: with the interleave, any run of m·D neighbouring
// bad blocks is healed, wherever it starts (in a full group, across
// groups, in the partial group), and m·D+1 is not always.
func TestBurstInterleaved(t *testing.T) {
	for _, o := range []Options{
		{Data: 4, Parity: 2, BlockSize: 512, Blocks: 203, Depth: WholeVolume}, // S = 51, run 102
		{Data: 16, Parity: 2, BlockSize: 512, Blocks: 1000, Depth: 7},         // run 14, tail of 104
		{Data: 8, Parity: 1, BlockSize: 512, Blocks: 333, Depth: 4},
	} {
		l := mustLayout(t, o)
		run := l.BurstTolerance()
		t.Run(fmt.Sprintf("km=%d+%d/depth=%d/run=%d", o.Data, o.Parity, l.Depth(), run), func(t *testing.T) {
			for start := int64(0); start+run <= l.Blocks(); start += max(1, run/3) {
				v := newHealVol(t, o, uint64(start))
				if refused := burst(t, v, start, run); len(refused) > 0 {
					t.Fatalf("a burst of %d from %d: stripes %v refused", run, start, refused)
				}
			}
			// One more block: the stripe the run starts in is met m+1
			// times (in a full group).
			v := newHealVol(t, o, 1)
			if refused := burst(t, v, 0, run+1); len(refused) == 0 {
				t.Fatalf("a burst of %d from 0 was healed", run+1)
			}
		})
	}
}

// TestBurstInterleaveVersusConsecutive shows what the interleave buys: the
// same burst of m+1 neighbouring blocks, and of 8·m, is lost to the
// non-interleaved layout (one stripe holds more than m of them) and healed
// by the interleaved one.
func TestBurstInterleaveVersusConsecutive(t *testing.T) {
	for _, n := range []int64{3, 16} {
		for _, depth := range []int64{Consecutive, DefaultDepth, WholeVolume} {
			o := Options{Data: 16, Parity: 2, BlockSize: 512, Blocks: 4096, Depth: depth}
			t.Run(fmt.Sprintf("burst=%d/depth=%d", n, depth), func(t *testing.T) {
				v := newHealVol(t, o, 5)
				refused := burst(t, v, 32, n) // blocks 32.. start stripe 2 of Consecutive
				if lost := len(refused) > 0; lost != (depth == Consecutive) {
					t.Fatalf("a burst of %d blocks: refused stripes %v", n, refused)
				}
			})
		}
	}
}

// TestHealShortStripe heals the partial last stripes of each layout:
// their missing blocks count as zeros and are never written.
func TestHealShortStripe(t *testing.T) {
	for _, depth := range []int64{Consecutive, 3, WholeVolume} {
		o := Options{Data: 8, Parity: 3, BlockSize: 512, Blocks: 8*9 + 5, Depth: depth}
		t.Run(fmt.Sprintf("depth=%d", depth), func(t *testing.T) {
			v := newHealVol(t, o, 6)
			s := v.l.Stripes() - 1
			if v.l.StripeLen(s) == v.l.DataShards() {
				t.Fatalf("%v: the last stripe is full", v.l)
			}
			r := rand.New(rand.NewPCG(1, 1))
			bad := map[int64]bool{}
			for _, b := range v.l.StripeBlocks(nil, s) {
				if b >= 0 && len(bad) < 2 {
					v.damage(r, b)
					bad[b] = true
				}
			}
			v.damageParity(t, s, 2)
			damaged := cloneBlocks(v.vol)
			if refused := v.heal(t, bad, map[int64]bool{s: true}); len(refused) > 0 {
				t.Fatalf("refused %v", refused)
			}
			v.check(t, nil, damaged)
		})
	}
}

// TestDamagedParityNeverUsed: a parity block that fails its checksum is an
// erasure. With m-1 bad data blocks beside it the stripe heals (and the
// parity block is rebuilt); with m it is refused, where using the damaged
// block would have "rebuilt" wrong data.
func TestDamagedParityNeverUsed(t *testing.T) {
	o := Options{Data: 16, Parity: 2, BlockSize: 4096, Blocks: 64}
	r := rand.New(rand.NewPCG(2, 2))
	for _, nData := range []int{1, 2} {
		t.Run(fmt.Sprintf("data=%d", nData), func(t *testing.T) {
			v := newHealVol(t, o, 7)
			bad := map[int64]bool{}
			for pos := range nData {
				b, _ := v.l.Block(0, pos)
				v.damage(r, b)
				bad[b] = true
			}
			v.damageParity(t, 0, 1)
			damaged := cloneBlocks(v.vol)
			refused := v.heal(t, bad, map[int64]bool{0: true})
			if len(refused) != nData-1 {
				t.Fatalf("refused %v", refused)
			}
			v.check(t, refused, damaged)
		})
	}
}
