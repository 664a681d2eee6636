// Command fold generates the amd64 carry-less-multiply fold kernels of one
// CRC and the Go layer around them: zfold_amd64.s, zfold_amd64.go (the
// declarations of the assembly, the CPU feature checks, the Update, Blocks
// and BlocksCopy wrappers of each kernel and the registration of the
// implementations) and zfold_amd64_test.go (the checks of the table offsets,
// of the registry and of the sub-block copy path).
//
// go generate in each kernel package runs it:
//
//	go run -C ../_asm ./fold -crc t10dif -dir ../crct10dif
//
// One description of the algorithm, parameterised by CRC width, bit order
// (reflected or not) and vector width, yields every kernel:
//
//	PCLMUL  128-bit PCLMULQDQ, SSE encodings, XMM registers;
//	AVX     128-bit PCLMULQDQ, VEX encodings, XMM registers (AVX + PCLMULQDQ);
//	AVX2    VPCLMULQDQ on YMM registers, VEX encodings (AVX2 + VPCLMULQDQ);
//	AVX512  VPCLMULQDQ on ZMM registers, EVEX encodings, VPTERNLOGD for
//	        three-way XORs (AVX512F/BW/VL + VPCLMULQDQ).
//
// Each kernel has two entry points. foldUpdateX(crc, p, tab) computes what
// crcmath.FoldUpdate does, in another order: XOR the CRC register into the
// first lane; from N vectors on, fold N vector accumulators forward by N
// vectors at a time while more than N vectors remain; then fold every
// accumulator and every remaining vector straight into the position of the
// message's last 16-byte lane, each lane by its own Fold constant (read from
// the reversed copy in crcmath.RevFoldTable), so these multiplies are
// independent of each other; add the last lane as is, shift in the tail of
// len(p)%16 bytes (a PSHUFB of the lane and a masked reload of the message's
// last 16 bytes, see gen.tail), and reduce (crcmath.Reduce: the Final
// constant, then Barrett). foldBlocksX(dst, p, blockLen, stride, tab) runs a
// fold chain on G blocks at once, one vector accumulator per block, so G
// independent multiply chains hide the multiplier's latency on short blocks.
//
// The constants are never in the assembly: every kernel reads the
// crcmath.RevFoldTable passed as its last argument, at fixed offsets (see
// tableFinal etc. below; a test in each kernel package checks them). The only
// data in the assembly are the byte-reversal shuffle of the unreflected CRC
// and the shift controls of the tail.
//
// The output depends only on the flags, so regenerating is reproducible.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"go/types"
	"path/filepath"
	"slices"
	"text/template"

	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/gotypes"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
)

// Byte offsets of the crcmath.RevFoldTable fields (scaffold's doc fixes them).
const (
	tableFold  = scaffold.TableFold
	tableFinal = scaffold.TableFinal
	tableMu    = scaffold.TableMu
	tablePoly  = scaffold.TablePoly
	tableRev   = scaffold.TableRev
	tableSize  = scaffold.TableSize
	maxFold    = scaffold.MaxFold
)

// crcSpec is what the kernels need to know about a CRC (the constants come
// from the table at run time) and how its package uses them.
type crcSpec struct {
	flag      string
	pkg       string
	width     int  // w
	reflected bool // RefIn = RefOut
	onesXor   bool // init = xorout = all ones (else both zero)
	// vecs are the kernels the package uses, by vecSpec.name.
	// crc32c takes only AVX512: on CPUs without AVX-512 its kernels that run
	// CRC32 streams beside the folds (crc32c_hybrid_amd64.go) are faster than
	// plain folding, so the AVX2, AVX and PCLMUL fold kernels would be
	// registered for the tests alone.
	vecs []string
	// min is the shortest input Update gives each kernel; below it the
	// package's updateGeneric runs (docs/performance.md, "Why the kernels are shaped as they are").
	min map[string]int
	// tail is the package's function for the last blockLen%16 bytes of a
	// block: its byte loop, or updateGeneric where that is the fastest.
	tail string
	// bitrev: the ZMM kernels of this unreflected CRC fold as the reflected
	// CRC of the same polynomial over bytes whose bits are reversed
	// (VGF2P8AFFINEQB, port 0) instead of reversing the bytes of every lane
	// (VPSHUFB, port 5 only at 512 bits, beside the two multiplies): the
	// register of a reflected CRC over bit-reversed bytes is the bit
	// reversal of the unreflected one's. They read foldTableRefl, the
	// reflected CRC's constants (crcgen).
	bitrev bool
	// subBlocks: BlocksCopy of contiguous 4 KiB blocks under the XMM
	// kernels runs the copying kernel over 1 KiB sub-blocks and joins the
	// partial CRCs (foldgo.UseSubBlocks; docs/performance.md, "Why the
	// kernels are shaped as they are"). The ZMM kernels take such blocks
	// one at a time instead (seqMinBlockLen).
	subBlocks bool
}

var allVecs = []string{"AVX512", "AVX2", "AVX", "PCLMUL"}

var crcs = []crcSpec{
	{flag: "t10dif", pkg: "crct10dif", width: 16, vecs: allVecs, tail: "updateBytes", subBlocks: true, bitrev: true,
		min: map[string]int{"PCLMUL": 16, "AVX": 16, "AVX2": 17, "AVX512": 17}},
	{flag: "crc32c", pkg: "crc32c", width: 32, reflected: true, onesXor: true, vecs: []string{"AVX512"},
		tail: "updateGeneric", min: map[string]int{"AVX512": 64}},
	{flag: "crc64nvme", pkg: "crc64nvme", width: 64, reflected: true, onesXor: true, vecs: allVecs,
		tail: "updateGeneric", subBlocks: true,
		min: map[string]int{"PCLMUL": 16, "AVX": 16, "AVX2": 16, "AVX512": 16}},
}

// bitrevMin: Update of bitrev CRCs runs the byte-reversing AVX-512 kernel
// below this length (glue.go, foldBitrevMin).
const bitrevMin = 1024

// foldMinBlockLen: Blocks folds groups of blocks from this length on;
// shorter blocks go one at a time through Update.
const foldMinBlockLen = 64

// vecSpec is one vector width.
type vecSpec struct {
	name  string // function name suffix
	impl  string // registry name of the implementation
	bytes int    // V: 16, 32 or 64
	accs  int    // N: accumulators of the Update main loop
	group int    // G: blocks interleaved by Blocks (4 or 8)
	desc  string // for the doc comments
	cpu   string // required features, for the doc comments
	has   string // the Go expression of those features
	// legacy: SSE encodings (two-operand forms, aligned memory operands).
	legacy bool
}

var vecs = []vecSpec{
	{name: "PCLMUL", impl: "pclmul", bytes: 16, accs: 8, group: 4, legacy: true,
		desc: "PCLMULQDQ on XMM registers (SSE encodings)",
		cpu:  "PCLMULQDQ, SSSE3 and SSE4.1",
		has:  "cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSSE3 && cpu.X86.HasSSE41"},
	// AVX is PCLMUL with VEX encodings: three-operand forms and unaligned
	// memory operands, so no register copies and fewer loads, for CPUs
	// with AVX but without VPCLMULQDQ (AMD Zen 2, Intel before Ice Lake).
	{name: "AVX", impl: "avx", bytes: 16, accs: 8, group: 4,
		desc: "PCLMULQDQ on XMM registers (VEX encodings)",
		cpu:  "AVX and PCLMULQDQ",
		has:  "cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSSE3 && cpu.X86.HasSSE41 && cpu.X86.HasAVX"},
	{name: "AVX2", impl: "avx2", bytes: 32, accs: 8, group: 4,
		desc: "VPCLMULQDQ on YMM registers (VEX encodings)",
		cpu:  "AVX2 and VPCLMULQDQ",
		has:  "cpu.X86.HasAVX2 && cpu.X86.HasPCLMULQDQ && x86.HasVPCLMULQDQ"},
	{name: "AVX512", impl: "avx512", bytes: 64, accs: 8, group: 4,
		desc: "VPCLMULQDQ on ZMM registers (EVEX encodings, VPTERNLOGD)",
		cpu:  "AVX512F, AVX512BW, AVX2, VPCLMULQDQ and GFNI",
		has: "cpu.X86.HasAVX2 && cpu.X86.HasPCLMULQDQ && x86.HasVPCLMULQDQ && cpu.X86.HasAVX512F && " +
			"cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasAVX512GFNI"},
}

// kernels returns the vector kernels of spec in the order of vecs, which
// is the order of the assembly (the registry takes them best first).
func (spec crcSpec) kernels() []vecSpec {
	var out []vecSpec
	for _, v := range vecs {
		if slices.Contains(spec.vecs, v.name) {
			out = append(out, v)
		}
	}
	return out
}

func main() {
	var crcFlag, dir string
	scaffold.Main("fold", func(fs *flag.FlagSet) {
		fs.StringVar(&crcFlag, "crc", "", "t10dif, crc32c or crc64nvme")
		fs.StringVar(&dir, "dir", "", "the kernel package's directory, relative to kernels/_asm")
	}, func(cmd []string) ([]scaffold.File, error) {
		i := slices.IndexFunc(crcs, func(c crcSpec) bool { return c.flag == crcFlag })
		if i < 0 || dir == "" {
			return nil, scaffold.Usage("fold -crc t10dif|crc32c|crc64nvme -dir DIR")
		}
		return generate(crcs[i], dir, cmd)
	})
}

