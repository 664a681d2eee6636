// Command small generates the AVX-512 kernels of single short Update and
// Checksum calls (zsmall_amd64.s, declared in zsmall_amd64.go) of one CRC:
// updateEntry, which Update and Checksum call, and for CRC-32C
// smallUpdateZ, the same kernel for updateHybridZ; and the AVX2 tier's
// entry updateEntryY (zsmall_avx2_amd64.s, ymm.go), which updateEntry jumps
// to while the dispatch variable holds entryTargetY, the avx2
// implementation's Update.
//
// go generate in each CRC package runs it, for example in kernels/crc32c:
//
//	go run -C ../_asm ./small -crc crc32c -out ../crc32c/zsmall_amd64.s -stubs ../crc32c/zsmall_amd64.go \
//		-avx2out ../crc32c/zsmall_avx2_amd64.s -avx2stubs ../crc32c/zsmall_avx2_amd64.go
//
// A benchmark that checksums one short buffer after another measures
// throughput: consecutive calls overlap out of order, so every instruction
// of a call counts, not only its chain, and so does every Go call layer:
// updateEntry is called from Update and Checksum themselves (one call for a
// short input), and runs the kernel while the dispatch variable holds the
// implementation the kernel belongs to (entryTarget), else tail-calls the
// Go code. The kernel has no loop setup beyond what the length needs and
// nothing to undo at its end:
//
//   - CRC-32C below 64 bytes is one CRC32 stream (fewer instructions and a
//     shorter chain than folding), 16 bytes with no taken branch (taken
//     branches cost about a CRC32Q each in these short paths); from 64
//     bytes its n%16 leading bytes go through the CRC32 instruction (8, 4,
//     2, 1 bytes by the bits of n), so the rest is whole 16-byte lanes;
//   - T10-DIF and CRC-64/NVME take 8 bytes and more: 8 to 15 as one lane
//     with leading zeros, from two overlapping loads; from 16 the n%16
//     bytes after the whole lanes shifted in at the end as the fold
//     generator's tail does (one more fold by Fold[1]); shorter inputs go
//     to updateGeneric.
//     T10-DIF, unreflected, byte-reverses each lane after its load;
//   - the register (after them) is XORed into the first lane, and every lane
//     but the last is folded straight into the position of the last lane by
//     its own constant of crcmath.RevFoldTable's reversed Fold row (lane l
//     of m by Fold[m-1-l], so the multiplies are independent of each
//     other): one XMM and one YMM piece first when the lane count is not a
//     multiple of four, then ZMM vectors (one, two, then four a step, each
//     vector's constant loaded once for both multiplies: two 64-byte
//     loads a vector, not three); the last vector's last lane meets
//     Fold[0] = 0 and is added as is;
//   - the lanes are XORed together into the 128-bit V, whose CRC register
//     V·x^w mod P is that of the whole input; CRC-32C reduces it by two
//     CRC32Q from a zero register (a CRC32 instruction from register 0 over
//     the 16 bytes of V computes exactly V·x^32 mod P), instead of the
//     Final constant and Barrett's three multiplies, which the others run
//     as crcmath.Reduce does;
//   - only the registers X16-X31 (Y, Z) are written, which legacy SSE code
//     cannot address, so the call leaves no dirty upper state that an SSE
//     instruction after it would pay for, and needs no VZEROUPPER.
//
// The output depends only on the flags, so regenerating is reproducible.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/types"

	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
	"github.com/difctl/difctl/kernels/internal/crcmath"
)

func main() {
	var out, stubs, outY, stubsY, crc string
	scaffold.Main("small", func(fs *flag.FlagSet) {
		fs.StringVar(&out, "out", "", "assembly output file")
		fs.StringVar(&stubs, "stubs", "", "Go declarations output file")
		fs.StringVar(&outY, "avx2out", "", "assembly output file of the AVX2 tier's entry")
		fs.StringVar(&stubsY, "avx2stubs", "", "Go declarations output file of the AVX2 tier's entry")
		fs.StringVar(&crc, "crc", "", "t10dif, crc32c or crc64nvme")
	}, func(cmd []string) ([]scaffold.File, error) {
		c, err := scaffold.LookupCRC(crc)
		if err != nil {
			return nil, err
		}
		if out == "" || stubs == "" || outY == "" || stubsY == "" {
			return nil, scaffold.Usage("small -crc t10dif|crc32c|crc64nvme -out file.s -stubs file.go -avx2out file.s -avx2stubs file.go")
		}
		asm, src, err := generate(cmd, c)
		if err != nil {
			return nil, err
		}
		asmY, srcY, err := generateY(cmd, c)
		return []scaffold.File{{Path: out, Data: asm}, {Path: stubs, Data: src},
			{Path: outY, Data: asmY}, {Path: stubsY, Data: srcY}}, err
	})
}

