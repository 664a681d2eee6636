package main

// The AVX-512 blocks kernels for blocks off a cache line (hybridBlocksZA*):
// those of zmm.go, but every fold block first runs its head, the bytes up
// to its first 64-byte boundary, through CRC32 from the initial register,
// and folds from that boundary, so that no 64-byte load spans two lines;
// the lockstep covers S = (blockLen-63)/64 steps of every block, and each
// block's tail, the rest (under 128 bytes), goes through CRC32 after the
// reduction. The CRC32 blocks read where they start (an 8-byte load spans
// no line at a stride that is a multiple of 8).
//
// The heads and tails add about one step's bytes a block to the CRC32
// unit, which the split of zmm.go leaves partly idle on short blocks: a
// 512-byte block at a stride of 520 folds 448 bytes and runs 64 through
// CRC32 (12.5%, the best share by the port model of zmm.go). Each block's
// start is its own, so the blocks' positions are kept in a table on the
// frame and every fold reloads its block's pointer (a load, no ALU µop).

import (
	"fmt"

	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
)

// zaVariants are the numbers of CRC32 blocks of the generated kernels.
var zaVariants = []int{0, 1, 2}

func zaName(c int) string { return fmt.Sprintf("hybridBlocksZA%d", c) }

// crcRun runs the n bytes at a through the register r, n < 128 (CRC32Q
// while 8 remain, then 4, 2, 1); a and n are consumed.
func crcRun(prefix string, r, a, n reg.GPVirtual) {
	ctx.CMPQ(n, operand.U8(8))
	ctx.JB(operand.LabelRef(prefix + "_q"))
	ctx.Label(prefix + "_loop")
	ctx.CRC32Q(operand.Mem{Base: a}, r)
	ctx.ADDQ(operand.U8(8), a)
	ctx.SUBQ(operand.U8(8), n)
	ctx.CMPQ(n, operand.U8(8))
	ctx.JAE(operand.LabelRef(prefix + "_loop"))
	ctx.Label(prefix + "_q")
	for _, w := range []int{4, 2, 1} {
		skip := fmt.Sprintf("%s_%d", prefix, w)
		ctx.TESTQ(operand.U32(w), n)
		ctx.JZ(operand.LabelRef(skip))
		switch w {
		case 4:
			ctx.CRC32L(operand.Mem{Base: a}, r.As32())
		case 2:
			ctx.CRC32W(operand.Mem{Base: a}, r.As32())
		default:
			ctx.CRC32B(operand.Mem{Base: a}, r.As32())
		}
		if w > 1 {
			ctx.ADDQ(operand.U8(w), a)
		}
		ctx.Label(skip)
	}
}

