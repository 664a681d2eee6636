package main

import (
	"fmt"
	"go/types"

	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/gotypes"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/difctl/difctl/kernels/_asm/internal/ifma"
	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
)

// The stream kernels' signatures: lanesIFMAS is lanesIFMA's;
// lanesIFMASCopy adds q *byte.
func lanesIFMASSig(cp bool) *gotypes.Signature {
	if cp {
		return scaffold.Signature(append(lanesIFMAParams(), scaffold.Param("q", types.NewPointer(types.Typ[types.Byte]))), nil)
	}
	return lanesIFMASig()
}

// rCq is lanesIFMASCopy's pointer to block 0 of its pair's row in q.
var rCq = reg.R12

// The stream kernels, lanesIFMAS and lanesIFMASCopy: lanesIFMA's arithmetic
// (radix 2^44, kernels/_asm/internal/ifma) in the stream layout, which
// needs no gathers (ifma's Limbs, Step and SumStreams). The eight blocks go
// as four pairs, one after the other; a pair fills the eight lanes as two
// blocks times four chunk streams, lane 2s+b holding chunks s, s+4, s+8,
// ... of block b. One 64-byte load of each block (a row: chunks 4u..4u+3)
// and VPUNPCKLQDQ/HQDQ of the two give the lo and hi words of chunk-vector
// u, lane 2s+b holding chunk 4u+s of block b: two loads and two shuffles
// per chunk-vector, against lanesIFMA's eight loads (six of them
// VINSERTI32X4, a shuffle each) and two shuffles.
//
// Each stream is a Horner evaluation in r^4, one row a term, four rows a
// step: h' = (h + v1)·r^16 + v2·r^12 + v3·r^8 + v4·r^4. The last step,
// of the R = 1..4 rows left, takes the bracket B = (h + v1)·r^(4(R-1)) +
// ... + vR (vR added, not multiplied), carries it, and multiplies it by
// F, lane 2s+b holding r^(4-s), so that chunk 4u+s of a block of n = 4U
// chunks ends with r^(n-4u-s), as Poly1305 has it. The accumulator h
// (h[8k+l], limb k of block l, from the associated data or zero) seeds
// stream 0 of its block, which the steps multiply by r^n in all.
//
// Three vector operations a chunk-vector fewer than lanesIFMA's split and
// carries, where every one counts (the multiplies and the shuffles share
// two ports, and on Sapphire Rapids independent ZMM VPMADD52LUQ issue two
// a cycle):
//   - No pad bit is ORed into the chunks: each step's accumulators start
//     from its pad bits' part instead, c = 2^128·Σ r^e over the step's
//     powers e (by linearity; ifma.KeyK), a load in place of a zeroing.
//   - Limb 1 is (lo>>44 | hi<<20) & M44 in one VPTERNLOGD for the OR and
//     the AND.
//   - The carry chain (ifma's CombineS) leaves out the last d0→d1 of
//     combine44 (ifma's Combine).
//
// Then the four streams of each block are summed (two VSHUFI64X2 and
// VPADDQ a limb) and carried: each stream left CombineS below 2^44 +
// 5·2^22, 2^44 and 2^42, so the sum is below 2^46 + 2^25, 2^46 and 2^44,
// and after the chain d0→d1, d1→d2, d2→d0 (times 5), d0→d1 its limbs are
// below 2^44, 2^44 + 1 and 2^42, combine44's bounds (packReduce44 relies
// on them).
//
// lanesIFMASCopy stores each row to q as it loads it (q's block l at
// q + l·stride, as p's) and absorbs the row from the register: the bytes
// hashed are the bytes copied, read once.
//
// The key words of r^16 and r^12 stay in ten registers and F's in five;
// those of r^8 and r^4 are broadcast quadword operands ({1to8}) of the
// multiplies. Full 512-bit memory operands were the cost: the first
// stream kernels took every key word but r^16's and r^12's that way, and
// the last step's eight-lane L_j (r^(4j-s) a lane, j = R-t) for every
// row, and ran markedly slower, though the emulator counts a few more
// instructions a byte for this form: the gain is in the operands, not
// the count. Eight-row steps (h' = (h + v1)·r^32 + ... + v8·r^4), fewer
// instructions a byte, ran slower: with one set of accumulators each
// takes a chain of 24 dependent multiplies, and with two the key no
// longer fits the registers. docs/perf/poly1305-generator.md has the figures.
//
// Each step prefetches, as lanesIFMA's do, as many bytes of the stream at
// pf as it absorbs (128 a row), in order, into all cache levels
// (PREFETCHT0; PREFETCHT1 measured the same).
var (
	rSBase, rSQBase = reg.R10, reg.R13 // the pair's block 0 in p and q
	rSPairs, rSRows = reg.R9, reg.RAX  // pairs left; rows of a block
	zKS             = [2][5]reg.VecPhysical{
		{reg.Z15, reg.Z16, reg.Z17, reg.Z18, reg.Z19}, // r^16
		{reg.Z20, reg.Z21, reg.Z22, reg.Z23, reg.Z24}, // r^12
	}
	zF = [5]reg.VecPhysical{reg.Z27, reg.Z28, reg.Z29, reg.Z30, reg.Z31} // F
)

// keyS44 is the key of r^(4e), e = 1..4: registers for r^16 and r^12,
// broadcast quadwords of the key for r^8 and r^4; or of the last step's
// factor F (e = 0), its registers.
func keyS44(e int) ifma.Key {
	switch {
	case e == 0:
		return ifma.Key{Word: func(w int) operand.Op { return zF[w] }}
	case e >= 3:
		return ifma.Key{Word: func(w int) operand.Op { return zKS[4-e][w] }}
	}
	return ifma.Key{Word: func(w int) operand.Op { return mem(rKey, 8*(ifma.KeyB+5*(e-1)+w)) }, Bcst: true}
}