// maxLen is the longest input the kernel of the CRC being generated takes
// (generate and generateY set it): 1024 bytes, the most whose lanes Fold's 64 rows
// reach, and for T10-DIF 1008, since from 1024 bytes its fold kernel runs
// on bit-reversed lanes (GFNI on port 0), faster than this kernel's byte
// shuffles on port 5 (docs/perf/small-calls.md).
var maxLen int

var ctx *build.Context

// The CRC being generated (generate and generateY set them): its width, and whether it
// is CRC-32C (the CRC32 instruction for leading bytes and the reduction),
// or unreflected (T10-DIF: lanes byte-reversed after every load).
var (
	width     int
	isC       bool
	unrefl    bool
	bswapMask operand.Mem
	tailShuf  operand.Mem
	// barrett2: barrett2Data (CRC-64/NVME).
	barrett2 operand.Mem
	// target is the Go function entryTarget holds, which updateEntry
	// jumps to for the lengths its body does not take.
	target string
)

// generate returns the assembly and the Go declarations of c's kernels,
// made by cmd.
func generate(cmd []string, c scaffold.CRC) (asm, stubs []byte, err error) {
	ctx = build.NewContext()
	ctx.ConstraintExpr("!purego")
	width, isC, unrefl = int(c.Params.Width), c.Flag == "crc32c", !c.Params.Reflected
	maxLen = 1024
	if unrefl {
		maxLen = 1008
	}
	target = "updateAVX512"
	if isC {
		target = "updateHybridZ"
	}
	staticData()
	if width == 64 {
		if err := barrett2Data(c.Params); err != nil {
			return nil, nil, err
		}
	}
	if isC {
		smallZ()
	}
	entry()
	asm, stubs, err = scaffold.AsmAndStubs(ctx, cmd, c.Pkg)
	if err != nil || !isC {
		return asm, stubs, err
	}
	// avo's stubs name crcmath.RevFoldTable without importing it.
	stubs = bytes.Replace(stubs, []byte("package "+c.Pkg+"\n"),
		[]byte("package "+c.Pkg+"\n\nimport \"github.com/difctl/difctl/kernels/internal/crcmath\"\n"), 1)
	stubs, err = scaffold.Go(stubs)
	return asm, stubs, err
}

func lbl(s string) operand.LabelRef { return operand.LabelRef(s) }

func mem(base reg.Register, disp int) operand.Mem { return operand.Mem{Base: base, Disp: disp} }

// smallZ writes smallUpdateZ (CRC-32C).
func smallZ() {
	ctx.Function("smallUpdateZ")
	ctx.Attributes(build.NOSPLIT)
	ctx.Signature(scaffold.Signature(
		[]*types.Var{
			scaffold.Param("crc", scaffold.Word(32)),
			scaffold.Param("p", types.NewPointer(scaffold.Byte)),
			scaffold.Param("n", scaffold.Int),
			scaffold.Param("tab", scaffold.RevFoldTable),
		},
		[]*types.Var{scaffold.Param("", scaffold.Word(32))}))
	ctx.Pragma("noescape")
	ctx.Doc("smallUpdateZ returns crc (finalised, as Update takes it) updated with p[0:n]:",
		"the n%16 leading bytes by CRC32 instructions, the lanes after them folded",
		"with VPCLMULQDQ straight into the last lane, each by its own constant of",
		"tab's reversed Fold row, and reduced by two CRC32Q (kernels/_asm/small).",
		"It writes only X16-X31 of the vector registers and needs no VZEROUPPER.",
		"",
		fmt.Sprintf("Preconditions: 1 <= n <= %d; tab is foldTables; the CPU has SSE4.2,", maxLen),
		"AVX512F, AVX512VL, AVX512DQ and VPCLMULQDQ. It reads only p[0:n].")
	ctx.Load(ctx.Param("p"), reg.RSI)
	ctx.Load(ctx.Param("n"), reg.RCX)
	ctx.Load(ctx.Param("crc"), reg.EAX)
	ctx.Load(ctx.Param("tab"), reg.RDX)
	body()
}