// generate returns the files of spec's kernels in dir, made by cmd.
func generate(spec crcSpec, dir string, cmd []string) ([]scaffold.File, error) {
	asm, err := generateAsm(spec, cmd)
	if err != nil {
		return nil, err
	}
	files := []scaffold.File{{Path: filepath.Join(dir, "zfold_amd64.s"), Data: asm}}
	for _, t := range []struct {
		name string
		tmpl *template.Template
	}{{"zfold_amd64.go", glueTemplate}, {"zfold_amd64_test.go", glueTestTemplate}} {
		src, err := render(t.tmpl, spec, cmd)
		if err != nil {
			return nil, err
		}
		files = append(files, scaffold.File{Path: filepath.Join(dir, t.name), Data: src})
	}
	return files, nil
}

// generateAsm returns the assembly of spec's kernels.
func generateAsm(spec crcSpec, cmd []string) ([]byte, error) {
	ctx := build.NewContext()
	ctx.ConstraintExpr("!purego")
	var mask operand.Mem
	if !spec.reflected {
		mask = ctx.StaticGlobal("bswapMask")
		ctx.DataAttributes(attr.RODATA | attr.NOPTR)
		// PSHUFB control that reverses the 16 bytes of a lane: result byte
		// i is source byte 15-i (bytes 0f 0e .. 00, little-endian words).
		ctx.AddDatum(0, operand.U64(0x08090a0b0c0d0e0f))
		ctx.AddDatum(8, operand.U64(0x0001020304050607))
	}
	tailShuf := ctx.StaticGlobal("tailShuf")
	ctx.DataAttributes(attr.RODATA | attr.NOPTR)
	for i := 0; i < len(tailShufData); i += 8 {
		ctx.AddDatum(i, operand.U64(binary.LittleEndian.Uint64(tailShufData[i:])))
	}
	lane3 := ctx.StaticGlobal("lane3")
	ctx.DataAttributes(attr.RODATA | attr.NOPTR)
	for i := 0; i < 64; i += 8 {
		var v uint64
		if i >= 48 {
			v = ^uint64(0)
		}
		ctx.AddDatum(i, operand.U64(v))
	}
	var bitrevMatrix operand.Mem
	if spec.bitrev {
		bitrevMatrix = ctx.StaticGlobal("bitrevMatrix")
		ctx.DataAttributes(attr.RODATA | attr.NOPTR)
		// The GF(2) affine matrix of VGF2P8AFFINEQB that reverses the bits
		// of a byte: result bit i is the parity of source AND matrix byte
		// 7-i, so byte k = 1<<k selects source bit 7-i.
		ctx.AddDatum(0, operand.U64(0x8040201008040201))
	}
	for _, v := range spec.kernels() {
		cs, m := spec, mask
		if spec.bitrev && v.bytes == 64 {
			cs.reflected, m = true, bitrevMatrix
		} else {
			cs.bitrev = false
		}
		g := &gen{c: ctx, crc: cs, v: v, mask: m, tailShuf: tailShuf, lane3: lane3, sse: v.legacy}
		// The copying kernels keep the byte reversal: with the stores of
		// the copy, the bitrev form ran slower (T10-DIF BlocksCopy 512
		// against ISA-L 1.14-1.16 with the shuffle, 1.03-1.05 without).
		gc := &gen{c: ctx, crc: spec, v: v, mask: mask, tailShuf: tailShuf, lane3: lane3, sse: v.legacy}
		gc.crc.bitrev = false
		g.update()
		if cs.bitrev {
			// Short inputs keep the byte reversal too (foldUpdateAVX512Shuf,
			// below foldBitrevMin bytes): VGF2P8AFFINEQB's latency, on every
			// load, lengthens the chain that bounds a short Update.
			gc.suffix = "Shuf"
			gc.update()
		}
		g.blocks(false)
		gc.blocks(true)
		if v.bytes == 64 {
			gs := *gc
			gs.seq = true
			gs.blocks(true)
		}
	}
	return scaffold.Asm(ctx, cmd, spec.pkg)
}

// tailShufData is the table of the tail's byte shifts and mask (see
// gen.tail). Bytes 0..47 are PSHUFB controls: 16 times 0x80 (a zero byte),
// the identity 0..15, 16 times 0x80; the 16 bytes at 16+s shift a lane down
// by s bytes (result byte i is byte i+s), at 16-s up by s. Bytes 48..95 are
// 16 zero bytes, 16 times 0xff, 16 zero bytes: the 16 bytes at 48+t keep
// bytes 16-t..15, at 48+32-t bytes 0..t-1.
var tailShufData = func() []byte {
	b := make([]byte, 96)
	for i := 0; i < 16; i++ {
		b[i], b[16+i], b[32+i] = 0x80, byte(i), 0x80
		b[64+i] = 0xff
	}
	return b
}()

// Signatures, for avo's frame argument names.

func updateSig(w int) *gotypes.Signature {
	word := scaffold.Word(w)
	return scaffold.Signature([]*types.Var{
		scaffold.Param("crc", word),
		scaffold.Param("p", scaffold.Bytes),
		scaffold.Param("tab", scaffold.RevFoldTable),
	}, []*types.Var{scaffold.Param("ret", word)})
}

func blocksSig(w int, copy bool) *gotypes.Signature {
	return scaffold.BatchSig(copy, scaffold.Param("dst", types.NewSlice(scaffold.Word(w))))
}

// Register file.
var (
	xmm = []reg.VecPhysical{reg.X0, reg.X1, reg.X2, reg.X3, reg.X4, reg.X5, reg.X6, reg.X7,
		reg.X8, reg.X9, reg.X10, reg.X11, reg.X12, reg.X13, reg.X14, reg.X15,
		reg.X16, reg.X17, reg.X18, reg.X19, reg.X20, reg.X21, reg.X22, reg.X23,
		reg.X24, reg.X25, reg.X26, reg.X27, reg.X28, reg.X29, reg.X30, reg.X31}
	ymm = []reg.VecPhysical{reg.Y0, reg.Y1, reg.Y2, reg.Y3, reg.Y4, reg.Y5, reg.Y6, reg.Y7,
		reg.Y8, reg.Y9, reg.Y10, reg.Y11, reg.Y12, reg.Y13, reg.Y14, reg.Y15,
		reg.Y16, reg.Y17, reg.Y18, reg.Y19, reg.Y20, reg.Y21, reg.Y22, reg.Y23,
		reg.Y24, reg.Y25, reg.Y26, reg.Y27, reg.Y28, reg.Y29, reg.Y30, reg.Y31}
	zmm = []reg.VecPhysical{reg.Z0, reg.Z1, reg.Z2, reg.Z3, reg.Z4, reg.Z5, reg.Z6, reg.Z7,
		reg.Z8, reg.Z9, reg.Z10, reg.Z11, reg.Z12, reg.Z13, reg.Z14, reg.Z15,
		reg.Z16, reg.Z17, reg.Z18, reg.Z19, reg.Z20, reg.Z21, reg.Z22, reg.Z23,
		reg.Z24, reg.Z25, reg.Z26, reg.Z27, reg.Z28, reg.Z29, reg.Z30, reg.Z31}
)

// Fixed vector register roles (indices). Accumulators are 0..7.
const (
	rK     = 8  // fold constant of the current loop, broadcast to every lane
	rMask  = 9  // byte-reversal shuffle (unreflected CRCs)
	rSeed  = 10 // CRC register positioned in lane 0
	rT1    = 11 // temporaries
	rT2    = 12
	rK1    = 13 // Fold[1] for the 16-byte tail loop (XMM)
	rT3    = 14
	rT4    = 15
	rRev   = 16 // AVX512: {Fold[3], Fold[2], Fold[1], 0}, the lane collapse
	rData0 = 17 // AVX512: loads of the unreflected CRC (one per accumulator)
	rLane3 = 21 // AVX512: all ones in lane 3, zeros elsewhere
	rK8    = 22 // AVX512 Blocks: Fold[8], forward by 128 bytes (pairMinLen)
	rDataB = 23 // AVX512 Blocks: loads of the second accumulators (4 registers)
)

type gen struct {
	c        *build.Context
	crc      crcSpec
	v        vecSpec
	mask     operand.Mem
	tailShuf operand.Mem
	lane3    operand.Mem // 64 bytes: all ones in lane 3, zeros elsewhere
	// scratch, where set (the ZMM kernels), is 16 bytes of the frame that
	// reduce passes its result through, instead of a cross-lane move.
	scratch *operand.Mem
	sse     bool // legacy SSE encodings (the PCLMUL kernel)
	// finalLanes, in the non-copying ZMM Blocks kernel of a 64-bit
	// reflected CRC, has the lane collapse multiply by the constants of
	// the collapse and of Final at once (rRev holds them, see
	// loadFinalLanes), so that reduce starts at Barrett.
	finalLanes bool
	suffix     string // of the Update kernel's name
	tab        reg.GPPhysical
	// seq: the copying Blocks kernel takes one block at a time
	// (foldBlocksCopyXSeq, see blocks).
	seq bool
}

