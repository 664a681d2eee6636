package main

// fusedBlocksCopyZG: the guard and the sector sum of blocks that it copies
// from p to q, in one pass on AVX-512 (t10crc32c.BlocksCopy on CPUs with
// VPCLMULQDQ and GFNI on ZMM). docs/perf/copy-avx512.md has the
// measurements behind every choice below.
//
// Every 64 bytes loaded from p are stored, as loaded, to q at the same
// offset, and both CRCs are folded from that register: the guard in the
// reflected domain (VGF2P8AFFINEQB reverses the bits of every byte on port
// 0, as in fusedBlocksZG), the sum with the CRC-32C constants. No sum runs
// as a CRC32 stream: a stream reads its bytes from memory, and reading them
// from p would let a p that changes meanwhile give a sum of other bytes
// than those in q, while reading them back from q behind its stores costs
// loads the copy cannot spare. Per 64 bytes: two guard and two sum
// multiplies, 16 bytes a cycle on port 5.
//
// The copy, not the multiplier, is the limit. A copy of 1 MiB from L2 to
// L2 (p and q in L2, as in a read into a reused buffer) runs at 24-27 GB/s
// on Emerald Rapids, memcpy or this kernel's loop without its folds,
// against 35-44 GB/s for its folds without the stores. So the kernel's
// memory pattern is a copy's: the blocks of a group one after the other,
// each block's 64-byte vectors in order, one stream of loads and one of
// stores (the shape of fusedBlocksZG, eight blocks a step, made sixteen
// streams, and sixteen lines in one L1 set at strides of 4 KiB: 0.55-1.1
// of ISA-L's memcpy and two calls). Each block folds with two accumulators
// per CRC, 128 bytes apart (a fold's multiply and XOR take about 4 cycles,
// a pair of vectors 8 cycles of port 5), merged at the block's end; the
// four blocks' accumulators are kept until the group ends, which is
// fusedBlocksZG's: each accumulator's lanes folded into one, the lanes of
// four summed by a transpose, the guards Barrett-reduced together and each
// sum's lane taken by two CRC32Q from zero, all through registers (zLane).
//
// Each pair of vectors prefetches the two lines of q zCopyPrefetch bytes
// ahead (PREFETCHT0: a line of the caller's buffer that no other core
// holds arrives exclusive, and the later store finds it owned), which the
// hardware prefetchers, following loads, do not do for stores: 10-20% faster than the same loop without it, from L2. Prefetching
// p as well (2 to 8 KiB ahead, into the next page) measured no better, from L2
// or from a mapped file.

