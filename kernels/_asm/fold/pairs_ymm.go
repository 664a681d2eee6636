package main

import (
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// The end of a group in the YMM Blocks kernel (foldBlocksAVX2), which runs
// once per group of four blocks and on Golden Cove (VPCLMULQDQ ymm and the
// cross-lane moves on port 5 alone) cost as much as three or four of the
// group's 32-byte steps: each block's lanes collapsed by a cross-lane extract and
// two XMM multiplies, then Final and Barrett on XMM, and the result taken
// out by VPEXTRQ, about six port-5 µops a block. Here the four blocks are
// reduced two at a time, block 2i in the low 128-bit lane of a YMM register
// and block 2i+1 in the high one, so that every multiply of the collapse,
// of Final and of Barrett serves two blocks:
//
//   - A block whose length is an odd number of 16-byte lanes has one lane D
//     left after the 32-byte steps; its accumulator A (lanes L0, L1) moves on
//     by one lane, A·Fold[1] (both lanes at once) ⊕ {0, D}, the {0, D} a
//     blend of the 32 bytes that end with D and zero, so that every block
//     ends as two lanes, L0 one lane before the block's last lane L1.
//   - The accumulators a (block 2i) and b (block 2i+1) are regrouped as
//     x = {a.L0, b.L0} and y = {a.L1, b.L1} by one lane swap c = {a.L1,
//     b.L0} (VPERM2I128, the only cross-lane µop) and two blends (any vector
//     port): x = {a.L0, c.hi}, y = {c.lo, b.L1}.
//   - The lanes are V = x·Fold[1] ⊕ y, each block's message folded into one
//     lane, and reducePairY runs crcmath.Reduce on both lanes at once.
//   - The two registers go out through the frame, and the general registers
//     read each block's CRC from there (no VPEXTRQ, which takes port 5).
//
// Per block that is one multiply for the collapse, 1.5 for Final and
// Barrett, half a lane swap and a few in-lane byte shifts, against 5
// multiplies, an extract, a VPEXTRQ and two or three byte shifts before.

// YMM registers of the pair reduction (Y0..Y3 hold the blocks, rK1 Fold[1]
// in both lanes).
const (
	rZeroY  = 4 // zero
	rFinalY = 5 // {Final[0], Final[1] = 0} in both lanes
	rMuY    = 6 // {Mu, Poly} in both lanes
	rDY     = 7 // the 16-byte lane after the last 32-byte vector
)

// pairSlots is the register that points at the pairs' 64 bytes of the
// frame, 32-byte aligned (free in the YMM Blocks kernel: it would hold a
// stride multiple only for groups of more than four blocks).
var pairSlots = reg.R11

// usePairs reports whether the Blocks kernel being generated ends its
// groups with reducePairsY: the non-copying YMM kernel of a CRC whose
// reduction reducePairY implements.
func (g *gen) usePairs(copy bool) bool {
	return g.v.bytes == 32 && !copy && g.v.group == 4 && (!g.crc.reflected || g.crc.width == 64)
}

// loadPairConsts loads the constants of reducePairsY and points pairSlots
// at the 32-byte aligned part of frame (at least 64+32 bytes).
func (g *gen) loadPairConsts(frame operand.Mem) {
	c := g.c
	c.Comment("The pair reduction: Fold[1], Final, Mu and Poly in both lanes, a zero,",
		"and 64 bytes of the frame from a 32-byte boundary.")
	g.bcast(g.V(rK1), g.fold(1))
	g.bcast(g.V(rFinalY), mem(g.tab, tableFinal))
	g.bcast(g.V(rMuY), mem(g.tab, tableMu))
	g.xor(g.V(rZeroY), g.V(rZeroY), g.V(rZeroY))
	c.LEAQ(frame.Offset(31), pairSlots)
	c.ANDQ(operand.I32(-32), pairSlots)
}

// reducePairsY ends a group of the YMM Blocks kernel (see above): n (0 or
// 16) bytes of every block are left at cur (blockAddr gives block j's
// position); it stores the group's G CRCs to dst[0..G).
func (g *gen) reducePairsY(G int, n, cur, dst reg.GPPhysical, addr func(base reg.GPPhysical, j, disp int) operand.Mem) {
	c := g.c
	if G != 4 {
		panic("reducePairsY: groups of four blocks")
	}
	V := g.V
	lPairs := g.label("bpairs")
	c.Comment("An odd 16-byte lane left: every accumulator on by one lane, plus {0, D}.")
	c.CMPQ(n, operand.U32(16))
	c.JB(operand.LabelRef(lPairs))
	for j := 0; j < G; j++ {
		d := V(rDY)
		c.VPBLENDD(operand.U8(0xf0), addr(cur, j, -16), V(rZeroY), d)
		g.transform(d)
		g.foldInto(V(j), V(rK1), d, V(rT1))
	}
	c.Label(lPairs)
	for p := 0; p < G/2; p++ {
		a, b := V(2*p), V(2*p+1)
		sw, x, y, t := V(rT4), V(rT1), V(rT2), V(rT3)
		c.Comment("Blocks 2i and 2i+1: x = their first lanes, y = their last lanes.")
		c.VPERM2I128(operand.U8(0x21), b, a, sw) // {a.L1, b.L0}
		c.VPBLENDD(operand.U8(0xf0), sw, a, x)   // {a.L0, b.L0}
		c.VPBLENDD(operand.U8(0xf0), b, sw, y)   // {a.L1, b.L1}
		g.clmul(g.immHi(), V(rK1), x, t)
		g.clmul(g.immLo(), V(rK1), x, x)
		g.xor(x, x, t)
		g.xor(x, x, y)
		out := g.reducePairY(x)
		c.VMOVDQU(out, mem(pairSlots, 32*p))
	}
	wb := g.crc.width / 8
	for j := 0; j < G; j++ {
		off := 16 * j
		if g.crc.reflected {
			// The register is the high quadword (w = 64).
			c.MOVQ(mem(pairSlots, off+8), reg.RAX)
		} else {
			switch g.crc.width {
			case 16:
				c.MOVWQZX(mem(pairSlots, off), reg.RAX)
			case 32:
				c.MOVLQZX(mem(pairSlots, off), reg.RAX)
			default:
				c.MOVQ(mem(pairSlots, off), reg.RAX)
			}
		}
		g.finish(reg.RAX)
		g.store(reg.RAX, mem(dst, j*wb))
	}
}

// reducePairY is reduce on both 128-bit lanes of YMM register x at once,
// the same operations in the same order (see reduce for the math), with
// the constants from loadPairConsts; it returns the register holding each
// lane's CRC register (before xorout): an unreflected CRC's in the low w
// bits of the lane, a reflected 64-bit CRC's in its high quadword. It
// clobbers rT2, rT3 and rT4.
func (g *gen) reducePairY(x reg.VecPhysical) reg.VecPhysical {
	c, w := g.c, g.crc.width
	t, s, cv := g.V(rT2), g.V(rT3), g.V(rT4)
	final, mp, zero := g.V(rFinalY), g.V(rMuY), g.V(rZeroY)
	if !g.crc.reflected {
		g.clmul(0x01, final, x, t)               // Hi·C(64+w)
		c.VPBLENDD(operand.U8(0xcc), zero, x, s) // Lo: the high quadword cleared
		g.pslldq(w/8, s, s)                      // Lo·x^w
		g.xor(t, t, s)                           // T
		g.psrldq(w/8, t, s)                      // Q = T div x^w
		g.clmul(0x00, mp, s, cv)
		g.psrldq(8, cv, cv) // floor(Q·mu_low / x^64)
		g.xor(s, s, cv)     // q
		g.clmul(0x10, mp, s, cv)
		g.xor(t, t, cv) // low w bits: the register
		return t
	}
	if w != 64 {
		panic("reducePairY: reflected CRCs of 64 bits only")
	}
	g.clmul(0x00, final, x, t) // Hi·C(128)
	g.psrldq(8, x, s)          // Lo·x^64
	g.xor(t, t, s)             // T; Q is its low quadword
	g.clmul(0x00, mp, t, cv)   // x·Q·mu_low
	g.shiftq(true, 1, cv, cv)
	g.xor(s, t, cv)          // q
	g.clmul(0x10, mp, s, cv) // x·q·p
	g.shiftq(true, 1, cv, s)
	g.shiftq(false, 63, cv, cv)
	g.pslldq(8, cv, cv)
	g.xor(s, s, cv)
	g.xor(t, t, s) // the register in the high quadword
	return t
}