// entry writes updateEntry, what Update and Checksum call: while the
// dispatch variable update holds entryTarget, the kernel's body for the
// lengths it takes and a tail call of entryTarget's function (target) for
// the others; under any other implementation a tail call of
// updateDispatch, which calls update, unless update holds entryTargetY, the
// avx2 implementation's, for which it jumps to updateEntryY (ymm.go).
// Called from Go directly, it makes a short Checksum one call, not
// a call of the dispatch variable and one of the kernel; the comparison
// keeps it right whatever implementation the registry makes active.
func entry() {
	// updateEntry is declared noescape although its tail call reaches
	// updateDispatch, which passes p to a func value the compiler cannot
	// see through. Each generated doc comment states the contract that
	// makes this sound.
	noescapeDoc := []string{"",
		"noescape holds because no implementation the registry can make active",
		"keeps p past its return: every Update only reads p[0:len(p)]. An",
		"implementation that retained p would break this declaration."}
	word := scaffold.Word(width)
	ctx.Function("updateEntry")
	ctx.Attributes(build.NOSPLIT)
	ctx.Signature(scaffold.Signature(
		[]*types.Var{
			scaffold.Param("crc", word),
			scaffold.Param("p", scaffold.Bytes),
		},
		[]*types.Var{scaffold.Param("", word)}))
	ctx.Pragma("noescape")
	if isC {
		ctx.Doc(append([]string{"updateEntry is Update: while update is entryTarget, smallUpdateZ's body",
			fmt.Sprintf("(kernels/_asm/small) for 1 to %d bytes and a tail call of", maxLen),
			"updateHybridZ for other lengths; while update is entryTargetY, a jump to",
			"updateEntryY (the AVX2 tier's); else a tail call of updateDispatch.",
			"The CPU checks are entryTarget's: it is updateHybridZ only where",
			"hasHybridZ holds."}, noescapeDoc...)...)
	} else {
		shuf := ""
		if unrefl {
			shuf = " (byte-reversed by VPSHUFB)"
		}
		ctx.Doc(append([]string{fmt.Sprintf("updateEntry is Update: for 8 to %d bytes, while update is entryTarget,", maxLen),
			"it folds every whole lane" + shuf + " straight into the last",
			"lane with VPCLMULQDQ, each by its own constant of foldTables' reversed",
			"Fold row,",
			"shifts in the bytes after the lanes (8 to 15 bytes: one lane with leading",
			"zeros), and reduces by Final and Barrett (kernels/_asm/small), on X16-X31",
			"only (no VZEROUPPER); it tail-calls updateGeneric below 8 bytes and",
			"updateAVX512 above. While update is entryTargetY it jumps to updateEntryY",
			"(the AVX2 tier's), under another implementation to updateDispatch.",
			"entryTarget is nil unless the CPU has what it needs: AVX512F, AVX512VL,",
			"AVX512BW, AVX512DQ and VPCLMULQDQ."}, noescapeDoc...)...)
	}
	ctx.MOVQ(operand.NewDataAddr(operand.Symbol{Name: "·update"}, 0), reg.RAX)
	ctx.CMPQ(reg.RAX, operand.NewDataAddr(operand.Symbol{Name: "·entryTarget"}, 0))
	ctx.JNE(lbl("dispatch"))
	ctx.Load(ctx.Param("p").Len(), reg.RCX)
	if isC {
		ctx.LEAQ(mem(reg.RCX, -1), reg.RDX)
		ctx.CMPQ(reg.RDX, operand.U32(maxLen))
	} else {
		ctx.Comment(fmt.Sprintf("8 <= n <= %d; shorter inputs go to updateGeneric, as", maxLen),
			"updateAVX512 sends them.")
		ctx.CMPQ(reg.RCX, operand.U8(8))
		ctx.JB(lbl("short"))
		ctx.LEAQ(mem(reg.RCX, -8), reg.RDX)
		ctx.CMPQ(reg.RDX, operand.U32(maxLen-7))
	}
	ctx.JAE(lbl("other"))
	ctx.Load(ctx.Param("p").Base(), reg.RSI)
	switch width {
	case 16:
		ctx.Load(ctx.Param("crc"), reg.RAX)
	case 32:
		ctx.Load(ctx.Param("crc"), reg.EAX)
	default:
		ctx.Load(ctx.Param("crc"), reg.RAX)
	}
	ctx.MOVQ(operand.NewDataAddr(operand.Symbol{Name: "·foldTables"}, 0), reg.RDX)
	body()
	ctx.Label("other")
	ctx.Comment("A length the body does not take, under entryTarget: entryTarget's",
		"function itself, one frame fewer than through updateDispatch.")
	tailCall(target)
	if !isC {
		ctx.Label("short")
		tailCall("updateGeneric")
	}
	ctx.Label("dispatch")
	ctx.Comment("The AVX2 tier's entry (zsmall_avx2_amd64.s) while update is",
		"entryTargetY, else the Go dispatch.")
	ctx.CMPQ(reg.RAX, operand.NewDataAddr(operand.Symbol{Name: "·entryTargetY"}, 0))
	ctx.JNE(lbl("fallback"))
	tailCall("updateEntryY")
	ctx.Label("fallback")
	tailCall("updateDispatch")
}

