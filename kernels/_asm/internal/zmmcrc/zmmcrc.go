// Package zmmcrc emits the CRC steps that the fused ZMM kernels of
// kernels/_asm share (fused's fusedBlocksZ, fusedBlocksZG and
// fusedBlocksCopyZG, fusedpoly's fusedPolyCopyZ; Reduce also for both
// generators' AVX kernels, LaneCRC32 also for crc32hybrid's merges): the
// fold of a 64-byte accumulator, the collapse of four accumulators into
// the lanes of one register, the Barrett reduction of unreflected lanes
// and the CRC-32C register of a folded lane.
//
// A 64-byte accumulator holds four 16-byte lanes of a CRC's carry-less
// folding (crcmath's model, kernels/internal/crcmath, fold.go), lane l
// standing for bytes 16·(3-l) before the last lane's. The emitters take every register
// they use, temporaries included, as arguments and allocate none: some
// generators let avo allocate virtual registers and others fix physical
// ones, and either way the registers (and the order in which a generator
// allocates them, which avo's allocator follows on ties) stay the
// generator's own.
package zmmcrc

import (
	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// Fold folds the 64-byte accumulator a forward onto the next 64 bytes d:
// a = (a's lanes times k) ⊕ d, each lane Hi·k[0] ⊕ Lo·k[1] (crcmath.Fold)
// with k = Fold[4] of the CRC's table in every lane (x^512 a lane
// further). The immediates lo and hi pick the products as the lanes hold
// the quadwords: 0x00 and 0x11 in the reflected domain (Hi in the low
// quadword), 0x01 and 0x10 in the unreflected one. t is a temporary.
func Fold(c *build.Context, lo, hi uint8, k operand.Op, a, t reg.Register, d operand.Op) {
	c.VPCLMULQDQ(operand.U8(lo), k, a, t)
	c.VPCLMULQDQ(operand.U8(hi), k, a, a)
	c.VPTERNLOGD(operand.U8(0x96), d, t, a) // a ^ t ^ d
}

// FoldLanes sets w to a 64-byte value congruent to the accumulator a
// whose four lanes, summed, are a 16-byte lane congruent to a: a's lanes
// times k, the 64 bytes at Rev[61] of its table ({Fold[3], Fold[2],
// Fold[1], 0}: lane l folded forward onto the last), its last lane kept
// as it is (through last4, all ones in the last lane and zeros in the
// others). lo and hi are Fold's immediates; t is a temporary.
func FoldLanes(c *build.Context, lo, hi uint8, k, last4 operand.Op, a, t, w reg.Register) {
	c.VPCLMULQDQ(operand.U8(lo), k, a, t)
	c.VPCLMULQDQ(operand.U8(hi), k, a, w)
	c.VPXORQ(t, w, w)
	// w ^= a & last4: 0x78 is A ^ (B & C) with A = w, B = a, C = last4.
	c.VPTERNLOGD(operand.U8(0x78), last4, a, w)
}

// Transpose4 sets z's lane j to the sum (XOR) of w[j]'s four lanes: lanes
// {0,1} and {2,3} of two vectors paired and summed into x[i], then lanes
// {0,2} and {1,3} of those. lo[i] and hi[i] take the halves of pair i,
// lo[2] and hi[2] the last shuffles' (they may repeat).
func Transpose4(c *build.Context, w [4]reg.Register, x [2]reg.Register, lo, hi [3]reg.Register, z reg.Register) {
	for i := 0; i < 2; i++ {
		c.VSHUFI64X2(operand.U8(0x44), w[2*i+1], w[2*i], lo[i]) // lanes 0,1 of each
		c.VSHUFI64X2(operand.U8(0xee), w[2*i+1], w[2*i], hi[i]) // lanes 2,3 of each
		c.VPXORQ(lo[i], hi[i], x[i])
	}
	c.VSHUFI64X2(operand.U8(0x88), x[1], x[0], lo[2]) // lanes 0,2 of each
	c.VSHUFI64X2(operand.U8(0xdd), x[1], x[0], hi[2]) // lanes 1,3 of each
	c.VPXORQ(lo[2], hi[2], z)
}

// Lanes4Regs are the registers of Lanes4: T FoldLanes' temporary, W its
// results, X, Lo and Hi those of Transpose4.
type Lanes4Regs struct {
	T      reg.Register
	W      [4]reg.Register
	X      [2]reg.Register
	Lo, Hi [3]reg.Register
}

// Lanes4 sets z's lane j to a 16-byte lane congruent to the 64-byte
// accumulator as[j] (four of them, of one table: k and lo, hi as
// FoldLanes takes them): FoldLanes of each, then Transpose4.
func Lanes4[V reg.Register](c *build.Context, as []V, k, last4 operand.Op, lo, hi uint8, r Lanes4Regs, z reg.Register) {
	for j, a := range as {
		FoldLanes(c, lo, hi, k, last4, a, r.T, r.W[j])
	}
	Transpose4(c, r.W, r.X, r.Lo, r.Hi, z)
}

// Last4 sets last4 to all ones in its last 16-byte lane and zeros in the
// others, Lanes4's mask, from no memory; zero and ones are temporaries.
func Last4(c *build.Context, last4, zero, ones reg.Register) {
	c.VPXORQ(zero, zero, zero)
	c.VPTERNLOGD(operand.U8(0xff), zero, zero, ones)
	c.VSHUFI64X2(operand.U8(0x00), ones, zero, last4)  // {0, 0, ones, ones}
	c.VSHUFI64X2(operand.U8(0xc0), last4, zero, last4) // {0, 0, 0, ones}
}

// Reduce is crcmath.Reduce, without the xorout, on the unreflected lane x
// of a CRC of w bits (w a multiple of 8, at most 64): T = Hi·C(64+w) ⊕ Lo·x^w
// (degree below 64+w), Q = T div x^w, q = Q ⊕ floor(Q·mu_low / x^64)
// (Barrett), CRC = T mod x^w ⊕ (q·p mod x^w). fin holds {Final[0], 0} and
// muP {Mu, Poly} of the CRC's table; the CRC is left in the low w bits of
// t (the rest of t not zeroed). s and k are temporaries.
func Reduce(c *build.Context, x, fin, muP, t, s, k reg.Register, w int) {
	c.VPCLMULQDQ(operand.U8(0x01), fin, x, t) // Hi·C(64+w)
	c.VMOVQ(x, s)                             // Lo
	c.VPSLLDQ(operand.U8(w/8), s, s)          // Lo·x^w
	c.VPXOR(s, t, t)                          // T, degree < 64+w
	c.VPSRLDQ(operand.U8(w/8), t, s)          // Q = T div x^w
	c.VPCLMULQDQ(operand.U8(0x00), muP, s, k) // Q·mu_low
	c.VPSRLDQ(operand.U8(8), k, k)            // floor(Q·mu_low / x^64)
	c.VPXOR(k, s, s)                          // q
	c.VPCLMULQDQ(operand.U8(0x10), muP, s, k) // q·p
	c.VPXOR(k, t, t)                          // low w bits: the CRC
}

// ReduceZ is Reduce on the four lanes of the ZMM register x at once, fin
// and muP in every lane: each lane's CRC is left in its low w bits of x
// (the rest of the lane not zeroed). t, s and k are temporaries.
func ReduceZ(c *build.Context, x, fin, muP, t, s, k reg.Register, w int) {
	c.VPCLMULQDQ(operand.U8(0x01), fin, x, t) // Hi·C(64+w)
	c.VPSLLDQ(operand.U8(8), x, s)            // Lo in the high quadword
	c.VPSRLDQ(operand.U8(8-w/8), s, s)        // Lo·x^w
	c.VPXORQ(s, t, t)                         // T, degree < 64+w
	c.VPSRLDQ(operand.U8(w/8), t, s)          // Q = T div x^w
	c.VPCLMULQDQ(operand.U8(0x00), muP, s, k) // Q·mu_low
	c.VPSRLDQ(operand.U8(8), k, k)            // floor(Q·mu_low / x^64)
	c.VPXORQ(k, s, s)                         // q
	c.VPCLMULQDQ(operand.U8(0x10), muP, s, k) // q·p
	c.VPXORQ(k, t, x)                         // low w bits: the CRC
}

// LaneCRC32 sets r to the CRC-32C register, from zero, of the 16-byte
// message in the XMM register x (two CRC32Q of its quadwords, through the
// temporary q). A lane congruent to a block's folded CRC-32C gives the
// block's register so; r's low 32 bits hold it, not yet inverted.
func LaneCRC32(c *build.Context, x reg.Register, r, q reg.GPVirtual) {
	c.XORL(r.As32(), r.As32())
	c.VMOVQ(x, q)
	c.CRC32Q(q, r)
	c.VPEXTRQ(operand.U8(1), x, q)
	c.CRC32Q(q, r)
}
