package main

// fusedBlocksZ: the guard and the sector sum of eight blocks at a time on
// AVX-512, in one pass (t10crc32c.Blocks on CPUs with VPCLMULQDQ on ZMM).
//
// Why this shape, from the ports of Emerald Rapids (docs/perf/crc32c-avx512.md
// has the measurements): VPCLMULQDQ zmm issues once a cycle on port 5, and
// so does VPSHUFB zmm; CRC32 runs once a cycle on port 1 and VPTERNLOGD on
// port 0, beside both. Per 64 bytes of a block the guard costs two
// multiplies and the byte reversal (3 port-5 cycles); the sector sum either
// a fold (2 port-5 cycles) or 8 CRC32Q (8 port-1 cycles). With the sums of
// half the blocks folded and half through CRC32, ports 5 and 1 are equal:
// per step of 64 bytes of eight blocks, 8·3 + 4·2 = 32 port-5 cycles and
// 4·8 = 32 port-1 cycles, 16 bytes a cycle, where the guard and the sum as
// two folding passes (ISA-L's by16_10 calls) take 1/20 + 1/32 cycles a byte
// (12.3 bytes a cycle).
//
// Blocks 0, 2, 4, 6 fold their sums, blocks 1, 3, 5, 7 run them as CRC32Q
// streams (one chain each: 8 CRC32Q, 24 cycles of latency, a step against
// the step's 32 cycles). Every block folds its guard: the 64 bytes
// byte-reversed in each 16-byte lane (the lane is then the unreflected
// polynomial, Hi in the high quadword, as in main.go) and folded forward by
// 64 bytes with Fold[4] of the T10-DIF table.
//
// After the loop the blocks end four at a time, which at 512 bytes a block
// costs about half what ending them one at a time did (see
// docs/perf/crc32c-avx512.md). Each accumulator's four lanes fold into the
// last (lane l by Fold[3-l]: one VPCLMULQDQ pair with the 64 bytes at
// Rev[61] of its table, whose last lane Fold[0] is zero, the last lane
// added through a mask); a transpose of four such vectors (six VSHUFI64X2)
// sums each one's lanes into a lane of one register (zmmcrc.Lanes4). The
// guards' register is Barrett-reduced at once (zmmcrc.ReduceZ); of the
// folded sums', each lane is moved to two GPRs (zLane), and two CRC32Q of
// them from zero give the block's register (the lane is a 16-byte message
// congruent to the block).

