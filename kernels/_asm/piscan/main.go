// Command piscan generates the amd64 kernels of package piscan: the scans
// of packed PI tuples that dif's verification runs over every chunk of
// blocks of the separate layout, of 8-byte tuples (16-bit guard: scan, the
// rest of this comment) and of 16-byte ones (64-bit guard: scan64, whose
// comment has its shape).
//
// Run by go generate in kernels/piscan (piscan_amd64.go):
//
//	go run -C ../_asm ./piscan -out ../piscan/zscan_amd64.s -stubs ../piscan/zscan_amd64.go
//
// What the 8-byte kernels compute. Tuple j is read as the big-endian word w_j; the
// expected word of block j is guard_j<<48 | (e + j·step) (app tag in bits
// 32-47, storage and ref tags below, e + j·step wrapping modulo 2^64). The
// result is
//
//	OR_j (w_j XOR (guard_j<<48 | (e + j·step))) AND mask
//	  | (OR_j ((w_j + 2^32) XOR w_j)) AND 2^48
//
// the second term (the escape kernels only) being the carry out of the app
// tag: bit 48 of (w + 2^32) XOR w is set iff bits 32-47 of w are all ones,
// that is, iff the app tag is 0xFFFF. That is exactly what the pure-Go scan
// of package piscan returns, so the two are compared word for word.
//
// Shape. A vector holds L tuples (8 in a ZMM, 4 in a YMM), one a quadword
// lane: VPSHUFB reverses the bytes of each quadword (the big-endian load),
// VPMOVZXWQ widens L guards to quadwords, VPSLLQ puts them at bit 48, and
// each lane keeps its own expected word E_i = e + i·step (laneWords),
// advanced by 2L·step an iteration. Two independent chains of L tuples run an
// iteration (2L tuples), so that the OR accumulators' one-cycle latency
// does not bound the loop; one more step of the first chain takes a
// remaining L. On AVX-512 VPTERNLOGD folds the OR with the expected word,
// the XOR with the tuple, and the AND with the mask and the OR into the
// accumulator, into two instructions (its truth tables are derived at
// ternBadWord and below); AVX2 spells them out. The lanes are ORed together
// at the end. Kernels take a multiple of L tuples; package piscan scans the
// rest in Go.
package main

import (
	"flag"
	"fmt"

	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
)

func main() {
	var out, stubs string
	scaffold.Main("piscan", func(fs *flag.FlagSet) {
		fs.StringVar(&out, "out", "", "assembly output file")
		fs.StringVar(&stubs, "stubs", "", "Go declarations output file")
	}, func(cmd []string) ([]scaffold.File, error) {
		if out == "" || stubs == "" {
			return nil, scaffold.Usage("piscan -out file.s -stubs file.go")
		}
		asm, src, err := generate(cmd)
		return []scaffold.File{{Path: out, Data: asm}, {Path: stubs, Data: src}}, err
	})
}

// variant is one kernel: its vector width and whether it computes the
// escape term.
type variant struct {
	name string
	zmm  bool // ZMM and AVX-512 (F, BW); else YMM and AVX2
	esc  bool
}

var variants = []variant{
	{"scanZ", true, true},
	{"scanNZ", true, false},
	{"scanY", false, true},
	{"scanNY", false, false},
}

// VPTERNLOGD truth tables. The operands in Go order are imm, C, B, A (A the
// destination); bit A<<2 | B<<1 | C of imm is the result for those input
// bits, so the inputs' own tables are A = 0xF0, B = 0xCC, C = 0xAA, and a
// function's table is that function of the three.
const (
	// ternBadWord: A = C XOR (A OR B), with A the guards at bit 48, B the
	// lanes' expected words and C the tuples: 0xAA ^ (0xF0 | 0xCC).
	ternBadWord = 0xAA ^ (0xF0 | 0xCC)
	// ternOrAnd: A = A OR (B AND C): the accumulator ORed with a word under
	// a mask: 0xF0 | (0xCC & 0xAA).
	ternOrAnd = 0xF0 | (0xCC & 0xAA)
	// ternOrXor: A = A OR (B XOR C): the escape accumulator ORed with
	// (w + 2^32) XOR w: 0xF0 | (0xCC ^ 0xAA).
	ternOrXor = 0xF0 | (0xCC ^ 0xAA)
)

