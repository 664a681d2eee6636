// Command fused generates the amd64 kernels of package t10crc32c: the
// CRC-16/T10-DIF guard and the CRC-32C sector checksum of every block, both
// computed in one pass over the block's bytes.
//
// go generate in kernels/t10crc32c runs it:
//
//	go run -C ../_asm ./fused -out ../t10crc32c/zfused_amd64.s -stubs ../t10crc32c/zfused_amd64.go
//
// Why one pass costs about as much as the guard alone. The two CRCs run on
// different execution units: T10-DIF by carry-less folding on the multiplier
// (VPCLMULQDQ on YMM: two multiplies per 32 bytes, one multiply per about 2
// cycles on AMD Zen 3, so 8 bytes per cycle), CRC-32C by the SSE4.2 CRC32
// instruction on an integer ALU (four CRC32Q per 32 bytes, one per cycle
// with a latency of 3 cycles, 8 bytes per cycle). Every 32-byte step of a
// block feeds the same bytes to both: one vector load (byte-reversed for the
// unreflected T10-DIF) that the fold adds, and four CRC32Q that read the
// bytes from memory again, which the L1 cache serves.
//
// Shape. G = 4 blocks at once, p + j·stride for j = 0..3: per block one YMM
// fold accumulator (the fold chain of kernels/_asm/fold's foldBlocksAVX2:
// forward by 32 bytes with Fold[2], then the two 16-byte lanes collapsed with
// Fold[1], one more 16-byte lane if blockLen is an odd number of them, and
// Barrett reduction as crcmath.Reduce does) and one CRC32Q stream, so no
// CRC-32C merge is needed. Four streams give each CRC32 chain 16 cycles of
// issue per step against its 12 cycles of latency, and each fold chain 16
// cycles against its 5 (multiply and XOR). The multiplier stays the limit:
// 2 multiplies per 32 bytes plus 7 per block at the end.
//
// Copy. fusedBlocksCopyAVX2 (t10crc32c.BlocksCopy) also stores every
// vector it loads, as loaded, to q at the same offset, folds that register,
// and runs the CRC32Q streams over the bytes in q, so the guard and the sum
// are of the bytes the caller gets even if p changes meanwhile. Reading the
// sums from q measured faster than taking them from the loaded register
// (VMOVQ, VPEXTRQ, VEXTRACTI128 into a GPR). The CRC32Q streams run one
// step behind the loads: each step reads the vectors the step before
// stored, which have left the store queue, rather than loading 8-byte
// pieces of a 32-byte store just issued (store-to-load forwarding).
// Reading the sums from p instead ran as fast, but would let a p that
// changes meanwhile give a sum of other bytes. docs/perf/poly1305-generator.md
// ("The CRC kernels") has the figures.
//
// The constants are never in the assembly: the kernel reads the
// crcmath.RevFoldTable passed as its last argument (Fold[1], Fold[2],
// Final, Mu and Poly at fixed offsets; a test in t10crc32c checks them).
// The only datum is the byte-reversal shuffle. The tail of blockLen mod 16
// bytes and the blocks that do not fill a group are left to the Go code.
//
// The output depends only on the flags, so regenerating is reproducible.
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
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// Byte offsets of the crcmath.RevFoldTable fields (scaffold's doc fixes them).
const (
	tableFold  = scaffold.TableFold
	tableFinal = scaffold.TableFinal
	tableMu    = scaffold.TableMu
	tablePoly  = scaffold.TablePoly
)

// Kernel shape.
const (
	group  = 4  // blocks interleaved
	width  = 16 // T10-DIF
	minLen = 64 // documented minimum blockLen
)

// vecLen is the bytes per fold step of the kernel being generated: 32 in
// the AVX2 kernels (YMM, VPCLMULQDQ), 16 in the AVX ones (VEX encodings on
// XMM: PCLMULQDQ and AVX suffice, for CPUs without VPCLMULQDQ such as AMD
// Zen 2, where the multiplier allows 4 bytes per cycle either way).
var vecLen = 32

