//go:build !purego

package crc32c

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/difctl/difctl/kernels/internal/crcmath"
)

// TestHybridConsts checks the generated merge constants against their
// definition (kernels/_asm/crcgen).
func TestHybridConsts(t *testing.T) {
	c := func(k int) uint64 { return crcmath.C(Params, uint64(k)) }
	row := func(s int) (r [14]uint64) {
		for i := 6; i >= 1; i-- {
			r[6-i] = c(8*i*s - 64)
		}
		for q := 0; q < 4; q++ {
			r[6+q] = c(64*(3-q) + 8*s)
			r[10+q] = c(64*(3-q) + 16*s)
		}
		return r
	}
	for j := range hybridK {
		if hybridK[j] != row(hybridSegUnit*(j+1)) {
			t.Fatalf("hybridK[%d] is stale: run go generate", j)
		}
	}
	if hybridKBig[0] != row(hybridBigSeg) {
		t.Fatal("hybridKBig is stale: run go generate")
	}
	for j := range hybridK3 {
		s := hybridShortUnit * (j + 2)
		if hybridK3[j] != [2]uint64{c(16*s - 64), c(8*s - 64)} {
			t.Fatalf("hybridK3[%d] is stale: run go generate", j)
		}
	}
	for j := range hybridKZ {
		s := hybridZUnit * (j + 1)
		for i, k := range hybridKZ[j] {
			if k != c(8*(16-i)*s-64) {
				t.Fatalf("hybridKZ[%d][%d] is stale: run go generate", j, i)
			}
		}
	}
	for j, k := range hybridKS {
		if k != c(256*(j+1)-64) {
			t.Fatalf("hybridKS[%d] is stale: run go generate", j)
		}
	}
	// updateShort's segment for the longest input it gets has a row.
	if s := medium(hybridMin - 1); s/hybridShortUnit-2 >= len(hybridK3) || s > hybridShortMaxSeg {
		t.Fatalf("hybridK3 ends at s = %d; updateShort needs s = %d", hybridShortMaxSeg, s)
	}
}

// BenchmarkShort3 is the measurement behind hybridShort3Min: one CRC32
// stream (hybridShort) against three (hybridShort3) at the sizes around
// it, independent calls.
func BenchmarkShort3(b *testing.B) {
	var sink uint32
	for _, n := range []int{64, 96, 128, 192, 256, 384, 511, 1024, 2047} {
		p := make([]byte, n)
		s := medium(n)
		b.Run(fmt.Sprintf("size=%d/kernel=one", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				sink ^= hybridShort(0, &p[0], n)
			}
		})
		b.Run(fmt.Sprintf("size=%d/kernel=three", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				sink ^= hybridShort3(0, &p[0], n-3*s, s, &hybridK3[s/hybridShortUnit-2])
			}
		})
	}
	_ = sink
}

// TestHybridMergeModel proves the merge of the chunk kernels in Go, step by
// step as the 256-bit kernel does it: registers of segments 0..2 from CRC32
// streams, 32-byte accumulators of segments 3..5 from folding, every part
// multiplied into one 128-bit V, and V reduced as a 16-byte message.
func TestHybridMergeModel(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	reg := func(crc uint32, p []byte) uint32 { // CRC register from register crc
		return ^uint32(crcmath.Bitwise(Params, uint64(^crc), p))
	}
	mul := func(q, k uint64) crcmath.Lane {
		hi, lo := crcmath.Clmul(q, k)
		return crcmath.Lane{Q0: lo, Q1: hi}
	}
	xor := func(a, b crcmath.Lane) crcmath.Lane { return crcmath.Lane{Q0: a.Q0 ^ b.Q0, Q1: a.Q1 ^ b.Q1} }
	for _, s := range []int{32, 64, 96, 672, 2048} {
		rowp := &hybridK[s/hybridSegUnit-1]
		data := make([]byte, 6*s)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		in := r.Uint32()
		var v crcmath.Lane
		// The register before the chunk and the CRC segments, 6..3
		// segments before the end.
		regs := []uint32{in, reg(0, data[:s]), reg(0, data[s:2*s]), reg(0, data[2*s:3*s])}
		for i, x := range regs {
			v = xor(v, mul(uint64(x), rowp[i]))
		}
		// The fold segments, 2, 1 and 0 segments before the end.
		for f := 0; f < 3; f++ {
			seg := data[(3+f)*s : (4+f)*s]
			lo, hi := crcmath.Load(Params, seg), crcmath.Load(Params, seg[16:])
			for o := 32; o < s; o += 32 {
				lo = xor(crcmath.Fold(Params, lo, foldTable.Fold[2]), crcmath.Load(Params, seg[o:]))
				hi = xor(crcmath.Fold(Params, hi, foldTable.Fold[2]), crcmath.Load(Params, seg[o+16:]))
			}
			switch d := 2 - f; d {
			case 0:
				v = xor(v, xor(crcmath.Fold(Params, lo, foldTable.Fold[1]), hi))
			default:
				k := rowp[6+4*(d-1):]
				for j, q := range []uint64{lo.Q0, lo.Q1, hi.Q0, hi.Q1} {
					v = xor(v, mul(q, k[j]))
				}
			}
		}
		var vb [16]byte
		binary.LittleEndian.PutUint64(vb[:], v.Q0)
		binary.LittleEndian.PutUint64(vb[8:], v.Q1)
		if got, want := reg(0, vb[:]), reg(in, data); got != want {
			t.Fatalf("s=%d: merged register %#x, want %#x", s, got, want)
		}
	}
}

