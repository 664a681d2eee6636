package main

// fusedPolyCopyZ: the AVX-512 form of the fused kernel, for CPUs with
// AVX-512 IFMA, VPCLMULQDQ and GFNI. One pass over each pair of blocks:
// every 64-byte row of a block is loaded once from p into a ZMM register,
// stored from it to q, and from that register
//
//   - its T10-DIF guard is folded in the reflected domain (VGF2P8AFFINEQB
//     reverses the bits of every byte, then two VPCLMULQDQ and a
//     VPTERNLOGD fold the block's accumulator forward by 64 bytes with
//     Fold[4] of the reflected table), as t10crc32c's fusedBlocksCopyZG
//     (kernels/_asm/fused, zmmcopy.go) does;
//   - its CRC-32C sector sum is folded the same way with the CRC-32C
//     table (no CRC32 stream: a stream reads its bytes from memory, from p,
//     which may change meanwhile, or back from q behind the stores, loads
//     the copy cannot spare; zmmcopy.go has the measurements);
//   - its Poly1305 chunks enter the eight 64-bit lanes of the IFMA
//     accumulators in the layout of kernels/_asm/poly1305's lanesIFMAS (a
//     pair of blocks, lane 2s+b holding chunks s, s+4, s+8, ... of block
//     b, the lo and hi words of a row of both blocks by one VPUNPCKLQDQ and
//     one VPUNPCKHQDQ), radix 2^44 with VPMADD52LUQ/HUQ, four rows a step:
//     h' = (h + v1)·r^16 + v2·r^12 + v3·r^8 + v4·r^4, the last step's
//     bracket times F (lane 2s+b r^(4-s)), each step's accumulators
//     started from its pad bits' part. The key table is poly1305's
//     ifmaKey (Key.IFMAKey), its layout the one lanesIFMAS reads.
//
// The rows go in order, as the folds need them; the multiplies of
// (h + row 0) come last in a step, so that the accumulators' chains take
// rows 1..3 first, which do not wait on the previous step's carries.
//
// What one pass gains. The two-pass form on these CPUs (keyedcopy's
// pair: fusedBlocksCopyZG, then lanesIFMAS over the copy, 16 KiB of
// blocks at a time) issues the same vector µops: the folds' VPCLMULQDQ
// and GF2P8AFFINEQB, the lanes' VPMADD52LUQ/HUQ, shuffles and carries, on
// ports 0 and 5 of Golden Cove, which bound both. One pass saves the
// second pass's loads (its rows, and the copy read back from L1) and lets
// the copy's stores and the source's misses overlap the arithmetic; each
// pair of blocks then ends with its own lane sums and CRC reductions, which
// weigh on short blocks. So keyedcopy takes this kernel for blocks from 2
// KiB and pair's passes below (docs/perf/keyedcopy-avx512.md has the
// measurements and llvm-mca's view of the loop). The sums as CRC32Q
// streams over q (port 1 instead of 5) measured no faster: a 512-bit µop
// on port 0 keeps port 1 from issuing (docs/perf/crc32c-avx512.md), and
// the IFMA multiplies are such µops.
//
// Registers: every ZMM register is taken in the loop. Z0, Z1 the rows of
// blocks 0 and 1; Z2..Z5 the lanes' lo and hi words, the limb and a
// temporary; Z6..Z8 h; Z9..Z14 the lo and hi accumulators; Z15, Z16 the
// limb masks; Z17, Z18 Fold[4] of the reflected T10-DIF and the CRC-32C
// tables; Z19 the bit-reversal matrix; Z20, Z21 the guards' accumulators,
// Z22, Z23 the sums'; Z24, Z25 the folds' product and reversed row;
// Z26..Z30 the key words of r^16; Z31 the CRC-32C's initial register. The
// key words of r^12, r^8 and r^4 are broadcast memory operands ({1to8}),
// F's full vectors (only the last step takes them).
//
// After a pair: the four streams of each block summed and carried into
// lanes 0 and 1 (lanesIFMAS's sum, the same bounds: limbs below 2^44,
// 2^44 + 1, 2^42), stored to h; the four CRC accumulators' lanes folded
// into one each (lane l by Fold[3-l]: the 64 bytes at Rev[61] of its
// table, the last lane kept through a mask) and transposed into the four
// lanes of one register, guards in lanes 0 and 1, sums in 2 and 3; the
// sums read back by two CRC32Q from zero each, the guards taken back to the
// unreflected domain (bits, then bytes) and Barrett-reduced with the
// T10-DIF table's Final and Mu, as fusedBlocksCopyZG ends its groups.