// variants are the kernels' widths: name suffix and vecLen.
var variants = []struct {
	suffix string
	vecLen int
}{{"AVX2", 32}, {"AVX", 16}}

func main() { scaffold.MainAsm("fused", generate) }

// generate returns the assembly and the Go declarations of the kernels,
// made by cmd.
func generate(cmd []string) (asm, src []byte, err error) {
	c := build.NewContext()
	c.ConstraintExpr("!purego")
	mask := c.StaticGlobal("fusedBswap")
	c.DataAttributes(attr.RODATA | attr.NOPTR)
	// PSHUFB control that reverses the 16 bytes of a lane: result byte i is
	// source byte 15-i (bytes 0f 0e .. 00, little-endian words).
	c.AddDatum(0, operand.U64(0x08090a0b0c0d0e0f))
	c.AddDatum(8, operand.U64(0x0001020304050607))
	for _, v := range variants {
		vecLen = v.vecLen
		blocks(c, mask, v.suffix, false)
		blocks(c, mask, v.suffix, true)
	}
	bitrev := c.StaticGlobal("fusedBitrev")
	c.DataAttributes(attr.RODATA | attr.NOPTR)
	// VGF2P8AFFINEQB matrix that reverses the bits of a byte: result bit i
	// is the parity of row byte 7-i ANDed with the source, and row byte
	// 7-i = 1<<(7-i) picks source bit 7-i.
	c.AddDatum(0, operand.U64(0x8040201008040201))
	blocksZ(c, mask, false, bitrev)
	blocksZ(c, mask, true, bitrev)
	blocksCopyZ(c, mask, bitrev)

	if asm, err = scaffold.Asm(c, cmd, "t10crc32c"); err != nil {
		return nil, nil, err
	}
	src, err = writeStubs(scaffold.Warning(cmd))
	return asm, src, err
}

// blocksSig is the kernels' signature, for the frame argument names.
func blocksSig(copy bool) *gotypes.Signature {
	return scaffold.BatchSig(copy,
		scaffold.Param("dst", types.NewSlice(scaffold.Word(16))),
		scaffold.Param("sums", types.NewSlice(scaffold.Word(32))))
}

func mem(base reg.Register, disp int) operand.Mem { return operand.Mem{Base: base, Disp: disp} }

// Registers. General purpose: the group's pointers and the four CRC-32C
// registers; vector: the four accumulators and the constants, all loaded
// once (the table pointer is not kept).
var (
	rDst, rSums  = reg.RDI, reg.R8
	rP, rS1, rS3 = reg.RSI, reg.R9, reg.R10 // group start, stride, 3·stride
	rCur, rN     = reg.R13, reg.RCX         // position in the blocks, bytes left
	rCRC         = []reg.GPPhysical{reg.RAX, reg.RBX, reg.R11, reg.R12}
	// The copying kernel: rQ is the step's position in q, rQd is q - p.
	rQ, rQd = reg.R14, reg.R15

	acc   = []reg.VecPhysical{reg.Y0, reg.Y1, reg.Y2, reg.Y3}
	yK2   = reg.Y8  // Fold[2] in both lanes: forward by 32 bytes
	yMask = reg.Y9  // byte reversal
	xK1   = reg.X13 // Fold[1]: forward by 16 bytes
	xFin  = reg.X4  // {Final[0], 0}
	xMuP  = reg.X5  // {Mu, Poly}
	yT1   = reg.Y11
	yData = reg.Y12
	yT3   = reg.Y14
)

func xmm(y reg.VecPhysical) reg.VecPhysical { return y.AsX().(reg.VecPhysical) }

// blockAddr is byte disp of block j of the group at the current position.
func blockAddr(j, disp int) operand.Mem { return addrAt(rCur, j, disp) }

// qAddr is blockAddr in q, with rQ set for the step.
func qAddr(j, disp int) operand.Mem { return addrAt(rQ, j, disp) }

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