import (
	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
	"github.com/difctl/difctl/kernels/_asm/internal/zmmcrc"

	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

const zGroup = 8

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

// blocksZ generates fusedBlocksZ, or with gfni fusedBlocksZG: the guard
// folded in the reflected domain. An unreflected CRC of a message is the
// bit reversal of the reflected CRC (same polynomial, reflected) of the
// message with every byte's bits reversed; VGF2P8AFFINEQB with the matrix
// bitrev reverses the bits of every byte on port 0, where VPSHUFB takes
// port 5, so a step of the guard costs two port-5 cycles rather than three.
// The lanes are then reflected lanes (Hi in the low quadword), folded as
// the CRC-32C sums are, with the reflected T10-DIF table (tabR). After the
// lane fold, the one lane, a 16-byte message in the reflected domain, goes
// back to the unreflected one (the bits of every byte reversed again, and
// its 16 bytes reversed into an unreflected lane) for the Barrett reduction
// of tab. Port 5 then allows one more folded sum: blocks 1, 4 and 7 run
// CRC32 streams, the other five fold (8·2 + 5·2 = 26 port-5 cycles and
// 3·8 = 24 port-1 cycles a step, 19.7 bytes a cycle).
func blocksZ(c *build.Context, maskZ operand.Mem, gfni bool, bitrev operand.Mem) {
	name := "fusedBlocksZ"
	sig := "func(dst *uint16, sums *uint32, p *byte, groups, blockLen, stride int, tab, tab32 *byte)"
	// isCRC is whether block k's sum runs as a CRC32 stream.
	isCRC := func(k int) bool { return k%2 == 1 }
	if gfni {
		name = "fusedBlocksZG"
		sig = "func(dst *uint16, sums *uint32, p *byte, groups, blockLen, stride int, tab, tabR, tab32 *byte)"
		isCRC = func(k int) bool { return k%3 == 1 }
	}
	c.Function(name)
	c.SignatureExpr(sig)
	c.Pragma("noescape")
	tp := c.Load(c.Param("tab"), c.GP64())
	kT, kC, kR, kRC := c.ZMM(), c.ZMM(), c.ZMM(), c.ZMM()
	mask := c.ZMM()
	tr := tp
	if gfni {
		tr = c.Load(c.Param("tabR"), c.GP64())
	}
	c.VBROADCASTI32X4(operand.Mem{Base: tr, Disp: tableFold + 16*4}, kT)
	c.VMOVDQU64(operand.Mem{Base: tr, Disp: scaffold.TableRev + 16*61}, kR)
	// The guard's lanes: unreflected (VPSHUFB) or reflected (GFNI), and the
	// VPCLMULQDQ immediates that pick Hi·k[0] and Lo·k[1] in them.
	gLo, gHi := uint8(0x01), uint8(0x10)
	var brev reg.VecVirtual
	if gfni {
		gLo, gHi = 0x00, 0x11
		brev = c.ZMM()
		c.VPBROADCASTQ(bitrev, brev)
	}
	// reverse turns 64 bytes of data in src into the guard's lanes in dst.
	reverse := func(src, dst reg.VecVirtual) {
		if gfni {
			c.VGF2P8AFFINEQB(operand.U8(0), brev, src, dst)
		} else {
			c.VPSHUFB(mask, src, dst)
		}
	}
	// last4 is all ones in the last lane, zeros elsewhere.
	last4, zero, allOnes := c.ZMM(), c.ZMM(), c.ZMM()
	zmmcrc.Last4(c, last4, zero, allOnes)
	zFin, zMuP := c.ZMM(), c.ZMM()
	c.VBROADCASTI32X4(operand.Mem{Base: tp, Disp: tableFinal}, zFin)
	c.VBROADCASTI32X4(operand.Mem{Base: tp, Disp: tableMu}, zMuP)
	kp := c.Load(c.Param("tab32"), c.GP64())
	c.VBROADCASTI32X4(operand.Mem{Base: kp, Disp: tableFold + 16*4}, kC)
	c.VMOVDQU64(operand.Mem{Base: kp, Disp: scaffold.TableRev + 16*61}, kRC)
	c.VBROADCASTI32X4(maskZ, mask)
	initv := c.XMM()
	ones := c.GP32()
	c.MOVL(operand.U32(0xffffffff), ones)
	c.VMOVD(ones, initv)
	c.Label(name + "_group")
	p := c.Load(c.Param("p"), c.GP64())
	stride := c.Load(c.Param("stride"), c.GP64())
	s3 := c.GP64()
	c.LEAQ(operand.Mem{Base: stride, Index: stride, Scale: 2}, s3)
	bases := make([]reg.GPVirtual, (zGroup+2)/3)
	for i := range bases {
		bases[i] = c.GP64()
		if i == 0 {
			c.MOVQ(p, bases[0])
		} else {
			c.LEAQ(operand.Mem{Base: bases[i-1], Index: s3, Scale: 1}, bases[i])
		}
	}
	addr := func(k, disp int) operand.Mem { return zAddr(bases, stride, k, disp) }
	// crcs[k] for the CRC32 blocks, sacc[k] for the folded sums.
	crcs := map[int]reg.GPVirtual{}
	var crcBlocks []int
	for k := 0; k < zGroup; k++ {
		if isCRC(k) {
			crcBlocks = append(crcBlocks, k)
			crcs[k] = c.GP64()
			c.MOVL(operand.U32(0xffffffff), crcs[k].As32())
		}
	}
	iter := c.GP64()
	c.Load(c.Param("blockLen"), iter)
	c.SHRQ(operand.U8(6), iter)

	c.Comment("The first 64 bytes of every block: byte-reversed for the guard,",
		"with the initial register in the first lane for the folded sums.")
	gacc := make([]reg.VecVirtual, zGroup)
	sacc := map[int]reg.VecVirtual{}
	for k := 0; k < zGroup; k++ {
		gacc[k] = c.ZMM()
		c.VMOVDQU64(addr(k, 0), gacc[k])
		if !isCRC(k) {
			sacc[k] = c.ZMM()
			c.VPXORQ(initv.AsZ(), gacc[k], sacc[k])
		}
		reverse(gacc[k], gacc[k])
	}
	t, d, raw := c.ZMM(), c.ZMM(), c.ZMM()
	crcStep := func(q, s int) {
		for _, k := range crcBlocks {
			c.CRC32Q(addr(k, 64*s+8*q), crcs[k])
		}
	}
	c.Comment("Every step: 64 bytes of each CRC32 block (8 CRC32Q), each guard",
		"and folded sum forward by 64 bytes onto the next 64 of its block.")
	c.DECQ(iter)
	c.JZ(operand.LabelRef(name + "_last"))
	// step emits the step s steps on from the bases.
	step := func(s int) {
		for q := 0; q < 8; q++ {
			crcStep(q, s)
			k := q
			// One load of the 64 bytes serves both folds of a folded sum's
			// block: the sum takes them as loaded, the guard after the
			// transform into a second register. (A memory operand for the
			// sum's VPTERNLOGD loaded them twice, and two loads of a line
			// split at a stride of 520 or 4104 cost fusedBlocksZG most of
			// its lead there: docs/perf/crc32c-avx512.md.)
			if !isCRC(q) {
				a := sacc[q]
				c.VMOVDQU64(addr(k, 64*s+64), raw)
				zmmcrc.Fold(c, 0x00, 0x11, kC, a, t, raw)
				reverse(raw, d)
			} else {
				c.VMOVDQU64(addr(k, 64*s+64), d)
				reverse(d, d)
			}
			zmmcrc.Fold(c, gLo, gHi, kT, gacc[k], t, d)
		}
	}
	advance := func(steps int) {
		for _, b := range bases {
			c.ADDQ(operand.U32(64*steps), b)
		}
	}
	// Two steps a round halve the pointer updates and branches (scalar µops
	// that can take ports 1 and 5): 4096/4096 1.33-1.41 of two ISA-L calls
	// against 1.27-1.35 on Emerald Rapids, within the spread of a shared
	// machine but never below it.
	c.Comment("Two steps a round while two remain, then one.")
	c.CMPQ(iter, operand.U8(2))
	c.JB(operand.LabelRef(name + "_loop"))
	c.Label(name + "_loop2")
	step(0)
	step(1)
	advance(2)
	c.SUBQ(operand.U8(2), iter)
	c.CMPQ(iter, operand.U8(2))
	c.JAE(operand.LabelRef(name + "_loop2"))
	c.TESTQ(iter, iter)
	c.JZ(operand.LabelRef(name + "_last"))
	c.Label(name + "_loop")
	step(0)
	advance(1)
	c.DECQ(iter)
	c.JNZ(operand.LabelRef(name + "_loop"))
	c.Label(name + "_last")
	c.Comment("Last step: the CRC32 blocks only.")
	for q := 0; q < 8; q++ {
		crcStep(q, 0)
	}

	dst := c.Load(c.Param("dst"), c.GP64())
	sums := c.Load(c.Param("sums"), c.GP64())
	// lanes sets x to the lane congruent to the 64-byte accumulator a: its
	// lanes folded into the last by the 64 bytes k at Rev[61] of their
	// table ({Fold[3], Fold[2], Fold[1], 0}), with immediates lo and hi
	// picking the quadwords as the CRC's lanes hold them.
	lanes := func(a, k reg.VecVirtual, lo, hi uint8, x reg.VecVirtual) {
		c.VPCLMULQDQ(operand.U8(lo), k, a, t)
		c.VPCLMULQDQ(operand.U8(hi), k, a, d)
		c.VPXORQ(t, d, d)
		y, l3 := c.YMM(), c.XMM()
		c.VEXTRACTI64X4(operand.U8(1), d, y)
		c.VPXORQ(y, d.AsY(), y)
		c.VEXTRACTI32X4(operand.U8(1), y, x)
		c.VPXORQ(x, y.AsX(), x)
		c.VEXTRACTI32X4(operand.U8(3), a, l3)
		c.VPXORQ(l3, x, x)
	}
	c.Comment("The folded sums four at a time: lane j of z congruent to the j-th's",
		"block, moved to GPRs and read by two CRC32Q from zero",
		"(the lane is a 16-byte message congruent to the block).")
	var folded []int
	for k := 0; k < zGroup; k++ {
		if !isCRC(k) {
			folded = append(folded, k)
		}
	}
	sumOut := func(k int, r reg.GPVirtual) {
		c.NOTL(r.As32())
		c.MOVL(r.As32(), operand.Mem{Base: sums, Disp: 4 * k})
	}
	for h := 0; h < len(folded); h += 4 {
		ks := folded[h:min(h+4, len(folded))]
		if len(ks) < 4 {
			for _, k := range ks {
				v := c.XMM()
				lanes(sacc[k], kRC, 0x00, 0x11, v)
				r, q := c.GP64(), c.GP64()
				zmmcrc.LaneCRC32(c, v, r, q)
				sumOut(k, r)
			}
			continue
		}
		z := c.ZMM()
		zmmcrc.Lanes4(c, []reg.VecVirtual{sacc[ks[0]], sacc[ks[1]], sacc[ks[2]], sacc[ks[3]]}, kRC, last4, 0x00, 0x11, lanes4Regs(c, t), z)
		for j, k := range ks {
			x := zLane(c, z, j)
			r, q := c.GP64(), c.GP64()
			zmmcrc.LaneCRC32(c, x, r, q)
			sumOut(k, r)
		}
	}
	for _, k := range crcBlocks {
		sumOut(k, crcs[k])
	}
	c.Comment("The guards four at a time: lane j of z congruent to the j-th's block,",
		"reduced together, each CRC the low 16 bits of its lane, through a GPR.")
	for h := 0; h < zGroup; h += 4 {
		z := c.ZMM()
		zmmcrc.Lanes4(c, gacc[h:h+4], kR, last4, gLo, gHi, lanes4Regs(c, t), z)
		if gfni {
			c.Comment("Back to the unreflected domain: bits of every byte, then the bytes.")
			c.VGF2P8AFFINEQB(operand.U8(0), brev, z, z)
			c.VPSHUFB(mask, z, z)
		}
		zmmcrc.ReduceZ(c, z, zFin, zMuP, c.ZMM(), c.ZMM(), c.ZMM(), width)
		for j := 0; j < 4; j++ {
			out := c.GP32()
			c.VMOVD(zLane(c, z, j), out)
			c.MOVW(out.As16(), operand.Mem{Base: dst, Disp: 2 * (h + j)})
		}
	}
	c.ADDQ(operand.U8(2*zGroup), dst)
	c.Store(dst, c.Param("dst"))
	c.ADDQ(operand.U8(4*zGroup), sums)
	c.Store(sums, c.Param("sums"))
	c.Comment("p += 8·stride.")
	p = c.GP64()
	c.Load(c.Param("p"), p)
	st := c.Load(c.Param("stride"), c.GP64())
	c.SHLQ(operand.U8(3), st)
	c.ADDQ(st, p)
	c.Store(p, c.Param("p"))
	c.DECQ(scaffold.ParamAddr(c, "groups"))
	c.JNZ(operand.LabelRef(name + "_group"))
	c.VZEROUPPER()
	c.RET()
}

// lanes4Regs allocates the registers of zmmcrc.Lanes4 in c but its
// temporary t.
func lanes4Regs(c *build.Context, t reg.Register) zmmcrc.Lanes4Regs {
	r := zmmcrc.Lanes4Regs{T: t}
	for j := range r.W {
		r.W[j] = c.ZMM()
	}
	r.X = [2]reg.Register{c.ZMM(), c.ZMM()}
	for i := range r.Lo {
		r.Lo[i], r.Hi[i] = c.ZMM(), c.ZMM()
	}
	return r
}
