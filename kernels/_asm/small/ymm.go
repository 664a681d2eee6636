package main

// The AVX2 tier's kernel of single short calls (zsmall_avx2_amd64.s):
// updateEntryY, which updateEntry jumps to while the dispatch variable
// holds entryTargetY, the avx2 implementation's Update (CPUs with AVX2 and
// VPCLMULQDQ on YMM but no AVX-512: AMD Zen 3, Intel client cores). It is
// the AVX-512 kernel's shape in VEX encodings: every lane but the last
// folded straight into the last lane's position by its own constant (one
// XMM lane first when the lane count is odd, then YMM pairs), the last
// lane added as is, the bytes around the lanes as the AVX-512 kernel takes
// them, and the same reductions with VPXOR pairs for VPTERNLOGD. VEX
// encodings reach only X0-X15, whose upper halves SSE code after the call
// would pay for while dirty, so every return runs VZEROUPPER.

import (
	"fmt"
	"go/types"

	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
)

// maxLenY is the longest input updateEntryY takes: 1024 bytes, the most
// whose lanes Fold's 64 rows reach (T10-DIF included: the avx2 fold kernel
// byte-reverses its lanes too, so nothing faster takes over at 1 KiB).
const maxLenY = 1024

// generateY returns the assembly and the Go declarations of c's AVX2-tier
// entry updateEntryY, made by cmd.
func generateY(cmd []string, c scaffold.CRC) (asm, stubs []byte, err error) {
	ctx = build.NewContext()
	ctx.ConstraintExpr("!purego")
	width, isC, unrefl = int(c.Params.Width), c.Flag == "crc32c", !c.Params.Reflected
	maxLen = maxLenY
	targetY := "updateAVX2"
	if isC {
		targetY = "updateHybrid256"
	}
	staticData()
	word := scaffold.Word(width)
	ctx.Function("updateEntryY")
	ctx.Attributes(build.NOSPLIT)
	ctx.Signature(scaffold.Signature(
		[]*types.Var{
			scaffold.Param("crc", word),
			scaffold.Param("p", scaffold.Bytes),
		},
		[]*types.Var{scaffold.Param("", word)}))
	ctx.Pragma("noescape")
	first := 8
	how := []string{
		"folds every whole lane straight into the last lane with VPCLMULQDQ on",
		"YMM registers, each by its own constant of foldTables' reversed Fold",
		"row, shifts in the bytes after the lanes (8 to 15 bytes: one lane with",
		"leading zeros), and reduces by Final and Barrett (kernels/_asm/small);",
		"it tail-calls updateGeneric below 8 bytes and " + targetY + " above."}
	if isC {
		first = 1
		how = []string{
			"runs 1 to 63 bytes as one CRC32 stream, and from 64 bytes the n%16",
			"leading bytes by CRC32 instructions and the lanes after them folded",
			"with VPCLMULQDQ on YMM registers straight into the last lane, each by",
			"its own constant of foldTables' reversed Fold row, reduced by two",
			"CRC32Q (kernels/_asm/small); it tail-calls " + targetY + " above."}
	}
	doc := []string{fmt.Sprintf("updateEntryY is Update for %d to %d bytes under the avx2 implementation: it", first, maxLenY)}
	doc = append(doc, how...)
	doc = append(doc,
		"It writes X0-X15 and runs VZEROUPPER before it returns.",
		"",
		"updateEntry jumps to it, with its arguments in place, while update is",
		"entryTargetY, which is nil unless the CPU has what it needs: AVX2 and",
		"VPCLMULQDQ (and SSE4.2 for CRC-32C); nothing else calls it.",
		"",
		"noescape holds as for updateEntry: it reads p[0:len(p)] and keeps nothing.")
	ctx.Doc(doc...)
	ctx.Load(ctx.Param("p").Len(), reg.RCX)
	if isC {
		ctx.LEAQ(mem(reg.RCX, -1), reg.RDX)
		ctx.CMPQ(reg.RDX, operand.U32(maxLenY))
	} else {
		ctx.Comment(fmt.Sprintf("8 <= n <= %d; shorter inputs go to updateGeneric, as", maxLenY),
			targetY+" sends them.")
		ctx.CMPQ(reg.RCX, operand.U8(8))
		ctx.JB(lbl("short"))
		ctx.LEAQ(mem(reg.RCX, -8), reg.RDX)
		ctx.CMPQ(reg.RDX, operand.U32(maxLenY-7))
	}
	ctx.JAE(lbl("other"))
	ctx.Load(ctx.Param("p").Base(), reg.RSI)
	switch width {
	case 32:
		ctx.Load(ctx.Param("crc"), reg.EAX)
	default:
		ctx.Load(ctx.Param("crc"), reg.RAX)
	}
	ctx.MOVQ(operand.NewDataAddr(operand.Symbol{Name: "·foldTables"}, 0), reg.RDX)
	bodyY()
	ctx.Label("other")
	ctx.Comment("A length the body does not take: entryTargetY's function itself.")
	tailCall(targetY)
	if !isC {
		ctx.Label("short")
		tailCall("updateGeneric")
	}
	asm, stubs, err = scaffold.AsmAndStubs(ctx, cmd, c.Pkg)
	if err != nil {
		return nil, nil, err
	}
	return asm, stubs, nil
}