// generate returns the assembly and the Go declarations of the kernels,
// made by cmd.
func generate(cmd []string) (asm, src []byte, err error) {
	c := build.NewContext()
	c.ConstraintExpr("!purego")
	bswap := c.StaticGlobal("piscanBswap")
	c.DataAttributes(attr.RODATA | attr.NOPTR)
	// VPSHUFB control that reverses the bytes of each quadword of a lane:
	// result byte i of a quadword is its source byte 7-i (bytes 07 06 .. 00
	// and 0f 0e .. 08, as little-endian words).
	c.AddDatum(0, operand.U64(0x0001020304050607))
	c.AddDatum(8, operand.U64(0x08090a0b0c0d0e0f))
	laneIdx := c.StaticGlobal("piscanLanes")
	c.DataAttributes(attr.RODATA | attr.NOPTR)
	// The lane indexes 0..7, one a quadword: lane i's expected word is
	// e + i*step (laneWords).
	for i := range 8 {
		c.AddDatum(8*i, operand.U64(i))
	}
	for _, v := range variants {
		scan(c, v, bswap, laneIdx)
	}
	perm := c.StaticGlobal("piscanPerm64")
	c.DataAttributes(attr.RODATA | attr.NOPTR)
	// VPERMQ indexes that put guard perm64[i] in lane i: the lanes of the
	// unpacked tuple words (see scan64).
	for i, k := range perm64 {
		c.AddDatum(8*i, operand.U64(k))
	}
	scan64(c, "scan64Z", true, bswap, perm)
	scan64(c, "scan64NZ", false, bswap, perm)
	return scaffold.AsmAndStubs(c, cmd, "piscan")
}