func blocksZA(c int) {
	const g = zBlocks
	f := g - c
	name := zaName(c)
	ctx.Function(name)
	ctx.SignatureExpr("func(dst *uint32, p *byte, groups, blockLen, stride int, init, xorout uint32, fold *[2]uint64)")
	ctx.Pragma("noescape")
	ctx.Doc(
		name+" is "+zName(zVariant{g, c, 1, 1})+" for blocks off a cache line: every",
		"fold block's head, up to its first 64-byte boundary, and every block's",
		"tail beyond (blockLen-63)/64 steps go through CRC32, so that no fold",
		"load spans two lines (kernels/_asm/crc32hybrid, zalign.go).",
		"Needs SSE4.2, AVX512F and VPCLMULQDQ.",
		"",
		"Preconditions: groups >= 1, blockLen >= 128, stride >= blockLen;",
		"fold = &foldTable.Fold[4].",
	)
	frame := ctx.AllocLocal(64*g + 64 + 8*g + 8*g)
	ptrs := frame.Offset(64*g + 64)       // the fold (or CRC32) position of every block
	regs := frame.Offset(64*g + 64 + 8*g) // every block's register, 8 bytes each

	fp := ctx.Load(ctx.Param("fold"), ctx.GP64())
	kf := ctx.ZMM()
	ctx.VBROADCASTI32X4(operand.Mem{Base: fp}, kf)
	p := ctx.Load(ctx.Param("p"), ctx.GP64())

	ctx.Label(name + "_group")
	ctx.Comment("Heads: every block's position and register, the fold blocks'",
		"after their bytes up to a 64-byte boundary.")
	{
		kk, a := ctx.GP64(), ctx.GP64()
		ctx.XORL(kk.As32(), kk.As32())
		ctx.MOVQ(p, a)
		ctx.Label(name + "_head")
		r, h, pos := ctx.GP64(), ctx.GP64(), ctx.GP64()
		ctx.Load(ctx.Param("init"), r.As32())
		ctx.MOVQ(a, pos)
		ctx.CMPQ(kk, operand.U8(c))
		ctx.JB(operand.LabelRef(name + "_headdone"))
		ctx.ADDQ(operand.U8(63), pos)
		ctx.ANDQ(operand.I8(-64), pos)
		ctx.MOVQ(pos, h)
		ctx.SUBQ(a, h)
		t := ctx.GP64()
		ctx.MOVQ(a, t)
		crcRun(name+"_h", r, t, h)
		ctx.Label(name + "_headdone")
		ctx.MOVQ(pos, operand.Mem{Base: ptrs.Base, Disp: ptrs.Disp, Index: kk, Scale: 8})
		ctx.MOVQ(r, operand.Mem{Base: regs.Base, Disp: regs.Disp, Index: kk, Scale: 8})
		ctx.ADDQ(ctx.Load(ctx.Param("stride"), ctx.GP64()), a)
		ctx.INCQ(kk)
		ctx.CMPQ(kk, operand.U8(g))
		ctx.JB(operand.LabelRef(name + "_head"))
	}

	ctx.Comment("The CRC32 blocks' registers and positions; the first 64 bytes of",
		"every fold block from its boundary, its register in the first 32 bits.")
	crcs := make([]reg.GPVirtual, c)
	cps := make([]reg.GPVirtual, c)
	for i := range crcs {
		crcs[i], cps[i] = ctx.GP64(), ctx.GP64()
		ctx.MOVQ(regs.Offset(8*i), crcs[i])
		ctx.MOVQ(ptrs.Offset(8*i), cps[i])
	}
	acc := make([]reg.VecVirtual, f)
	for i := range acc {
		k := c + i
		pr, x := ctx.GP64(), ctx.XMM()
		acc[i] = ctx.ZMM()
		ctx.MOVQ(ptrs.Offset(8*k), pr)
		ctx.VMOVD(regs.Offset(8*k), x)
		ctx.VPXORQ(operand.Mem{Base: pr}, x.AsZ(), acc[i])
	}
	off, iter := ctx.GP64(), ctx.GP64()
	ctx.XORL(off.As32(), off.As32())
	ctx.Load(ctx.Param("blockLen"), iter)
	ctx.SUBQ(operand.U8(63), iter)
	ctx.SHRQ(operand.U8(6), iter)
	crcStep := func(q int) {
		for i, r := range crcs {
			ctx.CRC32Q(operand.Mem{Base: cps[i], Index: off, Scale: 1, Disp: 8 * q}, r)
		}
	}
	ctx.Comment("Every step: 64 bytes of each CRC32 block, and each fold accumulator",
		"folded forward by 64 bytes onto the next 64 of its block.")
	ctx.DECQ(iter)
	ctx.JZ(operand.LabelRef(name + "_last"))
	ctx.Label(name + "_loop")
	t := ctx.ZMM()
	for q := 0; q < 8; q++ {
		crcStep(q)
		for i := q; i < f; i += 8 {
			pr := ctx.GP64()
			ctx.MOVQ(ptrs.Offset(8*(c+i)), pr)
			ctx.VPCLMULQDQ(operand.U8(0x00), kf, acc[i], t)
			ctx.VPCLMULQDQ(operand.U8(0x11), kf, acc[i], acc[i])
			ctx.VPTERNLOGD(operand.U8(0x96), operand.Mem{Base: pr, Index: off, Scale: 1, Disp: 64}, t, acc[i])
		}
	}
	ctx.ADDQ(operand.U8(64), off)
	ctx.DECQ(iter)
	ctx.JNZ(operand.LabelRef(name + "_loop"))
	ctx.Label(name + "_last")
	ctx.Comment("Last step: the CRC32 blocks only.")
	for q := 0; q < 8; q++ {
		crcStep(q)
	}
	ctx.ADDQ(operand.U8(64), off)

	ctx.Comment("The accumulators to a 64-byte aligned area, the CRC32 blocks'",
		"registers to the table.")
	ap := ctx.GP64()
	ctx.LEAQ(frame.Offset(63), ap)
	ctx.ANDQ(operand.I8(-64), ap)
	for i, a := range acc {
		ctx.VMOVDQA64(a, operand.Mem{Base: ap, Disp: 64 * i})
	}
	for i, r := range crcs {
		ctx.MOVQ(r, regs.Offset(8*i))
	}

	ctx.Comment("Tails: every block's register (a fold block's by 8 CRC32Q of its",
		"accumulator), its bytes from its position plus the steps to its end,",
		"xorout; stored.")
	{
		kk, end, dst := ctx.GP64(), ctx.GP64(), ctx.GP64()
		ctx.XORL(kk.As32(), kk.As32())
		ctx.Load(ctx.Param("blockLen"), end)
		ctx.ADDQ(p, end)
		ctx.Load(ctx.Param("dst"), dst)
		ctx.Label(name + "_tail")
		r := ctx.GP64()
		ctx.MOVQ(operand.Mem{Base: regs.Base, Disp: regs.Disp, Index: kk, Scale: 8}, r)
		if f > 0 {
			ctx.CMPQ(kk, operand.U8(c))
			ctx.JB(operand.LabelRef(name + "_reduced"))
			ctx.XORL(r.As32(), r.As32())
			for j := 0; j < 8; j++ {
				ctx.CRC32Q(operand.Mem{Base: ap, Disp: 8 * j}, r)
			}
			ctx.ADDQ(operand.U8(64), ap)
			ctx.Label(name + "_reduced")
		}
		a, n := ctx.GP64(), ctx.GP64()
		ctx.MOVQ(operand.Mem{Base: ptrs.Base, Disp: ptrs.Disp, Index: kk, Scale: 8}, a)
		ctx.ADDQ(off, a)
		ctx.MOVQ(end, n)
		ctx.SUBQ(a, n)
		crcRun(name+"_t", r, a, n)
		ctx.XORL(scaffold.ParamAddr(ctx, "xorout"), r.As32())
		ctx.MOVL(r.As32(), operand.Mem{Base: dst, Index: kk, Scale: 4})
		ctx.ADDQ(ctx.Load(ctx.Param("stride"), ctx.GP64()), end)
		ctx.INCQ(kk)
		ctx.CMPQ(kk, operand.U8(g))
		ctx.JB(operand.LabelRef(name + "_tail"))
		ctx.ADDQ(operand.U8(4*g), dst)
		ctx.Store(dst, ctx.Param("dst"))
	}
	st := ctx.Load(ctx.Param("stride"), ctx.GP64())
	ctx.SHLQ(operand.U8(4), st)
	ctx.ADDQ(st, p) // p += 16·stride
	ctx.DECQ(scaffold.ParamAddr(ctx, "groups"))
	ctx.JNZ(operand.LabelRef(name + "_group"))
	ctx.VZEROUPPER()
	ctx.RET()
}