func (g *gen) lanes() int { return g.v.bytes / 16 }

// vec returns vector register i at width bytes (16, 32, 64).
func vec(i, bytes int) reg.VecPhysical {
	switch bytes {
	case 16:
		return xmm[i]
	case 32:
		return ymm[i]
	}
	return zmm[i]
}

func (g *gen) V(i int) reg.VecPhysical { return vec(i, g.v.bytes) }
func (g *gen) X(i int) reg.VecPhysical { return xmm[i] }

func mem(base reg.Register, disp int) operand.Mem { return operand.Mem{Base: base, Disp: disp} }

func (g *gen) fold(i int) operand.Mem { return mem(g.tab, tableFold+16*i) }

func width(r reg.VecPhysical) int { return int(r.Size()) }

// Immediates of the two multiplies of a fold: Hi·k[0] and Lo·k[1], where the
// constant register holds k[0] in its low quadword. Unreflected lanes keep Hi
// in the high quadword, reflected lanes in the low one (crcmath.Load).
func (g *gen) immHi() operand.U8 {
	if g.crc.reflected {
		return 0x00
	}
	return 0x01
}

func (g *gen) immLo() operand.U8 {
	if g.crc.reflected {
		return 0x11
	}
	return 0x10
}

// Instruction helpers: the register width picks the encoding (SSE in the
// PCLMUL kernel, VEX for XMM/YMM otherwise, EVEX for ZMM).

func (g *gen) load(dst reg.VecPhysical, m operand.Mem) {
	g.move(m, dst)
	g.transform(dst)
}

// transform turns loaded bytes into a lane of the folded CRC: reverses the
// bytes of each lane of an unreflected CRC, the bits of every byte in the
// bitrev kernels (rMask holds the shuffle or the matrix).
func (g *gen) transform(dst reg.VecPhysical) {
	switch {
	case g.crc.bitrev:
		g.c.VGF2P8AFFINEQB(operand.U8(0), vec(rMask, width(dst)), dst, dst)
	case !g.crc.reflected:
		g.shuffle(dst)
	}
}

// loadCopy loads the vector at m into dst, stores it unchanged to q, then
// byte-reverses dst for an unreflected CRC.
func (g *gen) loadCopy(dst reg.VecPhysical, m, q operand.Mem) {
	g.move(m, dst)
	g.move(dst, q)
	g.transform(dst)
}

// move is an unaligned vector load or store of the register's width.
func (g *gen) move(src, dst operand.Op) {
	r, ok := dst.(reg.VecPhysical)
	if !ok {
		r = src.(reg.VecPhysical)
	}
	switch {
	case width(r) == 64:
		g.c.VMOVDQU64(src, dst)
	case g.sse:
		g.c.MOVOU(src, dst)
	default:
		g.c.VMOVDQU(src, dst)
	}
}

func (g *gen) shuffle(r reg.VecPhysical) {
	m := vec(rMask, width(r))
	if g.sse {
		g.c.PSHUFB(m, r)
	} else {
		g.c.VPSHUFB(m, r, r)
	}
}

func (g *gen) bcast(dst reg.VecPhysical, m operand.Mem) {
	switch width(dst) {
	case 16:
		if g.sse {
			g.c.MOVOU(m, dst)
		} else {
			g.c.VMOVDQU(m, dst)
		}
	case 32:
		g.c.VBROADCASTI128(m, dst)
	default:
		g.c.VBROADCASTI32X4(m, dst)
	}
}

func (g *gen) xor(dst, a reg.VecPhysical, b operand.Op) {
	switch {
	case g.sse:
		if dst != a {
			g.c.MOVO(a, dst)
		}
		g.c.PXOR(b, dst)
	case width(dst) == 64:
		g.c.VPXORQ(b, a, dst)
	default:
		g.c.VPXOR(b, a, dst)
	}
}

// xor3 sets dst ^= a ^ b.
func (g *gen) xor3(dst, a reg.VecPhysical, b operand.Op) {
	if width(dst) == 64 {
		g.c.VPTERNLOGD(operand.U8(0x96), b, a, dst)
		return
	}
	g.xor(dst, dst, a)
	g.xor(dst, dst, b)
}

// clmul sets dst = a.q(imm&1) · k.q(imm>>4&1).
func (g *gen) clmul(imm operand.U8, k operand.Op, a, dst reg.VecPhysical) {
	if g.sse {
		if dst != a {
			g.c.MOVO(a, dst)
		}
		g.c.PCLMULQDQ(imm, k, dst)
		return
	}
	g.c.VPCLMULQDQ(imm, k, a, dst)
}

// foldInto sets acc = Hi(acc)·k[0] ⊕ Lo(acc)·k[1] ⊕ data, t a temporary.
func (g *gen) foldInto(acc reg.VecPhysical, k operand.Op, data operand.Op, t reg.VecPhysical) {
	g.clmul(g.immHi(), k, acc, t)
	g.clmul(g.immLo(), k, acc, acc)
	g.xor3(acc, t, data)
}

// data returns the operand holding the vector at m: the memory itself where
// the instruction can take it (reflected, VEX/EVEX), else a register loaded
// (and byte-reversed) from it.
func (g *gen) data(m operand.Mem, scratch reg.VecPhysical) operand.Op {
	if g.crc.reflected && !g.sse && !g.crc.bitrev {
		return m
	}
	g.load(scratch, m)
	return scratch
}

func (g *gen) psrldq(n int, src, dst reg.VecPhysical) {
	if g.sse {
		if dst != src {
			g.c.MOVO(src, dst)
		}
		g.c.PSRLDQ(operand.U8(n), dst)
		return
	}
	g.c.VPSRLDQ(operand.U8(n), src, dst)
}

func (g *gen) pslldq(n int, src, dst reg.VecPhysical) {
	if g.sse {
		if dst != src {
			g.c.MOVO(src, dst)
		}
		g.c.PSLLDQ(operand.U8(n), dst)
		return
	}
	g.c.VPSLLDQ(operand.U8(n), src, dst)
}

// movqZX copies the low quadword of src to dst and clears the rest.
func (g *gen) movqZX(src, dst reg.VecPhysical) {
	if g.sse {
		g.c.MOVQ(src, dst)
		return
	}
	g.c.VMOVQ(src, dst)
}

func (g *gen) toGPR(src reg.VecPhysical, dst reg.GPPhysical) {
	if g.sse {
		g.c.MOVQ(src, dst)
		return
	}
	g.c.VMOVQ(src, dst)
}

func (g *gen) highToGPR(src reg.VecPhysical, dst reg.GPPhysical) {
	if g.sse {
		g.c.PEXTRQ(operand.U8(1), src, dst)
		return
	}
	g.c.VPEXTRQ(operand.U8(1), src, dst)
}

func (g *gen) fromGPR(src reg.GPPhysical, dst reg.VecPhysical) {
	if g.sse {
		g.c.MOVQ(src, dst)
		return
	}
	g.c.VMOVQ(src, dst)
}

// seedVector puts the CRC register held in AX (stored form, w bits) into
// lane 0 of rSeed, where crcmath.InitLane XORs it: the low quadword of a
// reflected lane, the top bits of the high quadword of an unreflected one.
// The rest of the register is zero.
func (g *gen) seedVector() {
	if !g.crc.reflected {
		g.c.SHLQ(operand.U8(64-g.crc.width), reg.RAX)
	}
	if g.crc.bitrev {
		// The reflected register is the bit reversal of the w-bit
		// register: its bytes swapped here, their bits below (rMask
		// loaded).
		if g.crc.width != 16 {
			panic("bitrev: 16-bit CRCs only")
		}
		g.c.ROLW(operand.U8(8), reg.AX)
		g.fromGPR(reg.RAX, g.X(rSeed))
		g.transform(g.X(rSeed))
		return
	}
	g.fromGPR(reg.RAX, g.X(rSeed))
	if !g.crc.reflected {
		g.pslldq(8, g.X(rSeed), g.X(rSeed))
	}
}

func (g *gen) loadMask() {
	switch {
	case g.crc.bitrev:
		g.c.VPBROADCASTQ(g.mask, g.V(rMask))
	case !g.crc.reflected:
		g.bcast(g.V(rMask), g.mask)
	}
}

