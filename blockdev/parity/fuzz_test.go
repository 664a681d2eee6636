package parity

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// FuzzLayout: NewLayout accepts or refuses with ErrInvalidLayout; an
// accepted layout's block i and its stripe map back and forth, the
// stripe's length and blocks agree, the parity offsets lie in the file,
// and a run of m·D blocks from i meets no stripe more than m times. Small
// volumes are checked whole.
func FuzzLayout(f *testing.F) {
	f.Add(uint8(4), uint8(2), uint32(203), int16(-1), uint32(17))
	f.Add(uint8(16), uint8(2), uint32(1000), int16(7), uint32(999))
	f.Add(uint8(32), uint8(4), uint32(1<<20), int16(0), uint32(123456))
	f.Add(uint8(8), uint8(1), uint32(9), int16(1), uint32(8))
	f.Fuzz(func(t *testing.T, k, m uint8, n uint32, depth int16, i uint32) {
		l, err := NewLayout(Options{Data: int(k), Parity: int(m), BlockSize: 512, Blocks: int64(n), Depth: int64(depth)})
		if err != nil {
			if !errors.Is(err, ErrInvalidLayout) {
				t.Fatal(err)
			}
			return
		}
		if l.Blocks() <= 2000 {
			checkLayout(t, l)
		}
		b := int64(i) % l.Blocks()
		s, pos := l.Locate(b)
		if got, ok := l.Block(s, pos); !ok || got != b || pos >= l.StripeLen(s) {
			t.Fatalf("%v: block %d: stripe %d position %d: Block %d %v, StripeLen %d", l, b, s, pos, got, ok, l.StripeLen(s))
		}
		blocks := l.StripeBlocks(nil, s)
		if blocks[pos] != b {
			t.Fatalf("%v: StripeBlocks(%d) = %v", l, s, blocks)
		}
		if end := l.ParityOffset(s, int(m)-1) + 512; end > l.ParitySize() {
			t.Fatalf("%v: stripe %d ends at %d, past %d", l, s, end, l.ParitySize())
		}
		if run := l.BurstTolerance(); run <= 1<<14 {
			hits := map[int64]int{}
			for x := b; x < min(b+run, l.Blocks()); x++ {
				st, _ := l.Locate(x)
				if hits[st]++; hits[st] > int(m) {
					t.Fatalf("%v: the run of %d from %d meets stripe %d %d times", l, run, b, st, hits[st])
				}
			}
		}
	})
}

// FuzzRebuild erases a random set of shards of a random stripe (short or
// not) and rebuilds: the stripe comes back whole with at most m erasures,
// and is refused unchanged with more.
func FuzzRebuild(f *testing.F) {
	f.Add(uint8(4), uint8(2), uint8(4), uint64(1), []byte{0b000101})
	f.Add(uint8(16), uint8(2), uint8(9), uint64(2), []byte{0, 0, 0b11})
	f.Add(uint8(32), uint8(4), uint8(32), uint64(3), []byte{1, 2, 4, 8, 0xf})
	f.Add(uint8(8), uint8(1), uint8(8), uint64(4), []byte{0xff})
	f.Fuzz(func(t *testing.T, k, m, short uint8, seed uint64, mask []byte) {
		kk := 1 + int(k)%48
		mm := 1 + int(m)%kk
		c, err := NewCodec(kk, mm, 64)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(seed, 1))
		sh := stripe(t, r, c, 1+int(short)%kk)
		var set []int
		for i := range kk + mm {
			if i/8 < len(mask) && mask[i/8]&(1<<(i%8)) != 0 {
				set = append(set, i)
			}
		}
		checkRebuild(t, r, c, sh, set)
	})
}
