// Command fusedpoly generates the amd64 kernels of package kernels/keyedcopy:
// one pass over four blocks side by side that copies every block from p to
// q, computes its CRC-16/T10-DIF guard and its CRC-32C sector sum (as
// kernels/_asm/fused's fusedBlocksCopyAVX does), and evaluates Poly1305 over
// the same bytes in the four 64-bit lanes of YMM registers (radix 2^26, as
// kernels/_asm/poly1305's lanesAVX2 does); and its AVX-512 form,
// fusedPolyCopyZ (zmm.go: a pair of blocks, ZMM folds, IFMA lanes).
//
// go generate in kernels/keyedcopy runs it:
//
//	go run -C ../_asm ./fusedpoly -out ../keyedcopy/zfusedpoly_amd64.s -stubs ../keyedcopy/zfusedpoly_amd64.go
//
// Why fuse. A keyed verified read needs, for every block, the guard
// (PCLMULQDQ folds on the vector multiplier's carry-less unit), the sector
// sum (CRC32Q on an integer ALU) and the Poly1305 polynomial (VPMULUDQ).
// On AMD Zen 2 PCLMULQDQ and VPMULUDQ do not share a pipe (interleaved
// they take the time of the PCLMULQDQ alone; docs/perf/poly1305-generator.md),
// so the three can overlap; run as two passes (t10crc32c.BlocksCopy, then
// poly1305.Key.BlocksAD over the copy) their times add, and the data is
// loaded twice.
//
// Shape. G = 4 blocks, p + j·stride for j = 0..3. One step covers 64 bytes
// of each block: four 16-byte vectors per block loaded from p, stored as
// loaded to q at the same offset, byte-reversed and folded into the block's
// XMM fold accumulator (fused's AVX chain: forward by 16 bytes with
// Fold[1]; the first vector of a block starts the accumulator). The CRC32Q
// streams and the Poly1305 lanes run one step behind, over the 64 bytes
// per block that the step before stored to q (so both are of the bytes the
// caller gets, and no load waits on a store just issued): 8 CRC32Q per
// block, and one four-chunk Horner step of the lanes,
//
//	h' = (h + m1)·r^4 + m2·r^3 + m3·r^2 + m4·r     (mod 2^130-5)
//
// with the chunks m1..m4 of each block gathered into the lanes as lanesAVX2
// does (two 16-byte loads and two VINSERTI128 per chunk, VPUNPCKLQDQ/HQDQ
// into lo and hi words, five 26-bit limbs with the 2^128 pad bit in limb
// 4), 100 VPMULUDQ and one carry chain per step (the bounds are
// kernels/poly1305/poly1305_lanes.go's: limbs below 2^26 + 2^12 after a
// carry chain, below 2^27 after adding a chunk, every sum of products below
// 2^64). The fold instructions and the lagging ones are emitted interleaved
// (evenly spread), and within the lagging ones the 32 CRC32Q are spread
// evenly among the lane instructions, so the out-of-order window holds work
// for the carry-less unit, the vector multiplier and the CRC ALU at once
// (with the CRC32Q all at the head of the lagging step the kernel measured
// slower). A last lagging step after the loop covers the last 64 bytes.
//
// What did not help (each within the noise of the runs, so not kept):
// cutting the limbs out with shift pairs instead of the mask (16 loads a
// step fewer); hmac5's staggered adds (each VPADDQ up to two multiplies
// behind its VPMULUDQ, with yLo and yHi as product registers once the
// split is done with them); running the last lagging step of a group
// interleaved with the first fold step of the next (the per-group fixed
// cost at 512 B). Ablations (wrong results, timing only: every key operand
// a register, every VPMULUDQ a VPADDQ, every VPCLMULQDQ a VPXOR) each
// gained little, so neither the loads, nor the vector multiplier, nor the
// carry-less unit bound it alone; it is bound by the sheer number of
// instructions a step (about 440, of which about 400 vector ones on the
// four FP pipes), and only fewer instructions will make it faster.
// docs/perf/poly1305-generator.md has the figures.
//
// The lanes start from h = 0 and see only the block's bytes: the kernel
// leaves, per group, the four accumulators Poly1305_r(block) in the
// laneState form of kernels/poly1305 (limb k of block l at word 4k+l,
// unreduced), which the Go side turns into tags: associated data and the
// AES mask are added after (poly1305.Key.TagsFromPartials), by Poly1305's
// linearity: Poly_r(ad || m) = Poly_r(ad)·r^(chunks of m) + Poly_r(m).
//
// Registers. Sixteen YMM registers are all taken: X0..X3 the fold
// accumulators, X4, X5 the fold's data and product, Y6..Y10 the five limbs
// of the product sums d, Y11..Y14 the gather, limb and product registers of
// the lanes (the product register doubles as the gather's and the split's
// temporary, the hi-word one as a carry temporary), X15 Fold[1]. So the
// other constants are memory operands: the byte reversal and the lanes'
// limb mask and pad bit (DATA), the key powers (the key table the Go side
// passes, poly1305's laneKey layout).
//
// Loads were taken to bound this kernel on AMD Zen 2 (two loads per cycle;
// but see the ablations above: without the key loads it ran only a little
// faster): per step 100 key operands of VPMULUDQ, 32 CRC32Q, 16
// vector loads and 16 gathers, the byte-reversal and mask operands, h.
// Fold[1] is in X15 rather than a memory operand (32 more loads a step),
// which took the kernel from behind the two passes at 4 KiB blocks to
// ahead of them (BenchmarkFusedRatio in kernels/keyedcopy). Of the three
// computations the Poly1305 lanes cost the most (ablations, in
// docs/perf/poly1305-generator.md). The lane accumulators h live in the
// frame between steps (five 32-byte words: added to m1 as a memory
// operand, stored after the carry chain). The general registers are those
// of fused, but the guard and sum pointers live in the frame and DI holds
// the key table.
//
// Nothing is pasted: the fold constants are read from the
// crcmath.RevFoldTable and the powers of r from the key table passed as
// arguments; the only data are the byte-reversal shuffle, M = 2^26-1 and
// the pad bit 2^24 (2^128 = 2^(4·26+24)). blockLen must be a positive
// multiple of 64; other lengths and the blocks that do not fill a group
// are left to the Go code. The output depends only on the flags.
package main

