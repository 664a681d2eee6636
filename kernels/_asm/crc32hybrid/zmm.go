package main

// The AVX-512 hybrid kernels: sixteen blocks in lockstep, c of them as CRC32
// instruction streams and 16-c folded with VPCLMULQDQ on ZMM registers, and
// the merge that turns sixteen segment registers into the register of their
// concatenation (Update cuts a long input into sixteen segments and runs
// them as blocks).
//
// Why this shape, from the port counts of Intel Golden Cove (Sapphire and
// Emerald Rapids) and AMD Zen 4. Folding 64 bytes costs two VPCLMULQDQ zmm,
// which issue only on port 5 (Intel; one a cycle) or the one multiplier pipe
// of Zen 4: 32 bytes a cycle is the multiplier's limit, and ISA-L's by16_10
// kernels run at it on large buffers. The CRC32 instruction runs on port 1
// (Intel) at one a cycle, 8 bytes, with a latency of 3 cycles, so one stream
// reads 8 bytes every 3 cycles and three streams fill the unit. Both units
// together: at most 40 bytes a cycle, 4/5 folded and 1/5 through CRC32.
//
// Per 64-byte step a fold block costs 2 VPCLMULQDQ (2 cycles of port 5) and
// a CRC block 8 CRC32Q (8 cycles of port 1, and 24 of latency on its own
// chain); after the last step a fold block's 64-byte accumulator is reduced
// by 8 CRC32Q (stored to the stack and read back, which costs no port 5 µop,
// where extracting lanes would), so port 1 also carries 8 CRC32Q per fold
// block per block, not per step. For a block of S steps:
//
//	port 5: 2·S·f        port 1: 8·S·c + 8·f        CRC chain: 24·S
//
// With f = 16-c, counting ports 5 and 1 alone, c = 3 would balance them
// for long blocks (S = 64, 4 KiB: 1664 against 1640 cycles, 39 bytes a
// cycle) and c = 1 for short ones (S = 8: 34 bytes a cycle). VPTERNLOGD
// goes to port 0, beside both: on Emerald Rapids a loop of 8 VPCLMULQDQ
// zmm, 4 VPTERNLOGD zmm and 8 CRC32Q runs in 8 cycles, so the split's bound
// is 40 bytes a cycle, 1.25x the fold's. With one chain a stream, c = 3
// measured slower than c = 2: three chains of 24 cycles a step fill port 1's
// 24 cycles with no slack. So a kernel with sub = 2 runs every CRC block as
// two chains (blocksZ), and unroll = 4 runs four steps a round (a quarter of
// the pointer updates and branches). Every split measures 31-34 bytes a
// cycle at 4 KiB whatever its port budget (docs/perf/crc32c-avx512.md has
// the figures and what else was tried); crc32c_hybridz_amd64.go picks
// c = 2 with two chains and four steps a round from 256 bytes, c = 1 below.
//
// The loop interleaves the CRC32Q of the CRC blocks with the folds, as the
// YMM kernels do, so that the scheduler sees both kinds in every window.
//
// Measured on Emerald Rapids (docs/perf/crc32c-avx512.md), the kernels run
// at 70-93 GB/s on blocks in L2 whose 64-byte loads are aligned, and at
// 52-62 GB/s where every load spans two lines (a stride of 520 or 4104, or
// a buffer 8 bytes off a line); blocks in L1 lose only a few per cent so.
// Software prefetching (the next group, or 256-1024 bytes ahead in every
// block) did not recover it and cost 15% on aligned blocks, so there is
// none.

import (
	"fmt"

	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
	"github.com/difctl/difctl/kernels/_asm/internal/zmmcrc"
)

// zBlocks is the number of blocks of a group of the AVX-512 kernels.
const zBlocks = 16

// A zVariant is an AVX-512 blocks kernel: g blocks a group, c of them
// CRC32 streams, each as sub independent chains (1 or 2), the loop
// unrolled to unroll steps a round.
type zVariant struct{ g, c, sub, unroll int }