// collapseLanes folds the lanes of vector register acc into its lane 0 (the
// XMM register of the same number), leaving the result there.
// crcmath.FoldUpdate's collapse, within one vector: lane i of m is folded by
// Fold[m-1-i] and the last lane is added as is.
func (g *gen) collapseLanes(acc int) {
	switch g.lanes() {
	case 1:
	case 2:
		g.c.VEXTRACTI128(operand.U8(1), g.V(acc), g.X(rT3))
		g.foldInto(g.X(acc), g.X(rK1), g.X(rT3), g.X(rT1))
	case 4:
		// rRev = {Fold[3], Fold[2], Fold[1], Fold[0] = 0}: one multiply
		// pair folds lanes 0..2 and clears lane 3, which is added back.
		g.clmul(g.immHi(), g.V(rRev), g.V(acc), g.V(rT1))
		g.clmul(g.immLo(), g.V(rRev), g.V(acc), g.V(rT2))
		g.c.VEXTRACTI32X4(operand.U8(3), g.V(acc), g.X(rT3))
		g.c.VPXORQ(g.V(rT2), g.V(rT1), g.V(rT1))
		g.c.VEXTRACTI64X4(operand.U8(1), g.V(rT1), ymm[rT2])
		g.c.VPXOR(ymm[rT2], ymm[rT1], ymm[rT1])
		g.c.VEXTRACTI128(operand.U8(1), ymm[rT1], g.X(rT2))
		g.c.VPXOR(g.X(rT2), g.X(rT1), g.X(rT1))
		g.c.VPXOR(g.X(rT3), g.X(rT1), g.X(acc))
	}
}

// pairMinLen is the shortest block the ZMM Blocks kernels fold with two
// accumulators.
const pairMinLen = 256

// pairs is the part of the ZMM Blocks kernels that folds each block of at
// least pairMinLen bytes with two accumulators, j and 4+j, 64 bytes apart,
// each forward by 128 bytes a step: 2G independent multiply chains rather
// than G, which on Emerald Rapids the latency of VPCLMULQDQ bounds. It
// starts after the blocks' first vectors (in accumulators 0..G-1) and
// ends with the pairs merged (j forward by 64 bytes, plus 4+j) into
// accumulators 0..G-1, fewer than 128 bytes left, at lSingle, the loop of
// single steps. Shorter blocks go straight there.
func (g *gen) pairs(G int, n, cur reg.GPPhysical, prefetch func(), dataAt func(j, disp int, scratch reg.VecPhysical) operand.Op, lSingle string) {
	c := g.c
	if G > 4 {
		panic("pairs: accumulators 4..7 hold blocks for G > 4")
	}
	lPair, lMerge := g.label("bpair"), g.label("bmerge")
	c.CMPQ(n, operand.U32(pairMinLen-64))
	c.JB(operand.LabelRef(lSingle))
	c.Comment("The second vector of every block starts its second accumulator.")
	prefetch()
	for j := 0; j < G; j++ {
		d := dataAt(j, 0, g.V(4+j))
		if d != g.V(4+j) {
			c.VMOVDQU64(d, g.V(4+j))
		}
	}
	c.ADDQ(operand.U32(64), cur)
	c.SUBQ(operand.U32(64), n)
	c.Label(lPair)
	c.CMPQ(n, operand.U32(128))
	c.JB(operand.LabelRef(lMerge))
	prefetch()
	prefetch()
	for j := 0; j < G; j++ {
		g.foldInto(g.V(j), g.V(rK8), dataAt(j, 0, g.dataReg(j)), g.V(rT1))
		g.foldInto(g.V(4+j), g.V(rK8), dataAt(j, 64, g.V(rDataB+j)), g.V(rT2))
	}
	c.ADDQ(operand.U32(128), cur)
	c.SUBQ(operand.U32(128), n)
	c.JMP(operand.LabelRef(lPair))
	c.Label(lMerge)
	for j := 0; j < G; j++ {
		g.foldInto(g.V(j), g.V(rK), g.V(4+j), g.V(rT1))
	}
}

// collapseLanesMem is collapseLanes for the G ZMM accumulators 0..G-1 with
// no cross-lane instruction, which would compete with the multiplies for
// port 5 on Intel cores: every accumulator's products with rRev, and its
// last lane (kept by the mask rLane3), go to a 64-byte slot of the frame,
// and the four lanes are read back as XMM operands and summed. slots is
// the frame area (64·G+64 bytes; the slots start at its first 64-byte
// boundary, so no store splits a cache line); R11 points at the slots,
// which it must be free for (G = 4).
func (g *gen) collapseLanesMem(G int, slots operand.Mem) {
	c := g.c
	if G > 4 {
		panic("collapseLanesMem: R11 holds a stride multiple for G > 4")
	}
	base := reg.R11
	c.LEAQ(slots.Offset(63), base)
	c.ANDQ(operand.I32(-64), base)
	for j := 0; j < G; j++ {
		if g.finalLanes {
			// Every lane multiplied, the last by Final's constants.
			g.clmul(g.immHi(), g.V(rRev), g.V(j), g.V(rT1))
			g.clmul(g.immLo(), g.V(rRev), g.V(j), g.V(rT2))
			g.xor(g.V(rT3), g.V(rT1), g.V(rT2))
		} else {
			c.VPANDQ(g.V(rLane3), g.V(j), g.V(rT3))
			g.clmul(g.immHi(), g.V(rRev), g.V(j), g.V(rT1))
			g.clmul(g.immLo(), g.V(rRev), g.V(j), g.V(rT2))
			g.xor3(g.V(rT3), g.V(rT1), g.V(rT2))
		}
		c.VMOVDQU64(g.V(rT3), mem(base, 64*j))
	}
	for j := 0; j < G; j++ {
		x, y := g.X(j), g.X(rT1)
		c.VMOVDQU(mem(base, 64*j), x)
		c.VPXOR(mem(base, 64*j+16), x, x)
		c.VMOVDQU(mem(base, 64*j+32), y)
		c.VPTERNLOGD(operand.U8(0x96), mem(base, 64*j+48), y, x)
	}
}

func (g *gen) loadLaneConsts() {
	if g.lanes() > 1 {
		g.c.Comment("Fold[1] for the 16-byte lanes.")
		g.bcast(g.X(rK1), g.fold(1))
	}
	if g.lanes() == 4 {
		g.c.Comment("{Fold[3], Fold[2], Fold[1], Fold[0]}: lane i of 4 folds by Fold[3-i].")
		g.c.VMOVDQU64(g.fold(0), g.V(rRev))
		g.c.VSHUFI64X2(operand.U8(0x1b), g.V(rRev), g.V(rRev), g.V(rRev))
		g.c.Comment("All ones in lane 3: the lane collapseLanesMem keeps as is.")
		g.c.VMOVDQU64(g.lane3, g.V(rLane3))
	}
}

// loadFinalLanes sets rRev to the constants that fold the four lanes of a
// 64-byte accumulator into T, the input of Barrett's reduction, at once, for
// a 64-bit reflected CRC (w = 64, where T = V·x^64 has 128 bits, as the sum
// of four lanes' products has): lane l, 3-l lanes before the last, holds
// V_l = Hi·x^64 + Lo, and V_l·x^(128(3-l))·x^64 ≡ Hi·C(128(4-l)) ⊕
// Lo·C(128(3-l)+64), so lane l of rRev is {Fold[4-l][1], Fold[3-l][0]},
// the last lane's {C(128), C(64)}; C(128) = Fold[1][1] is Final's constant,
// and C(64), the stored form of x^63 reflected, is 1 (Fold[0] is zero).
// Per block that saves Final's multiply and the shift of Lo (two port-5
// µops) and the mask of the last lane.
func (g *gen) loadFinalLanes() {
	c := g.c
	if g.crc.width != 64 || !g.crc.reflected || g.v.bytes != 64 {
		panic("loadFinalLanes: 64-bit reflected CRCs on ZMM only")
	}
	c.Comment("{Fold[4-l][1], Fold[3-l][0]} in lane l, {C(128), C(64) = 1} in the last:",
		"the lane collapse and Final in one multiply pair.")
	c.VMOVDQU64(mem(g.tab, tableRev+16*60), g.V(rT1)) // Fold[4], Fold[3], Fold[2], Fold[1]
	c.VMOVDQU64(mem(g.tab, tableRev+16*61), g.V(rT2)) // Fold[3], Fold[2], Fold[1], Fold[0]
	c.VPSLLDQ(operand.U8(8), g.V(rT2), g.V(rT2))      // Fold[3-l][0] in the high quadword
	c.VPUNPCKHQDQ(g.V(rT2), g.V(rT1), g.V(rRev))
	c.VPSRLQ(operand.U8(63), g.V(rLane3), g.V(rT1)) // 1 in both quadwords of lane 3
	c.VPSLLDQ(operand.U8(8), g.V(rT1), g.V(rT1))    // 1 in its high quadword
	c.VPORQ(g.V(rT1), g.V(rRev), g.V(rRev))
}