// foldInto sets a = Hi(a)·k[0] ⊕ Lo(a)·k[1] ⊕ d, lane by lane. The lanes
// are byte-reversed, so Hi is the high quadword (immediate 0x01 takes the
// high quadword of a and the low one of k, 0x10 the opposite).
func foldInto(c *build.Context, a, k, d, t reg.VecPhysical) {
	c.VPCLMULQDQ(operand.U8(0x01), k, a, t)
	c.VPCLMULQDQ(operand.U8(0x10), k, a, a)
	c.VPXOR(t, a, a)
	c.VPXOR(d, a, a)
}

// crcSteps emits the CRC32Q of bytes off..off+8n-1 of every block of the
// group, interleaved across the blocks, read from p or, when copying, from
// q (what was stored there, so that the guard and the sum are of the same
// bytes).
func crcSteps(c *build.Context, off, n int, copy bool) {
	for i := 0; i < n; i++ {
		for j := 0; j < group; j++ {
			c.CRC32Q(srcAddr(j, off+8*i, copy), rCRC[j])
		}
	}
}

func srcAddr(j, disp int, copy bool) operand.Mem {
	if copy {
		return qAddr(j, disp)
	}
	return blockAddr(j, disp)
}

// loadBlock loads the vector of block j at the current position into r
// (XMM or YMM), stores it to q when copying, and byte-reverses r.
func loadBlock(c *build.Context, j int, r reg.VecPhysical, copy bool) {
	c.VMOVDQU(blockAddr(j, 0), r)
	if copy {
		c.VMOVDQU(r, qAddr(j, 0))
	}
	m := yMask
	if r.Size() == 16 {
		m = xmm(yMask)
	}
	c.VPSHUFB(m, r, r)
}

// Software prefetch. The G blocks of a group are read as G streams at
// once, one vector per block per step, and such interleaved streams do not
// train the hardware prefetchers the way one sequential stream does. So the
// kernel prefetches, as one sequential stream, the group pfGroups groups
// ahead: at the start of a group rPf points group·pfGroups·stride + pfDisp
// bytes past it, and every step (the group's first vectors included) issues
// a PREFETCHT0 for each line of the group·32 bytes the step consumes and
// moves rPf on by as much. With stride = blockLen (DIX data, a volume's
// data) the steps of a group cover that later group whole; wider strides
// leave the gaps between blocks to the hardware prefetcher. A prefetch never
// faults, so the last groups prefetching past the buffer is harmless. rPf
// is DX, which held the count of blocks left; that count lives in the frame
// now (one SUBQ to memory per group). BP would have been free too, but a
// kernel that uses it as a general register cannot be unwound by profilers
// that follow frame pointers (perf). kernels/_asm/fold does the same (see
// its pfGroups).
//
// The sequential prefetch replaced one that prefetched, per block, the
// line one group ahead at the same position, which measured slower on Zen
// 3 (the per-block loop's loads and stores alone, without arithmetic, took
// longer than the whole kernel with the sequential prefetch). Distances of
// 2 to 16 KiB, and PREFETCHT1, ran the same at 512-byte blocks; a fixed
// distance loses at 4096-byte blocks, where 4 KiB ahead is inside the
// group being read. docs/perf/poly1305-generator.md has the figures.
const (
	pfGroups = 2
	pfDisp   = 0
)

var rPf = reg.RDX

// prefetch issues the prefetches of one step and moves rPf on.
func prefetch(c *build.Context) {
	for off := 0; off < group*vecLen; off += 64 {
		c.PREFETCHT0(mem(rPf, off))
	}
	c.ADDQ(operand.U32(group*vecLen), rPf)
}

// step begins a loop step: the prefetches, then rQ pointed at the step's
// position in q when copying.
func step(c *build.Context, copy bool) {
	prefetch(c)
	if copy {
		c.LEAQ(operand.Mem{Base: rCur, Index: rQd, Scale: 1}, rQ)
	}
}

// reduce mirrors crcmath.Reduce on lane x (unreflected, w = 16:
// zmmcrc.Reduce). The CRC is left zero-extended in out.
func reduce(c *build.Context, x reg.VecPhysical, out reg.GPPhysical) {
	t := xmm(yT1)
	zmmcrc.Reduce(c, x, xFin, xMuP, t, xmm(yData), xmm(yT3), width)
	c.VMOVQ(t, out)
	c.MOVWQZX(out.As16(), out)
}