// zVariants are the generated AVX-512 blocks kernels.
// (Groups of 8 blocks measured no faster than 16 at any layout, and slower
// with CRC32 blocks, whose share is then coarse.)
var zVariants = []zVariant{{16, 0, 1, 1}, {16, 1, 1, 1}, {16, 2, 1, 1}, {16, 3, 1, 1}, {16, 3, 2, 1},
	{16, 2, 1, 4}, {16, 2, 2, 4}, {16, 3, 2, 4}, {16, 0, 1, 4}, {16, 3, 1, 4}, {16, 4, 1, 4}, {16, 5, 1, 4}}

// zName is the name of the AVX-512 blocks kernel v.
func zName(v zVariant) string {
	n := fmt.Sprintf("hybridBlocksZ%d", v.c)
	if v.sub == 2 {
		n += "S"
	}
	if v.unroll > 1 {
		n += fmt.Sprintf("U%d", v.unroll)
	}

	return n
}

// zAddr returns the address of block k at disp from the bases (one every
// three blocks, with the stride as index).
func zAddr(bases []reg.GPVirtual, stride reg.Register, k, disp int) operand.Mem {
	m := operand.Mem{Base: bases[k/3], Disp: disp}
	if k%3 != 0 {
		m.Index = stride
		m.Scale = uint8(k % 3)
	}
	return m
}

