// Package ifma emits the radix-2^44 Poly1305 arithmetic of the AVX-512
// IFMA kernels of kernels/_asm: poly1305's lanesIFMA, lanesIFMAS and
// lanesIFMASCopy, and fusedpoly's fusedPolyCopyZ. The generators keep
// their loops, loads, stores and prefetches; this package emits what they
// compute on the eight 64-bit lanes of ZMM registers, and documents it.
//
// A lane holds an accumulator h of one Poly1305 stream modulo p = 2^130 -
// 5 as three limbs of 44, 44 and 42 bits (h = h0 + h1·2^44 + h2·2^88), a
// 16-byte chunk m the same way (m2 its bits 88..127, the pad bit 2^128 as
// bit 40 of m2 or, in the stream layout, in the step's constant). A key
// power r^e is five words r0 r1 r2 s1 s2, s_i = 20·r_i. A product limb x_i
// times a word enters two accumulators per output limb: VPMADD52LUQ adds
// the low 52 bits of the 104-bit product to d_k^lo, VPMADD52HUQ the high 52
// bits to d_k^hi (Madd, with Words):
//
//	d0 = x0·r0 + x1·s2 + x2·s1
//	d1 = x0·r1 + x1·r0 + x2·s2
//	d2 = x0·r2 + x1·r1 + x2·r0
//
// s_i = 20·r_i because 2^132 ≡ 20 (mod p): a product at weight 2^132 or
// above (x1·r2 at 2^132, x2·r1 at 2^132, x2·r2 at 2^176 = 2^44·2^132)
// folds down by 2^132. The hi sums weigh 2^52 = 2^8·2^44 more than their
// lo sums, so hi_0 and hi_1 join the limbs above shifted left by 8, and
// hi_2 (at 2^140 ≡ 5·2^10) joins limb 0 times 5·2^10 = 2^12 + 2^10
// (JoinHi). The carries then take each limb to its width, the carry out of
// limb 2 (at 2^130 ≡ 5) into limb 0 times 5 = 4 + 1 (Carry, Combine,
// CombineS).
//
// The stream layout (Step, Limbs, SumStreams): a pair of blocks fills the
// eight lanes as two blocks times four chunk streams, lane 2s+b holding
// chunks s, s+4, s+8, ... of block b. One 64-byte row of each block (chunks
// 4u..4u+3) gives, by VPUNPCKLQDQ/HQDQ of the two, the lo and hi words of
// chunk-vector u, lane 2s+b holding chunk 4u+s of block b. Each stream is
// a Horner evaluation in r^4, four rows a step: h' = (h + v1)·r^16 +
// v2·r^12 + v3·r^8 + v4·r^4. The last step, of the R = 1..4 rows left,
// takes the bracket B = (h + v1)·r^(4(R-1)) + ... + vR, carries it and
// multiplies it by F, lane 2s+b holding r^(4-s), so that chunk 4u+s of a
// block of n = 4U chunks ends with r^(n-4u-s), as Poly1305 has it. The pad
// bits enter by linearity: each step's accumulators start from c = 2^128·Σ
// r^e over the powers e its chunk-vectors take (KeyK), not from zero.
//
// The key table (poly1305's ifmaKey, kernels/poly1305/poly1305_lanes44.go,
// built by KeyTable for the emulator tests) is KeyWords uint64 words; its
// offsets are the Key* constants.
package ifma