// scan writes kernel v.
func scan(c *build.Context, v variant, bswap, laneIdx operand.Mem) {
	lanes := 4
	vec := c.YMM
	if v.zmm {
		lanes, vec = 8, c.ZMM
	}
	c.Function(v.name)
	c.Attributes(build.NOSPLIT)
	c.SignatureExpr("func(t [][8]byte, g []uint16, e, step, mask uint64) uint64")
	isa, what := "AVX2", "YMM"
	if v.zmm {
		isa, what = "AVX-512 F and BW", "ZMM"
	}
	escWhat := "with the escape term"
	if !v.esc {
		escWhat = "without the escape term"
	}
	c.Doc(fmt.Sprintf("%s is the scan of len(g) packed tuples %s, %d a %s register (needs %s).", v.name, escWhat, lanes, what, isa),
		fmt.Sprintf("len(g) must be a multiple of %d and len(t) at least len(g).", lanes))

	t := c.Load(c.Param("t").Base(), c.GP64())
	g := c.Load(c.Param("g").Base(), c.GP64())
	n := c.Load(c.Param("g").Len(), c.GP64())
	e := c.Load(c.Param("e"), c.GP64())
	step := c.Load(c.Param("step"), c.GP64())
	mask := c.Load(c.Param("mask"), c.GP64())

	mov := func(src, dst operand.Op) {
		if v.zmm {
			c.VMOVDQU64(src, dst)
		} else {
			c.VMOVDQU(src, dst)
		}
	}
	broadcast := func(r reg.Register) reg.VecVirtual {
		x, z := c.XMM(), vec()
		c.VMOVQ(r, x)
		c.VPBROADCASTQ(x, z)
		return z
	}
	c.Comment(fmt.Sprintf("The expected words of the first %d blocks: e + i*step in lane i of", lanes),
		fmt.Sprintf("the first chain, %d lanes on in the second.", lanes))
	idx := vec()
	mov(laneIdx, idx)
	e0, e1 := vec(), vec()
	laneWords(c, vec, broadcast(e), broadcast(step), idx, e0)
	c.SHLQ(operand.U8(log2(lanes)), step)
	c.VPADDQ(broadcast(step), e0, e1)
	c.Comment(fmt.Sprintf("Each iteration advances the lanes by %d blocks: step<<%d.", 2*lanes, log2(2*lanes)))
	c.SHLQ(operand.U8(1), step)
	stepV := broadcast(step)
	maskV := broadcast(mask)
	ctl := vec()
	if v.zmm {
		c.VBROADCASTI32X4(bswap, ctl)
	} else {
		c.VBROADCASTI128(bswap, ctl)
	}
	var oneV reg.VecVirtual
	if v.esc {
		one := c.GP64()
		c.MOVQ(operand.U64(1<<32), one)
		oneV = broadcast(one)
	}
	zero := func(r reg.VecVirtual) {
		if v.zmm {
			c.VPXORQ(r, r, r)
		} else {
			c.VPXOR(r, r, r)
		}
	}
	or := func(x, y, dst reg.VecVirtual) {
		if v.zmm {
			c.VPORQ(x, y, dst)
		} else {
			c.VPOR(x, y, dst)
		}
	}
	bad := []reg.VecVirtual{vec(), vec()}
	var esc []reg.VecVirtual
	for _, b := range bad {
		zero(b)
	}
	if v.esc {
		esc = []reg.VecVirtual{vec(), vec()}
		for _, s := range esc {
			zero(s)
		}
	}
	ev := []reg.VecVirtual{e0, e1}

	// chain scans the lanes tuples from tuple k of t and g with chain k's
	// expected words and accumulators.
	chain := func(k int) {
		w, gw := vec(), vec()
		mov(operand.Mem{Base: t, Disp: 8 * lanes * k}, w)
		c.VPSHUFB(ctl, w, w)
		c.VPMOVZXWQ(operand.Mem{Base: g, Disp: 2 * lanes * k}, gw)
		c.VPSLLQ(operand.U8(48), gw, gw)
		if v.zmm {
			c.VPTERNLOGD(operand.U8(ternBadWord), w, ev[k], gw)
			c.VPTERNLOGD(operand.U8(ternOrAnd), maskV, gw, bad[k])
		} else {
			c.VPOR(ev[k], gw, gw)
			c.VPXOR(w, gw, gw)
			c.VPAND(maskV, gw, gw)
			c.VPOR(gw, bad[k], bad[k])
		}
		if v.esc {
			s := vec()
			c.VPADDQ(oneV, w, s)
			if v.zmm {
				c.VPTERNLOGD(operand.U8(ternOrXor), w, s, esc[k])
			} else {
				c.VPXOR(w, s, s)
				c.VPOR(s, esc[k], esc[k])
			}
		}
	}

	c.Label("loop")
	c.CMPQ(n, operand.U32(2*lanes))
	c.JB(operand.LabelRef("last"))
	c.Comment(fmt.Sprintf("%d blocks: two chains of %d.", 2*lanes, lanes))
	chain(0)
	chain(1)
	c.VPADDQ(stepV, e0, e0)
	c.VPADDQ(stepV, e1, e1)
	c.ADDQ(operand.U32(16*lanes), t)
	c.ADDQ(operand.U32(4*lanes), g)
	c.SUBQ(operand.U32(2*lanes), n)
	c.JMP(operand.LabelRef("loop"))

	c.Label("last")
	c.Comment(fmt.Sprintf("n is 0 or %d: one more step of the first chain.", lanes))
	c.TESTQ(n, n)
	c.JZ(operand.LabelRef("done"))
	chain(0)

	c.Label("done")
	or(bad[1], bad[0], bad[0])
	if v.esc {
		c.Comment("The escape bit of every lane: bit 48 of its accumulator.")
		or(esc[1], esc[0], esc[0])
		carry := c.GP64()
		c.MOVQ(operand.U64(1<<48), carry)
		carryV := broadcast(carry)
		if v.zmm {
			c.VPTERNLOGD(operand.U8(ternOrAnd), carryV, esc[0], bad[0])
		} else {
			c.VPAND(carryV, esc[0], esc[0])
			c.VPOR(esc[0], bad[0], bad[0])
		}
	}
	c.Comment("OR the lanes together.")
	if v.zmm {
		hi := c.YMM()
		c.VEXTRACTI64X4(operand.U8(1), bad[0], hi)
		c.VPOR(hi, bad[0].AsY(), hi)
		lo := c.XMM()
		c.VEXTRACTI128(operand.U8(1), hi, lo)
		c.VPOR(lo, hi.AsX(), lo)
		reduce2(c, lo)
	} else {
		lo := c.XMM()
		c.VEXTRACTI128(operand.U8(1), bad[0], lo)
		c.VPOR(lo, bad[0].AsX(), lo)
		reduce2(c, lo)
	}
}