// blocksZ generates the AVX-512 blocks kernel v.
//
// With v.sub = 2 every CRC block runs as two chains: A over the first
// D = 32·(blockLen/64) bytes of the block from the initial register, B
// over the next D from zero, 32 bytes of each a step (four CRC32Q), so
// that a step of a CRC block is two chains of 12 cycles of latency
// rather than one of 24 and the CRC32 unit can take three CRC blocks
// without the chains' latency setting the pace. The register after A‖B is
// r_A·x^(8D) ⊕ r_B: as in short3 (main.go), V = r_A·k with k = C(8D-64)
// (a parameter, crcmath.C), and two CRC32Q of V's quadwords from zero give
// r_A·x^(8D).
func blocksZ(v zVariant) {
	c, zBlocks, sub := v.c, v.g, v.sub
	f := zBlocks - c
	name := zName(v)
	// Not NOSPLIT: the frame holds the sixteen accumulators.
	ctx.Function(name)
	sig := "func(dst *uint32, p *byte, groups, blockLen, stride int, init, xorout uint32, fold *[2]uint64)"
	if sub == 2 {
		sig = "func(dst *uint32, p *byte, groups, blockLen, stride int, init, xorout uint32, fold *[2]uint64, k uint64)"
	}
	ctx.SignatureExpr(sig)
	ctx.Pragma("noescape")
	doc := []string{
		name + " sets dst[i] to the CRC-32C register of the block of blockLen",
		"bytes at p[i·stride:], from the register init, XORed with xorout, for",
		fmt.Sprintf("i < %d·groups, %d blocks at a time: the first %d as CRC32 instruction", zBlocks, zBlocks, c),
		fmt.Sprintf("streams, the other %d folded with VPCLMULQDQ on ZMM registers (64", f),
		"bytes a step), their accumulators reduced by CRC32Q; the last blockLen",
		"mod 64 bytes of every block by CRC32. Blocks passes init = xorout =",
		"0xffffffff (finalised CRCs), Update's segments 0 and 0 (registers).",
		"Needs SSE4.2, AVX512F and VPCLMULQDQ.",
	}
	if sub == 2 {
		doc = append(doc, "", "Every CRC32 stream runs as two chains over the halves of the block's",
			"first 64·(blockLen/64) bytes, merged with k = C(256·(blockLen/64) - 64)",
			"(kernels/_asm/crc32hybrid, zmm.go).")
	}
	doc = append(doc, "",
		"Preconditions: groups >= 1, blockLen >= 64, stride >= blockLen;",
		"fold = &foldTable.Fold[4].")
	if c > 3 && sub == 2 {
		panic("blocksZ: two chains need the CRC blocks addressed from one base")
	}
	ctx.Doc(doc...)
	// The accumulators go to a 64-byte aligned area of the frame after the
	// loop, all before any is read back, so that the loads that cannot take
	// their bytes from a 64-byte store wait for the stores once, not once
	// per block; the group's p is kept after them (the loop of the
	// two-chain kernels needs every register).
	frame := ctx.AllocLocal(64*zBlocks + 64 + 8)
	pSave := frame.Offset(64*zBlocks + 64)
	fp := ctx.Load(ctx.Param("fold"), ctx.GP64())
	kf := ctx.ZMM()
	ctx.VBROADCASTI32X4(operand.Mem{Base: fp}, kf)
	ctx.Comment("The initial register in the first 32 bits of a vector, for the fold blocks.")
	init32 := ctx.Load(ctx.Param("init"), ctx.GP32())
	initv := ctx.XMM()
	ctx.VMOVD(init32, initv)
	p := ctx.Load(ctx.Param("p"), ctx.GP64())

	ctx.Label(name + "_group")
	ctx.MOVQ(p, pSave)
	stride := ctx.Load(ctx.Param("stride"), ctx.GP64())
	s3 := ctx.GP64()
	ctx.LEAQ(operand.Mem{Base: stride, Index: stride, Scale: 2}, s3)
	// bases[i] = p + 3i·stride, for the blocks 3i..3i+2; with two chains
	// the CRC blocks have their own (ca, cb), and bases[0] is needed only
	// if it holds a fold block.
	bases := make([]reg.GPVirtual, (zBlocks+2)/3)
	first := 0
	if sub == 2 && c >= 3 {
		first = 1
	}
	var ca, cb reg.GPVirtual
	if sub == 2 {
		ca = ctx.GP64()
		ctx.MOVQ(p, ca)
	}
	for i := range bases {
		if i < first {
			continue
		}
		bases[i] = ctx.GP64()
		switch {
		case i == 0:
			ctx.MOVQ(p, bases[0])
		case i == first:
			ctx.LEAQ(operand.Mem{Base: p, Index: s3, Scale: 1}, bases[i])
		default:
			ctx.LEAQ(operand.Mem{Base: bases[i-1], Index: s3, Scale: 1}, bases[i])
		}
	}
	bases = bases[first:]
	addr := func(k, disp int) operand.Mem { return zAddr(bases, stride, k-3*first, disp) }
	crcs := make([]reg.GPVirtual, c)
	for i := range crcs {
		crcs[i] = ctx.GP64()
		ctx.Load(ctx.Param("init"), crcs[i].As32())
	}
	var crcsB []reg.GPVirtual
	iter := ctx.GP64()
	ctx.Load(ctx.Param("blockLen"), iter)
	ctx.SHRQ(operand.U8(6), iter)
	if sub == 2 {
		ctx.Comment("Chain B of every CRC block from zero, at D = 32·(blockLen/64).")
		cb = ctx.GP64()
		ctx.MOVQ(iter, cb)
		ctx.SHLQ(operand.U8(5), cb)
		ctx.ADDQ(ca, cb)
		crcsB = make([]reg.GPVirtual, c)
		for i := range crcsB {
			crcsB[i] = ctx.GP64()
			ctx.XORL(crcsB[i].As32(), crcsB[i].As32())
		}
	}
	// chainAddr is the address of CRC block i at disp from the base b.
	chainAddr := func(b reg.Register, i, disp int) operand.Mem {
		m := operand.Mem{Base: b, Disp: disp}
		if i > 0 {
			m.Index, m.Scale = stride, uint8(i)
		}
		return m
	}

	ctx.Comment("The first 64 bytes of every fold block, the initial register in the first.")
	acc := make([]reg.VecVirtual, f)
	for i := range acc {
		acc[i] = ctx.ZMM()
		ctx.VMOVDQU64(addr(c+i, 0), acc[i])
		ctx.VPXORQ(initv.AsZ(), acc[i], acc[i])
	}
	// crcStep emits eighth q of the step s steps on from the bases.
	crcStep := func(q, s int) {
		if sub == 2 {
			// Eighth q of the step: 8 bytes of chain A (q even) or B.
			rs, b := crcs, ca
			if q%2 == 1 {
				rs, b = crcsB, cb
			}
			for i, r := range rs {
				ctx.CRC32Q(chainAddr(b, i, 32*s+8*(q/2)), r)
			}
			return
		}
		for i, r := range crcs {
			ctx.CRC32Q(addr(i, 64*s+8*q), r)
		}
	}
	t := ctx.ZMM()
	// step emits the step s steps on from the bases.
	step := func(s int) {
		for q := 0; q < 8; q++ {
			crcStep(q, s)
			// Fold blocks q, q+8 in this eighth of the step.
			for i := q; i < f; i += 8 {
				ctx.VPCLMULQDQ(operand.U8(0x00), kf, acc[i], t)
				ctx.VPCLMULQDQ(operand.U8(0x11), kf, acc[i], acc[i])
				ctx.VPTERNLOGD(operand.U8(0x96), addr(c+i, 64*s+64), t, acc[i])
			}
		}
	}
	advance := func(steps int) {
		for _, b := range bases {
			ctx.ADDQ(operand.U32(64*steps), b)
		}
		if sub == 2 {
			ctx.ADDQ(operand.U32(32*steps), ca)
			ctx.ADDQ(operand.U32(32*steps), cb)
		}
	}
	ctx.Comment("Every step: 64 bytes of each CRC block (8 CRC32Q), and each fold",
		"accumulator folded forward by 64 bytes onto the next 64 of its block.")
	ctx.DECQ(iter)
	ctx.JZ(operand.LabelRef(name + "_last"))
	if u := v.unroll; u > 1 {
		ctx.Comment(fmt.Sprintf("%d steps a round while %d remain, then one a round.", u, u))
		ctx.CMPQ(iter, operand.U8(u))
		ctx.JB(operand.LabelRef(name + "_loop"))
		ctx.Label(name + "_loopu")
		for s := 0; s < u; s++ {
			step(s)
		}
		advance(u)
		ctx.SUBQ(operand.U8(u), iter)
		ctx.CMPQ(iter, operand.U8(u))
		ctx.JAE(operand.LabelRef(name + "_loopu"))
		ctx.TESTQ(iter, iter)
		ctx.JZ(operand.LabelRef(name + "_last"))
	}
	ctx.Label(name + "_loop")
	step(0)
	advance(1)
	ctx.DECQ(iter)
	ctx.JNZ(operand.LabelRef(name + "_loop"))
	ctx.Label(name + "_last")
	ctx.Comment("Last step: the CRC blocks only.")
	for q := 0; q < 8; q++ {
		crcStep(q, 0)
	}
	if sub == 2 {
		(&chains{ra: crcs, rb: crcsB}).merge()
	}

	ctx.Comment("Every block in turn: reduce a fold accumulator (its 64 bytes through",
		"CRC32Q from zero, read back from the stack), add the block's last",
		"blockLen mod 64 bytes, XOR xorout, store.")
	ctx.MOVQ(pSave, p)
	tl := ctx.GP64()
	ctx.Load(ctx.Param("blockLen"), tl)
	q := ctx.GP64()
	ctx.MOVQ(tl, q)
	ctx.ANDQ(operand.I32(-64), q)
	ctx.ADDQ(p, q) // q: block 0's tail
	ctx.ANDQ(operand.U8(63), tl)
	sp := ctx.GP64()
	ctx.LEAQ(frame.Offset(63), sp)
	ctx.ANDQ(operand.I32(-64), sp)
	for i, a := range acc {
		ctx.VMOVDQA64(a, operand.Mem{Base: sp, Disp: 64 * i})
	}
	dst := ctx.Load(ctx.Param("dst"), ctx.GP64())
	for k := 0; k < zBlocks; k++ {
		var r reg.GPVirtual
		if k < c {
			r = crcs[k]
		} else {
			r = ctx.GP64()
			ctx.XORL(r.As32(), r.As32())
			for j := 0; j < 8; j++ {
				ctx.CRC32Q(operand.Mem{Base: sp, Disp: 64*(k-c) + 8*j}, r)
			}
		}
		tailZ(fmt.Sprintf("%s_b%d", name, k), r, q, tl)
		ctx.XORL(scaffold.ParamAddr(ctx, "xorout"), r.As32())
		ctx.MOVL(r.As32(), operand.Mem{Base: dst, Disp: 4 * k})
		if k < zBlocks-1 {
			ctx.ADDQ(stride, q)
		}
	}
	ctx.ADDQ(operand.U8(4*zBlocks), dst)
	ctx.Store(dst, ctx.Param("dst"))
	// q = p + (blockLen &^ 63) + 15·stride: p += 16·stride.
	ctx.LEAQ(operand.Mem{Base: q, Index: stride, Scale: 1}, p)
	blen := ctx.Load(ctx.Param("blockLen"), ctx.GP64())
	ctx.ANDQ(operand.I32(-64), blen)
	ctx.SUBQ(blen, p)
	ctx.DECQ(scaffold.ParamAddr(ctx, "groups"))
	ctx.JNZ(operand.LabelRef(name + "_group"))
	ctx.VZEROUPPER()
	ctx.RET()
}