// reduce mirrors crcmath.Reduce on lane x: T = Hi·C(64+w) ⊕ Lo·x^w, then
// Barrett with mu and p. It leaves the CRC register (stored form, before
// xorout) in out, zero-extended. It uses rT1, rT2, rT3 and, in the SSE
// kernel, rT4 and rK; GPR tmp is clobbered for w = 64.
func (g *gen) reduce(x reg.VecPhysical, out reg.GPPhysical) {
	w := g.crc.width
	if g.scratch != nil && g.crc.reflected && w == 32 {
		// CRC-32C: the CRC32 instruction reduces the lane on its own
		// port: the register of a zero start updated with the lane's 16
		// bytes is x·x^32 mod P, what the multiplies below compute.
		g.c.VMOVDQU(x, *g.scratch)
		g.c.XORL(out.As32(), out.As32())
		g.c.CRC32Q(*g.scratch, out)
		g.c.CRC32Q(g.scratch.Offset(8), out)
		return
	}
	t, s, c := g.X(rT1), g.X(rT2), g.X(rT3)
	var final, muPoly operand.Op = mem(g.tab, tableFinal), mem(g.tab, tableMu)
	if g.sse {
		// Legacy SSE memory operands must be aligned; the table is not.
		g.c.MOVOU(final, g.X(rT4))
		g.c.MOVOU(muPoly, g.X(rK))
		final, muPoly = g.X(rT4), g.X(rK)
	}
	if !g.crc.reflected {
		g.clmul(0x01, final, x, t) // Hi·C(64+w), Hi in the high quadword
		g.movqZX(x, s)             // Lo
		g.pslldq(w/8, s, s)        // Lo·x^w
		g.xor(t, t, s)             // T, degree < 64+w
		g.psrldq(w/8, t, s)        // Q = T div x^w in the low quadword
		g.clmul(0x00, muPoly, s, c)
		g.psrldq(8, c, c)           // floor(Q·mu_low / x^64)
		g.xor(s, s, c)              // q = floor(T / P)
		g.clmul(0x10, muPoly, s, c) // q·p
		g.xor(t, t, c)              // low w bits: T mod x^w ⊕ q·p mod x^w
		g.toGPR(t, out)
		switch w {
		case 16:
			g.c.MOVWQZX(out.As16(), out)
		case 32:
			// (avo drops a MOVL of a register to itself.)
			g.c.SHLQ(operand.U8(32), out)
			g.c.SHRQ(operand.U8(32), out)
		}
		return
	}
	// Reflected: bit i of the lane is the coefficient of x^(127-i).
	if g.finalLanes {
		// x is T already (collapseLanesMem, loadFinalLanes).
		g.movo(x, t)
	} else {
		g.clmul(0x00, final, x, t) // Hi·C(64+w), Hi in the low quadword
		g.psrldq(8, x, s)          // Lo moved to the low quadword: Lo·x^64
		if w < 64 {
			g.pslldq((64-w)/8, s, s) // Lo·x^w
		}
		g.xor(t, t, s) // T, in bits 64-w .. 127
	}
	q := t
	if w < 64 {
		g.psrldq((64-w)/8, t, s) // Q = T div x^w in the low quadword
		q = s
	}
	g.clmul(0x00, muPoly, q, c) // x·Q·mu_low
	g.shiftq(true, 1, c, c)     // floor(Q·mu_low / x^64) in the low quadword
	g.xor(s, q, c)              // q
	g.clmul(0x10, muPoly, s, c) // x·q·p
	// CRC = top w bits of T ⊕ the w bits of x·q·p ending at bit 126, which
	// are the top w bits of x·q·p shifted left by one over 128 bits.
	g.shiftq(true, 1, c, s) // per quadword
	if w == 64 {
		// The bit that crosses from the low quadword into the high one.
		g.shiftq(false, 63, c, c)
		g.pslldq(8, c, c)
		g.xor(s, s, c)
	}
	g.xor(t, t, s)
	if g.crc.bitrev {
		// Back to the unreflected register: the bits of its bytes
		// reversed here, the bytes swapped below.
		g.transform(t)
	}
	if g.scratch != nil {
		// The high quadword through the frame: VPEXTRQ takes port 5.
		g.c.VMOVDQU(t, *g.scratch)
		g.c.MOVQ(g.scratch.Offset(8), out)
	} else {
		g.highToGPR(t, out)
	}
	if w < 64 {
		g.c.SHRQ(operand.U8(64-w), out)
	}
	if g.crc.bitrev {
		g.c.ROLW(operand.U8(8), out.As16())
	}
}

// shiftq shifts each quadword of src by n into dst, left or right.
func (g *gen) shiftq(left bool, n int, src, dst reg.VecPhysical) {
	switch {
	case g.sse:
		if dst != src {
			g.c.MOVO(src, dst)
		}
		if left {
			g.c.PSLLQ(operand.U8(n), dst)
		} else {
			g.c.PSRLQ(operand.U8(n), dst)
		}
	case left:
		g.c.VPSLLQ(operand.U8(n), src, dst)
	default:
		g.c.VPSRLQ(operand.U8(n), src, dst)
	}
}

// finish applies xorout to the register in r.
func (g *gen) finish(r reg.GPPhysical) {
	if !g.crc.onesXor {
		return
	}
	switch g.crc.width {
	case 32:
		g.c.NOTL(r.As32())
	case 64:
		g.c.NOTQ(r)
	default:
		g.c.XORQ(operand.U32(1<<g.crc.width-1), r)
	}
}

func (g *gen) label(s string) string { return s + g.v.name }

// update generates foldUpdateX. The message is a run of L = n/16 whole
// 16-byte lanes and a tail of t = n%16 bytes. Lane i is worth
// lane·x^(128(L-1-i)) relative to the last lane, so it folds straight into
// the last lane's position with Fold[L-1-i]: every vector is multiplied by the
// constants of its own lanes (read from the table at an address computed from
// the remaining length, lane order reversed) and summed, with no dependency
// between vectors: the multiplier's throughput, not its latency, bounds
// short messages. Long messages first run the N-accumulator loop, which folds
// every accumulator forward by N vectors; when fewer than N vectors remain
// the accumulators fold straight into the last lane like memory vectors. The
// last lane (Fold[0] = 0) is added as is, the tail is shifted in (see tail),
// and the lane is reduced.
func (g *gen) update() {
	c := g.c
	V, N := g.v.bytes, g.v.accs
	name := "foldUpdate" + g.v.name + g.suffix
	c.Function(name)
	c.Attributes(attr.NOSPLIT)
	c.Signature(updateSig(g.crc.width))
	g.tab = reg.RDX
	// The frame passes (collapseMem, reduce's scratch) cost more latency
	// than the cross-lane moves they replace, and a short Update is bound
	// by its latency: they are the Blocks kernels' alone.
	g.scratch = nil
	p, rem, last, end, tail := reg.RSI, reg.RCX, reg.R9, reg.R11, reg.R8
	c.Load(c.Param("tab"), g.tab)
	c.Load(c.Param("p").Base(), p)
	c.Load(c.Param("p").Len(), rem)
	c.Load(c.Param("crc"), reg.RAX)
	c.Comment("The CRC register (xorout undone) goes into the first lane.")
	if g.crc.onesXor {
		g.finish(reg.RAX)
	}
	g.loadMask()
	g.seedVector()
	c.Comment("Tail length t, the last 16 bytes, whole lanes, the last whole lane.")
	c.MOVQ(rem, tail)
	c.ANDQ(operand.U32(15), tail)
	c.LEAQ(operand.Mem{Base: p, Index: rem, Scale: 1, Disp: -16}, end)
	c.ANDQ(operand.I32(-16), rem)
	c.LEAQ(operand.Mem{Base: p, Index: rem, Scale: 1, Disp: -16}, last)

	lLoop, lFinish, lDirect, lSteps := g.label("loop"), g.label("finish"), g.label("direct"), g.label("steps")
	stepN := N * V
	c.Comment(fmt.Sprintf("%d accumulators, %d bytes per iteration, from %d bytes on.", N, stepN, stepN))
	c.CMPQ(rem, operand.U32(stepN))
	c.JB(operand.LabelRef(lDirect))
	for j := 0; j < N; j++ {
		g.load(g.V(j), mem(p, j*V))
	}
	g.xor(g.V(0), g.V(0), g.V(rSeed))
	c.ADDQ(operand.U32(stepN), p)
	c.SUBQ(operand.U32(stepN), rem)
	c.Comment(fmt.Sprintf("Fold[%d]: forward by %d bytes.", N*g.lanes(), stepN))
	g.bcast(g.V(rK), g.fold(N*g.lanes()))
	c.Comment("The loop leaves the last lane to the direct folding (it is added as is")
	c.Comment("there, which an accumulator's folded last lane could not be).")
	c.CMPQ(rem, operand.U32(stepN+16))
	c.JB(operand.LabelRef(lFinish))
	c.Label(lLoop)
	for j := 0; j < N; j++ {
		d := g.data(mem(p, j*V), g.dataReg(j))
		g.foldInto(g.V(j), g.V(rK), d, g.V(rT1))
		if V == 64 {
			c.PREFETCHT0(mem(p, updatePfDist+j*V))
		}
	}
	c.ADDQ(operand.U32(stepN), p)
	c.SUBQ(operand.U32(stepN), rem)
	c.CMPQ(rem, operand.U32(stepN+16))
	c.JAE(operand.LabelRef(lLoop))

	c.Label(lFinish)
	g.revPointer(rem)
	c.Comment("Accumulator j folds into the last lane: its lanes are followed by")
	c.Comment("N-1-j vectors and the remaining lanes.")
	for j := 0; j < N; j++ {
		var k operand.Op = mem(revPtr, -(N-j)*V)
		if g.sse {
			g.c.MOVOU(k, g.V(rK))
			k = g.V(rK)
		}
		g.clmul(g.immHi(), k, g.V(j), g.V(rT1))
		g.clmul(g.immLo(), k, g.V(j), g.V(j))
		g.xor(g.V(j), g.V(j), g.V(rT1))
	}
	g.xorTree(N)
	c.Comment("The CRC register is in accumulator 0 now.")
	g.xor(g.X(rSeed), g.X(rSeed), g.X(rSeed))
	c.JMP(operand.LabelRef(lSteps))

	c.Label(lDirect)
	g.revPointer(rem)
	g.xor(g.V(0), g.V(0), g.V(0))
	c.CMPQ(rem, operand.U32(32))
	c.JB(operand.LabelRef(g.label("single")))

	c.Label(lSteps)
	g.directSteps(p, rem)
	g.xor(g.V(0), g.V(0), g.V(1))
	g.collapseWidth(0, V, 16)
	c.JMP(operand.LabelRef(g.label("raw")))

	c.Label(g.label("single"))
	c.Comment("A single lane: the CRC register alone.")
	g.movo(g.X(rSeed), g.X(0))

	c.Label(g.label("raw"))
	c.Comment("The last whole lane, as is.")
	g.xor(g.X(0), g.X(0), g.data16(mem(last, 0), g.X(rT2)))
	g.tail(g.X(0), tail, end)
	g.reduce(g.X(0), reg.RAX)
	g.finish(reg.RAX)
	switch g.crc.width {
	case 16:
		c.Store(reg.AX, c.ReturnIndex(0))
	case 32:
		c.Store(reg.EAX, c.ReturnIndex(0))
	default:
		c.Store(reg.RAX, c.ReturnIndex(0))
	}
	g.vzeroupper()
	c.RET()
}