// TestHybridLong runs both hybrid kernels over lengths beyond the harness's
// 64 KiB, around the chunk sizes.
func TestHybridLong(t *testing.T) {
	buf := make([]byte, 1<<20+300)
	r := rand.New(rand.NewPCG(9, 10))
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	const mid, big = 6 * hybridMaxSeg, 6 * hybridBigSeg
	lengths := []int{big, big + 191, big + 192, 2*big + mid - 1, 2*big + 3*mid + 200, 1 << 20, 1<<20 + 300}
	for name, f := range map[string]func(uint32, []byte) uint32{"hybrid": updateHybrid256, "hybrid128": updateHybrid128} {
		if (name == "hybrid" && !hasHybrid256) || !hasHybrid128 {
			continue
		}
		for _, n := range lengths {
			crc := r.Uint32()
			if got, want := f(crc, buf[:n]), crc32.Update(crc, castagnoli, buf[:n]); got != want {
				t.Errorf("%s: len=%d: %#x, want %#x", name, n, got, want)
			}
		}
	}
}

// BenchmarkHybrid256Shapes is the measurement behind blocksHybrid256's
// choice of kernel by CPU vendor: the YMM blocks kernels of three CRC32
// streams beside three folds (hybridBlocks256, with and without the
// prefetch) and two streams of two chains each beside four folds
// (hybridBlocks256S), over 1 MiB of blocks in cache and 64 MiB beyond
// it (where the prefetching kernel matters), timed by the thread's
// CPU time in interleaved rounds (-benchtime Nx is N rounds); it reports
// the median GB/s of each.
func BenchmarkHybrid256Shapes(b *testing.B) {
	if !hasHybrid256 {
		b.Skip("the CPU lacks AVX2 VPCLMULQDQ")
	}
	for _, l := range [][3]int{{512, 512, 1 << 20}, {512, 520, 1 << 20}, {1024, 1024, 1 << 20}, {4096, 4096, 1 << 20},
		{4096, 4104, 1 << 20}, {512, 512, 64 << 20}, {4096, 4096, 64 << 20}} {
		bl, stride := l[0], l[1]
		n := l[2] / bl / 6 * 6
		p := make([]byte, (n-1)*stride+bl)
		for i := range p {
			p[i] = byte(i * 7)
		}
		dst := make([]uint32, n)
		names := []string{"3+3", "3+3prefetch", "2x2+4"}
		runs := []func(){
			func() { hybridBlocks256(&dst[0], &p[0], n/6, bl, stride, &foldTable.Fold[2]) },
			func() { hybridBlocksPrefetch256(&dst[0], &p[0], n/6, bl, stride, &foldTable.Fold[2]) },
			func() { hybridBlocks256S(&dst[0], &p[0], n/6, bl, stride, &foldTable.Fold[2], hybridKS[bl/64-1]) },
		}
		b.Run(fmt.Sprintf("block=%d/stride=%d/bytes=%d", bl, stride, n*bl), func(b *testing.B) {
			benchRounds(b, runs, names, n*bl)
		})
	}
}

// TestBlocksHybrid256Chains runs the avx2 Blocks with and without the
// two-chain kernel (hybridChains, which the CPU's vendor sets) at the
// block lengths where its choice changes, on and off a line, with a count
// of blocks that leaves some to Update, against hash/crc32.
func TestBlocksHybrid256Chains(t *testing.T) {
	if !hasHybrid256 {
		t.Skip("the CPU lacks AVX2 VPCLMULQDQ")
	}
	defer func(c bool) { hybridChains = c }(hybridChains)
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	r := rand.New(rand.NewPCG(3, 4))
	for _, chains := range []bool{false, true} {
		hybridChains = chains
		for _, bl := range []int{32, 64, 96, 128, 512, 544, 4096, 64 * hybridSubMaxSteps, 64*hybridSubMaxSteps + 64} {
			for _, gap := range []int{0, 8} {
				n := 13
				stride := bl + gap
				p := make([]byte, (n-1)*stride+bl)
				for i := range p {
					p[i] = byte(r.Uint32())
				}
				dst := make([]uint32, n)
				blocksHybrid256(dst, p, bl, stride)
				for i := range dst {
					if want := crc32.Checksum(p[i*stride:][:bl], castagnoli); dst[i] != want {
						t.Fatalf("chains=%v block=%d stride=%d: dst[%d] = %#x, want %#x", chains, bl, stride, i, dst[i], want)
					}
				}
			}
		}
	}
}