// tailZ runs the n < 64 bytes at q through the register r: CRC32Q, L, W, B
// by the bits of n; q is left as it was.
func tailZ(prefix string, r, q, n reg.GPVirtual) {
	ctx.TESTQ(n, n)
	ctx.JZ(operand.LabelRef(prefix + "_done"))
	a := ctx.GP64()
	ctx.MOVQ(q, a)
	for _, w := range []int{32, 16, 8, 4, 2, 1} {
		skip := fmt.Sprintf("%s_%d", prefix, w)
		ctx.TESTQ(operand.U32(w), n)
		ctx.JZ(operand.LabelRef(skip))
		switch {
		case w >= 8:
			for o := 0; o < w; o += 8 {
				ctx.CRC32Q(operand.Mem{Base: a, Disp: o}, r)
			}
		case w == 4:
			ctx.CRC32L(operand.Mem{Base: a}, r.As32())
		case w == 2:
			ctx.CRC32W(operand.Mem{Base: a}, r.As32())
		default:
			ctx.CRC32B(operand.Mem{Base: a}, r.As32())
		}
		if w > 1 {
			ctx.ADDQ(operand.U8(w), a)
		}
		ctx.Label(skip)
	}
	ctx.Label(prefix + "_done")
}

// mergeZ generates hybridMergeZ, which merges the registers of a
// sixteen-segment chunk (see kernels/_asm/crcgen, hybrid.go): regs[0] is
// the register before the chunk and regs[1..] those of its segments but the
// last, each from zero; k[i] = C(8·D_i - 64) for the D_i bytes that follow
// the part of regs[i] (zero for unused slots). V = Σ regs[i]·k[i], each
// register in the low 32 bits of a quadword, is a 16-byte message with
// V·x^32 ≡ Σ regs[i]·x^(8·D_i) (mod P): two CRC32Q of V from zero, and the
// last segment's register added, give the register after the chunk.
func mergeZ() {
	text("hybridMergeZ", "func(regs *[16]uint32, last uint32, k *[16]uint64) uint32")
	ctx.Pragma("noescape")
	ctx.Doc("hybridMergeZ returns the register after a chunk of segments from the",
		"registers regs (the one before the chunk, then the segments' but the",
		"last, from zero), the last segment's register last and the chunk's",
		"row k of hybridKZ (kernels/_asm/crc32hybrid, zmm.go); needs SSE4.2,",
		"AVX512F and VPCLMULQDQ.")
	rp := ctx.Load(ctx.Param("regs"), ctx.GP64())
	kp := ctx.Load(ctx.Param("k"), ctx.GP64())
	var sum reg.VecVirtual
	for h := 0; h < 2; h++ {
		x, a, b := ctx.ZMM(), ctx.ZMM(), ctx.ZMM()
		ctx.VPMOVZXDQ(operand.Mem{Base: rp, Disp: 32 * h}, x)
		ctx.VPCLMULQDQ(operand.U8(0x00), operand.Mem{Base: kp, Disp: 64 * h}, x, a)
		ctx.VPCLMULQDQ(operand.U8(0x11), operand.Mem{Base: kp, Disp: 64 * h}, x, b)
		if sum == nil {
			ctx.VPXORQ(a, b, a)
			sum = a
		} else {
			ctx.VPTERNLOGD(operand.U8(0x96), a, b, sum)
		}
	}
	hi := ctx.YMM()
	ctx.VEXTRACTI64X4(operand.U8(1), sum, hi)
	ctx.VPXOR(hi, sum.AsY(), hi)
	h2 := ctx.XMM()
	ctx.VEXTRACTI128(operand.U8(1), hi, h2)
	ctx.VPXOR(h2, hi.AsX(), h2)
	out, t := ctx.GP64(), ctx.GP64()
	zmmcrc.LaneCRC32(ctx, h2, out, t)
	ctx.XORL(scaffold.ParamAddr(ctx, "last"), out.As32())
	ctx.VZEROUPPER()
	ctx.Store(out.As32(), ctx.ReturnIndex(0))
	ctx.RET()
}