// blocks generates fusedBlocksX, or with copy fusedBlocksCopyX, which
// stores every vector it loads, as loaded, to q at the same offset, folds
// that register and runs the CRC32Q streams over the bytes in q. X is the
// suffix of the vecLen being generated.
func blocks(c *build.Context, mask operand.Mem, suffix string, copy bool) {
	name := "fusedBlocks" + suffix
	if copy {
		name = "fusedBlocksCopy" + suffix
	}
	ymm := vecLen == 32
	// The accumulators, the forward constant and the data register at the
	// kernel's width.
	accs := acc
	k, data, t1 := yK2, yData, yT1
	if !ymm {
		accs = []reg.VecPhysical{xmm(acc[0]), xmm(acc[1]), xmm(acc[2]), xmm(acc[3])}
		k, data, t1 = xK1, xmm(yData), xmm(yT1)
	}
	label := func(l string) string { return l + suffix }
	c.Function(name)
	c.Attributes(attr.NOSPLIT)
	c.Signature(blocksSig(copy))
	// The blocks left, in the frame: every register is taken.
	cnt := c.AllocLocal(8)
	c.Load(c.Param("dst").Base(), rDst)
	c.Load(c.Param("dst").Len(), rPf)
	c.MOVQ(rPf, cnt)
	c.Load(c.Param("sums").Base(), rSums)
	c.Load(c.Param("p").Base(), rP)
	c.Load(c.Param("stride"), rS1)
	if copy {
		scaffold.CopyOffset(c, rP, rQd)
	}
	c.Comment("Block j of a group starts at p + j*stride.")
	c.LEAQ(operand.Mem{Base: rS1, Index: rS1, Scale: 2}, rS3)
	c.Comment("The constants, from the table.")
	tab := rCur
	c.Load(c.Param("tab"), tab)
	if ymm {
		c.VBROADCASTI128(mem(tab, tableFold+16*2), yK2)
	}
	c.VMOVDQU(mem(tab, tableFold+16*1), xK1)
	c.VMOVDQU(mem(tab, tableFinal), xFin)
	c.VMOVDQU(mem(tab, tableMu), xMuP)
	if ymm {
		c.VBROADCASTI128(mask, yMask)
	} else {
		c.VMOVDQU(mask, xmm(yMask))
	}

	c.Label(label("group"))
	c.MOVQ(rP, rCur)
	c.Load(c.Param("blockLen"), rN)
	c.LEAQ(operand.Mem{Base: rP, Index: rS1, Scale: uint8(group * pfGroups), Disp: pfDisp}, rPf)
	prefetch(c)
	c.Comment(fmt.Sprintf("The first %d bytes of each block: the fold accumulators (T10-DIF", vecLen),
		"starts from zero) and the CRC-32C registers, from all ones.")
	if copy {
		c.LEAQ(operand.Mem{Base: rCur, Index: rQd, Scale: 1}, rQ)
	}
	for j := 0; j < group; j++ {
		loadBlock(c, j, accs[j], copy)
		c.MOVL(operand.U32(0xffffffff), rCRC[j].As32())
	}
	if !copy {
		crcSteps(c, 0, vecLen/8, false)
	}
	c.ADDQ(operand.U32(vecLen), rCur)
	c.SUBQ(operand.U32(vecLen), rN)

	c.Comment(fmt.Sprintf("Every step: fold each accumulator forward by %d bytes onto the", vecLen),
		fmt.Sprintf("block's next %d bytes, and run the same bytes through its CRC32Q stream.", vecLen),
		"blockLen >= 64, so there is at least one step.")
	c.Label(label("loop"))
	step(c, copy)
	// The copying kernel's CRC32Q streams run one step behind, over the
	// vectors the previous step stored to q (see "Copy." above).
	lag := 0
	if copy {
		lag = -vecLen
	}
	for j := 0; j < group; j++ {
		loadBlock(c, j, data, copy)
		foldInto(c, accs[j], k, data, t1)
		c.CRC32Q(srcAddr(j, lag, copy), rCRC[j])
	}
	for i := 1; i < vecLen/8; i++ {
		for j := 0; j < group; j++ {
			c.CRC32Q(srcAddr(j, lag+8*i, copy), rCRC[j])
		}
	}
	c.ADDQ(operand.U32(vecLen), rCur)
	c.SUBQ(operand.U32(vecLen), rN)
	c.CMPQ(rN, operand.U32(vecLen))
	c.JAE(operand.LabelRef(label("loop")))
	if copy {
		c.Comment("The CRC32Q of the last step's vectors, still at rQ.")
		crcSteps(c, 0, vecLen/8, true)
	}

	if ymm {
		c.Comment("Collapse each accumulator's two lanes: lane 0 folded by Fold[1],",
			"lane 1 added as is.")
		for j := 0; j < group; j++ {
			c.VEXTRACTI128(operand.U8(1), acc[j], xmm(yT3))
			foldInto(c, xmm(acc[j]), xK1, xmm(yT3), xmm(yT1))
		}
		c.Comment("An odd 16-byte lane left: one more fold by Fold[1] and two CRC32Q.")
		c.TESTQ(rN, rN)
		c.JZ(operand.LabelRef(label("reduce")))
		if copy {
			c.LEAQ(operand.Mem{Base: rCur, Index: rQd, Scale: 1}, rQ)
		}
		for j := 0; j < group; j++ {
			loadBlock(c, j, xmm(yData), copy)
			foldInto(c, xmm(acc[j]), xK1, xmm(yData), xmm(yT1))
		}
		crcSteps(c, 0, 2, copy)
	}

	c.Label(label("reduce"))
	c.Comment("The guards (Barrett) and the finalised CRC-32C of the group.")
	for j := 0; j < group; j++ {
		reduce(c, xmm(acc[j]), rN)
		c.MOVW(rN.As16(), mem(rDst, 2*j))
		c.NOTL(rCRC[j].As32())
		c.MOVL(rCRC[j].As32(), mem(rSums, 4*j))
	}
	c.ADDQ(operand.U32(2*group), rDst)
	c.ADDQ(operand.U32(4*group), rSums)
	c.LEAQ(operand.Mem{Base: rP, Index: rS1, Scale: group}, rP)
	c.SUBQ(operand.U32(group), cnt)
	c.JNZ(operand.LabelRef(label("group")))
	c.VZEROUPPER()
	c.RET()
}