// staticData declares the file's static tables in ctx, as bswapMask and
// tailShuf: for T10-DIF the VPSHUFB control that reverses the 16 bytes of a
// lane (result byte i is source byte 15-i, the fold generator's bswapMask),
// and unless CRC-32C the tail's byte shifts and mask, the fold generator's
// table: bytes 0..47 are VPSHUFB controls (16 times 0x80, the identity
// 0..15, 16 times 0x80), so the 16 bytes at 16+s shift a lane down by s
// bytes and at 16-s up by s; bytes 48..95 are 16 zero bytes, 16 times 0xff,
// 16 zero bytes, so the 16 bytes at 48+t keep bytes 16-t..15 and at 80-t
// bytes 0..t-1.
func staticData() {
	if unrefl {
		bswapMask = ctx.StaticGlobal("bswapMask")
		ctx.DataAttributes(attr.RODATA | attr.NOPTR)
		ctx.AddDatum(0, operand.U64(0x08090a0b0c0d0e0f))
		ctx.AddDatum(8, operand.U64(0x0001020304050607))
	}
	if !isC {
		tailShuf = ctx.StaticGlobal("tailShuf")
		ctx.DataAttributes(attr.RODATA | attr.NOPTR)
		for i := 0; i < 96; i += 8 {
			var v uint64
			for j := 0; j < 8; j++ {
				var b byte
				switch k := i + j; {
				case k < 16 || k >= 32 && k < 48:
					b = 0x80
				case k < 32:
					b = byte(k - 16)
				case k >= 64 && k < 80:
					b = 0xff
				}
				v |= uint64(b) << (8 * j)
			}
			ctx.AddDatum(i, operand.U64(v))
		}
	}
}