import (
	"fmt"
	"go/types"

	"github.com/difctl/difctl/kernels/_asm/internal/ifma"
	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
	"github.com/difctl/difctl/kernels/_asm/internal/zmmcrc"

	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/gotypes"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// The AVX-512 kernel's shape: blocks a group (a pair), rows a step, the h
// words of a pair (three radix-2^44 limbs of two blocks).
const (
	zGroup  = 2
	zRows   = 4
	zHWords = 3 * zGroup
)

// The key table: poly1305's ifmaKey (kernels/poly1305/poly1305_lanes44.go),
// in the layout of kernels/_asm/internal/ifma's Key* constants.
const key44Words = ifma.KeyWords

// zPrefetch is how far ahead in q each row prefetches (PREFETCHT0), as
// fusedBlocksCopyZG does: the later store then finds its line owned.
const zPrefetch = 1024

var (
	zRow             = [2]reg.VecPhysical{reg.Z0, reg.Z1}
	zLo, zHi, zL, zT = reg.Z2, reg.Z3, reg.Z4, reg.Z5
	zH               = [3]reg.VecPhysical{reg.Z6, reg.Z7, reg.Z8}
	zDLo             = [3]reg.VecPhysical{reg.Z9, reg.Z10, reg.Z11}
	zDHi             = [3]reg.VecPhysical{reg.Z12, reg.Z13, reg.Z14}
	zM44, zM42       = reg.Z15, reg.Z16
	zKT, zKC, zBrev  = reg.Z17, reg.Z18, reg.Z19
	zGAcc            = [2]reg.VecPhysical{reg.Z20, reg.Z21}
	zSAcc            = [2]reg.VecPhysical{reg.Z22, reg.Z23}
	zCT, zCE         = reg.Z24, reg.Z25
	zK16             = [5]reg.VecPhysical{reg.Z26, reg.Z27, reg.Z28, reg.Z29, reg.Z30}
	zInit            = reg.Z31

	zrKey, zrH      = reg.RDI, reg.R8
	zrS             = reg.R9           // stride
	zrBase, zrQBase = reg.R10, reg.R13 // the pair's block 0 in p and q
	zrP, zrQ        = reg.RSI, reg.R14 // the step's row of block 0 in p and q
	zrN             = reg.RCX          // rows left
	zrDst, zrSums   = reg.R11, reg.R12 // the pair's guard and sum
	zrCnt, zrT      = reg.RBX, reg.RDX
)

type zgen struct {
	c *build.Context
	// DATA: the byte reversal of a lane (16 bytes), the bit-reversal
	// matrix, the limb masks, and the mask of a vector's last lane.
	bswap, bitrev, masks, last4 operand.Mem
	frame                       operand.Mem
	a                           *ifma.Arith // the Poly1305 arithmetic
}

// zSig: fusedPolyCopyZ(dst []uint16, sums []uint32, h []uint64, q, p
// []byte, blockLen, stride int, tab, tabR, tab32 *crcmath.RevFoldTable, key
// *[280]uint64).
func zSig() *gotypes.Signature {
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
		scaffold.Param("tabR", scaffold.RevFoldTable),
		scaffold.Param("tab32", scaffold.RevFoldTable),
		scaffold.Param("key", types.NewPointer(types.NewArray(u64, key44Words))),
	}, nil)
}

// blockMem is byte disp of block b of the pair from base (block 1 a stride
// on).
func blockMem(base reg.Register, b, disp int) operand.Mem {
	if b == 0 {
		return mem(base, disp)
	}
	return operand.Mem{Base: base, Index: zrS, Scale: 1, Disp: disp}
}

// fold is a = a·x^512 ⊕ d in the reflected domain (zmmcrc.Fold) with k
// = Fold[4] in every lane.
func (z *zgen) fold(a, k, d reg.VecPhysical) { zmmcrc.Fold(z.c, 0x00, 0x11, k, a, zCT, d) }