import (
	"fmt"

	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
	"github.com/difctl/difctl/kernels/_asm/internal/zmmcrc"

	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// The copying kernel's shape: blocks a group, and how far ahead in q it
// prefetches (1, 2 and 4 KiB measured within each other's spread).
const (
	zCopyGroup    = 4
	zCopyPrefetch = 1024
)

// blocksCopyZ generates fusedBlocksCopyZG: for each group of zCopyGroup
// blocks (blockLen a multiple of 128), the blocks in turn, each as
// 128-byte pairs of vectors loaded, stored to q and folded.
func blocksCopyZ(c *build.Context, maskZ operand.Mem, bitrev operand.Mem) {
	const G = zCopyGroup
	name := "fusedBlocksCopyZG"
	c.Function(name)
	c.SignatureExpr("func(dst *uint16, sums *uint32, q, p *byte, groups, blockLen, stride int, tab, tabR, tab32 *byte)")
	c.Pragma("noescape")
	tr := c.Load(c.Param("tabR"), c.GP64())
	kT8, kT4, kC8, kC4, brev := c.ZMM(), c.ZMM(), c.ZMM(), c.ZMM(), c.ZMM()
	c.VBROADCASTI32X4(operand.Mem{Base: tr, Disp: tableFold + 16*8}, kT8)
	c.VBROADCASTI32X4(operand.Mem{Base: tr, Disp: tableFold + 16*4}, kT4)
	c.VPBROADCASTQ(bitrev, brev)
	kp := c.Load(c.Param("tab32"), c.GP64())
	c.VBROADCASTI32X4(operand.Mem{Base: kp, Disp: tableFold + 16*8}, kC8)
	c.VBROADCASTI32X4(operand.Mem{Base: kp, Disp: tableFold + 16*4}, kC4)
	qd := c.GP64()
	c.Load(c.Param("q"), qd)
	pp := c.Load(c.Param("p"), c.GP64())
	c.SUBQ(pp, qd)

	c.Label(name + "_group")
	gacc := make([]reg.VecVirtual, G)
	sacc := make([]reg.VecVirtual, G)
	t := c.ZMM()
	fold := func(a, k reg.VecVirtual, d reg.VecVirtual) { zmmcrc.Fold(c, 0x00, 0x11, k, a, t, d) }
	for k := 0; k < G; k++ {
		lbl := fmt.Sprintf("%s_b%d", name, k)
		cp := c.GP64()
		c.Load(c.Param("p"), cp)
		if k > 0 {
			st := c.Load(c.Param("stride"), c.GP64())
			if k == 3 {
				c.LEAQ(operand.Mem{Base: st, Index: st, Scale: 2}, st)
				c.ADDQ(st, cp)
			} else {
				c.LEAQ(operand.Mem{Base: cp, Index: st, Scale: uint8(k)}, cp)
			}
		}
		n := c.GP64()
		c.Load(c.Param("blockLen"), n)
		c.SHRQ(operand.U8(7), n)
		qa := func(disp int) operand.Mem { return operand.Mem{Base: cp, Index: qd, Scale: 1, Disp: disp} }
		c.Comment(fmt.Sprintf("Block %d: its first 128 bytes, stored to q.", k))
		initv := c.XMM()
		ones := c.GP32()
		c.MOVL(operand.U32(0xffffffff), ones)
		c.VMOVD(ones, initv)
		g0, g1, s0, s1 := c.ZMM(), c.ZMM(), c.ZMM(), c.ZMM()
		c.VMOVDQU64(operand.Mem{Base: cp}, g0)
		c.VMOVDQU64(operand.Mem{Base: cp, Disp: 64}, g1)
		c.VMOVDQU64(g0, qa(0))
		c.VMOVDQU64(g1, qa(64))
		c.VPXORQ(initv.AsZ(), g0, s0)
		c.VMOVDQA64(g1, s1)
		c.VGF2P8AFFINEQB(operand.U8(0), brev, g0, g0)
		c.VGF2P8AFFINEQB(operand.U8(0), brev, g1, g1)
		c.ADDQ(operand.U8(128), cp)
		c.DECQ(n)
		c.JZ(operand.LabelRef(lbl + "_end"))
		c.Label(lbl + "_loop")
		d0, d1, e0, e1 := c.ZMM(), c.ZMM(), c.ZMM(), c.ZMM()
		c.PREFETCHT0(qa(zCopyPrefetch))
		c.PREFETCHT0(qa(zCopyPrefetch + 64))
		c.VMOVDQU64(operand.Mem{Base: cp}, d0)
		c.VMOVDQU64(operand.Mem{Base: cp, Disp: 64}, d1)
		c.VMOVDQU64(d0, qa(0))
		c.VMOVDQU64(d1, qa(64))
		c.VGF2P8AFFINEQB(operand.U8(0), brev, d0, e0)
		c.VGF2P8AFFINEQB(operand.U8(0), brev, d1, e1)
		fold(g0, kT8, e0)
		fold(g1, kT8, e1)
		fold(s0, kC8, d0)
		fold(s1, kC8, d1)
		c.ADDQ(operand.U8(128), cp)
		c.DECQ(n)
		c.JNZ(operand.LabelRef(lbl + "_loop"))
		c.Label(lbl + "_end")
		c.Comment("The first accumulators folded by 64 bytes onto the second.")
		fold(g0, kT4, g1)
		fold(s0, kC4, s1)
		gacc[k], sacc[k] = g0, s0
	}

	c.Comment("The constants of the group's end.")
	kR, kRC, mask, zFin, zMuP := c.ZMM(), c.ZMM(), c.ZMM(), c.ZMM(), c.ZMM()
	tr = c.Load(c.Param("tabR"), c.GP64())
	c.VMOVDQU64(operand.Mem{Base: tr, Disp: scaffold.TableRev + 16*61}, kR)
	tp := c.Load(c.Param("tab"), c.GP64())
	c.VBROADCASTI32X4(operand.Mem{Base: tp, Disp: tableFinal}, zFin)
	c.VBROADCASTI32X4(operand.Mem{Base: tp, Disp: tableMu}, zMuP)
	kp = c.Load(c.Param("tab32"), c.GP64())
	c.VMOVDQU64(operand.Mem{Base: kp, Disp: scaffold.TableRev + 16*61}, kRC)
	c.VBROADCASTI32X4(maskZ, mask)
	last4, zero, allOnes := c.ZMM(), c.ZMM(), c.ZMM()
	zmmcrc.Last4(c, last4, zero, allOnes)
	dst := c.Load(c.Param("dst"), c.GP64())
	sums := c.Load(c.Param("sums"), c.GP64())
	z := c.ZMM()
	zmmcrc.Lanes4(c, sacc, kRC, last4, 0x00, 0x11, lanes4Regs(c, c.ZMM()), z)
	c.Comment("Each sum's lane moved to GPRs and read by two CRC32Q from zero.")
	for j := 0; j < G; j++ {
		x := zLane(c, z, j)
		r, v := c.GP64(), c.GP64()
		zmmcrc.LaneCRC32(c, x, r, v)
		c.NOTL(r.As32())
		c.MOVL(r.As32(), operand.Mem{Base: sums, Disp: 4 * j})
	}
	z = c.ZMM()
	zmmcrc.Lanes4(c, gacc, kR, last4, 0x00, 0x11, lanes4Regs(c, c.ZMM()), z)
	c.VGF2P8AFFINEQB(operand.U8(0), brev, z, z)
	c.VPSHUFB(mask, z, z)
	zmmcrc.ReduceZ(c, z, zFin, zMuP, c.ZMM(), c.ZMM(), c.ZMM(), width)
	c.Comment("Each guard, the low 16 bits of its lane, through a GPR.")
	for j := 0; j < G; j++ {
		out := c.GP32()
		c.VMOVD(zLane(c, z, j), out)
		c.MOVW(out.As16(), operand.Mem{Base: dst, Disp: 2 * j})
	}
	c.ADDQ(operand.U8(2*G), dst)
	c.Store(dst, c.Param("dst"))
	c.ADDQ(operand.U8(4*G), sums)
	c.Store(sums, c.Param("sums"))
	c.Comment("p += 4·stride.")
	st := c.Load(c.Param("stride"), c.GP64())
	c.SHLQ(operand.U8(2), st)
	r := c.Load(c.Param("p"), c.GP64())
	c.ADDQ(st, r)
	c.Store(r, c.Param("p"))
	c.DECQ(scaffold.ParamAddr(c, "groups"))
	c.JNZ(operand.LabelRef(name + "_group"))
	c.VZEROUPPER()
	c.RET()
}

// zLane is lane j (0-3) of z as an XMM register: z's own low lane, or the
// lane extracted. The group ends take their results through these
// registers, not through a store of z and loads of its parts: a load that
// a wider store must forward to waits instead until that store has
// written the cache, behind every store before it, which in a copying
// kernel are the group's copies to q, each waiting for its line.
func zLane(c *build.Context, z reg.VecVirtual, j int) reg.Register {
	if j == 0 {
		return z.AsX()
	}
	x := c.XMM()
	c.VEXTRACTI32X4(operand.U8(j), z, x)
	return x
}