// bodyY is the AVX2 tier's kernel: SI = p, CX = n (CRC-32C: 1..maxLenY;
// else 8..maxLenY), AX = crc (finalised, zero-extended), DX = the fold
// table; it stores the result and returns. The registers are body's.
func bodyY() {
	var (
		si, cx, ax, dx = reg.RSI, reg.RCX, reg.RAX, reg.RDX
		t              = reg.R8  // the last lane's address
		bx             = reg.RBX // the constant of the lane at the data pointer
		di             = reg.RDI // data - constant pointer: the data at (BX)(DI*1)
		r10, r11       = reg.R10, reg.R11
		init           = reg.Y0 // the register, where the first lane's first bits are
		acc            = reg.Y1
		v, w           = reg.Y2, reg.Y3
		bswap          = reg.Y4
		last           = reg.X5
		tl, end        = reg.R9, reg.R11 // n%16; (T10-DIF, CRC-64/NVME) p+n-16
	)
	hiImm, loImm := operand.U8(0x00), operand.U8(0x11)
	if unrefl {
		hiImm, loImm = operand.U8(0x01), operand.U8(0x10)
	}
	load := func(m operand.Mem, x, dst reg.Register) {
		if x != nil {
			ctx.VPXOR(m, x, dst)
		} else {
			ctx.VMOVDQU(m, dst)
		}
		if unrefl {
			ctx.VPSHUFB(sized(bswap, dst), dst, dst)
		}
	}
	// fold XORs both halves of the product of the lanes in v by the
	// constants at k, and acc, into dst; w is scratch and v overwritten.
	fold := func(k operand.Mem, v, w, acc, dst reg.Register) {
		ctx.VMOVDQU(k, reg.Y7)
		ctx.VPCLMULQDQ(hiImm, reg.Y7, v, w)
		ctx.VPCLMULQDQ(loImm, reg.Y7, v, v)
		ctx.VPXOR(w, v, v)
		ctx.VPXOR(v, acc, dst)
	}
	ret := func() {
		ctx.VZEROUPPER()
		ctx.RET()
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
		ctx.VBROADCASTI128(bswapMask, bswap)
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
	ctx.Comment("Lane l (at SI+16l) folds by Fold[m-1-l] = Rev[64-m+1+l], at",
		"tab + 1072 + 16·(65-m+l) = tab + 2112 - CX + 16l: BX tracks the data.")
	ctx.LEAQ(mem(dx, scaffold.TableRev+16*(scaffold.MaxFold+1)), bx)
	ctx.SUBQ(cx, bx)
	ctx.MOVQ(si, di)
	ctx.SUBQ(bx, di)
	data := operand.Mem{Base: bx, Index: di, Scale: 1}
	k := mem(bx, 0)
	ctx.Comment("An odd lane count: one XMM lane first, with the register, so that",
		"YMM pairs remain.")
	ctx.TESTQ(operand.U32(16), cx)
	ctx.JZ(lbl("pairs"))
	load(data, init.AsX(), v.AsX())
	ctx.VPCLMULQDQ(hiImm, k, v.AsX(), w.AsX())
	ctx.VPCLMULQDQ(loImm, k, v.AsX(), v.AsX())
	ctx.VPXOR(w.AsX(), v.AsX(), acc.AsX())
	ctx.ADDQ(operand.U8(16), bx)
	ctx.SUBQ(operand.U8(16), cx)
	ctx.JMP(lbl("yloop"))

	ctx.Label("pairs")
	ctx.Comment("YMM pairs: the first one carries the register.")
	load(data, init, v)
	ctx.VPCLMULQDQ(hiImm, k, v, w)
	ctx.VPCLMULQDQ(loImm, k, v, v)
	ctx.VPXOR(w, v, acc)
	ctx.ADDQ(operand.U8(32), bx)
	ctx.SUBQ(operand.U8(32), cx)
	ctx.JZ(lbl("collapse"))
	ctx.Label("yloop")
	ctx.Comment("An odd count of YMM pairs left: one, then two a step.")
	ctx.TESTQ(operand.U32(32), cx)
	ctx.JZ(lbl("yloop2"))
	load(data, nil, v)
	fold(k, v, w, acc, acc)
	ctx.ADDQ(operand.U8(32), bx)
	ctx.SUBQ(operand.U8(32), cx)
	ctx.JZ(lbl("collapse"))
	ctx.Label("yloop2")
	load(data, nil, v)
	load(operand.Mem{Base: bx, Index: di, Scale: 1, Disp: 32}, nil, reg.Y8)
	fold(k, v, w, acc, acc)
	fold(mem(bx, 32), reg.Y8, reg.Y9, acc, acc)
	ctx.ADDQ(operand.U8(64), bx)
	ctx.SUBQ(operand.U8(64), cx)
	ctx.JNZ(lbl("yloop2"))

	ctx.Label("collapse")
	ctx.Comment("The two lanes of the accumulator and the last lane, as is.")
	ctx.VEXTRACTI128(operand.U8(1), acc, w.AsX())
	ctx.VPXOR(w.AsX(), acc.AsX(), acc.AsX())
	if unrefl {
		load(mem(t, 0), nil, last)
		ctx.VPXOR(last, acc.AsX(), acc.AsX())
	} else {
		ctx.VPXOR(mem(t, 0), acc.AsX(), acc.AsX())
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
		reduce16Y(acc.AsX(), v.AsX(), w.AsX(), dx)
	default:
		reduce64Y(acc.AsX(), v.AsX(), w.AsX(), dx)
	}
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
	ret()

	if !isC {
		ctx.Label("single")
		ctx.Comment("One lane: the register and the lane, nothing to fold.")
		load(mem(si, 0), init.AsX(), acc.AsX())
		ctx.TESTQ(tl, tl)
		ctx.JZ(lbl("reduce"))
		ctx.Label("tail")
		tailY(acc.AsX(), v.AsX(), w.AsX(), last, tl, end, dx, bswap.AsX(), hiImm, loImm)
		ctx.JMP(lbl("reduce"))

		ctx.Label("tiny")
		ctx.Comment("8 to 15 bytes M: the lane 0^(16-n) || M, from two overlapping 8-byte",
			"loads, the first shifted up by 16-n bytes, the second the high quadword,",
			"and the register shifted up as far, to where M starts.")
		ctx.MOVQ(mem(si, 0), reg.R10)
		ctx.MOVQ(operand.Mem{Base: si, Index: cx, Scale: 1, Disp: -8}, reg.R11)
		ctx.LEAQ(tailShuf, reg.R12)
		up := operand.Mem{Base: reg.R12, Index: cx, Scale: 1} // up by 16-n
		ctx.VMOVQ(reg.R10, v.AsX())
		ctx.VPSHUFB(up, v.AsX(), v.AsX())
		ctx.VPINSRQ(operand.U8(1), reg.R11, v.AsX(), acc.AsX())
		ctx.VMOVQ(ax, w.AsX())
		ctx.VPSHUFB(up, w.AsX(), w.AsX())
		ctx.VPXOR(w.AsX(), acc.AsX(), acc.AsX())
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
		return
	}

	ctx.Label("short")
	ctx.Comment("Below 64 bytes: one CRC32 stream (no vector register written, so no",
		"VZEROUPPER): 16 bytes a step, then 8, 4, 2 and 1 by the bits of n; 16",
		"bytes take no branch, and a multiple of 16 skips the four tests.")
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
	ctx.JZ(lbl("shortdone"))
	ctx.Label("shortrest")
	bytes8421("shortrest", cx, si, ax)
	ctx.Label("shortdone")
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

// reduce64Y is reduce64 in VEX encodings (VPTERNLOGD as two VPXOR).
func reduce64Y(v, a, b, tab reg.Register) {
	ax := reg.RAX
	ctx.Comment("V·x^64 mod P: Final, then Barrett (crcmath.Reduce, reflected, w = 64).")
	ctx.VPCLMULQDQ(operand.U8(0x00), mem(tab, scaffold.TableFinal), v, a)
	ctx.VPSRLDQ(operand.U8(8), v, b)
	ctx.VPXOR(b, a, a)
	ctx.VPCLMULQDQ(operand.U8(0x00), mem(tab, scaffold.TableMu), a, b)
	ctx.VPSLLQ(operand.U8(1), b, b)
	ctx.VPXOR(b, a, v)
	ctx.VPCLMULQDQ(operand.U8(0x10), mem(tab, scaffold.TableMu), v, b)
	ctx.VPSLLQ(operand.U8(1), b, v)
	ctx.VPSRLQ(operand.U8(63), b, b)
	ctx.VPSLLDQ(operand.U8(8), b, b)
	ctx.VPXOR(b, v, v)
	ctx.VPXOR(v, a, a)
	ctx.VPEXTRQ(operand.U8(1), a, ax)
}

// reduce16Y is reduce16 in VEX encodings.
func reduce16Y(v, a, b, tab reg.Register) {
	ax := reg.RAX
	ctx.Comment("V·x^16 mod P: Final, then Barrett (crcmath.Reduce, unreflected, w = 16).")
	ctx.VPCLMULQDQ(operand.U8(0x01), mem(tab, scaffold.TableFinal), v, a)
	ctx.VMOVQ(v, b)
	ctx.VPSLLDQ(operand.U8(2), b, b)
	ctx.VPXOR(b, a, a)
	ctx.VPSRLDQ(operand.U8(2), a, v)
	ctx.VPCLMULQDQ(operand.U8(0x00), mem(tab, scaffold.TableMu), v, b)
	ctx.VPSRLDQ(operand.U8(8), b, b)
	ctx.VPXOR(b, v, v)
	ctx.VPCLMULQDQ(operand.U8(0x10), mem(tab, scaffold.TableMu), v, b)
	ctx.VPXOR(b, a, a)
	ctx.VMOVQ(a, ax)
	ctx.MOVWQZX(ax.As16(), ax)
}

// tailY is tail in VEX encodings (VPAND for the mask, VPXOR pairs).
func tailY(x, a, b, c, tl, end, tab, bswap reg.Register, hiImm, loImm operand.Op) {
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
	ctx.VMOVDQU(mem(end, 0), c)
	if unrefl {
		ctx.VPSHUFB(bswap, c, c)
	}
	ctx.VPAND(mask, c, c)
	ctx.VPSHUFB(cShift, x, a)
	ctx.VPSHUFB(bShift, x, x)
	ctx.VPCLMULQDQ(hiImm, mem(tab, scaffold.TableFold+16), a, b)
	ctx.VPCLMULQDQ(loImm, mem(tab, scaffold.TableFold+16), a, a)
	ctx.VPXOR(b, a, a)
	ctx.VPXOR(c, x, x)
	ctx.VPXOR(a, x, x)
}