import (
	"bytes"
	"fmt"
	"go/types"

	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
	"github.com/difctl/difctl/kernels/_asm/internal/zmmcrc"

	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/gotypes"
	"github.com/mmcloughlin/avo/ir"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// Byte offsets of the crcmath.RevFoldTable fields.
const (
	tableFold  = scaffold.TableFold
	tableFinal = scaffold.TableFinal
	tableMu    = scaffold.TableMu
	tablePoly  = scaffold.TablePoly
)

// Kernel shape.
const (
	group   = 4  // blocks interleaved
	width   = 16 // T10-DIF
	vecLen  = 16 // bytes per fold vector (XMM)
	stepLen = 64 // bytes of each block per step: four Poly1305 chunks
	minLen  = stepLen
)

// Layout of poly1305's laneKey (kernels/_asm/poly1305 has the same): R(j,k),
// limb k of r^(j+1), at keyR + 32(5j+k), S(j,k) = 5·R(j,k) at keyS +
// 32(5j+k), each a vector of four equal quadwords; then r0, r1.
const (
	limbs    = 5
	lanes    = 4
	powers   = 4
	keyR     = 0
	keyS     = 32 * limbs * powers
	keyWords = (2*keyS + 16) / 8
	limbBits = 26
	limbMask = 1<<limbBits - 1
	padBit   = 1 << (128 - 4*limbBits)
	hWords   = limbs * lanes // laneState words of one group
)

func main() { scaffold.MainAsm("fusedpoly", generate) }

// generate returns the assembly and the Go declarations of the kernel,
// made by cmd.
func generate(cmd []string) (asm, src []byte, err error) {
	c := build.NewContext()
	c.ConstraintExpr("!purego")
	consts := c.StaticGlobal("fusedPolyConsts")
	c.DataAttributes(attr.RODATA | attr.NOPTR)
	// PSHUFB control that reverses the 16 bytes of a lane (result byte i is
	// source byte 15-i), then four lanes of M = 2^26-1, then four of 2^24.
	c.AddDatum(0, operand.U64(0x08090a0b0c0d0e0f))
	c.AddDatum(8, operand.U64(0x0001020304050607))
	// (The assembler wants the entries in order.)
	for i := 0; i < lanes; i++ {
		c.AddDatum(32+8*i, operand.U64(limbMask))
	}
	for i := 0; i < lanes; i++ {
		c.AddDatum(64+8*i, operand.U64(padBit))
	}
	g := &gen{c: c, bswap: consts, mask: consts.Offset(32), pad: consts.Offset(64)}
	g.kernel()
	zData(c, consts).kernelZ()
	if g.err != nil {
		return nil, nil, g.err
	}
	if asm, err = scaffold.Asm(c, cmd, "keyedcopy"); err != nil {
		return nil, nil, err
	}
	src, err = writeStubs(scaffold.Warning(cmd))
	return asm, src, err
}

// kernelSig: fusedPolyCopyAVX(dst []uint16, sums []uint32, h []uint64, q, p
// []byte, blockLen, stride int, tab *crcmath.RevFoldTable, key *[162]uint64).
func kernelSig() *gotypes.Signature {
	u64 := types.Typ[types.Uint64]
	return scaffold.Signature([]*types.Var{
		scaffold.Param("dst", types.NewSlice(scaffold.Word(16))),
		scaffold.Param("sums", types.NewSlice(scaffold.Word(32))),
		scaffold.Param("h", types.NewSlice(u64)),
		scaffold.Param("q", scaffold.Bytes),
		scaffold.Param("p", scaffold.Bytes),
		scaffold.Param("blockLen", scaffold.Int),
		scaffold.Param("stride", scaffold.Int),
		scaffold.Param("tab", scaffold.RevFoldTable),
		scaffold.Param("key", types.NewPointer(types.NewArray(u64, keyWords))),
	}, nil)
}

func mem(base reg.Register, disp int) operand.Mem { return operand.Mem{Base: base, Disp: disp} }

// Registers.
var (
	rKey         = reg.RDI
	rH           = reg.R8                   // the group's laneState in h
	rP, rS1, rS3 = reg.RSI, reg.R9, reg.R10 // group start, stride, 3·stride
	rCur, rN     = reg.R13, reg.RCX         // position in the blocks, bytes left
	rCRC         = []reg.GPPhysical{reg.RAX, reg.RBX, reg.R11, reg.R12}
	rQ, rQd      = reg.R14, reg.R15 // the step's position in q; q - p
	rPf          = reg.RDX          // prefetch pointer

	acc   = []reg.VecPhysical{reg.X0, reg.X1, reg.X2, reg.X3}
	xData = reg.X4
	xT    = reg.X5
	yD    = []reg.VecPhysical{reg.Y6, reg.Y7, reg.Y8, reg.Y9, reg.Y10}
	yLo   = reg.Y11 // the chunks' low quadwords; a carry temporary
	yHi   = reg.Y12 // the chunks' high quadwords
	yL    = reg.Y13 // the limb being split off
	yP    = reg.Y14 // a product; the gather's and the split's temporary
	xK1   = reg.X15 // Fold[1]
)

type gen struct {
	c                *build.Context
	bswap, mask, pad operand.Mem
	hmem             operand.Mem // frame: the lane accumulators
	err              error
}

func (g *gen) fail(err error) {
	if g.err == nil {
		g.err = err
	}
}

func xmm(y reg.VecPhysical) reg.VecPhysical { return y.AsX().(reg.VecPhysical) }

// addrAt is byte disp of block j of the group from base.
func addrAt(base reg.GPPhysical, j, disp int) operand.Mem {
	switch j {
	case 0:
		return mem(base, disp)
	case 1:
		return operand.Mem{Base: base, Index: rS1, Scale: 1, Disp: disp}
	case 2:
		return operand.Mem{Base: base, Index: rS1, Scale: 2, Disp: disp}
	}
	return operand.Mem{Base: base, Index: rS3, Scale: 1, Disp: disp}
}

func keyRMem(j, k int) operand.Mem { return mem(rKey, keyR+32*(limbs*j+k)) }
func keySMem(j, k int) operand.Mem { return mem(rKey, keyS+32*(limbs*j+k)) }

// keyFor is the key vector limb i of h multiplies for d_k under r^(j+1).
func keyFor(j, i, k int) operand.Mem {
	if i <= k {
		return keyRMem(j, k-i)
	}
	return keySMem(j, k-i+limbs)
}

// foldStep emits the loads, stores and folds of one step at rCur (rQ set
// for it): first starts each accumulator with the block's first vector.
func (g *gen) foldStep(first bool) {
	c := g.c
	for j := 0; j < group; j++ {
		for v := 0; v < stepLen/vecLen; v++ {
			r := xData
			if first && v == 0 {
				r = acc[j]
			}
			c.VMOVDQU(addrAt(rCur, j, vecLen*v), r)
			c.VMOVDQU(r, addrAt(rQ, j, vecLen*v))
			c.VPSHUFB(g.bswap, r, r)
			if r == acc[j] {
				continue
			}
			// acc = Hi(acc)·Fold[1][0] ⊕ Lo(acc)·Fold[1][1] ⊕ data (the
			// lanes byte-reversed: immediate 0x01 takes the high quadword
			// of acc and the low one of the constant, 0x10 the opposite).
			c.VPCLMULQDQ(operand.U8(0x01), xK1, acc[j], xT)
			c.VPCLMULQDQ(operand.U8(0x10), xK1, acc[j], acc[j])
			c.VPXOR(xT, acc[j], acc[j])
			c.VPXOR(r, acc[j], acc[j])
		}
	}
}

// lagStep emits the CRC32Q streams and the Poly1305 step over the 64 bytes
// per block at rQ + disp, leaving the lane accumulators in out.
func (g *gen) lagStep(disp int, out func(k int) operand.Mem) {
	crc := g.record(func() {
		for i := 0; i < stepLen/8; i++ {
			for j := 0; j < group; j++ {
				g.c.CRC32Q(addrAt(rQ, j, disp+8*i), rCRC[j])
			}
		}
	})
	lanes := g.record(func() {
		c := g.c
		g.split(disp+48, func(i int) { g.mulAdd(yL, i, 0, i == 0) })
		g.split(disp+32, func(i int) { g.mulAdd(yL, i, 1, false) })
		g.split(disp+16, func(i int) { g.mulAdd(yL, i, 2, false) })
		g.split(disp, func(i int) {
			c.VPADDQ(g.hmem.Offset(32*i), yL, yL) // h + m1
			g.mulAdd(yL, i, 3, false)
		})
		g.carryChain()
		for k := 0; k < limbs; k++ {
			c.VMOVDQU(yD[k], out(k))
		}
	})
	scaffold.Interleave(g.c, lanes, crc)
}

// split gathers the chunk at rQ + disp of the four blocks and calls use
// with each limb in yL, in order 0..4 (lanesAVX2's split).
func (g *gen) split(disp int, use func(i int)) {
	c := g.c
	c.VMOVDQU(addrAt(rQ, 0, disp), xmm(yLo))
	c.VINSERTI128(operand.U8(1), addrAt(rQ, 2, disp), yLo, yLo)
	c.VMOVDQU(addrAt(rQ, 1, disp), xmm(yP))
	c.VINSERTI128(operand.U8(1), addrAt(rQ, 3, disp), yP, yP)
	c.VPUNPCKHQDQ(yP, yLo, yHi) // hi words of blocks 0..3
	c.VPUNPCKLQDQ(yP, yLo, yLo) // lo words
	c.VPAND(g.mask, yLo, yL)
	use(0)
	c.VPSRLQ(operand.U8(26), yLo, yL)
	c.VPAND(g.mask, yL, yL)
	use(1)
	c.VPSRLQ(operand.U8(52), yLo, yL)
	c.VPSLLQ(operand.U8(12), yHi, yP)
	c.VPOR(yP, yL, yL)
	c.VPAND(g.mask, yL, yL)
	use(2)
	c.VPSRLQ(operand.U8(14), yHi, yL)
	c.VPAND(g.mask, yL, yL)
	use(3)
	c.VPSRLQ(operand.U8(40), yHi, yL)
	c.VPOR(g.pad, yL, yL)
	use(4)
}

// mulAdd adds x·r^(j+1) to d (x limb i); first sets d instead.
func (g *gen) mulAdd(x reg.VecPhysical, i, j int, first bool) {
	for k := 0; k < limbs; k++ {
		if first {
			g.c.VPMULUDQ(keyFor(j, i, k), x, yD[k])
			continue
		}
		g.c.VPMULUDQ(keyFor(j, i, k), x, yP)
		g.c.VPADDQ(yP, yD[k], yD[k])
	}
}

// carry is dk→dl of the carry chain with temporary t (yP for times 5).
func (g *gen) carry(from, to int, times5 bool, t reg.VecPhysical) {
	c := g.c
	c.VPSRLQ(operand.U8(26), yD[from], t)
	c.VPAND(g.mask, yD[from], yD[from])
	if times5 {
		c.VPSLLQ(operand.U8(2), t, yP)
		c.VPADDQ(yP, t, t)
	}
	c.VPADDQ(t, yD[to], yD[to])
}

// carryChain carries d as lanesAVX2 does: d0→d1, d3→d4; d1→d2, d4→d0
// (times 5); d2→d3, d0→d1; d3→d4.
func (g *gen) carryChain() {
	g.carry(0, 1, false, yLo)
	g.carry(3, 4, false, yHi)
	g.carry(1, 2, false, yLo)
	g.carry(4, 0, true, yHi)
	g.carry(2, 3, false, yLo)
	g.carry(0, 1, false, yHi)
	g.carry(3, 4, false, yLo)
}

// record returns the instructions emit adds (scaffold.Record), for
// scaffold.Interleave.
func (g *gen) record(emit func()) []*ir.Instruction {
	ins, err := scaffold.Record(&g.c, emit)
	if err != nil {
		g.fail(err)
	}
	return ins
}

// Software prefetch, as kernels/_asm/fused does it: one sequential stream
// pfGroups groups ahead, a PREFETCHT0 per line of the group·64 bytes a step
// consumes.
const pfGroups = 2

func (g *gen) prefetch() {
	for off := 0; off < group*stepLen; off += 64 {
		g.c.PREFETCHT0(mem(rPf, off))
	}
	g.c.ADDQ(operand.U32(group*stepLen), rPf)
}

// reduce mirrors crcmath.Reduce on lane x (unreflected, w = 16:
// zmmcrc.Reduce), with xFin = {Final[0], 0} and xMuP = {Mu, Poly}; the CRC
// is left zero-extended in out. The temporaries are lane registers, free
// after the last step.
func reduce(c *build.Context, x, xFin, xMuP reg.VecPhysical, out reg.GPPhysical) {
	t := xmm(yLo)
	zmmcrc.Reduce(c, x, xFin, xMuP, t, xmm(yHi), xmm(yL), width)
	c.VMOVQ(t, out)
	c.MOVWQZX(out.As16(), out)
}

func (g *gen) kernel() {
	c := g.c
	c.Function("fusedPolyCopyAVX")
	c.Attributes(attr.NOSPLIT)
	c.Signature(kernelSig())
	// The frame: the blocks left, the guard and sum pointers, Fold[1], the
	// lane accumulators.
	cnt := c.AllocLocal(8)
	dstPtr := c.AllocLocal(8)
	sumsPtr := c.AllocLocal(8)
	g.hmem = c.AllocLocal(32 * limbs)

	c.Load(c.Param("dst").Base(), rPf)
	c.MOVQ(rPf, dstPtr)
	c.Load(c.Param("dst").Len(), rPf)
	c.MOVQ(rPf, cnt)
	c.Load(c.Param("sums").Base(), rPf)
	c.MOVQ(rPf, sumsPtr)
	c.Load(c.Param("h").Base(), rH)
	c.Load(c.Param("p").Base(), rP)
	c.Load(c.Param("stride"), rS1)
	c.Load(c.Param("key"), rKey)
	scaffold.CopyOffset(c, rP, rQd)
	c.Comment("Block j of a group starts at p + j*stride.")
	c.LEAQ(operand.Mem{Base: rS1, Index: rS1, Scale: 2}, rS3)
	c.Comment("Fold[1], kept in X15.")
	c.Load(c.Param("tab"), rCur)
	c.VMOVDQU(mem(rCur, tableFold+16*1), xK1)

	c.Label("group")
	c.MOVQ(rP, rCur)
	c.Load(c.Param("blockLen"), rN)
	c.LEAQ(operand.Mem{Base: rP, Index: rS1, Scale: uint8(group * pfGroups)}, rPf)
	c.Comment("The lanes start from zero, the CRC-32C registers from all ones.")
	c.VPXOR(yP, yP, yP)
	for k := 0; k < limbs; k++ {
		c.VMOVDQU(yP, g.hmem.Offset(32*k))
	}
	for j := 0; j < group; j++ {
		c.MOVL(operand.U32(0xffffffff), rCRC[j].As32())
	}
	c.Comment("The first 64 bytes of each block: copied and folded.")
	g.prefetch()
	c.LEAQ(operand.Mem{Base: rCur, Index: rQd, Scale: 1}, rQ)
	g.foldStep(true)
	c.ADDQ(operand.U32(stepLen), rCur)
	c.SUBQ(operand.U32(stepLen), rN)
	c.JZ(operand.LabelRef("last"))

	c.Comment("Every step: copy and fold the next 64 bytes of each block; the",
		"CRC-32C streams and the Poly1305 lanes over the 64 bytes before,",
		"read from q; the two interleaved.")
	c.Label("loop")
	g.prefetch()
	c.LEAQ(operand.Mem{Base: rCur, Index: rQd, Scale: 1}, rQ)
	fold := g.record(func() { g.foldStep(false) })
	lag := g.record(func() { g.lagStep(-stepLen, func(k int) operand.Mem { return g.hmem.Offset(32 * k) }) })
	scaffold.Interleave(g.c, fold, lag)
	c.ADDQ(operand.U32(stepLen), rCur)
	c.SUBQ(operand.U32(stepLen), rN)
	c.JNZ(operand.LabelRef("loop"))

	c.Label("last")
	c.Comment("The CRC-32C and the lanes over the last step's bytes, still at rQ;",
		"the lane accumulators to h.")
	g.lagStep(0, func(k int) operand.Mem { return mem(rH, 32*k) })

	c.Comment("The guards (Barrett) and the finalised CRC-32C of the group.")
	xFin, xMuP := xmm(yD[0]), xmm(yD[1]) // the lanes are stored
	c.Load(c.Param("tab"), rN)
	c.VMOVDQU(mem(rN, tableFinal), xFin)
	c.VMOVDQU(mem(rN, tableMu), xMuP)
	c.MOVQ(dstPtr, rCur)
	c.MOVQ(sumsPtr, rQ)
	for j := 0; j < group; j++ {
		reduce(c, acc[j], xFin, xMuP, rN)
		c.MOVW(rN.As16(), mem(rCur, 2*j))
		c.NOTL(rCRC[j].As32())
		c.MOVL(rCRC[j].As32(), mem(rQ, 4*j))
	}
	c.ADDQ(operand.U32(2*group), rCur)
	c.MOVQ(rCur, dstPtr)
	c.ADDQ(operand.U32(4*group), rQ)
	c.MOVQ(rQ, sumsPtr)
	c.ADDQ(operand.U32(8*hWords), rH)
	c.LEAQ(operand.Mem{Base: rP, Index: rS1, Scale: group}, rP)
	c.SUBQ(operand.U32(group), cnt)
	c.JNZ(operand.LabelRef("group"))
	c.VZEROUPPER()
	c.RET()
}

func writeStubs(warning string) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\n\n//go:build !purego\n\npackage keyedcopy\n\n", warning)
	fmt.Fprintf(&b, "import \"github.com/difctl/difctl/kernels/internal/crcmath\"\n\n")
	fmt.Fprintf(&b, `// Byte offsets of the crcmath.RevFoldTable fields the kernel reads.
const (
	fusedTableFold  = %d
	fusedTableFinal = %d
	fusedTableMu    = %d
	fusedTablePoly  = %d
)

// Shape of the kernel: blocks per group, block lengths a multiple of
// fusedStep, the laneState words per group, the key table's words.
const (
	fusedGroup    = %[5]d
	fusedStep     = %[7]d
	fusedHWords   = %[6]d
	fusedKeyWords = %[8]d
)

// fusedPolyCopyAVX copies the blocks p[i*stride:][:blockLen] to q at the
// same offsets and sets, for every i < len(dst), dst[i] to the
// CRC-16/T10-DIF and sums[i] to the CRC-32C (both from their initial
// values, finalised) of the bytes written to q, and leaves in
// h[%[6]d*(i/%[5]d):][:%[6]d] the Poly1305 lane accumulators of group i/%[5]d (limb k of
// block l of the group at word 4k+l, radix 2^26, unreduced, from h = 0, 2^128
// pad bit on every chunk) of the same bytes, under the powers r..r^4 of key
// (poly1305's lane key layout): %[5]d blocks at once, one pass.
//
// Preconditions: len(dst) is a positive multiple of %[5]d; len(sums) >= len(dst);
// len(h) >= %[6]d*len(dst)/%[5]d; blockLen is a positive multiple of %[7]d; stride >=
// blockLen; len(p) and len(q) >= (len(dst)-1)*stride + blockLen, the blocks
// of q not overlapping those of p; tab is the T10-DIF fold table; the CPU
// has AVX2, PCLMULQDQ and SSE4.2. It reads only the blocks of p and q and
// writes only the blocks of q, dst, sums and h.
//
//go:noescape
func fusedPolyCopyAVX(dst []uint16, sums []uint32, h []uint64, q, p []byte, blockLen, stride int, tab *crcmath.RevFoldTable, key *[%[8]d]uint64)

// Shape of the AVX-512 kernel: blocks per group, the h words per group,
// poly1305's IFMA key table's words, the byte offset of Rev in
// crcmath.RevFoldTable.
const (
	fusedZGroup    = %[9]d
	fusedZHWords   = %[10]d
	fusedZKeyWords = %[11]d
	fusedTableRev  = %[12]d
)

// fusedPolyCopyZ copies the blocks p[i*stride:][:blockLen] to q at the
// same offsets and sets, for every i < len(dst), dst[i] to the
// CRC-16/T10-DIF and sums[i] to the CRC-32C (both from their initial
// values, finalised) of the bytes written to q, and leaves in
// h[%[10]d*(i/%[9]d):][:%[10]d] the Poly1305 accumulators of pair i/%[9]d (limb k of
// block b of the pair at word 2k+b, radix 2^44, limbs below 2^44, 2^44 + 1
// and 2^42, from h = 0, 2^128 pad bit on every chunk) of the same bytes,
// under key (poly1305's IFMA key table): a pair of blocks at once, one pass.
//
// Preconditions: len(dst) is a positive multiple of %[9]d; len(sums) >= len(dst);
// len(h) >= %[10]d*len(dst)/%[9]d; blockLen is a positive multiple of 64; stride >=
// blockLen; len(p) and len(q) >= (len(dst)-1)*stride + blockLen, the blocks
// of q not overlapping those of p; tab is the T10-DIF fold table, tabR that
// of T10-DIF reflected, tab32 that of CRC-32C; the CPU has AVX-512 F, BW,
// IFMA, VPCLMULQDQ and GFNI. It reads only the blocks of p and q and writes
// only the blocks of q, dst, sums and h.
//
//go:noescape
func fusedPolyCopyZ(dst []uint16, sums []uint32, h []uint64, q, p []byte, blockLen, stride int, tab, tabR, tab32 *crcmath.RevFoldTable, key *[%[11]d]uint64)

`, tableFold, tableFinal, tableMu, tablePoly, group, hWords, stepLen, keyWords, zGroup, zHWords, key44Words, scaffold.TableRev)
	return scaffold.Go(b.Bytes())
}