// updatePfDist is how far ahead of its loads the ZMM Update loop prefetches
// (PREFETCHT0, one line per vector folded). Inputs longer than the 48 KiB L1
// come from L2, and the hardware prefetchers alone kept the loop at 0.95-0.96
// of ISA-L's by16_10 (which prefetches too) on CRC-64/NVME Checksum of 64 KiB
// and 1 MiB; 1 KiB ahead measured 0.99-1.05, 1.5 and 2 KiB no better
// (docs/perf/fold-avx512.md). A prefetch past the input's end never faults.
const updatePfDist = 1024

// vzeroupper ends a kernel that used YMM or ZMM registers. The XMM kernels
// (the SSE and the VEX.128 encodings) leave no upper state dirty, as VEX.128
// instructions zero the upper bits of their destinations, so they skip it:
// it costs a measurable share of a short Update
// (docs/perf/poly1305-generator.md).
func (g *gen) vzeroupper() {
	if g.v.bytes > 16 {
		g.c.VZEROUPPER()
	}
}

// revPtr points at the constants of the next vector of the direct folding in
// crcmath.RevFoldTable's Rev: with rem bytes of whole lanes left, a vector
// of m lanes has its last lane j = rem/16-m lanes before the last one and
// needs Fold[j+m-1] .. Fold[j], which are Rev[65-j-m] onwards, at
// tab + tableRev + 16*(65-rem/16): an address that does not depend on the
// vector width and moves on by the width of every vector consumed.
var revPtr = reg.R13

func (g *gen) revPointer(rem reg.GPPhysical) {
	g.c.LEAQ(mem(g.tab, tableRev+16*(maxFold+1)), revPtr)
	g.c.SUBQ(rem, revPtr)
}

// directSteps folds the vectors of the rem bytes of whole lanes at p (fewer
// than N+1 vectors) straight into the last lane, summed in accumulator 1;
// the CRC register rSeed (zero unless p is the start of the message) is
// added to the first vector. The steps are unrolled with fixed offsets from
// p and revPtr. Vectors of the kernel's width run while they fit; AVX512
// first takes one YMM vector when rem is an odd number of them. The last
// vector may hold the message's last lane, which its constant Fold[0]
// clears; the PCLMUL kernel stops before that lane instead.
func (g *gen) directSteps(p, rem reg.GPPhysical) {
	c := g.c
	V, N := g.v.bytes, g.v.accs
	lDone := g.label("stepsdone")
	g.xor(g.V(1), g.V(1), g.V(1))
	if V == 64 {
		lZ := g.label("zsteps")
		c.TESTQ(operand.U32(32), rem)
		c.JZ(operand.LabelRef(lZ))
		c.Comment("One YMM vector first, so that whole ZMM vectors remain.")
		g.directStep(32, p, 0, true)
		g.xor(g.X(rSeed), g.X(rSeed), g.X(rSeed))
		c.ADDQ(operand.U32(32), p)
		c.ADDQ(operand.U32(32), revPtr)
		c.SUBQ(operand.U32(32), rem)
		c.Label(lZ)
	}
	c.Comment(fmt.Sprintf("%d-byte vectors while they fit.", V))
	for i := 0; i < N; i++ {
		need := (i + 1) * V
		if V == 16 {
			need += 16 // not the last lane
		}
		c.CMPQ(rem, operand.U32(need))
		c.JB(operand.LabelRef(lDone))
		g.directStep(V, p, i*V, i == 0)
	}
	c.Label(lDone)
}

// directStep folds the w-byte vector at p+off into the last lane with the
// constants at revPtr+off and adds it to accumulator 1, with the CRC
// register added to the vector first if seed.
func (g *gen) directStep(w int, p reg.GPPhysical, off int, seed bool) {
	c := g.c
	v := func(i int) reg.VecPhysical { return vec(i, w) }
	k, t, u, d := v(rK), v(rT1), v(rT3), v(rT2)
	var kOp operand.Op = mem(revPtr, off)
	switch {
	case g.sse:
		// Legacy SSE memory operands must be aligned.
		c.MOVOU(kOp, k)
		kOp = k
	case g.crc.reflected && !seed && !g.crc.bitrev:
		// The multiplies of a reflected lane are symmetric (0x00, 0x11):
		// the data can be the memory operand, the constants a register.
		if w == 64 {
			c.VMOVDQU64(kOp, k)
		} else {
			c.VMOVDQU(kOp, k)
		}
		g.clmul(g.immHi(), mem(p, off), k, t)
		g.clmul(g.immLo(), mem(p, off), k, u)
		kOp = nil
	}
	if kOp != nil {
		g.load(d, mem(p, off))
		if seed {
			g.xor(d, d, v(rSeed))
		}
		g.clmul(g.immHi(), kOp, d, t)
		g.clmul(g.immLo(), kOp, d, u)
	}
	if w == 64 {
		g.xor3(v(1), t, u)
	} else {
		g.xor(t, t, u)
		g.xor(v(1), v(1), t)
	}
}

// collapseWidth adds the upper half of vector register r of from bytes to
// its lower half, down to to bytes. The lanes are already aligned.
func (g *gen) collapseWidth(r, from, to int) {
	for w := from; w > to; w /= 2 {
		h := vec(rT1, w/2)
		if w == 64 {
			g.c.VEXTRACTI64X4(operand.U8(1), vec(r, 64), h)
		} else {
			g.c.VEXTRACTI128(operand.U8(1), vec(r, 32), h)
		}
		g.xor(vec(r, w/2), vec(r, w/2), h)
	}
}

func (g *gen) movo(src, dst reg.VecPhysical) {
	if g.sse {
		g.c.MOVO(src, dst)
	} else {
		g.c.VMOVDQA(src, dst)
	}
}

// tail appends the t = tailLen (0..15) bytes that end at end+16 to the
// message whose last lane is x. The new last lane B is x without its first t
// bytes followed by the t bytes (read as part of the last 16 bytes of the
// message, which lie inside the buffer); the first t bytes of x become a lane
// C of their own, zero-padded in front, one lane before B. x = C·Fold[1] ⊕ B.
// In message order B is x shifted down by t bytes and C is x shifted up by
// 16-t; an unreflected lane holds the message bytes reversed, so there the
// shifts swap directions. The shifts are PSHUFB controls from tailShuf.
func (g *gen) tail(x reg.VecPhysical, tailLen, end reg.GPPhysical) {
	c := g.c
	lDone := g.label("notail")
	c.TESTQ(tailLen, tailLen)
	c.JZ(operand.LabelRef(lDone))
	tbl, neg := reg.R10, reg.R12
	c.LEAQ(g.tailShuf, tbl)
	c.MOVQ(tailLen, neg)
	c.NEGQ(neg)
	lb, cc, msk, k, tt := g.X(rT2), g.X(rT3), g.X(rT4), g.X(rK), g.X(rT1)
	// Control of B (shift by t) and C (shift by 16-t), and the mask of the
	// tail bytes in B.
	var bShift, cShift, mask operand.Mem
	if g.crc.reflected {
		bShift = operand.Mem{Base: tbl, Index: tailLen, Scale: 1, Disp: 16} // down t
		cShift = operand.Mem{Base: tbl, Index: tailLen, Scale: 1, Disp: 0}  // up 16-t
		mask = operand.Mem{Base: tbl, Index: tailLen, Scale: 1, Disp: 48}   // bytes >= 16-t
	} else {
		bShift = operand.Mem{Base: tbl, Index: neg, Scale: 1, Disp: 16}    // up t
		cShift = operand.Mem{Base: tbl, Index: neg, Scale: 1, Disp: 32}    // down 16-t
		mask = operand.Mem{Base: tbl, Index: neg, Scale: 1, Disp: 48 + 32} // bytes < t
	}
	g.load(lb, mem(end, 0))
	if g.sse {
		c.MOVOU(mask, msk)
		c.PAND(msk, lb)
		c.MOVOU(cShift, k)
		c.MOVO(x, cc)
		c.PSHUFB(k, cc)
		c.MOVOU(bShift, k)
		c.PSHUFB(k, x)
		c.PXOR(lb, x)
		c.MOVOU(g.fold(1), k)
	} else {
		c.VPAND(mask, lb, lb)
		c.VPSHUFB(cShift, x, cc)
		c.VPSHUFB(bShift, x, x)
		c.VPXOR(lb, x, x)
		k = nil
	}
	var kOp operand.Op = g.fold(1)
	if k != nil {
		kOp = k
	}
	g.clmul(g.immHi(), kOp, cc, tt)
	g.clmul(g.immLo(), kOp, cc, cc)
	g.xor3(x, tt, cc)
	c.Label(lDone)
}