func writeStubs(warning string) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\n\n//go:build !purego\n\npackage t10crc32c\n\n", warning)
	fmt.Fprintf(&b, "import \"github.com/difctl/difctl/kernels/internal/crcmath\"\n\n")
	fmt.Fprintf(&b, `// Byte offsets of the crcmath.RevFoldTable fields that the fused kernels read.
const (
	fusedTableFold  = %d
	fusedTableFinal = %d
	fusedTableMu    = %d
	fusedTablePoly  = %d
	fusedTableRev   = %d
	fusedTableSize  = %d
)

// Shape of the fused kernels: blocks per group, shortest block.
const (
	fusedGroup  = %d
	fusedMinLen = %d
)

`, tableFold, tableFinal, tableMu, tablePoly, scaffold.TableRev, scaffold.TableSize, group, minLen)
	for _, v := range variants {
		desc, cpu := "a 32-byte VPCLMULQDQ fold accumulator (YMM, VEX\n// encodings)", "AVX2, VPCLMULQDQ and SSE4.2"
		if v.vecLen == 16 {
			desc, cpu = "a 16-byte PCLMULQDQ fold accumulator (XMM, VEX\n// encodings)", "AVX, PCLMULQDQ and SSE4.2"
		}
		fmt.Fprintf(&b, `// fusedBlocks%[1]s sets dst[i] to the CRC-16/T10-DIF and sums[i] to the
// CRC-32C (both from their initial values, finalised) of
// p[i*stride:][:blockLen] for every i < len(dst), in one pass: %[2]d blocks at
// once, each with %[3]s and a CRC32Q stream over the same bytes.
//
// Preconditions: len(dst) is a positive multiple of %[2]d; len(sums) >= len(dst);
// blockLen is a multiple of 16 and at least %[4]d; stride >= blockLen;
// len(p) >= (len(dst)-1)*stride + blockLen; tab is the T10-DIF fold table;
// the CPU has %[5]s. It reads only the blocks.
//
//go:noescape
func fusedBlocks%[1]s(dst []uint16, sums []uint32, p []byte, blockLen, stride int, tab *crcmath.RevFoldTable)

// fusedBlocksCopy%[1]s is fusedBlocks%[1]s that also copies the blocks to q:
// every vector it loads from p it stores, as loaded, to q at the same
// offset, and folds that register; the CRC32Q streams read the bytes from
// q. So dst[i] and sums[i] are both of the bytes written to q. It writes
// nothing else of q.
//
// Preconditions: those of fusedBlocks%[1]s, and the same for q as for p; the
// blocks of q do not overlap those of p.
//
//go:noescape
func fusedBlocksCopy%[1]s(dst []uint16, sums []uint32, q, p []byte, blockLen, stride int, tab *crcmath.RevFoldTable)

`, v.suffix, group, desc, minLen, cpu)
	}
	fmt.Fprintf(&b, `// fusedBlocksZ sets dst[i] to the CRC-16/T10-DIF and sums[i] to the
// CRC-32C (both from their initial values, finalised) of
// p[i*stride:][:blockLen] for i < %[1]d·groups, in one pass, %[1]d blocks at once:
// every guard folded on a ZMM register, the sums of blocks 0, 2, 4, 6 folded
// and those of 1, 3, 5, 7 through CRC32Q streams (kernels/_asm/fused, zmm.go).
//
// Preconditions: groups >= 1; blockLen is a multiple of 64 and at least 64;
// stride >= blockLen; tab is the T10-DIF fold table, tab32 the CRC-32C one;
// the CPU has AVX512F, AVX512BW, VPCLMULQDQ and SSE4.2.
// It reads only the blocks.
//
//go:noescape
func fusedBlocksZ(dst *uint16, sums *uint32, p *byte, groups, blockLen, stride int, tab, tab32 *crcmath.RevFoldTable)

// fusedBlocksZG is fusedBlocksZ with the guard folded in the reflected
// domain (every byte's bits reversed by VGF2P8AFFINEQB), the sums of
// blocks 1, 4 and 7 through CRC32Q streams and the other five folded
// (kernels/_asm/fused, zmm.go). tab is the T10-DIF fold table, tabR that
// of T10-DIF reflected (t10Reflected), tab32 the CRC-32C one; the CPU has,
// besides, GFNI with AVX-512.
//
//go:noescape
func fusedBlocksZG(dst *uint16, sums *uint32, p *byte, groups, blockLen, stride int, tab, tabR, tab32 *crcmath.RevFoldTable)

`, zGroup)
	fmt.Fprintf(&b, `// fusedBlocksCopyZG is fusedBlocksZG that also copies the blocks to q,
// %[1]d blocks a group, one after the other: every 64 bytes it loads from p it
// stores, as loaded, to q at the same offset, and folds both the guard and
// the sum from that register, so dst[i] and sums[i] are of the bytes
// written to q (kernels/_asm/fused, zmmcopy.go). It writes nothing else of
// q.
//
// Preconditions: groups >= 1; blockLen is a multiple of 128 and at least
// 128; stride >= blockLen; the same for q as for p; the blocks of q do not
// overlap those of p; tab, tabR and tab32 as for fusedBlocksZG; the CPU
// has AVX512F, AVX512BW, VPCLMULQDQ, GFNI and SSE4.2. The blocks need not
// be on a cache line.
//
//go:noescape
func fusedBlocksCopyZG(dst *uint16, sums *uint32, q, p *byte, groups, blockLen, stride int, tab, tabR, tab32 *crcmath.RevFoldTable)

// fusedCopyGroup is fusedBlocksCopyZG's blocks a group.
const fusedCopyGroup = %[1]d

`, zCopyGroup)
	return scaffold.Go(b.Bytes())
}