// rowS44 loads row t of the pair's two blocks (and with copying stores
// them to q), prefetches its 128 bytes of the stream, and calls use with
// each limb of chunk-vector t in zL, as split44 does.
func (g *gen) rowS44(t int, use func(i int)) {
	c := g.c
	c.VMOVDQU64(mem(rP, 64*t), zA)
	c.VMOVDQU64(operand.Mem{Base: rP, Index: rS, Scale: 1, Disp: 64 * t}, zB)
	if g.copying {
		c.VMOVDQU64(zA, mem(rCq, 64*t))
		c.VMOVDQU64(zB, operand.Mem{Base: rCq, Index: rS, Scale: 1, Disp: 64 * t})
	}
	c.PREFETCHT0(mem(rPf44, 128*t))
	c.PREFETCHT0(mem(rPf44, 128*t+64))
	g.a.Limbs(zA, zB, use)
}

// stepS44 emits a step over the next R rows of the pair. An ordinary
// step (R = 4) takes row t times r^(4(4-t)). The last (last, R = 1..4)
// takes the bracket, row t times r^(4(R-1-t)) (row R-1 added, times 1),
// carries it and multiplies it by F, lane 2s+b r^(4-s), and carries again.
// Each starts its accumulators from its pad bits' part and takes the
// products of rows 1..R-1 first, then h + row 0; then it moves the
// pointers on.
func (g *gen) stepS44(rows int, last bool) {
	c := g.c
	g.a.Step(rows, last, false, g.rowS44)
	c.ADDQ(operand.U32(64*rows), rP)
	if g.copying {
		c.ADDQ(operand.U32(64*rows), rCq)
	}
	c.ADDQ(operand.U32(128*rows), rPf44)
}

// sumS44 sums the four streams of each block of the pair into lanes 0
// and 1, carries them, and stores them to h's words of the pair.
func (g *gen) sumS44() {
	g.c.Comment("Sum the four streams of each block (lanes b, 2+b, 4+b, 6+b), carry.")
	g.a.SumStreams(func(k int) operand.Mem { return mem(rH, 64*k) })
}

func (g *gen) lanesIFMAS(name string, consts operand.Mem, cp bool) {
	c := g.c
	c.Function(name)
	c.Attributes(attr.NOSPLIT)
	c.Signature(lanesIFMASSig(cp))
	if cp {
		c.Load(c.Param("q"), rSQBase)
	}
	c.Load(c.Param("pf"), rPf44)
	c.Load(c.Param("h"), rH)
	c.Load(c.Param("p").Base(), rSBase)
	c.Load(c.Param("stride"), rS)
	c.Load(c.Param("chunks"), rSRows)
	c.Load(c.Param("key"), rKey)
	c.SHRQ(operand.U8(2), rSRows)
	c.JZ(operand.LabelRef("doneS"))
	c.VPBROADCASTQ(consts, zM44)
	c.VPBROADCASTQ(consts.Offset(8), zM42)
	c.Comment("The key words of r^16 and r^12, broadcast, and of F.")
	for j, pw := range []int{3, 2} {
		for w := 0; w < 5; w++ {
			c.VPBROADCASTQ(mem(rKey, 8*(ifma.KeyB+5*pw+w)), zKS[j][w])
		}
	}
	for w := 0; w < 5; w++ {
		c.VMOVDQU64(mem(rKey, 8*(ifma.KeyF+8*w)), zF[w])
	}
	c.MOVQ(operand.U32(lanes44/2), rSPairs)

	c.Label("pairS")
	c.Comment("A pair: blocks b = 0, 1 at p + b*stride; h seeds stream 0.")
	c.MOVQ(rSBase, rP)
	if cp {
		c.MOVQ(rSQBase, rCq)
	}
	c.MOVQ(rSRows, rN)
	for k := 0; k < 3; k++ {
		c.VMOVDQU(mem(rH, 64*k), xmm(zH[k]))
	}
	c.CMPQ(rN, operand.U32(5))
	c.JB(operand.LabelRef("lastS"))
	c.Label("quadS")
	g.copying = cp
	g.stepS44(4, false)
	c.SUBQ(operand.U32(4), rN)
	c.CMPQ(rN, operand.U32(5))
	c.JAE(operand.LabelRef("quadS"))

	c.Label("lastS")
	c.Comment("The last 1..4 rows, then stream s times r^(4-s).")
	c.CMPQ(rN, operand.U32(2))
	c.JB(operand.LabelRef("last1S"))
	c.JZ(operand.LabelRef("last2S"))
	c.CMPQ(rN, operand.U32(3))
	c.JZ(operand.LabelRef("last3S"))
	for rows := 4; rows >= 1; rows-- {
		if rows < 4 {
			c.Label(fmt.Sprintf("last%dS", rows))
		}
		g.stepS44(rows, true)
		if rows > 1 {
			c.JMP(operand.LabelRef("sumS"))
		}
	}
	g.copying = false

	c.Label("sumS")
	g.sumS44()
	c.ADDQ(operand.U32(16), rH)
	c.LEAQ(operand.Mem{Base: rSBase, Index: rS, Scale: 2}, rSBase)
	if cp {
		c.LEAQ(operand.Mem{Base: rSQBase, Index: rS, Scale: 2}, rSQBase)
	}
	c.DECQ(rSPairs)
	c.JNZ(operand.LabelRef("pairS"))
	c.VZEROUPPER()

	c.Label("doneS")
	c.RET()
}