// tailCall jumps to the Go function fn of the package, which returns to
// the caller: fn has updateEntry's signature, so its ABI0 wrapper finds the
// arguments where they are. To avo it is a terminal instruction (a JMP to a
// symbol names no label of the function).
func tailCall(fn string) {
	ctx.Instruction(&ir.Instruction{
		Opcode:     "JMP",
		Operands:   []operand.Op{operand.NewDataAddr(operand.Symbol{Name: "·" + fn}, 0)},
		IsTerminal: true,
	})
}

// body is the kernel: SI = p, CX = n (CRC-32C: 1..maxLen; else a multiple
// of 16 from 16 to maxLen), AX = crc (finalised, zero-extended), DX = the
// fold table; it stores the result and returns.
func body() {
	var (
		si, cx, ax, dx = reg.RSI, reg.RCX, reg.RAX, reg.RDX
		t              = reg.R8  // n%16, then the last lane's address
		bx             = reg.RBX // the constant of the lane at the data pointer
		di             = reg.RDI // data - constant pointer: the data at (BX)(DI*1)
		r10, r11       = reg.R10, reg.R11
		init           = reg.Z16 // the register, where the first lane's first bits are
		acc            = reg.Z17
		v, w           = reg.Z18, reg.Z19
		bswap          = reg.Z20
		last           = reg.X21
		tl, end        = reg.R9, reg.R11 // n%16; (T10-DIF, CRC-64/NVME) p+n-16
	)
	// The fold's multiplies: Hi by the constant's [0], Lo by its [1]; Hi is
	// the low quadword of a reflected lane, the high one of a
	// byte-reversed unreflected lane (crcmath.FoldTable).
	hiImm, loImm := operand.U8(0x00), operand.U8(0x11)
	if unrefl {
		hiImm, loImm = operand.U8(0x01), operand.U8(0x10)
	}
	// load puts the vector at m, XORed with x if x is not nil, in dst,
	// byte-reversed per lane for T10-DIF (the register enters the first
	// bytes before the reversal, big-endian).
	load := func(m operand.Mem, x, dst reg.Register) {
		if x != nil {
			ctx.VPXORQ(m, x, dst)
		} else {
			ctx.VMOVDQU64(m, dst)
		}
		if unrefl {
			ctx.VPSHUFB(sized(bswap, dst), dst, dst)
		}
	}
	switch {
	case isC:
		ctx.Comment("The CRC register: xorout undone.")
		ctx.NOTL(ax.As32())
		ctx.CMPQ(cx, operand.U8(64))
		ctx.JB(lbl("short"))
		ctx.MOVQ(cx, tl)
		ctx.ANDQ(operand.U8(15), tl)
		ctx.JNZ(lbl("heads"))
	case unrefl:
		ctx.Comment("The CRC register (init and xorout zero), big-endian as the first",
			"bytes of the message; the lanes' byte reversal control.")
		ctx.ROLW(operand.U8(8), ax.As16())
		ctx.VBROADCASTI32X4(bswapMask, bswap)
	default:
		ctx.Comment("The CRC register: xorout undone.")
		ctx.NOTQ(ax)
	}
	if !isC {
		ctx.Comment("No tail (n%16 = 0) costs no set-up; 8 to 15 bytes go on from there.")
		ctx.TESTQ(operand.U32(15), cx)
		ctx.JNZ(lbl("tailsetup"))
		ctx.XORL(tl.As32(), tl.As32())
	}

	ctx.Label("lanes")
	if isC {
		ctx.Comment("CX = 16·m bytes of whole lanes from SI, m >= 4.")
		ctx.VMOVD(ax.As32(), init.AsX())
	} else {
		ctx.Comment("CX = 16·m bytes of whole lanes from SI, m >= 1.")
		ctx.VMOVQ(ax, init.AsX())
		ctx.CMPQ(cx, operand.U8(16))
		ctx.JZ(lbl("single"))
	}
	ctx.LEAQ(operand.Mem{Base: si, Index: cx, Scale: 1, Disp: -16}, t)
	ctx.Comment("Lane l (at SI+16l) folds by Fold[m-1-l] = Rev[65-m+l], at",
		"tab + 1072 + 16·(65-m+l) = tab + 2112 - CX + 16l: BX tracks the data.")
	ctx.LEAQ(mem(dx, scaffold.TableRev+16*(scaffold.MaxFold+1)), bx)
	ctx.SUBQ(cx, bx)
	ctx.MOVQ(si, di)
	ctx.SUBQ(bx, di)
	ctx.VPXORQ(acc, acc, acc)
	ctx.TESTQ(operand.U32(48), cx)
	ctx.JNZ(lbl("pieces"))

	data := operand.Mem{Base: bx, Index: di, Scale: 1}
	k := mem(bx, 0)
	// group folds the g ZMM vectors at BX's data and constants (64 bytes
	// apart), the first carrying the register x if x is not nil, into acc:
	// two loads and two multiplies a vector and one VPTERNLOGD. The
	// constant goes through a register rather than being each multiply's
	// memory operand: three 64-byte loads a vector measured slower at
	// 512 bytes than two (docs/perf/small-calls.md).
	vs := [4][2]reg.VecPhysical{{v, w}, {reg.Z22, reg.Z23}, {reg.Z24, reg.Z25}, {reg.Z26, reg.Z27}}
	group := func(g int, x reg.Register) {
		for i := range g {
			vi, wi := vs[i][0], vs[i][1]
			if i > 0 {
				x = nil
			}
			load(operand.Mem{Base: bx, Index: di, Scale: 1, Disp: 64 * i}, x, vi)
			ki := []reg.VecPhysical{reg.Z28, reg.Z29, reg.Z30, reg.Z31}[i]
			ctx.VMOVDQU64(mem(bx, 64*i), ki)
			ctx.VPCLMULQDQ(hiImm, ki, vi, wi)
			ctx.VPCLMULQDQ(loImm, ki, vi, vi)
			ctx.VPTERNLOGD(operand.U8(0x96), wi, vi, acc)
		}
	}
	ctx.Label("vectors")
	ctx.Comment("CX = 64·z bytes of ZMM vectors, z >= 1: one vector if z is odd, two",
		"if z&2, then four a step, with no loop counter beyond CX and BX; the",
		"first vector takes the register (zero if a piece took it).")
	ctx.TESTQ(operand.U32(64), cx)
	ctx.JZ(lbl("z2"))
	group(1, init)
	ctx.SUBQ(operand.U8(64), cx)
	ctx.JZ(lbl("collapse"))
	ctx.ADDQ(operand.U8(64), bx)
	ctx.VPXORQ(init, init, init)
	ctx.Label("z2")
	ctx.TESTQ(operand.U32(128), cx)
	ctx.JZ(lbl("z4"))
	group(2, init)
	ctx.SUBQ(operand.U32(128), cx)
	ctx.JZ(lbl("collapse"))
	ctx.ADDQ(operand.U32(128), bx)
	ctx.VPXORQ(init, init, init)
	ctx.Label("z4")
	group(4, init)
	ctx.ADDQ(operand.U32(256), bx)
	ctx.SUBQ(operand.U32(256), cx)
	ctx.JZ(lbl("collapse"))
	ctx.Label("zloop")
	group(4, nil)
	ctx.ADDQ(operand.U32(256), bx)
	ctx.SUBQ(operand.U32(256), cx)
	ctx.JNZ(lbl("zloop"))

	ctx.Label("collapse")
	ctx.Comment("The four lanes of the accumulator and the last lane, as is.")
	ctx.VEXTRACTI64X4(operand.U8(1), acc, w.AsY())
	ctx.VPXORQ(w.AsY(), acc.AsY(), acc.AsY())
	ctx.VEXTRACTI32X4(operand.U8(1), acc.AsY(), w.AsX())
	if unrefl {
		load(mem(t, 0), nil, last)
		ctx.VPTERNLOGD(operand.U8(0x96), last, w.AsX(), acc.AsX())
	} else {
		ctx.VPTERNLOGD(operand.U8(0x96), mem(t, 0), w.AsX(), acc.AsX())
	}

	if !isC {
		ctx.Comment("Bytes after the whole lanes: shifted in out of line.")
		ctx.TESTQ(tl, tl)
		ctx.JNZ(lbl("tail"))
	}
	ctx.Label("reduce")
	switch {
	case isC:
		ctx.Comment("V·x^32 mod P: the CRC32 instruction over V's 16 bytes from 0.")
		ctx.VMOVQ(acc.AsX(), r10)
		ctx.VPEXTRQ(operand.U8(1), acc.AsX(), r11)
		ctx.XORL(ax.As32(), ax.As32())
		ctx.CRC32Q(r10, ax)
		ctx.CRC32Q(r11, ax)
	case unrefl:
		reduce16(acc.AsX(), v.AsX(), w.AsX(), dx)
	default:
		reduce64(acc.AsX(), v.AsX(), w.AsX(), dx)
	}
	ctx.Label("done")
	switch width {
	case 16:
		ctx.Store(ax.As16(), ctx.ReturnIndex(0))
	case 32:
		ctx.NOTL(ax.As32())
		ctx.Store(ax.As32(), ctx.ReturnIndex(0))
	default:
		ctx.NOTQ(ax)
		ctx.Store(ax, ctx.ReturnIndex(0))
	}
	ctx.RET()

	if !isC {
		ctx.Label("single")
		ctx.Comment("One lane: the register and the lane, nothing to fold.")
		load(mem(si, 0), init.AsX(), acc.AsX())
		ctx.TESTQ(tl, tl)
		ctx.JZ(lbl("reduce"))
		ctx.Label("tail")
		tail(acc.AsX(), v.AsX(), w.AsX(), last, tl, end, dx, bswap.AsX(), hiImm, loImm)
		ctx.JMP(lbl("reduce"))

		ctx.Label("tiny")
		ctx.Comment("8 to 15 bytes M: the lane 0^(16-n) || M, from two overlapping 8-byte",
			"loads, the first shifted up by 16-n bytes, the second the high quadword,",
			"and the register shifted up as far, to where M starts; leading zeros do",
			"not change a register that enters after them.")
		ctx.MOVQ(mem(si, 0), reg.R10)
		ctx.MOVQ(operand.Mem{Base: si, Index: cx, Scale: 1, Disp: -8}, reg.R11)
		ctx.LEAQ(tailShuf, reg.R12)
		up := operand.Mem{Base: reg.R12, Index: cx, Scale: 1} // up by 16-n
		ctx.VMOVQ(reg.R10, v.AsX())
		ctx.VPSHUFB(up, v.AsX(), v.AsX())
		ctx.VPINSRQ(operand.U8(1), reg.R11, v.AsX(), acc.AsX())
		ctx.VMOVQ(ax, w.AsX())
		ctx.VPSHUFB(up, w.AsX(), w.AsX())
		ctx.VPXORQ(w.AsX(), acc.AsX(), acc.AsX())
		if unrefl {
			ctx.VPSHUFB(bswap.AsX(), acc.AsX(), acc.AsX())
		}
		ctx.JMP(lbl("reduce"))

		ctx.Label("tailsetup")
		ctx.CMPQ(cx, operand.U8(16))
		ctx.JB(lbl("tiny"))
		ctx.Comment("The tail length n%16, the input's last 16 bytes, the whole lanes.")
		ctx.MOVQ(cx, tl)
		ctx.ANDQ(operand.U8(15), tl)
		ctx.LEAQ(operand.Mem{Base: si, Index: cx, Scale: 1, Disp: -16}, end)
		ctx.ANDQ(operand.I8(-16), cx)
		ctx.JMP(lbl("lanes"))
	}

	ctx.Label("pieces")
	ctx.Comment("m%4 lanes first, an XMM lane then a YMM pair, so that whole ZMM",
		"vectors remain; the first piece takes the register.")
	ctx.TESTQ(operand.U32(16), cx)
	ctx.JZ(lbl("pair"))
	load(data, init.AsX(), v.AsX())
	ctx.VPCLMULQDQ(hiImm, k, v.AsX(), w.AsX())
	ctx.VPCLMULQDQ(loImm, k, v.AsX(), v.AsX())
	ctx.VPXORQ(w.AsX(), v.AsX(), acc.AsX())
	ctx.VPXORQ(init.AsX(), init.AsX(), init.AsX())
	ctx.ADDQ(operand.U8(16), bx)
	ctx.SUBQ(operand.U8(16), cx)
	ctx.Label("pair")
	ctx.TESTQ(operand.U32(32), cx)
	ctx.JZ(lbl("vectors"))
	load(data, init.AsY(), v.AsY())
	ctx.VPCLMULQDQ(hiImm, k, v.AsY(), w.AsY())
	ctx.VPCLMULQDQ(loImm, k, v.AsY(), v.AsY())
	ctx.VPTERNLOGD(operand.U8(0x96), w.AsY(), v.AsY(), acc.AsY())
	ctx.VPXORQ(init.AsX(), init.AsX(), init.AsX())
	ctx.ADDQ(operand.U8(32), bx)
	ctx.SUBQ(operand.U8(32), cx)
	ctx.TESTQ(cx, cx)
	ctx.JNZ(lbl("vectors"))
	ctx.JMP(lbl("collapse"))

	if !isC {
		return
	}
	ctx.Label("short")
	ctx.Comment("Below 64 bytes: one CRC32 stream, fewer instructions and a shorter",
		"chain than the fold: 16 bytes a step, then 8, 4, 2 and 1 by the bits",
		"of n. Taken branches cost here (each about as much as a CRC32Q), so 16",
		"bytes take none, and a multiple of 16 skips the four tests.")
	ctx.CMPQ(cx, operand.U8(16))
	ctx.JB(lbl("shortrest"))
	ctx.JNZ(lbl("shortloop"))
	ctx.CRC32Q(mem(si, 0), ax)
	ctx.CRC32Q(mem(si, 8), ax)
	ctx.NOTL(ax.As32())
	ctx.Store(ax.As32(), ctx.ReturnIndex(0))
	ctx.RET()
	ctx.Label("shortloop")
	ctx.CRC32Q(mem(si, 0), ax)
	ctx.CRC32Q(mem(si, 8), ax)
	ctx.ADDQ(operand.U8(16), si)
	ctx.SUBQ(operand.U8(16), cx)
	ctx.CMPQ(cx, operand.U8(16))
	ctx.JAE(lbl("shortloop"))
	ctx.TESTQ(cx, cx)
	ctx.JZ(lbl("done"))
	ctx.Label("shortrest")
	bytes8421("shortrest", cx, si, ax)
	ctx.NOTL(ax.As32())
	ctx.Store(ax.As32(), ctx.ReturnIndex(0))
	ctx.RET()

	ctx.Label("heads")
	ctx.Comment("The n%16 leading bytes through the CRC32 instruction; the register",
		"after them enters the first lane.")
	bytes8421("heads", tl, si, ax)
	ctx.SUBQ(tl, cx)
	ctx.JMP(lbl("lanes"))
}