import (
	"math/big"

	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// The limbs' masks and the lanes of a ZMM register.
const (
	Mask44 = 1<<44 - 1 // limbs 0 and 1
	Mask42 = 1<<42 - 1 // limb 2 (bits 88..129)
	Lanes  = 8
)

// The key table's layout, in words (uint64), not bytes. Words w = 0..4 (r0
// r1 r2 s1 s2) of r^(j+1), j = 0..3, at 5j + w. From KeyVec, those of r^3
// and r^4 again as eight-lane vectors: word w of r^(j+1), j = 2, 3, at
// KeyVec + 40(j-2) + 8w. From KeyB, word w of r^(4(P+1)), P = 0..3 (r^4,
// r^8, r^12, r^16), at KeyB + 5P + w (broadcast operands). From KeyF, the
// last step's per-lane factor F, word w at KeyF + 8w in eight lanes, lane
// 2s+b holding that of r^(4-s). From KeyK, a step's pad bits' part, the
// limbs of c = 2^128·Σ r^e over the powers e the step's chunk-vectors take
// (mod p, radix 2^44), limb k in eight lanes at KeyK + 24V + 8k: V = 0 an
// ordinary step's (e = 4, 8, 12, 16), V = R the bracket's of a last step
// of R rows (e = 0, 4, ..., 4(R-1)).
const (
	KeyVec   = 4 * 5
	KeyB     = KeyVec + 2*5*Lanes
	KeyF     = KeyB + 4*5
	KeyK     = KeyF + 5*Lanes
	KeyWords = KeyK + 5*3*Lanes
)

// Words[k][i] is the key word (index into r0 r1 r2 s1 s2) that limb i
// multiplies for output limb k (the package doc has the products).
var Words = [3][3]int{{0, 4, 3}, {1, 0, 4}, {2, 1, 0}}

// A Key is the operands of the five words of a power of r: Word(w) is a
// register or 64 bytes of eight lanes, or with Bcst a quadword that the
// multiplies broadcast to the eight ({1to8}).
type Key struct {
	Word func(w int) operand.Op
	Bcst bool
}

// Arith is the arithmetic of one kernel: its context, its registers and
// its key operands. The registers are fixed (physical): the IFMA kernels
// take every ZMM register, so their generators assign them.
type Arith struct {
	C *build.Context
	// H is the accumulator, DLo and DHi the products' lo and hi sums, by
	// limb.
	H, DLo, DHi [3]reg.VecPhysical
	// Lo, Hi take a chunk-vector's lo and hi words (Limbs); L takes each
	// limb for use; T and T5 are the carries' temporaries (T5 for the
	// times-5 of the carry out of limb 2).
	Lo, Hi, L, T, T5 reg.VecPhysical
	// M44 and M42 hold Mask44 and Mask42 in every lane.
	M44, M42 reg.VecPhysical
	// KeyBase holds the key table's address (Step's KeyK loads).
	KeyBase reg.Register
	// Pow is the key of r^(4e), e = 1..4, or of F, e = 0 (Step).
	Pow func(e int) Key
}

// Madd adds x (limb i of a chunk-vector) times key to the accumulators.
func (a *Arith) Madd(x reg.VecPhysical, i int, key Key) {
	c := a.C
	for k := 0; k < 3; k++ {
		w := key.Word(Words[k][i])
		if key.Bcst {
			c.VPMADD52LUQ_BCST(w, x, a.DLo[k])
			c.VPMADD52HUQ_BCST(w, x, a.DHi[k])
			continue
		}
		c.VPMADD52LUQ(w, x, a.DLo[k])
		c.VPMADD52HUQ(w, x, a.DHi[k])
	}
}

// ZeroAcc zeroes the lo and hi sums.
func (a *Arith) ZeroAcc() {
	for k := 0; k < 3; k++ {
		a.C.VPXORQ(a.DLo[k], a.DLo[k], a.DLo[k])
		a.C.VPXORQ(a.DHi[k], a.DHi[k], a.DHi[k])
	}
}

// JoinHi joins the hi sums to the lo sums of the limbs above: hi_0 and
// hi_1 shifted left by 8, hi_2 into limb 0 times 5120 = 2^12 + 2^10.
func (a *Arith) JoinHi() {
	c := a.C
	c.VPSLLQ(operand.U8(12), a.DHi[2], a.T)
	c.VPADDQ(a.T, a.DLo[0], a.DLo[0])
	c.VPSLLQ(operand.U8(10), a.DHi[2], a.T)
	c.VPADDQ(a.T, a.DLo[0], a.DLo[0])
	c.VPSLLQ(operand.U8(8), a.DHi[0], a.T)
	c.VPADDQ(a.T, a.DLo[1], a.DLo[1])
	c.VPSLLQ(operand.U8(8), a.DHi[1], a.T)
	c.VPADDQ(a.T, a.DLo[2], a.DLo[2])
}

// Carry is d_from → d_to of the lo sums: d_from keeps its low bits bits
// (mask holds them), the rest is added to d_to, times 5 if times5 (the
// carry out of limb 2).
func (a *Arith) Carry(from, to, bits int, mask reg.VecPhysical, times5 bool) {
	c := a.C
	c.VPSRLQ(operand.U8(bits), a.DLo[from], a.T)
	c.VPANDQ(mask, a.DLo[from], a.DLo[from])
	if times5 {
		c.VPSLLQ(operand.U8(2), a.T, a.T5)
		c.VPADDQ(a.T5, a.T, a.T)
	}
	c.VPADDQ(a.T, a.DLo[to], a.DLo[to])
}

// Carries is the full carry chain d0→d1, d1→d2, d2→d0 (times 5), d0→d1
// (the bounds it leaves: Combine's callers and SumStreams).
func (a *Arith) Carries() {
	a.Carry(0, 1, 44, a.M44, false)
	a.Carry(1, 2, 44, a.M44, false)
	a.Carry(2, 0, 42, a.M42, true)
	a.Carry(0, 1, 44, a.M44, false)
}

// Combine joins the hi sums (JoinHi), carries fully (Carries) and moves
// the limbs to h.
func (a *Arith) Combine() {
	a.JoinHi()
	a.Carries()
	for k := 0; k < 3; k++ {
		a.C.VMOVDQA64(a.DLo[k], a.H[k])
	}
}

// CombineS is Combine without its last carry, d0→d1, each masked limb
// written to h (no moves): it leaves limb 0 below 2^44 + 5·2^22 (d2 below
// 2^64 carries under 2^22 from bit 42), limb 1 below 2^44 and limb 2 below
// 2^42, so that h plus a chunk-vector has limbs below 2^46, inside the
// multiplier's 52 bits.
func (a *Arith) CombineS() {
	c := a.C
	a.JoinHi()
	c.VPSRLQ(operand.U8(44), a.DLo[0], a.T)
	c.VPANDQ(a.M44, a.DLo[0], a.H[0])
	c.VPADDQ(a.T, a.DLo[1], a.DLo[1])
	c.VPSRLQ(operand.U8(44), a.DLo[1], a.T)
	c.VPANDQ(a.M44, a.DLo[1], a.H[1])
	c.VPADDQ(a.T, a.DLo[2], a.DLo[2])
	c.VPSRLQ(operand.U8(42), a.DLo[2], a.T)
	c.VPANDQ(a.M42, a.DLo[2], a.H[2])
	c.VPSLLQ(operand.U8(2), a.T, a.T5)
	c.VPADDQ(a.T5, a.T, a.T)
	c.VPADDQ(a.T, a.H[0], a.H[0])
}

// Limbs splits the rows of a pair's two blocks, row0 and row1, into the
// limbs of a chunk-vector (lane 2s+b chunk s of the row of block b) and
// calls use with each limb i in L, in order 0..2. Limb 1 is (lo>>44 |
// hi<<20) & M44 in one VPTERNLOGD; limb 2 has no pad bit (the step's
// constant has it).
func (a *Arith) Limbs(row0, row1 reg.VecPhysical, use func(i int)) {
	c := a.C
	c.VPUNPCKHQDQ(row1, row0, a.Hi)
	c.VPUNPCKLQDQ(row1, row0, a.Lo)
	c.VPANDQ(a.M44, a.Lo, a.L)
	use(0)
	c.VPSRLQ(operand.U8(44), a.Lo, a.L)
	c.VPSLLQ(operand.U8(20), a.Hi, a.T)
	c.VPTERNLOGD(operand.U8(0xa8), a.M44, a.T, a.L) // (L | T) & M44
	use(1)
	c.VPSRLQ(operand.U8(24), a.Hi, a.L)
	use(2)
}

// Step emits a step of the stream layout over rows rows of the pair. An
// ordinary step (last false, rows 4) takes row t times r^(4(4-t)). The
// last (rows 1..4) takes the bracket, row t times r^(4(rows-1-t)) (row
// rows-1 added, times 1), carries it, multiplies it by F and carries
// again. The accumulators start from the step's pad bits' part (KeyK);
// row(t, use) emits whatever the kernel does with row t and the split
// (Limbs), calling use with each limb. The rows go in order 0..rows-1
// (ascending) or rows-1..0; either way the multiplies of h + row 0 come
// last, so that the accumulators' chains take the other rows first, which
// do not wait on the previous step's carries.
func (a *Arith) Step(rows int, last, ascending bool, row func(t int, use func(i int))) {
	c := a.C
	pow := func(t int) int {
		if last {
			return rows - 1 - t
		}
		return 4 - t
	}
	v := 0
	if last {
		v = rows
	}
	for k := 0; k < 3; k++ {
		c.VMOVDQU64(operand.Mem{Base: a.KeyBase, Disp: 8 * (KeyK + 24*v + 8*k)}, a.DLo[k])
		c.VPXORQ(a.DHi[k], a.DHi[k], a.DHi[k])
	}
	one := func(t int) {
		switch {
		case t == 0:
			row(0, func(i int) { c.VPADDQ(a.L, a.H[i], a.H[i]) })
		case pow(t) == 0:
			row(t, func(i int) { c.VPADDQ(a.L, a.DLo[i], a.DLo[i]) })
		default:
			row(t, func(i int) { a.Madd(a.L, i, a.Pow(pow(t))) })
		}
	}
	if ascending {
		for t := 0; t < rows; t++ {
			one(t)
		}
	} else {
		for t := rows - 1; t >= 0; t-- {
			one(t)
		}
	}
	for i := 0; i < 3; i++ {
		if pow(0) == 0 {
			c.VPADDQ(a.H[i], a.DLo[i], a.DLo[i])
			continue
		}
		a.Madd(a.H[i], i, a.Pow(pow(0)))
	}
	a.CombineS()
	if last {
		c.Comment("Times F: stream s times r^(4-s).")
		a.ZeroAcc()
		for i := 0; i < 3; i++ {
			a.Madd(a.H[i], i, a.Pow(0))
		}
		a.CombineS()
	}
}

// SumStreams sums the four streams of each block (lanes b, 2+b, 4+b, 6+b)
// into lanes 0 and 1 and carries them fully (Carries: each stream below
// 2^44 + 5·2^22, 2^44, 2^42 after CombineS, so the sums below 2^46 + 2^25,
// 2^46, 2^44, and afterwards below 2^44, 2^44 + 1, 2^42, the bounds of
// Combine), then stores limb k (lanes 0 and 1: blocks 0 and 1) to dst(k).
func (a *Arith) SumStreams(dst func(k int) operand.Mem) {
	c := a.C
	for k := 0; k < 3; k++ {
		c.VSHUFI64X2(operand.U8(0x4e), a.H[k], a.H[k], a.T) // units 2, 3, 0, 1
		c.VPADDQ(a.T, a.H[k], a.DLo[k])
		c.VSHUFI64X2(operand.U8(0xb1), a.DLo[k], a.DLo[k], a.T) // units 1, 0, 3, 2
		c.VPADDQ(a.T, a.DLo[k], a.DLo[k])
	}
	a.Carries()
	for k := 0; k < 3; k++ {
		c.VMOVDQU(a.DLo[k].AsX(), dst(k))
	}
}

// P is 2^130 - 5.
var P = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 130), big.NewInt(5))