// dataReg is the register an unreflected (or SSE) load for accumulator j
// goes through.
func (g *gen) dataReg(j int) reg.VecPhysical {
	if g.v.bytes == 64 {
		return g.V(rData0 + j%4)
	}
	return g.V(rT2)
}

func (g *gen) data16(m operand.Mem, scratch reg.VecPhysical) operand.Op {
	return g.data(m, scratch)
}

// xorTree XORs accumulators 0..n-1 pairwise into accumulator 0.
func (g *gen) xorTree(n int) {
	regs := make([]int, n)
	for i := range regs {
		regs[i] = i
	}
	for len(regs) > 1 {
		var next []int
		i := 0
		for ; i+2 < len(regs) && g.v.bytes == 64; i += 3 {
			g.xor3(g.V(regs[i]), g.V(regs[i+1]), g.V(regs[i+2]))
			next = append(next, regs[i])
		}
		for ; i+1 < len(regs); i += 2 {
			g.xor(g.V(regs[i]), g.V(regs[i]), g.V(regs[i+1]))
			next = append(next, regs[i])
		}
		if i < len(regs) {
			next = append(next, regs[i])
		}
		regs = next
	}
}

func (g *gen) store(r reg.GPPhysical, m operand.Mem) {
	switch g.crc.width {
	case 16:
		g.c.MOVW(r.As16(), m)
	case 32:
		g.c.MOVL(r.As32(), m)
	default:
		g.c.MOVQ(r, m)
	}
}

// Software prefetch of the interleaved Blocks loops. The G blocks of a
// group lie stride bytes apart, and G streams that each advance by one
// vector per step do not train the hardware prefetchers the way one
// sequential stream does: from DRAM, 512-byte blocks ran at about half the
// speed of Update. So the kernels prefetch as one sequential stream the
// group pfGroups groups ahead: at the start of a group rSeq points
// G·pfGroups·stride + pfDisp bytes past it, and every step (the group's
// first vectors included) issues a PREFETCHT0 for each line of the G·V
// bytes it consumes and moves rSeq on by as much. With stride = blockLen
// (DIX data, a volume's data) the steps of a group cover that later group
// whole; wider strides leave the gaps between blocks to the hardware
// prefetcher. A prefetch never faults, so the last groups prefetching past
// the buffer is harmless. rSeq is R8, which held the count of blocks left;
// that count lives in the frame now (one SUBQ to memory per group). BP would
// have been free too, but a kernel that uses it as a general register cannot
// be unwound by profilers that follow frame pointers (perf).
//
// The first form prefetched, per block, the line one group ahead at the
// same position (G prefetches per step, half of them to a line already
// asked for at V = 32). On Zen 3 the sequential form is faster from memory
// at 512-byte blocks (Blocks and BlocksCopy, and blockdev's verified read
// markedly) and for BlocksCopy at 4096-byte blocks, and slower for Blocks
// at 4096-byte blocks, which read in place. One group ahead plus 2 KiB ran
// the same; a fixed 4 KiB ahead lost more at 4096-byte blocks, where that
// lands inside the group being read. docs/perf/poly1305-generator.md has the
// figures.
//
// The ZMM kernels prefetch pfGroups groups ahead below pfLongBlock bytes a
// block and one group ahead from there: on Emerald Rapids, with 4096-byte
// blocks from L2, two groups ahead (32 KiB) crowded the 48 KiB L1 that the
// group being read shares with them (CRC-64/NVME Blocks 4096/4096 against
// ISA-L by16_10: 0.94 two groups ahead, 1.00-1.04 one), while 512-byte
// blocks ran faster two ahead (1.01-1.03 against 0.97-0.98). The
// non-copying YMM kernel does the same: two groups of 4 KiB blocks ahead
// are the whole 32 KiB L1 of Zen 3, and on Emerald Rapids T10-DIF Blocks
// 4096/4104 against ISA-L's AVX2 kernel went from 1.02-1.03 to 1.05-1.06
// with one (docs/perf/fold-avx2.md).
const (
	pfGroups    = 2
	pfDisp      = 0
	pfLongBlock = 2048
)

// copyQAhead is how far ahead of each block's position in q the ZMM
// copying kernels prefetch q, one line per vector stored: the hardware
// prefetchers follow loads, not stores, and a store to a line not yet owned
// waits for it, while a PREFETCHT0 of a line of the caller's buffer that no
// other core holds brings it exclusive. On Emerald Rapids it made the copying kernels 5-20% faster
// from L2 and from a mapped file (docs/perf/copy-avx512.md; t10crc32c's
// fusedBlocksCopyZG does the same).
const copyQAhead = 1024

// seqMinBlockLen is the block length from which BlocksCopy under the ZMM
// kernels runs foldBlocksCopyAVX512Seq (blocks with seq set): one block at a
// time, so that the loads and the stores are one stream each, as in a copy,
// rather than four blocks' eight streams, which at strides of 4 KiB share
// L1 sets (t10crc32c's fusedBlocksCopyZG, kernels/_asm/fused, measured the
// same). Its two accumulators a block hide the fold's latency alone from
// 256 bytes, but each block then ends on its own; from 2 KiB that costs
// little. On Emerald Rapids, 4096-byte blocks from a 64 MiB mapping against
// Go's copy: CRC-64/NVME 0.89-0.91 over four interleaved 1 KiB sub-blocks,
// 0.95-0.97 one block at a time; T10-DIF 0.94-0.95 and 0.96
// (docs/perf/copy-avx512.md).
const seqMinBlockLen = 2048

// Registers of the Blocks kernels beyond those of the group walk: rSeq
// holds the prefetch address, rQ the step's position in q in the copying
// kernels, rQd is q - p.
var rSeq, rQ, rQd = reg.R8, reg.R14, reg.R15

// pfDist is the ZMM kernels' prefetch distance in bytes (G ≤ 4).
var pfDist = reg.R12

func log2(n int) int {
	k := 0
	for 1<<k < n {
		k++
	}
	if 1<<k != n {
		panic("log2: not a power of two")
	}
	return k
}

