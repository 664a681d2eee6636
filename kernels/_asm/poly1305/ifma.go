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

// The IFMA kernels' layout (kernels/_asm/internal/ifma documents the
// arithmetic and the key table, poly1305's ifmaKey).
const (
	padBit44 = 1 << (128 - 88) // the pad bit 2^128 in limb 2, 128 = 88 + 40
	lanes44  = ifma.Lanes
	key44    = ifma.KeyWords // words of poly1305.ifmaKey
)

// The IFMA kernels' signatures: lanesIFMA(h *[24]uint64, p []byte,
// stride, chunks int, key *[420]uint64, pf uintptr), the arrays being
// poly1305.laneState44 and ifmaKey.
func lanesIFMASig() *gotypes.Signature {
	return scaffold.Signature(lanesIFMAParams(), nil)
}

// lanesIFMAParams is lanesIFMA's parameters.
func lanesIFMAParams() []*types.Var {
	u64 := types.Typ[types.Uint64]
	return []*types.Var{
		scaffold.Param("h", types.NewPointer(types.NewArray(u64, 3*lanes44))),
		scaffold.Param("p", scaffold.Bytes),
		scaffold.Param("stride", scaffold.Int),
		scaffold.Param("chunks", scaffold.Int),
		scaffold.Param("key", types.NewPointer(types.NewArray(u64, key44))),
		scaffold.Param("pf", types.Typ[types.Uintptr]),
	}
}

// The IFMA kernel (see poly1305_lanes44.go in kernels/poly1305 for the
// math): eight blocks, one per 64-bit lane of ZMM registers, three limbs of
// 44, 44 and 42 bits. Every product of a limb and a key word is a
// VPMADD52LUQ into a lo accumulator and a VPMADD52HUQ into a hi one; the
// hi sums join the next limb up shifted left by 8 (weight 2^52 = 2^8·2^44),
// the top one limb 0 times 5120 (2^140 ≡ 5·2^10 mod 2^130-5). Four chunks
// per step, h' = (h + m1)·r^4 + m2·r^3 + m3·r^2 + m4·r, so that one carry
// chain serves four chunks (two per step measured slower, see
// docs/perf/poly1305-generator.md);
// two or three chunks left take one step (h + m1)·r^2 + m2·r, an odd last
// one (h + m)·r. The key words r0, r1, r2, 20·r1, 20·r2 of r and r^2 stay
// in ten registers, broadcast once; those of r^3 and r^4 are memory
// operands, eight-lane vectors in the key (there are not registers for
// twenty). Block j of the eight is at p + j·stride, blocks 4..7 addressed
// from a second pointer p + 4·stride.

var (
	rQ = reg.R10 // block 4 at the current chunk

	zA, zB   = reg.Z0, reg.Z1 // gathers; carry temporaries
	zLo, zHi = reg.Z2, reg.Z3
	zL, zT   = reg.Z4, reg.Z5
	zH       = [3]reg.VecPhysical{reg.Z6, reg.Z7, reg.Z8}
	zDLo     = [3]reg.VecPhysical{reg.Z9, reg.Z10, reg.Z11}
	zDHi     = [3]reg.VecPhysical{reg.Z12, reg.Z13, reg.Z14}
	zKey     = [2][5]reg.VecPhysical{
		{reg.Z15, reg.Z16, reg.Z17, reg.Z18, reg.Z19}, // r: r0 r1 r2 s1 s2
		{reg.Z20, reg.Z21, reg.Z22, reg.Z23, reg.Z24}, // r^2
	}
	zM44, zM42, zPad = reg.Z25, reg.Z26, reg.Z27
)

// newIFMA is the IFMA kernels' arithmetic in c: their registers (zA the
// carries' times-5 temporary) and the stream kernels' key operands.
// combine44, in the generated docs and kernels/poly1305, is its Combine.
func (g *gen) newIFMA() *ifma.Arith {
	return &ifma.Arith{
		C: g.c, H: zH, DLo: zDLo, DHi: zDHi,
		Lo: zLo, Hi: zHi, L: zL, T: zT, T5: zA,
		M44: zM44, M42: zM42,
		KeyBase: rKey, Pow: keyS44,
	}
}