// row emits row t of the step at zrP: both blocks' 64 bytes loaded,
// stored to q, folded into the guards and the sums (first: the block's
// first row, which starts them), then split into the limbs of the
// chunk-vector, use called with each in zL.
func (z *zgen) row(t int, first bool, use func(i int)) {
	c := z.c
	for b, r := range zRow {
		c.VMOVDQU64(blockMem(zrP, b, 64*t), r)
	}
	for b, r := range zRow {
		c.VMOVDQU64(r, blockMem(zrQ, b, 64*t))
		c.PREFETCHT0(blockMem(zrQ, b, 64*t+zPrefetch))
	}
	z.rowFolds(first)
	z.rowLanes(use)
}

// rowFolds is row's CRC folds, after the loads and stores.
func (z *zgen) rowFolds(first bool) {
	c := z.c
	for b, r := range zRow {
		if first {
			c.VGF2P8AFFINEQB(operand.U8(0), zBrev, r, zGAcc[b])
			c.VPXORQ(zInit, r, zSAcc[b])
			continue
		}
		c.VGF2P8AFFINEQB(operand.U8(0), zBrev, r, zCE)
		z.fold(zGAcc[b], zKT, zCE)
		z.fold(zSAcc[b], zKC, r)
	}
}

// rowLanes is row's Poly1305 part: the split of the rows into limbs.
func (z *zgen) rowLanes(use func(i int)) { z.a.Limbs(zRow[0], zRow[1], use) }

// keyZ is the key of r^(4e), e = 1..4 (r^16 from its registers, the
// others broadcast from the key), or of F (e = 0, full vectors of the
// key).
func keyZ(e int) ifma.Key {
	switch e {
	case 4:
		return ifma.Key{Word: func(w int) operand.Op { return zK16[w] }}
	case 0:
		return ifma.Key{Word: func(w int) operand.Op { return mem(zrKey, 8*(ifma.KeyF+8*w)) }}
	}
	return ifma.Key{Word: func(w int) operand.Op { return mem(zrKey, 8*(ifma.KeyB+5*(e-1)+w)) }, Bcst: true}
}

// step emits a step over the next rows rows of the pair (ifma's Step: an
// ordinary one, last false, of four rows, or the last of 1..4), the rows
// in order as the folds need them, and moves the pointers on. first: the
// step holds the blocks' first rows, which start the CRCs.
func (z *zgen) step(rows int, last, first bool) {
	z.a.Step(rows, last, true, func(t int, use func(i int)) { z.row(t, first && t == 0, use) })
	z.c.ADDQ(operand.U32(64*rows), zrP)
	z.c.ADDQ(operand.U32(64*rows), zrQ)
}

// sumStreams sums the four streams of each block into lanes 0 and 1,
// carries them fully and stores limb k of block b to h at 8(2k+b)
// (ifma's SumStreams).
func (z *zgen) sumStreams() {
	z.a.SumStreams(func(k int) operand.Mem { return mem(zrH, 16*k) })
}