// blocks generates foldBlocksX, or with copy foldBlocksCopyX: G blocks at
// once, each with one vector accumulator, from the first vector of every
// block to its last whole 16-byte lane. The copying kernel stores every
// vector it loads, before any byte reversal, to q at the same offset.
func (g *gen) blocks(copy bool) {
	c := g.c
	V, G, m := g.v.bytes, g.v.group, g.lanes()
	name := "foldBlocks" + g.v.name
	if copy {
		name = "foldBlocksCopy" + g.v.name
	}
	if g.seq {
		G = 1
		name += "Seq"
	}
	c.Function(name)
	c.Attributes(attr.NOSPLIT)
	c.Signature(blocksSig(g.crc.width, copy))
	// The blocks left, in the frame (see rSeq).
	cnt := c.AllocLocal(8)
	// The ZMM kernels collapse the accumulators' lanes through the frame
	// (collapseLanesMem): G 64-byte slots from a 64-byte boundary.
	var slots operand.Mem
	if V == 64 {
		slots = c.AllocLocal(64*G + 64 + 16)
	}
	g.tab = reg.RDX
	dst, p, blockLen := reg.RDI, reg.RSI, reg.RBX
	s1, s3, s5, s7 := reg.R9, reg.R10, reg.R11, reg.R12
	cur, n := reg.R13, reg.RCX
	c.Load(c.Param("tab"), g.tab)
	c.Load(c.Param("dst").Base(), dst)
	c.Load(c.Param("dst").Len(), rSeq)
	c.MOVQ(rSeq, cnt)
	c.Load(c.Param("p").Base(), p)
	c.Load(c.Param("blockLen"), blockLen)
	c.Load(c.Param("stride"), s1)
	if copy {
		scaffold.CopyOffset(c, p, rQd)
	}
	c.Comment("Block j of a group starts at p + j*stride.")
	c.LEAQ(operand.Mem{Base: s1, Index: s1, Scale: 2}, s3)
	if G > 4 {
		c.LEAQ(operand.Mem{Base: s1, Index: s1, Scale: 4}, s5)
		c.LEAQ(operand.Mem{Base: s3, Index: s1, Scale: 4}, s7)
	}
	addr := func(base reg.GPPhysical, j, disp int) operand.Mem {
		switch j {
		case 0:
			return mem(base, disp)
		case 1:
			return operand.Mem{Base: base, Index: s1, Scale: 1, Disp: disp}
		case 2:
			return operand.Mem{Base: base, Index: s1, Scale: 2, Disp: disp}
		case 3:
			return operand.Mem{Base: base, Index: s3, Scale: 1, Disp: disp}
		case 4:
			return operand.Mem{Base: base, Index: s1, Scale: 4, Disp: disp}
		case 5:
			return operand.Mem{Base: base, Index: s5, Scale: 1, Disp: disp}
		case 6:
			return operand.Mem{Base: base, Index: s3, Scale: 2, Disp: disp}
		}
		return operand.Mem{Base: base, Index: s7, Scale: 1, Disp: disp}
	}
	blockAddr := func(j int) operand.Mem { return addr(cur, j, 0) }
	// prefetch issues the step's prefetches and moves rSeq on; then, when
	// copying, it points rQ at the step's position in q.
	prefetch := func() {
		for off := 0; off < G*V; off += 64 {
			c.PREFETCHT0(mem(rSeq, off))
		}
		c.ADDQ(operand.U32(G*V), rSeq)
		if copy {
			c.LEAQ(operand.Mem{Base: cur, Index: rQd, Scale: 1}, rQ)
		}
	}
	// qPrefetch issues, in the ZMM copying kernel, the prefetch of block
	// j's line in q copyQAhead bytes past disp (see copyQAhead).
	qPrefetch := func(j, disp int) {
		if copy && V == 64 {
			c.PREFETCHT0(addr(rQ, j, disp+copyQAhead))
		}
	}
	// data is the operand holding block j's vector at the current position:
	// g.data's, or in the copying kernel a register loaded (and stored to q).
	data := func(j int, scratch reg.VecPhysical) operand.Op {
		if !copy {
			return g.data(blockAddr(j), scratch)
		}
		qPrefetch(j, 0)
		g.loadCopy(scratch, blockAddr(j), addr(rQ, j, 0))
		return scratch
	}
	// dataAt is data at disp bytes past the current position.
	dataAt := func(j, disp int, scratch reg.VecPhysical) operand.Op {
		if !copy {
			return g.data(addr(cur, j, disp), scratch)
		}
		qPrefetch(j, disp)
		g.loadCopy(scratch, addr(cur, j, disp), addr(rQ, j, disp))
		return scratch
	}
	seeded := g.crc.onesXor
	if seeded {
		c.Comment("Every block starts from the initial register, all ones.")
		if g.crc.width < 64 {
			c.MOVL(operand.U32(1<<g.crc.width-1), reg.EAX)
		} else {
			c.MOVQ(operand.I64(-1), reg.RAX)
		}
		g.seedVector()
	}
	g.loadMask()
	g.loadLaneConsts()
	usePairs := g.usePairs(copy)
	if usePairs {
		g.loadPairConsts(c.AllocLocal(64 + 32))
	}
	g.finalLanes = !copy && V == 64 && g.crc.width == 64 && g.crc.reflected
	defer func() { g.finalLanes = false }()
	if g.finalLanes {
		g.loadFinalLanes()
	}
	if V == 16 {
		g.bcast(g.X(rK1), g.fold(1))
	} else {
		c.Comment(fmt.Sprintf("Fold[%d]: forward by %d bytes.", m, V))
		g.bcast(g.V(rK), g.fold(m))
	}
	if V == 64 {
		c.Comment("Fold[8]: forward by 128 bytes, for the pairs of accumulators.")
		g.bcast(g.V(rK8), g.fold(8))
	}

	if V == 64 || usePairs {
		if G > 4 {
			panic("blocks: R12 holds a stride multiple for G > 4")
		}
		c.Comment("The prefetch distance: pfGroups groups, one from pfLongBlock bytes a block.")
		lLong := g.label("bpflong")
		c.MOVQ(s1, pfDist)
		if G > 1 {
			c.SHLQ(operand.U8(log2(G)), pfDist)
		}
		c.CMPQ(blockLen, operand.U32(pfLongBlock))
		c.JAE(operand.LabelRef(lLong))
		c.SHLQ(operand.U8(log2(pfGroups)), pfDist)
		c.Label(lLong)
	}

	lGroup, lLoop, lLanes, lTail, lTailLoop, lReduce :=
		g.label("bgroup"), g.label("bloop"), g.label("blanes"), g.label("btail"),
		g.label("btailloop"), g.label("breduce")
	c.Label(lGroup)
	c.MOVQ(p, cur)
	c.MOVQ(blockLen, n)
	if V == 64 || usePairs {
		c.LEAQ(operand.Mem{Base: p, Index: pfDist, Scale: 1, Disp: pfDisp}, rSeq)
	} else {
		c.LEAQ(operand.Mem{Base: p, Index: s1, Scale: uint8(G * pfGroups), Disp: pfDisp}, rSeq)
	}
	prefetch()
	for j := 0; j < G; j++ {
		if copy {
			g.loadCopy(g.V(j), blockAddr(j), addr(rQ, j, 0))
		} else {
			g.load(g.V(j), blockAddr(j))
		}
		if seeded {
			g.xor(g.V(j), g.V(j), g.V(rSeed))
		}
	}
	c.ADDQ(operand.U32(V), cur)
	c.SUBQ(operand.U32(V), n)
	if V == 64 {
		g.pairs(G, n, cur, prefetch, dataAt, lLoop)
	}
	if V > 16 {
		c.Label(lLoop)
		c.CMPQ(n, operand.U32(V))
		c.JB(operand.LabelRef(lLanes))
		prefetch()
		for j := 0; j < G; j++ {
			g.foldInto(g.V(j), g.V(rK), data(j, g.dataReg(j)), g.V(rT1))
		}
		c.ADDQ(operand.U32(V), cur)
		c.SUBQ(operand.U32(V), n)
		c.JMP(operand.LabelRef(lLoop))
		c.Label(lLanes)
		if usePairs {
			// The group ends two blocks at a time (pairs_ymm.go).
			g.reducePairsY(G, n, cur, dst, addr)
			c.ADDQ(operand.U32(G*g.crc.width/8), dst)
			c.LEAQ(operand.Mem{Base: p, Index: s1, Scale: uint8(G)}, p)
			c.SUBQ(operand.U32(G), cnt)
			c.JNZ(operand.LabelRef(lGroup))
			g.vzeroupper()
			c.RET()
			return
		}
		if V == 64 {
			g.collapseLanesMem(G, slots)
		} else {
			for j := 0; j < G; j++ {
				g.collapseLanes(j)
			}
		}
	}
	c.Label(lTail)
	c.CMPQ(n, operand.U32(16))
	c.JB(operand.LabelRef(lReduce))
	c.Label(lTailLoop)
	switch {
	case V == 16:
		// The only loop of the XMM kernel.
		prefetch()
	case copy:
		c.LEAQ(operand.Mem{Base: cur, Index: rQd, Scale: 1}, rQ)
	}
	for j := 0; j < G; j++ {
		if g.finalLanes {
			// The lane is T = V·x^64 (loadFinalLanes): the next 16
			// bytes D go in as D·x^64 = Hi·C(128) ⊕ Lo·x^64 too.
			d := g.X(rT2)
			g.load(d, blockAddr(j))
			g.clmul(0x00, mem(g.tab, tableFinal), d, g.X(rT3))
			g.psrldq(8, d, d)
			g.xor(d, d, g.X(rT3))
			g.foldInto(g.X(j), g.X(rK1), d, g.X(rT1))
			continue
		}
		g.foldInto(g.X(j), g.X(rK1), data(j, g.X(rT2)), g.X(rT1))
	}
	c.ADDQ(operand.U32(16), cur)
	c.SUBQ(operand.U32(16), n)
	c.CMPQ(n, operand.U32(16))
	c.JAE(operand.LabelRef(lTailLoop))

	c.Label(lReduce)
	if V == 64 {
		// R11 points at the slots (collapseLanesMem); 16 bytes after them.
		sc := mem(reg.R11, 64*G)
		g.scratch = &sc
		defer func() { g.scratch = nil }()
	}
	wb := g.crc.width / 8
	for j := 0; j < G; j++ {
		g.reduce(g.X(j), reg.RAX)
		g.finish(reg.RAX)
		g.store(reg.RAX, mem(dst, j*wb))
	}
	c.ADDQ(operand.U32(G*wb), dst)
	c.LEAQ(operand.Mem{Base: p, Index: s1, Scale: uint8(G)}, p)
	c.SUBQ(operand.U32(G), cnt)
	c.JNZ(operand.LabelRef(lGroup))
	g.vzeroupper()
	c.RET()
}