// block8 is byte disp of block j of eight at the current chunk.
func block8(j, disp int) operand.Mem {
	switch {
	case j < 4:
		return block(j, disp)
	case j == 7:
		return operand.Mem{Base: rP3, Index: rS, Scale: 4, Disp: disp}
	}
	m := block(j-4, disp)
	m.Base = rQ
	return m
}

// split44 gathers the chunk at disp of the eight blocks and calls use with
// each radix-2^44 limb in zL, in order 0..2.
//
// The gathers are a large part of the kernel's time (with their inserts
// left out, wrong, for timing only, Blocks ran markedly faster). Two
// alternatives passed the emulator and the package tests and were not
// kept: a four-chunk step that loaded 64 bytes of each block into a
// register and transposed the 8x8 quadwords (VPUNPCKLQDQ/HQDQ of each pair
// of blocks, then two rounds of VSHUFI64X2: 24 shuffles for four chunks
// against 32 here, and 8 loads against 24; nine registers, with M42 and
// the pad bit taken from memory) ran level with this one; a copying
// kernel built on it (lanesIFMACopy: each row stored to q as loaded, and
// absorbed from the register) gained only with the source in the L2 cache
// at 512-byte blocks, and lost at 4 KiB, where eight rows 4 KiB apart and
// their copies share an L1 set. The stream kernels (lanesIFMAS) are the
// layout without gathers, for blocks of whole 64-byte rows; this one is
// left for the associated data and blocks of other lengths.
// docs/perf/poly1305-generator.md has the figures.
func (g *gen) split44(disp int, use func(i int)) {
	c := g.c
	c.VMOVDQU(block8(0, disp), xmm(zA))
	c.VMOVDQU(block8(1, disp), xmm(zB))
	for l := 1; l < 4; l++ {
		c.VINSERTI32X4(operand.U8(l), block8(2*l, disp), zA, zA)
		c.VINSERTI32X4(operand.U8(l), block8(2*l+1, disp), zB, zB)
	}
	c.VPUNPCKHQDQ(zB, zA, zHi) // hi words of blocks 0..7
	c.VPUNPCKLQDQ(zB, zA, zLo) // lo words
	c.VPANDQ(zM44, zLo, zL)
	use(0)
	c.VPSRLQ(operand.U8(44), zLo, zL)
	c.VPSLLQ(operand.U8(20), zHi, zT)
	c.VPORQ(zT, zL, zL)
	c.VPANDQ(zM44, zL, zL)
	use(1)
	c.VPSRLQ(operand.U8(24), zHi, zL)
	c.VPORQ(zPad, zL, zL)
	use(2)
}

// keyIFMA is the key of r^(j+1): the words of r and r^2 in their
// registers, those of r^3 and r^4 memory operands, their eight-lane
// vectors in the key.
func keyIFMA(j int) ifma.Key {
	return ifma.Key{Word: func(w int) operand.Op {
		if j < 2 {
			return zKey[j][w]
		}
		return mem(rKey, 8*(ifma.KeyVec+40*(j-2)+8*w))
	}}
}

// step44 emits one step over the next k (4, 2 or 1) chunks of the eight
// blocks, m1..mk: h = (h + m1)·r^k + m2·r^(k-1) + ... + mk·r, the products
// of m2..mk first (they do not depend on h), then the carry chain; then it
// moves the block pointers on by 16k bytes and counts k chunks off rN.
//
// Each accumulator takes twelve dependent VPMADD52s a four-chunk step
// (four cycles each on Intel cores). Two sets of accumulators, m4·r and
// (h + m1)·r^4 in one and m3·r^2 and m2·r^3 in the other, added before the
// carries (r^2 taken from memory, for the registers), halve those chains,
// but measured slower (docs/perf/poly1305-generator.md), so
// there is one set.
func (g *gen) step44(k int) {
	c := g.c
	g.a.ZeroAcc()
	if k > 1 {
		c.Comment(fmt.Sprintf("m2..m%d times r^%d..r: independent of h.", k, k-1))
	}
	for m := k - 1; m >= 1; m-- {
		g.split44(16*m, func(i int) { g.a.Madd(zL, i, keyIFMA(k-1-m)) })
		g.prefetch44(k, k-1-m)
	}
	c.Comment(fmt.Sprintf("h += m1; (h + m1)·r^%d.", k))
	g.split44(0, func(i int) { c.VPADDQ(zL, zH[i], zH[i]) })
	g.prefetch44(k, k-1)
	for i := 0; i < 3; i++ {
		g.a.Madd(zH[i], i, keyIFMA(k-1))
	}
	g.a.Combine()
	for _, r := range []reg.Register{rP, rQ, rP3} {
		c.ADDQ(operand.U32(16*k), r)
	}
	if g.pf && k == 4 {
		c.ADDQ(operand.U32(pfStep44), rPf44)
	}
	c.SUBQ(operand.U32(k), rN)
}