// reduce2 ORs the two quadwords of x and returns the result.
func reduce2(c *build.Context, x reg.VecVirtual) {
	h := c.XMM()
	c.VPUNPCKHQDQ(x, x, h)
	c.VPOR(h, x, x)
	r := c.GP64()
	c.VMOVQ(x, r)
	c.Store(r, c.ReturnIndex(0))
	c.VZEROUPPER()
	c.RET()
}

// laneWords sets dst to eV + idx·sV lane by lane, modulo 2^64, for lane
// indexes idx below 2^32, without a trip through memory (whose narrow
// stores a wide load cannot forward from): with sV = sh·2^32 + sl,
// idx·sV = idx·sl + (idx·sh)·2^32, and VPMULUDQ multiplies the low 32 bits
// of each lane into 64. The second product's bits beyond 32 fall off the
// shift, as they do modulo 2^64.
func laneWords(c *build.Context, vec func() reg.VecVirtual, eV, sV, idx, dst reg.VecVirtual) {
	hi := vec()
	c.VPMULUDQ(sV, idx, dst)
	c.VPSRLQ(operand.U8(32), sV, hi)
	c.VPMULUDQ(hi, idx, hi)
	c.VPSLLQ(operand.U8(32), hi, hi)
	c.VPADDQ(hi, dst, dst)
	c.VPADDQ(eV, dst, dst)
}

func log2(n int) int {
	k := 0
	for 1<<k < n {
		k++
	}
	return k
}

// perm64 is the tuple in each lane after VPUNPCKLQDQ/VPUNPCKHQDQ of the
// vectors of tuples 0-3 and 4-7: 128-bit lane l takes quadword 2l of each
// source's lane l, that is tuples l and 4+l.
var perm64 = [8]int{0, 4, 1, 5, 2, 6, 3, 7}