// Split returns n limbs of bits bits of x (below 2^(bits·n)).
func Split(x *big.Int, bits uint, n int) []uint64 {
	out := make([]uint64, n)
	mask := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), bits), big.NewInt(1))
	y := new(big.Int).Set(x)
	for k := range out {
		out[k] = new(big.Int).And(y, mask).Uint64()
		y.Rsh(y, bits)
	}
	return out
}

// KeyTable is the key table of r (clamped) in the layout of the Key*
// constants, from math/big: the model the emulator tests give the kernels.
func KeyTable(r *big.Int) []uint64 {
	k := make([]uint64, KeyWords)
	pow := func(e int) *big.Int { return new(big.Int).Exp(r, big.NewInt(int64(e)), P) }
	words := func(n int) []uint64 {
		l := Split(pow(n), 44, 3)
		return []uint64{l[0], l[1], l[2], 20 * l[1], 20 * l[2]}
	}
	for j := 0; j < 4; j++ {
		copy(k[5*j:], words(j+1))
	}
	for w := 0; w < 5; w++ {
		for ln := 0; ln < Lanes; ln++ {
			for j := 2; j < 4; j++ {
				k[KeyVec+40*(j-2)+8*w+ln] = words(j + 1)[w]
			}
			k[KeyF+8*w+ln] = words(4 - ln/2)[w]
		}
		for pw := 0; pw < 4; pw++ {
			k[KeyB+5*pw+w] = words(4 * (pw + 1))[w]
		}
	}
	two128 := new(big.Int).Lsh(big.NewInt(1), 128)
	for v := 0; v <= 4; v++ {
		c := new(big.Int)
		if v == 0 {
			for j := 1; j <= 4; j++ {
				c.Add(c, pow(4*j))
			}
		} else {
			for j := 0; j < v; j++ {
				c.Add(c, pow(4*j))
			}
		}
		c.Mul(c, two128).Mod(c, P)
		for i, l := range Split(c, 44, 3) {
			for ln := 0; ln < Lanes; ln++ {
				k[KeyK+24*v+8*i+ln] = l
			}
		}
	}
	return k
}