// prefetch44 emits, in lanesIFMA's four-chunk steps, the
// prefetches of the step's quarter q of its pfStep44 bytes: after each of
// the step's four gathers, two PREFETCHT1, and the stream's pointer moved
// on at the step's end. A stream as long as the chunks of the eight
// blocks, one sequential run where the blocks lie side by side
// (blockdev's data), so the hardware prefetcher need not follow eight
// interleaved streams. poly1305.groupsIFMA points it at the blocks it will
// pass next, so that the hash's arithmetic covers the memory's latency;
// PREFETCHT1 rather than T0 because at 4 KiB blocks a
// group ahead is 32 KiB, the L1 cache (T0 measured slower there, see
// docs/perf/poly1305-generator.md). Shorter steps do not prefetch: at
// most three chunks of a call.
func (g *gen) prefetch44(k, q int) {
	if !g.pf || k != 4 {
		return
	}
	for off := q * pfStep44 / 4; off < (q+1)*pfStep44/4; off += 64 {
		g.c.PREFETCHT1(mem(rPf44, off))
	}
}

// pfStep44 is the bytes lanesIFMA prefetches per four-chunk step:
// those the step absorbs, 64 of each of eight blocks.
const pfStep44 = 64 * lanes44

var rPf44 = reg.R11

func (g *gen) lanesIFMA(name string, consts operand.Mem) {
	c := g.c
	g.pf = true
	defer func() { g.pf = false }()
	c.Function(name)
	c.Attributes(attr.NOSPLIT)
	c.Signature(lanesIFMASig())
	c.Load(c.Param("pf"), rPf44)
	c.Load(c.Param("h"), rH)
	c.Load(c.Param("p").Base(), rP)
	c.Load(c.Param("stride"), rS)
	c.Load(c.Param("chunks"), rN)
	c.Load(c.Param("key"), rKey)
	c.Comment("Block j starts at p + j*stride; blocks 3 and 7 from p + 3*stride,")
	c.Comment("4..6 from p + 4*stride.")
	c.LEAQ(operand.Mem{Base: rS, Index: rS, Scale: 2}, rP3)
	c.ADDQ(rP, rP3)
	c.LEAQ(operand.Mem{Base: rP, Index: rS, Scale: 4}, rQ)
	c.VPBROADCASTQ(consts, zM44)
	c.VPBROADCASTQ(consts.Offset(8), zM42)
	c.VPBROADCASTQ(consts.Offset(16), zPad)
	c.Comment("The key words of r and r^2 in every lane.")
	for j := 0; j < 2; j++ {
		for w := 0; w < 5; w++ {
			c.VPBROADCASTQ(mem(rKey, 8*(5*j+w)), zKey[j][w])
		}
	}
	for k := 0; k < 3; k++ {
		c.VMOVDQU64(mem(rH, 64*k), zH[k])
	}
	c.CMPQ(rN, operand.U32(4))
	c.JB(operand.LabelRef("pair44"))

	c.Label("quad44")
	g.step44(4)
	c.CMPQ(rN, operand.U32(4))
	c.JAE(operand.LabelRef("quad44"))

	c.Label("pair44")
	c.CMPQ(rN, operand.U32(2))
	c.JB(operand.LabelRef("single44"))
	c.Comment("Two or three chunks left.")
	g.step44(2)

	c.Label("single44")
	c.TESTQ(rN, rN)
	c.JZ(operand.LabelRef("done44"))
	c.Comment("One chunk left.")
	g.step44(1)

	c.Label("done44")
	for k := 0; k < 3; k++ {
		c.VMOVDQU64(zH[k], mem(rH, 64*k))
	}
	c.VZEROUPPER()
	c.RET()
}