// scan64 writes the scan of packed 16-byte tuples with a 64-bit guard
// (the CRC-64/NVME format): words w0 (the guard) and w1 (app<<48 | the
// storage and ref tags), expected g[j] and e + j·step. It returns
//
//	OR_j (w0_j XOR g[j]) AND gm | (w1_j XOR (e + j·step)) AND mask
//	  | OR_j ((w1_j>>48) + 1) >> 16
//
// (the last term, with esc, is 1 iff some app tag is 0xFFFF), which is
// package piscan's generic Scan64. Eight tuples an iteration, from two ZMM
// loads: after the byte swap, VPUNPCKLQDQ gathers their guard words and
// VPUNPCKHQDQ their other words, in the lane order perm64; one VPERMQ puts
// the guards in the same order, and the lanes' expected words start at
// e + perm64[i]·step and advance by 8·step.
func scan64(c *build.Context, name string, esc bool, bswap, perm operand.Mem) {
	c.Function(name)
	c.Attributes(build.NOSPLIT)
	c.SignatureExpr("func(t [][16]byte, g []uint64, e, step, gm, mask uint64) uint64")
	escWhat := "with the escape term"
	if !esc {
		escWhat = "without the escape term"
	}
	c.Doc(fmt.Sprintf("%s is the scan of len(g) packed 16-byte tuples %s, 8 an iteration (needs AVX-512 F and BW).", name, escWhat),
		"len(g) must be a multiple of 8 and len(t) at least len(g).")
	t := c.Load(c.Param("t").Base(), c.GP64())
	g := c.Load(c.Param("g").Base(), c.GP64())
	n := c.Load(c.Param("g").Len(), c.GP64())
	e := c.Load(c.Param("e"), c.GP64())
	step := c.Load(c.Param("step"), c.GP64())
	gm := c.Load(c.Param("gm"), c.GP64())
	mask := c.Load(c.Param("mask"), c.GP64())
	broadcast := func(r reg.Register) reg.VecVirtual {
		x, z := c.XMM(), c.ZMM()
		c.VMOVQ(r, x)
		c.VPBROADCASTQ(x, z)
		return z
	}
	ctl, idx := c.ZMM(), c.ZMM()
	c.VBROADCASTI32X4(bswap, ctl)
	c.VMOVDQU64(perm, idx)
	c.Comment("The expected words of the first 8 blocks: e + perm64[i]*step in lane i.")
	ev := c.ZMM()
	laneWords(c, c.ZMM, broadcast(e), broadcast(step), idx, ev)
	c.SHLQ(operand.U8(3), step)
	stepV, gmV, maskV := broadcast(step), broadcast(gm), broadcast(mask)
	var oneV, escV reg.VecVirtual
	badG, badW := c.ZMM(), c.ZMM()
	c.VPXORQ(badG, badG, badG)
	c.VPXORQ(badW, badW, badW)
	if esc {
		one := c.GP64()
		c.MOVQ(operand.U64(1), one)
		oneV = broadcast(one)
		escV = c.ZMM()
		c.VPXORQ(escV, escV, escV)
	}

	c.Label("loop")
	c.CMPQ(n, operand.U32(8))
	c.JB(operand.LabelRef("done"))
	za, zb := c.ZMM(), c.ZMM()
	c.VMOVDQU64(operand.Mem{Base: t}, za)
	c.VMOVDQU64(operand.Mem{Base: t, Disp: 64}, zb)
	c.VPSHUFB(ctl, za, za)
	c.VPSHUFB(ctl, zb, zb)
	w0, w1, gv := c.ZMM(), c.ZMM(), c.ZMM()
	c.VPUNPCKLQDQ(zb, za, w0)
	c.VPUNPCKHQDQ(zb, za, w1)
	c.VPERMQ(operand.Mem{Base: g}, idx, gv)
	c.VPXORQ(gv, w0, gv)
	c.VPTERNLOGD(operand.U8(ternOrAnd), gmV, gv, badG)
	x := c.ZMM()
	c.VPXORQ(ev, w1, x)
	c.VPTERNLOGD(operand.U8(ternOrAnd), maskV, x, badW)
	if esc {
		c.Comment("(w1>>48) + 1: bit 16 set iff the app tag is 0xFFFF.")
		a := c.ZMM()
		c.VPSRLQ(operand.U8(48), w1, a)
		c.VPADDQ(oneV, a, a)
		c.VPORQ(a, escV, escV)
	}
	c.VPADDQ(stepV, ev, ev)
	c.ADDQ(operand.U32(128), t)
	c.ADDQ(operand.U32(64), g)
	c.SUBQ(operand.U32(8), n)
	c.JMP(operand.LabelRef("loop"))

	c.Label("done")
	c.VPORQ(badW, badG, badG)
	if esc {
		c.Comment("The escape bit at bit 0, as the Go scan has it.")
		c.VPSRLQ(operand.U8(16), escV, escV)
		c.VPORQ(escV, badG, badG)
	}
	c.Comment("OR the lanes together.")
	hi := c.YMM()
	c.VEXTRACTI64X4(operand.U8(1), badG, hi)
	c.VPOR(hi, badG.AsY(), hi)
	lo := c.XMM()
	c.VEXTRACTI128(operand.U8(1), hi, lo)
	c.VPOR(lo, hi.AsX(), lo)
	reduce2(c, lo)
}