// bytes8421 runs the n%16 bytes at p through the register crc (8, 4, 2
// and 1 bytes by the bits of n), p ending past them. Labels start with
// prefix.
func bytes8421(prefix string, n, p, crc reg.Register) {
	for _, w := range []int{8, 4, 2, 1} {
		next := fmt.Sprintf("%s%d", prefix, w/2)
		ctx.TESTQ(operand.U32(w), n)
		ctx.JZ(lbl(next))
		switch w {
		case 8:
			ctx.CRC32Q(mem(p, 0), crc)
		case 4:
			ctx.CRC32L(mem(p, 0), crc.(reg.GPPhysical).As32())
		case 2:
			ctx.CRC32W(mem(p, 0), crc.(reg.GPPhysical).As32())
		case 1:
			ctx.CRC32B(mem(p, 0), crc.(reg.GPPhysical).As32())
		}
		ctx.ADDQ(operand.U8(w), p)
		ctx.Label(next)
	}
}

// sized returns r at the width of like.
func sized(r reg.VecPhysical, like reg.Register) reg.Register {
	switch like.Size() {
	case 16:
		return r.AsX()
	case 32:
		return r.AsY()
	}
	return r.AsZ()
}

// reduce64 leaves in AX the CRC-64/NVME register of the last lane V (in
// v), as crcmath.Reduce computes it for the reflected CRC with w = 64:
// T = Hi·C(128) ⊕ Lo·x^64 (Final, and Lo moved down a quadword); the
// Barrett quotient q = T.Q0 ⊕ ((T.Q0·mu) << 1).Q0; the register is
// T.Q1 ⊕ ((q·p) << 1).Q1, where · is the carry-less product of two
// quadwords and << 1 the one-place shift up of the 128-bit result that
// the reflected form needs (crcmath.Reduce). The shifts are in the
// constants of barrett2 (barrett2Data), as carry-less integer algebra:
// (a·b) << 1 = a·(b << 1) with b << 1 a 65-bit value. So
// ((T.Q0·mu) << 1).Q0 = (T.Q0·mu2).Q0 with mu2 = (mu << 1) mod 2^64
// (the bit shifted out of mu only reaches the high quadword), and
// ((q·p) << 1).Q1 = (q·p2).Q1 ⊕ q with p2 = (p << 1) mod 2^64, since p's
// top bit is set (the bit shifted out adds q·2^64). a and b are scratch;
// v is overwritten.
func reduce64(v, a, b, tab reg.Register) {
	ax := reg.RAX
	ctx.Comment("V·x^64 mod P: Final, then Barrett (crcmath.Reduce, reflected, w = 64)",
		"with the one-place shifts in barrett2's constants.")
	ctx.VPCLMULQDQ(operand.U8(0x00), mem(tab, scaffold.TableFinal), v, a)
	ctx.VPSRLDQ(operand.U8(8), v, b)
	ctx.VPXORQ(b, a, a)
	ctx.VPCLMULQDQ(operand.U8(0x00), barrett2, a, b)
	ctx.VPXORQ(b, a, v)
	ctx.VPCLMULQDQ(operand.U8(0x10), barrett2, v, b)
	ctx.VPSLLDQ(operand.U8(8), v, v)
	ctx.VPTERNLOGD(operand.U8(0x96), v, b, a)
	ctx.VPEXTRQ(operand.U8(1), a, ax)
}

