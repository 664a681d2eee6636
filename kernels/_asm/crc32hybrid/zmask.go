package main

// hybridBlocksZMS<mis>: the sixteen-block fold kernels for blocks off a
// cache line, at a stride of mis (mod 64) from a buffer on a line (520 and
// 4104, the DIF layouts with 8 bytes of metadata, are mis = 8), whose loads
// all lie within a line.
//
// Block k starts o_k = mis·k mod 64 bytes into a line. The kernel folds the
// block as the message of o_k zero bytes followed by the block's first
// blockLen - o_k bytes: blockLen/64 whole lines from the line that holds the
// block's start, the first of them with its o_k bytes before the block
// cleared (an AND with the 64 bytes of the mask table zmMask at 64 - o_k:
// o_k zero bytes, then ones). From a zero register, leading zero bytes leave
// the register zero, so the lines fold to the register of the block's first
// blockLen - o_k bytes from zero; the reduction and the last o_k bytes
// through CRC32 give R(0, block), the register of the whole block from zero.
// The register from the initial one is R(init, block) = init·x^(8·blockLen)
// ⊕ R(0, block), so the caller passes, as xorout, init·x^(8·blockLen) mod P
// ⊕ its xorout: for the CRC-32C of the block (init = xorout = all ones) that
// is the CRC-32C of blockLen zero bytes. The first line of a block may hold
// bytes before the block, in the same line and so the same page: it never
// faults, and those bytes are cleared before use.
//
// Since mis is known here, every block's lines are addressed from the
// group's bases with a displacement of their own, and its mask and its tail
// of o_k bytes are fixed (straight CRC32 code, no branch). A kernel for any
// stride that kept every block's first line in a table on the frame (one
// pointer load a fold) and ran the tails by the bits of o_k measured 0.82-0.86
// of ISA-L at 512/520 (docs/perf/crc32c-avx512.md).
//
// The reduction is the fold kernels' (kernels/_asm/fold, collapseLanesMem)
// rather than zmm.go's 8 CRC32Q of the accumulator: every accumulator's
// lanes folded into its last (one VPCLMULQDQ pair with {Fold[3], Fold[2],
// Fold[1], 0}, the last lane added through a mask), stored, the four lanes
// summed as XMM memory operands, and two CRC32Q of the sum from zero. At 512
// bytes a block the 128 CRC32Q a group of zmm.go's reduction, a burst on
// port 1 after the loop, took about a third of the time.
//
// Per group of sixteen blocks of S lines: 2·16·(S+1) VPCLMULQDQ (port 5),
// and 2·16 + the tails' CRC32Q (port 1).