// crcEnd emits the end of a pair's CRCs: the four accumulators' lanes
// folded each into one lane, a transpose into one register (guards in
// lanes 0, 1, sums in 2, 3), the sums finalised from two CRC32Q of their
// lanes from zero, the guards back to the unreflected domain and
// Barrett-reduced. The lane registers are free here.
func (z *zgen) crcEnd() {
	c := z.c
	kR, kRC := zDHi[0], zDHi[1]
	c.Load(c.Param("tabR"), zrT)
	c.VMOVDQU64(mem(zrT, scaffold.TableRev+16*61), kR)
	c.Load(c.Param("tab32"), zrT)
	c.VMOVDQU64(mem(zrT, scaffold.TableRev+16*61), kRC)
	// w_j = a_j's lanes times {Fold[3], Fold[2], Fold[1], 0} of its table,
	// plus its last lane as it is: congruent to a_j, in one lane's reach
	// once the lanes are summed.
	accs := []reg.VecPhysical{zGAcc[0], zGAcc[1], zSAcc[0], zSAcc[1]}
	w := [4]reg.Register{zH[0], zH[1], zH[2], zDLo[0]}
	for j, a := range accs {
		k := kR
		if j >= 2 {
			k = kRC
		}
		zmmcrc.FoldLanes(c, 0x00, 0x11, k, z.last4, a, zT, w[j])
	}
	// Transpose: lane j of the result is w_j's four lanes summed.
	zz := zL
	zmmcrc.Transpose4(c, w, [2]reg.Register{zDLo[1], zDLo[2]},
		[3]reg.Register{zLo, zLo, zLo}, [3]reg.Register{zHi, zHi, zHi}, zz)
	z.sumLanes(zz)
	c.Comment("The guards: lanes 0 and 1, bits of every byte and then the bytes",
		"reversed (the unreflected domain), Barrett-reduced.")
	c.VGF2P8AFFINEQB(operand.U8(0), zBrev, zz, zz)
	c.VBROADCASTI32X4(z.bswap, zT)
	c.VPSHUFB(zT, zz, zz)
	fin, muP := zDLo[0], zDLo[1]
	c.Load(c.Param("tab"), zrT)
	c.VBROADCASTI32X4(mem(zrT, tableFinal), fin)
	c.VBROADCASTI32X4(mem(zrT, tableMu), muP)
	zmmcrc.ReduceZ(c, zz, fin, muP, zLo, zHi, zT, width)
	c.VMOVDQU64(zz, z.frame)
	for b := 0; b < zGroup; b++ {
		c.MOVWQZX(z.frame.Offset(16*b), zrT)
		c.MOVW(zrT.As16(), mem(zrDst, 2*b))
	}
}

// sumLanes finalises the folded sums from lanes 2 and 3 of zz.
func (z *zgen) sumLanes(zz reg.VecPhysical) {
	c := z.c
	c.VMOVDQU64(zz, z.frame)
	c.Comment("The sums: lanes 2 and 3, each a 16-byte message congruent to its",
		"block, through CRC32Q from zero.")
	for b := 0; b < zGroup; b++ {
		c.XORL(zrT.As32(), zrT.As32())
		c.CRC32Q(z.frame.Offset(16*(2+b)), zrT)
		c.CRC32Q(z.frame.Offset(16*(2+b)+8), zrT)
		c.NOTL(zrT.As32())
		c.MOVL(zrT.As32(), mem(zrSums, 4*b))
	}
}