// barrett2Data writes barrett2, the reflected CRC-64's Barrett constants
// for reduce64: {(mu << 1) mod 2^64, (p << 1) mod 2^64}, with mu and p
// the quadwords crcmath.NewFoldTable stores (reflected). reduce64 relies
// on p's top bit being set, which holds for CRC-64/NVME; another
// polynomial is refused.
func barrett2Data(p crcmath.Params) error {
	mu := crcmath.Reflect(crcmath.BarrettMu(p), 64)
	poly := crcmath.Reflect(p.Poly, 64)
	if poly>>63 == 0 {
		return fmt.Errorf("small: reduce64 needs the reflected polynomial's top bit set, %#x has not", poly)
	}
	barrett2 = ctx.StaticGlobal("barrett2")
	ctx.DataAttributes(attr.RODATA | attr.NOPTR)
	ctx.AddDatum(0, operand.U64(mu<<1))
	ctx.AddDatum(8, operand.U64(poly<<1))
	return nil
}

// reduce16 leaves in AX (zero-extended) the T10-DIF CRC of the last lane
// V (in v, byte-reversed), as crcmath.Reduce computes it for the
// unreflected CRC with w = 16: T = Hi·C(80) ⊕ Lo·x^16 (Final, and Lo
// shifted up two bytes); Q = T div x^16; q = Q ⊕ (Q·mu)_high (Mu); the CRC
// is (T ⊕ q·p) mod x^16 (Poly). a and b are scratch.
func reduce16(v, a, b, tab reg.Register) {
	ax := reg.RAX
	ctx.Comment("V·x^16 mod P: Final, then Barrett (crcmath.Reduce, unreflected, w = 16).")
	ctx.VPCLMULQDQ(operand.U8(0x01), mem(tab, scaffold.TableFinal), v, a)
	ctx.VMOVQ(v, b)
	ctx.VPSLLDQ(operand.U8(2), b, b)
	ctx.VPXORQ(b, a, a)
	ctx.VPSRLDQ(operand.U8(2), a, v)
	ctx.VPCLMULQDQ(operand.U8(0x00), mem(tab, scaffold.TableMu), v, b)
	ctx.VPSRLDQ(operand.U8(8), b, b)
	ctx.VPXORQ(b, v, v)
	ctx.VPCLMULQDQ(operand.U8(0x10), mem(tab, scaffold.TableMu), v, b)
	ctx.VPXORQ(b, a, a)
	ctx.VMOVQ(a, ax)
	ctx.MOVWQZX(ax.As16(), ax)
}