import (
	"fmt"

	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// zmUnroll is the steps a round of the kernels' loops.
const zmUnroll = 4

// zmMask declares the kernels' mask table: 64 zero bytes, then 64 bytes of
// ones; the 64 bytes at 64 - o clear bytes 0..o-1 of a line, those at 16
// keep lane 3 alone.
func zmMask() operand.Mem {
	m := ctx.StaticGlobal("zmMask")
	ctx.DataAttributes(attr.RODATA | attr.NOPTR)
	for i := 0; i < 128; i += 8 {
		var v uint64
		if i >= 64 {
			v = ^uint64(0)
		}
		ctx.AddDatum(i, operand.U64(v))
	}
	return m
}

// zmsMis are the strides (mod 64) of the generated hybridBlocksZMS kernels.
var zmsMis = []int{8, 16}

// blocksZMS generates hybridBlocksZMS<mis>.
func blocksZMS(mask operand.Mem, mis int) {
	const g = zBlocks
	name := fmt.Sprintf("hybridBlocksZMS%d", mis)
	ctx.Function(name)
	ctx.SignatureExpr("func(dst *uint32, p *byte, groups, blockLen, stride int, xorout uint32, fold *[2]uint64)")
	ctx.Pragma("noescape")
	ctx.Doc(
		name+" sets dst[i] to the CRC-32C register of the block of blockLen",
		"bytes at p[i·stride:] from zero, XORed with xorout, for i < 16·groups,",
		"sixteen blocks at a time, every block folded from the line that holds",
		"its start (the bytes before it cleared) with no load spanning two lines,",
		fmt.Sprintf("its last %d·i mod 64 bytes through CRC32 (kernels/_asm/crc32hybrid,", mis),
		"zmask.go). Needs SSE4.2, AVX512F and VPCLMULQDQ.",
		"",
		"Preconditions: groups >= 1, blockLen >= 64 a multiple of 64,",
		fmt.Sprintf("stride >= blockLen, stride = %d (mod 64), p = 0 (mod 64);", mis),
		"fold = &foldTable.Fold[4].",
	)
	if mis%8 != 0 {
		panic("blocksZMS: the tails run as CRC32Q alone")
	}
	o := func(k int) int { return mis * k % 64 }
	frame := ctx.AllocLocal(64*g + 64 + 8 + 16*g + 8)
	pSave := frame.Offset(64*g + 64)
	sums := frame.Offset(64*g + 64 + 8) // every block's lane sum (16 bytes each)
	fp := ctx.Load(ctx.Param("fold"), ctx.GP64())
	kf := ctx.ZMM()
	ctx.VBROADCASTI32X4(operand.Mem{Base: fp}, kf)
	p := ctx.Load(ctx.Param("p"), ctx.GP64())

	ctx.Label(name + "_group")
	ctx.MOVQ(p, pSave)
	stride := ctx.Load(ctx.Param("stride"), ctx.GP64())
	s3 := ctx.GP64()
	ctx.LEAQ(operand.Mem{Base: stride, Index: stride, Scale: 2}, s3)
	bases := make([]reg.GPVirtual, (g+2)/3)
	for i := range bases {
		bases[i] = ctx.GP64()
		if i == 0 {
			ctx.MOVQ(p, bases[0])
		} else {
			ctx.LEAQ(operand.Mem{Base: bases[i-1], Index: s3, Scale: 1}, bases[i])
		}
	}
	// line is the address of block k's line disp bytes on from the line
	// that holds its start.
	line := func(k, disp int) operand.Mem { return zAddr(bases, stride, k, disp-o(k)) }
	ctx.Comment("Every block's first line, its bytes before the block cleared.")
	acc := make([]reg.VecVirtual, g)
	for k := range acc {
		acc[k] = ctx.ZMM()
		if o(k) == 0 {
			ctx.VMOVDQU64(line(k, 0), acc[k])
			continue
		}
		ctx.VMOVDQU64(mask.Offset(64-o(k)), acc[k])
		// 0xa0: A & C, A the mask, C the line.
		ctx.VPTERNLOGD(operand.U8(0xa0), line(k, 0), acc[k], acc[k])
	}
	iter := ctx.GP64()
	ctx.Load(ctx.Param("blockLen"), iter)
	ctx.SHRQ(operand.U8(6), iter)
	t := ctx.ZMM()
	step := func(s int) {
		for k := range acc {
			ctx.VPCLMULQDQ(operand.U8(0x00), kf, acc[k], t)
			ctx.VPCLMULQDQ(operand.U8(0x11), kf, acc[k], acc[k])
			ctx.VPTERNLOGD(operand.U8(0x96), line(k, 64+64*s), t, acc[k])
		}
	}
	advance := func(steps int) {
		for _, b := range bases {
			ctx.ADDQ(operand.U32(64*steps), b)
		}
	}
	ctx.Comment("Every step: each accumulator folded forward by 64 bytes onto the",
		"next line of its block.")
	ctx.DECQ(iter)
	ctx.JZ(operand.LabelRef(name + "_last"))
	ctx.Comment(fmt.Sprintf("%d steps a round while %d remain, then one a round.", zmUnroll, zmUnroll))
	ctx.CMPQ(iter, operand.U8(zmUnroll))
	ctx.JB(operand.LabelRef(name + "_loop"))
	ctx.Label(name + "_loopu")
	for s := 0; s < zmUnroll; s++ {
		step(s)
	}
	advance(zmUnroll)
	ctx.SUBQ(operand.U8(zmUnroll), iter)
	ctx.CMPQ(iter, operand.U8(zmUnroll))
	ctx.JAE(operand.LabelRef(name + "_loopu"))
	ctx.TESTQ(iter, iter)
	ctx.JZ(operand.LabelRef(name + "_last"))
	ctx.Label(name + "_loop")
	step(0)
	advance(1)
	ctx.DECQ(iter)
	ctx.JNZ(operand.LabelRef(name + "_loop"))
	ctx.Label(name + "_last")

	ctx.Comment("Every accumulator's lanes folded into its last (lane l by Fold[3-l],",
		"the last lane added through the mask of lane 3), to a 64-byte aligned",
		"area; then every block in turn: its four lanes summed, two CRC32Q of",
		"the sum from zero, its last o_k bytes (the line after its last folded",
		"one), xorout.")
	kr := ctx.ZMM()
	fp = ctx.Load(ctx.Param("fold"), ctx.GP64())
	ctx.VMOVDQU64(operand.Mem{Base: fp, Disp: -64}, kr) // Fold[0..3], Fold[0] = 0
	ctx.VSHUFI64X2(operand.U8(0x1b), kr, kr, kr)        // {Fold[3], Fold[2], Fold[1], 0}
	ap := ctx.GP64()
	ctx.LEAQ(frame.Offset(63), ap)
	ctx.ANDQ(operand.I8(-64), ap)
	for k, x := range acc {
		w := ctx.ZMM()
		ctx.VPCLMULQDQ(operand.U8(0x00), kr, x, t)
		ctx.VPCLMULQDQ(operand.U8(0x11), kr, x, w)
		ctx.VPXORQ(t, w, w)
		// w ^= x & lane 3 (0x78: A ^ (B & C)); the 64 bytes of the mask
		// table at 16 are ones in lane 3 alone.
		ctx.VPTERNLOGD(operand.U8(0x78), mask.Offset(16), x, w)
		ctx.VMOVDQA64(w, operand.Mem{Base: ap, Disp: 64 * k})
	}
	dst := ctx.Load(ctx.Param("dst"), ctx.GP64())
	for k := 0; k < g; k++ {
		x, y := ctx.XMM(), ctx.XMM()
		ctx.VMOVDQA(operand.Mem{Base: ap, Disp: 64 * k}, x)
		ctx.VPXOR(operand.Mem{Base: ap, Disp: 64*k + 16}, x, x)
		ctx.VMOVDQA(operand.Mem{Base: ap, Disp: 64*k + 32}, y)
		ctx.VPTERNLOGD(operand.U8(0x96), operand.Mem{Base: ap, Disp: 64*k + 48}, y, x)
		ctx.VMOVDQU(x, sums.Offset(16*k))
		r := ctx.GP64()
		ctx.XORL(r.As32(), r.As32())
		ctx.CRC32Q(sums.Offset(16*k), r)
		ctx.CRC32Q(sums.Offset(16*k+8), r)
		// The bases have moved on by the steps after the first line.
		for d := 0; d < o(k); d += 8 {
			ctx.CRC32Q(line(k, 64+d), r)
		}
		ctx.XORL(paramAddr("xorout"), r.As32())
		ctx.MOVL(r.As32(), operand.Mem{Base: dst, Disp: 4 * k})
	}
	ctx.ADDQ(operand.U8(4*g), dst)
	ctx.Store(dst, ctx.Param("dst"))
	ctx.MOVQ(pSave, p)
	st := ctx.Load(ctx.Param("stride"), ctx.GP64())
	ctx.SHLQ(operand.U8(4), st)
	ctx.ADDQ(st, p) // p += 16·stride
	ctx.DECQ(paramAddr("groups"))
	ctx.JNZ(operand.LabelRef(name + "_group"))
	ctx.VZEROUPPER()
	ctx.RET()
}