// kernelZ emits fusedPolyCopyZ.
func (z *zgen) kernelZ() {
	c := z.c
	c.Function("fusedPolyCopyZ")
	c.Attributes(attr.NOSPLIT)
	c.Signature(zSig())
	z.frame = c.AllocLocal(64)

	c.Load(c.Param("dst").Base(), zrDst)
	c.Load(c.Param("dst").Len(), zrCnt)
	c.SHRQ(operand.U8(1), zrCnt)
	c.Load(c.Param("sums").Base(), zrSums)
	c.Load(c.Param("h").Base(), zrH)
	c.Load(c.Param("p").Base(), zrBase)
	c.Load(c.Param("q").Base(), zrQBase)
	c.Load(c.Param("stride"), zrS)
	c.Load(c.Param("key"), zrKey)
	c.VPBROADCASTQ(z.masks, zM44)
	c.VPBROADCASTQ(z.masks.Offset(8), zM42)
	c.VPBROADCASTQ(z.bitrev, zBrev)
	c.Comment("Fold[4] of the reflected T10-DIF and of the CRC-32C tables.")
	c.Load(c.Param("tabR"), zrT)
	c.VBROADCASTI32X4(mem(zrT, tableFold+16*4), zKT)
	c.Load(c.Param("tab32"), zrT)
	c.VBROADCASTI32X4(mem(zrT, tableFold+16*4), zKC)
	c.Comment("The CRC-32C's initial register, XORed into a block's first bytes.")
	c.MOVL(operand.U32(0xffffffff), zrT.As32())
	c.VMOVQ(zrT, xmm(zInit))
	c.Comment("The key words of r^16, broadcast.")
	for w := 0; w < 5; w++ {
		c.VPBROADCASTQ(mem(zrKey, 8*(ifma.KeyB+5*3+w)), zK16[w])
	}

	c.Label("pairZ")
	c.Comment("A pair: blocks b = 0, 1 at p + b*stride; h from zero.")
	c.MOVQ(zrBase, zrP)
	c.MOVQ(zrQBase, zrQ)
	c.Load(c.Param("blockLen"), zrN)
	c.SHRQ(operand.U8(6), zrN)
	for k := 0; k < 3; k++ {
		c.VPXORQ(zH[k], zH[k], zH[k])
	}
	c.Comment("The first step, which starts the CRCs: four rows if more than four.")
	c.CMPQ(zrN, operand.U32(zRows+1))
	c.JB(operand.LabelRef("lastFZ"))
	z.step(zRows, false, true)
	c.SUBQ(operand.U32(zRows), zrN)
	c.CMPQ(zrN, operand.U32(zRows+1))
	c.JB(operand.LabelRef("lastZ"))
	c.Label("quadZ")
	z.step(zRows, false, false)
	c.SUBQ(operand.U32(zRows), zrN)
	c.CMPQ(zrN, operand.U32(zRows+1))
	c.JAE(operand.LabelRef("quadZ"))

	// The last 1..4 rows, then stream s times r^(4-s); the F variants
	// when they are the blocks' first rows too.
	for _, f := range []string{"", "F"} {
		c.Label("last" + f + "Z")
		c.CMPQ(zrN, operand.U32(2))
		c.JB(operand.LabelRef("last1" + f + "Z"))
		c.JZ(operand.LabelRef("last2" + f + "Z"))
		c.CMPQ(zrN, operand.U32(3))
		c.JZ(operand.LabelRef("last3" + f + "Z"))
		for rows := zRows; rows >= 1; rows-- {
			if rows < zRows {
				c.Label(fmt.Sprintf("last%d%sZ", rows, f))
			}
			z.step(rows, true, f == "F")
			c.JMP(operand.LabelRef("endZ"))
		}
	}

	c.Label("endZ")
	z.sumStreams()
	z.crcEnd()
	c.ADDQ(operand.U32(8*zHWords), zrH)
	c.ADDQ(operand.U32(2*zGroup), zrDst)
	c.ADDQ(operand.U32(4*zGroup), zrSums)
	c.LEAQ(operand.Mem{Base: zrBase, Index: zrS, Scale: zGroup}, zrBase)
	c.LEAQ(operand.Mem{Base: zrQBase, Index: zrS, Scale: zGroup}, zrQBase)
	c.DECQ(zrCnt)
	c.JNZ(operand.LabelRef("pairZ"))
	c.VZEROUPPER()
	c.RET()
}

// zData adds the AVX-512 kernel's constants to c.
func zData(c *build.Context, bswap operand.Mem) *zgen {
	z := &zgen{c: c, bswap: bswap}
	// The carries' times-5 temporary is zL, free once a row's limbs are
	// used.
	z.a = &ifma.Arith{
		C: c, H: zH, DLo: zDLo, DHi: zDHi,
		Lo: zLo, Hi: zHi, L: zL, T: zT, T5: zL,
		M44: zM44, M42: zM42,
		KeyBase: zrKey, Pow: keyZ,
	}
	z.bitrev = c.StaticGlobal("fusedPolyBitrev")
	c.DataAttributes(attr.RODATA | attr.NOPTR)
	// VGF2P8AFFINEQB matrix that reverses the bits of a byte: result bit i
	// is the parity of row byte 7-i ANDed with the source, and row byte
	// 7-i = 1<<(7-i) picks source bit 7-i.
	c.AddDatum(0, operand.U64(0x8040201008040201))
	z.masks = c.StaticGlobal("fusedPolyMasks44")
	c.DataAttributes(attr.RODATA | attr.NOPTR)
	// The radix-2^44 limb masks: M44 for limbs 0 and 1, M42 for limb 2
	// (bits 88..129).
	c.AddDatum(0, operand.U64(ifma.Mask44))
	c.AddDatum(8, operand.U64(ifma.Mask42))
	z.last4 = c.StaticGlobal("fusedPolyLast4")
	c.DataAttributes(attr.RODATA | attr.NOPTR)
	// All ones in the last 16-byte lane of a vector, zeros in the others.
	for i := 0; i < 8; i++ {
		v := uint64(0)
		if i >= 6 {
			v = ^uint64(0)
		}
		c.AddDatum(8*i, operand.U64(v))
	}
	return z
}