// tail shifts the n%16 (tl) bytes after the whole lanes into x, the lanes'
// folded value (as the fold generator's gen.tail does): with B the input's
// last 16 bytes (at end), x's first tl bytes become a lane that ends where
// B starts, folded forward one lane by Fold[1], and the rest of x followed
// by B's last tl bytes the new last lane. T10-DIF's lanes are
// byte-reversed (bswap), which reverses the shifts. tl is not zero; a, b,
// c are scratch.
func tail(x, a, b, c, tl, end, tab, bswap reg.Register, hiImm, loImm operand.Op) {
	tbl, neg := reg.R10, reg.R12
	ctx.LEAQ(tailShuf, tbl)
	var bShift, cShift, mask operand.Mem
	if unrefl {
		ctx.MOVQ(tl, neg)
		ctx.NEGQ(neg)
		bShift = operand.Mem{Base: tbl, Index: neg, Scale: 1, Disp: 16}    // up t
		cShift = operand.Mem{Base: tbl, Index: neg, Scale: 1, Disp: 32}    // down 16-t
		mask = operand.Mem{Base: tbl, Index: neg, Scale: 1, Disp: 48 + 32} // bytes < t
	} else {
		bShift = operand.Mem{Base: tbl, Index: tl, Scale: 1, Disp: 16} // down t
		cShift = operand.Mem{Base: tbl, Index: tl, Scale: 1, Disp: 0}  // up 16-t
		mask = operand.Mem{Base: tbl, Index: tl, Scale: 1, Disp: 48}   // bytes >= 16-t
	}
	ctx.VMOVDQU64(mem(end, 0), c)
	if unrefl {
		ctx.VPSHUFB(bswap, c, c)
	}
	// c &= mask, as VPTERNLOGD (B AND C: 0x88), which the emulator models.
	ctx.VPTERNLOGD(operand.U8(0x88), mask, c, c)
	ctx.VPSHUFB(cShift, x, a)
	ctx.VPSHUFB(bShift, x, x)
	ctx.VPCLMULQDQ(hiImm, mem(tab, scaffold.TableFold+16), a, b)
	ctx.VPCLMULQDQ(loImm, mem(tab, scaffold.TableFold+16), a, a)
	ctx.VPTERNLOGD(operand.U8(0x96), b, a, x)
	ctx.VPXORQ(c, x, x)
}
