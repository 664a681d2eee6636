// Command crc32hybrid generates the amd64 hybrid CRC-32C kernels of package
// crc32c: CRC32 instruction streams and carry-less-multiply folding running
// side by side over six segments of a chunk, or over six blocks at once.
//
// Run by go generate in kernels/crc32c (crc32c_hybrid_amd64.go):
//
//	go run -C ../_asm ./crc32hybrid -out ../crc32c/zhybrid_amd64.s -stubs ../crc32c/zhybrid_amd64.go -pkg crc32c
//
// Why two kinds of stream. The CRC32 instruction and the carry-less
// multiplier are separate execution units. On the AMD EPYC (Zen 3) this was
// written on, CRC32 r64 has a latency of 3 cycles and a throughput of one
// per cycle, so three independent streams run at 8 bytes per cycle, while
// VPCLMULQDQ has a throughput of one every 2 cycles for either an XMM or a
// YMM register: folding 32 bytes with YMM costs two of them, 8 bytes per
// cycle again. Running three CRC32 streams and three YMM fold streams in the
// same loop keeps both units busy, about 16 bytes per cycle in the limit. With
// XMM folding only (no VPCLMULQDQ), folding runs at 4 bytes per cycle, so the
// 128-bit variant runs four CRC32 streams and two fold streams.
//
// Structure. Six segments of n bytes (n a multiple of 32) start at
// p + k·stride, k = 0..5. Segments 0..2 are addressed from base SI, 3..5
// from base R8 = p + 3·stride, each with index stride·{0,1,2}. Every loop
// step advances all six by 32 bytes: four CRC32Q per CRC segment, one YMM
// (or two XMM) fold per fold segment. A fold segment's accumulator, after its
// last step, is a 32-byte message congruent to the segment (the fold
// multiplies by x^256 mod P, crcmath.FoldTable.Fold[2]).
//
// hybridChunk* runs a tail of the input first, as one more CRC32 stream that
// overlaps the loop, then merges everything into one 128-bit value V whose
// CRC register (two CRC32Q) is the register after the chunk: each CRC
// register and each accumulator quadword is multiplied by x^D mod P for its
// distance D from the end with one PCLMULQDQ (constants and proof in
// kernels/_asm/crcgen). hybridBlocks* reduces every block on
// its own (four CRC32Q per accumulator), adds the block's last
// blockLen mod 32 bytes and stores the finalised CRC.
package main

import (
	"flag"
	"fmt"

	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
	"github.com/difctl/difctl/kernels/_asm/internal/zmmcrc"
)

// variant describes one kernel width.
type variant struct {
	suffix  string // function name suffix
	ymm     bool   // VPCLMULQDQ on YMM (VEX encodings); else legacy SSE on XMM
	crcSegs int    // segments 0..crcSegs-1 run CRC32 streams; the rest fold
	// sub = 2 runs every CRC block as two chains (blocks only; see
	// chains): the Golden Cove shape of the YMM kernel.
	sub  int
	what []string // for the doc comment
}

var variants = []variant{
	{suffix: "256", ymm: true, crcSegs: 3, what: []string{
		"three CRC32 streams and three VPCLMULQDQ (YMM) fold streams;",
		"needs SSE4.2, AVX2 and VPCLMULQDQ."}},
	{suffix: "128", ymm: false, crcSegs: 4, what: []string{
		"four CRC32 streams and two PCLMULQDQ (XMM) fold streams;",
		"needs SSE4.2 and PCLMULQDQ."}},
	{suffix: "256S", ymm: true, crcSegs: 2, sub: 2, what: []string{
		"two CRC32 streams, each as two chains, and four VPCLMULQDQ (YMM) fold",
		"streams (the shape for Intel cores: see chains); needs SSE4.2, AVX2",
		"and VPCLMULQDQ."}},
}

func main() {
	var out, stubs, pkg string
	scaffold.Main("crc32hybrid", func(fs *flag.FlagSet) {
		fs.StringVar(&out, "out", "", "assembly output file")
		fs.StringVar(&stubs, "stubs", "", "Go declarations output file")
		fs.StringVar(&pkg, "pkg", "crc32c", "package name")
	}, func(cmd []string) ([]scaffold.File, error) {
		if out == "" || stubs == "" {
			return nil, scaffold.Usage("crc32hybrid -out file.s -stubs file.go [-pkg crc32c]")
		}
		asm, src, err := generate(cmd, pkg)
		return []scaffold.File{{Path: out, Data: asm}, {Path: stubs, Data: src}}, err
	})
}

// ctx is the context the kernels are built in (generate sets it).
var ctx *build.Context

// generate returns the assembly and the Go declarations of the kernels,
// made by cmd.
func generate(cmd []string, pkg string) (asm, stubs []byte, err error) {
	ctx = build.NewContext()
	ctx.ConstraintExpr("!purego")
	for _, v := range variants {
		if v.sub == 2 {
			blocks(v, false)
			continue
		}
		chunk(v)
		blocks(v, false)
		blocks(v, true)
	}
	short()
	short3()
	for _, v := range zVariants {
		blocksZ(v)
	}
	for _, c := range zaVariants {
		blocksZA(c)
	}
	mergeZ()
	return scaffold.AsmAndStubs(ctx, cmd, pkg)
}

// text starts a function: name, NOSPLIT and its Go signature.
func text(name, signature string) {
	ctx.Function(name)
	ctx.Attributes(build.NOSPLIT)
	ctx.SignatureExpr(signature)
}

// segs holds the addressing of the six segments.
type segs struct {
	si, r8, stride reg.Register
}

// addr returns the address of segment k at offset disp from the current
// position.
func (s segs) addr(k, disp int) operand.Mem {
	base := s.si
	if k >= 3 {
		base = s.r8
	}
	m := operand.Mem{Base: base, Disp: disp}
	if k%3 != 0 {
		m.Index = s.stride
		m.Scale = uint8(k % 3)
	}
	return m
}

// lockstep emits the loop over n bytes (n = 32·iter, iter >= 1) of every
// segment. The CRC registers must be initialised by the caller; the fold
// accumulators are loaded here, and the init register (if non-nil, a
// vector holding the initial CRC register in its first 32 bits) is XORed
// into the first lane of each fold segment. On return s.si and s.r8 point
// 32·iter bytes further and the fold accumulators hold the folded segments.
//
// If six is not nil, it holds 6·stride, and every step prefetches (PREFETCHT0)
// the line of each segment six blocks further at the step's position: the
// next group of hybridBlocks. Six streams that each advance by 32 bytes a
// step, stride bytes apart, do not train the hardware prefetchers as one
// sequential stream does; from DRAM (a buffer beyond the L3 cache),
// 512-byte blocks ran at about half the speed of Update without it. A
// prefetch past the end of the buffer does not fault.
//
// If ch is not nil, the CRC blocks run as ch's two chains (see chains)
// instead of from s: 8 bytes of chain A and 8 of chain B in each half of
// the step, and ch's pointers advance 16 bytes a step.
func lockstep(v variant, s segs, crcs []reg.GPVirtual, iter reg.Register, k reg.VecVirtual, init reg.VecVirtual, six reg.Register, name string, ch *chains) (acc [][]reg.VecVirtual) {
	nfold := 6 - v.crcSegs
	ctx.Comment("Load the first 32 bytes of each fold segment.")
	for f := 0; f < nfold; f++ {
		seg := v.crcSegs + f
		if v.ymm {
			a := ctx.YMM()
			ctx.VMOVDQU(s.addr(seg, 0), a)
			if init != nil {
				ctx.VPXOR(init.AsY(), a, a)
			}
			acc = append(acc, []reg.VecVirtual{a})
		} else {
			lo, hi := ctx.XMM(), ctx.XMM()
			ctx.MOVOU(s.addr(seg, 0), lo)
			ctx.MOVOU(s.addr(seg, 16), hi)
			if init != nil {
				ctx.PXOR(init, lo)
			}
			acc = append(acc, []reg.VecVirtual{lo, hi})
		}
	}
	crcStep := func(q int) {
		if ch != nil {
			ch.step(q)
			return
		}
		for c := 0; c < v.crcSegs; c++ {
			ctx.CRC32Q(s.addr(c, 8*q), crcs[c])
		}
	}
	advance := func() {
		ctx.ADDQ(operand.U8(32), s.si)
		ctx.ADDQ(operand.U8(32), s.r8)
		if ch != nil {
			ctx.ADDQ(operand.U8(16), ch.a)
			ctx.ADDQ(operand.U8(16), ch.b)
		}
	}
	ctx.Comment("Every step: 32 bytes of each CRC segment, and fold each fold",
		"accumulator forward by 32 bytes onto the next 32 bytes of its segment.")
	ctx.DECQ(iter)
	ctx.JZ(operand.LabelRef(name + "_last"))
	ctx.Label(name + "_loop")
	if six != nil {
		pf := ctx.GP64()
		for _, base := range []reg.Register{s.si, s.r8} {
			ctx.LEAQ(operand.Mem{Base: base, Index: six, Scale: 1}, pf)
			ps := segs{si: pf, r8: pf, stride: s.stride}
			for k := 0; k < 3; k++ {
				ctx.PREFETCHT0(ps.addr(k, 0))
			}
		}
	}
	for q := 0; q < 4; q++ {
		crcStep(q)
		if q >= nfold {
			continue
		}
		seg := v.crcSegs + q
		if v.ymm {
			a := acc[q][0]
			t1, t2 := ctx.YMM(), ctx.YMM()
			ctx.VPCLMULQDQ(operand.U8(0x00), k.AsY(), a, t1) // Hi · C(320)
			ctx.VPCLMULQDQ(operand.U8(0x11), k.AsY(), a, t2) // Lo · C(256)
			ctx.VPXOR(s.addr(seg, 32), t1, t1)
			ctx.VPXOR(t2, t1, a)
		} else {
			for h, a := range acc[q] {
				t1, t2 := ctx.XMM(), ctx.XMM()
				ctx.MOVO(a, t1)
				ctx.PCLMULQDQ(operand.U8(0x00), k, a)  // Hi · C(320)
				ctx.PCLMULQDQ(operand.U8(0x11), k, t1) // Lo · C(256)
				ctx.MOVOU(s.addr(seg, 32+16*h), t2)
				ctx.PXOR(t1, a)
				ctx.PXOR(t2, a)
			}
		}
	}
	advance()
	ctx.DECQ(iter)
	ctx.JNZ(operand.LabelRef(name + "_loop"))
	ctx.Label(name + "_last")
	ctx.Comment("Last step: the CRC segments only.")
	for q := 0; q < 4; q++ {
		crcStep(q)
	}
	advance()
	return acc
}

// chains runs each CRC block of a YMM kernel as two chains, for cores
// where one chain a block leaves the fold's port idle: on Intel's Golden
// Cove a 32-byte step costs a CRC block 4 CRC32Q, 12 cycles of latency on
// its chain and 4 of port 1, and a fold block 2 VPCLMULQDQ ymm, 2 cycles of
// port 5. Three CRC blocks and three fold blocks (hybridBlocks256, the
// Zen 2 and Zen 3 shape) run at the chains' 12 cycles a step, 16 bytes a
// cycle, the fold's own pace; two CRC blocks of two chains each beside
// four fold blocks balance both ports at 8 cycles a step (6 of latency a
// chain): 24 bytes a cycle, 1.5x.
//
// Chain A runs the block's first D = blockLen/2 bytes from the initial
// register, chain B the next D from zero, 16 bytes of each a step (the
// blocks kernel requires blockLen to be a multiple of 64, so the two
// halves are the block and each a whole number of steps). The register
// after A‖B is r_A·x^(8D) ⊕ r_B: with k = C(8D-64) (hybridKS's row for
// D = 32·(blockLen/64), kernels/_asm/crcgen), V = r_A·k and two CRC32Q of
// V's quadwords from zero give r_A·x^(8D), as in the AVX-512 kernels
// (zmm.go).
type chains struct {
	a, b   reg.GPVirtual   // chain A's and chain B's position in CRC block 0
	stride reg.Register    // the blocks' stride
	ra, rb []reg.GPVirtual // the registers of chains A and B of each CRC block
}

// step emits quarter q of a step: 8 bytes of chain A (q even) or B of
// every CRC block.
func (ch *chains) step(q int) {
	rs, base := ch.ra, ch.a
	if q%2 == 1 {
		rs, base = ch.rb, ch.b
	}
	for i, r := range rs {
		m := operand.Mem{Base: base, Disp: 8 * (q / 2)}
		if i > 0 {
			m.Index, m.Scale = ch.stride, uint8(i)
		}
		ctx.CRC32Q(m, r)
	}
}

// merge leaves in ch.ra the register of every CRC block: r_A·x^(8D) ⊕ r_B,
// with k = C(8D-64) the kernel's parameter k. (The ZMM kernels' two
// chains merge so too: only ra and rb are used.)
func (ch *chains) merge() {
	ctx.Comment("Every CRC block's register: r_A·C(8D-64) through two CRC32Q from zero, ⊕ r_B.")
	kt := ctx.GP64()
	ctx.Load(ctx.Param("k"), kt)
	kx := ctx.XMM()
	ctx.VMOVQ(kt, kx)
	for i, ra := range ch.ra {
		x := ctx.XMM()
		ctx.VMOVQ(ra, x)
		ctx.VPCLMULQDQ(operand.U8(0x00), kx, x, x)
		ctx.XORL(ra.As32(), ra.As32())
		ctx.VMOVQ(x, kt)
		ctx.CRC32Q(kt, ra)
		ctx.VPEXTRQ(operand.U8(1), x, kt)
		ctx.CRC32Q(kt, ra)
		ctx.XORL(ch.rb[i].As32(), ra.As32())
	}
}

// reduceFold returns, for each fold segment, the CRC register of its
// 32-byte accumulator from a zero register: four CRC32Q.
func reduceFold(v variant, acc [][]reg.VecVirtual) []reg.GPVirtual {
	var out []reg.GPVirtual
	ctx.Comment("Reduce each fold accumulator: CRC32Q over its 32 bytes from zero.")
	for _, a := range acc {
		r := ctx.GP64()
		t := ctx.GP64()
		ctx.XORL(r.As32(), r.As32())
		if v.ymm {
			x := a[0].AsX()
			hi := ctx.XMM()
			ctx.VEXTRACTI128(operand.U8(1), a[0], hi)
			ctx.VMOVQ(x, t)
			ctx.CRC32Q(t, r)
			ctx.VPEXTRQ(operand.U8(1), x, t)
			ctx.CRC32Q(t, r)
			ctx.VMOVQ(hi, t)
			ctx.CRC32Q(t, r)
			ctx.VPEXTRQ(operand.U8(1), hi, t)
			ctx.CRC32Q(t, r)
		} else {
			for _, x := range a {
				ctx.MOVQ(x, t)
				ctx.CRC32Q(t, r)
				ctx.PEXTRQ(operand.U8(1), x, t)
				ctx.CRC32Q(t, r)
			}
		}
		out = append(out, r)
	}
	return out
}

// xorClmul XORs into *sum (or sets it, if nil) the carry-less products
// x.lo·k.lo and, if both, x.hi·k.hi, with k the 16 bytes at m.
func xorClmul(v variant, sum *reg.VecVirtual, x reg.Register, m operand.Mem, both bool) {
	if v.ymm {
		t := ctx.XMM()
		ctx.VPCLMULQDQ(operand.U8(0x00), m, x, t)
		if both {
			u := ctx.XMM()
			ctx.VPCLMULQDQ(operand.U8(0x11), m, x, u)
			ctx.VPXOR(u, t, t)
		}
		if *sum == nil {
			*sum = t
			return
		}
		ctx.VPXOR(t, *sum, *sum)
		return
	}
	k, t := ctx.XMM(), ctx.XMM()
	ctx.MOVOU(m, k)
	ctx.MOVO(x, t)
	ctx.PCLMULQDQ(operand.U8(0x00), k, t)
	if both {
		ctx.PCLMULQDQ(operand.U8(0x11), k, x)
		ctx.PXOR(x, t)
	}
	if *sum == nil {
		*sum = t
		return
	}
	ctx.PXOR(t, *sum)
}

// pair returns a vector holding the register a in its low quadword and b
// (if not nil) in its high quadword.
func pair(v variant, a, b reg.Register) reg.VecVirtual {
	x := ctx.XMM()
	if v.ymm {
		ctx.VMOVQ(a, x)
		if b != nil {
			ctx.VPINSRQ(operand.U8(1), b, x, x)
		}
		return x
	}
	ctx.MOVQ(a, x)
	if b != nil {
		ctx.PINSRQ(operand.U8(1), b, x)
	}
	return x
}

func chunk(v variant) {
	name := "hybridChunk" + v.suffix
	text(name, "func(reg uint32, p *byte, tail, s int, k *[14]uint64, fold *[2][2]uint64) uint32")
	ctx.Pragma("noescape")
	ctx.Doc(append(append([]string{
		name + " returns the CRC-32C register (not finalised) after",
		"p[0:tail+6s], given the register reg before it. The tail p[0:tail] runs",
		"as one CRC32 stream; the chunk p[tail:tail+6s] as six segments of s",
		"bytes:"}, v.what...),
		"",
		"Preconditions: s is a multiple of 32 and at least 32; k = &hybridK[s/32-1];",
		"fold = &foldTable.Fold[1] (Fold[1] and Fold[2]).",
	)...)
	ctx.Comment("The tail first: one CRC32 chain from reg, which overlaps the main loop",
		"and enters the merge as the register before the chunk.")
	si, tail, rt := ctx.GP64(), ctx.GP64(), ctx.GP64()
	ctx.Load(ctx.Param("p"), si)
	ctx.Load(ctx.Param("tail"), tail)
	ctx.Load(ctx.Param("reg"), rt.As32())
	ctx.CMPQ(tail, operand.U8(8))
	ctx.JB(operand.LabelRef(name + "_tailb"))
	ctx.Label(name + "_tailq")
	ctx.CRC32Q(operand.Mem{Base: si}, rt)
	ctx.ADDQ(operand.U8(8), si)
	ctx.SUBQ(operand.U8(8), tail)
	ctx.CMPQ(tail, operand.U8(8))
	ctx.JAE(operand.LabelRef(name + "_tailq"))
	ctx.Label(name + "_tailb")
	ctx.TESTQ(tail, tail)
	ctx.JZ(operand.LabelRef(name + "_chunk"))
	ctx.CRC32B(operand.Mem{Base: si}, rt.As32())
	ctx.INCQ(si)
	ctx.DECQ(tail)
	ctx.JMP(operand.LabelRef(name + "_tailb"))
	ctx.Label(name + "_chunk")

	stride, r8 := ctx.GP64(), ctx.GP64()
	ctx.Load(ctx.Param("s"), stride)
	ctx.LEAQ(operand.Mem{Base: si, Index: stride, Scale: 2}, r8)
	ctx.ADDQ(stride, r8)
	s := segs{si: si, r8: r8, stride: stride}
	crcs := make([]reg.GPVirtual, v.crcSegs)
	for c := range crcs {
		crcs[c] = ctx.GP64()
		ctx.XORL(crcs[c].As32(), crcs[c].As32())
	}
	fp := ctx.Load(ctx.Param("fold"), ctx.GP64())
	kf := foldConst(v, operand.Mem{Base: fp, Disp: 16})
	iter := ctx.GP64()
	ctx.MOVQ(stride, iter)
	ctx.SHRQ(operand.U8(5), iter)
	acc := lockstep(v, s, crcs, iter, kf, nil, nil, name, nil)

	ctx.Comment("Merge: build V with V·x^32 ≡ the register after the chunk (see",
		"kernels/_asm/crcgen), then two CRC32Q.")
	kp := ctx.Load(ctx.Param("k"), ctx.GP64())
	var sum reg.VecVirtual
	nfold := len(acc)
	// Fold segments but the last, d segments before the end: the row's
	// constants for D = 8·d·s.
	for f := 0; f < nfold-1; f++ {
		d := nfold - 1 - f
		off := 48 + 32*(d-1)
		if v.ymm {
			t, u := ctx.YMM(), ctx.YMM()
			ctx.VPCLMULQDQ(operand.U8(0x00), operand.Mem{Base: kp, Disp: off}, acc[f][0], t)
			ctx.VPCLMULQDQ(operand.U8(0x11), operand.Mem{Base: kp, Disp: off}, acc[f][0], u)
			ctx.VPXOR(u, t, t)
			hi := ctx.XMM()
			ctx.VEXTRACTI128(operand.U8(1), t, hi)
			ctx.VPXOR(hi, t.AsX(), hi)
			if sum == nil {
				sum = hi
			} else {
				ctx.VPXOR(hi, sum, sum)
			}
		} else {
			xorClmul(v, &sum, acc[f][0], operand.Mem{Base: kp, Disp: off}, true)
			xorClmul(v, &sum, acc[f][1], operand.Mem{Base: kp, Disp: off + 16}, true)
		}
	}
	// The last segment: fold its first 16 bytes forward by 16 (Fold[1]) and
	// add its last 16.
	last := acc[nfold-1]
	if v.ymm {
		hi := ctx.XMM()
		ctx.VEXTRACTI128(operand.U8(1), last[0], hi)
		xorClmul(v, &sum, last[0].AsX(), operand.Mem{Base: fp}, true)
		ctx.VPXOR(hi, sum, sum)
	} else {
		xorClmul(v, &sum, last[0], operand.Mem{Base: fp}, true)
		ctx.PXOR(last[1], sum)
	}
	// The registers: the one after the tail (six segments before the end),
	// then the CRC segments, two per multiplication.
	regs := []reg.Register{rt}
	for _, c := range crcs {
		regs = append(regs, c)
	}
	for i := 0; i < len(regs); i += 2 {
		var b reg.Register
		if i+1 < len(regs) {
			b = regs[i+1]
		}
		xorClmul(v, &sum, pair(v, regs[i], b), operand.Mem{Base: kp, Disp: 8 * i}, b != nil)
	}
	out, t := ctx.GP64(), ctx.GP64()
	if v.ymm {
		zmmcrc.LaneCRC32(ctx, sum, out, t)
		ctx.VZEROUPPER()
	} else {
		ctx.XORL(out.As32(), out.As32())
		ctx.MOVQ(sum, t)
		ctx.CRC32Q(t, out)
		ctx.PEXTRQ(operand.U8(1), sum, t)
		ctx.CRC32Q(t, out)
	}
	ctx.Store(out.As32(), ctx.ReturnIndex(0))
	ctx.RET()
}

// foldConst loads Fold[2] from m (into both 128-bit lanes for YMM).
func foldConst(v variant, m operand.Mem) reg.VecVirtual {
	if v.ymm {
		k := ctx.YMM()
		ctx.VBROADCASTI128(m, k)
		return k
	}
	k := ctx.XMM()
	ctx.MOVOU(m, k)
	return k
}

// blocks generates hybridBlocksX, or with prefetch hybridBlocksPrefetchX,
// whose loop also prefetches the next group (see lockstep).
func blocks(v variant, prefetch bool) {
	name := "hybridBlocks" + v.suffix
	doc := []string{
		name + " computes the finalised CRC-32C of 6·groups blocks",
		"of blockLen bytes, the i-th at p[i·stride:], into dst[i], six blocks at",
		"a time:"}
	if prefetch {
		name = "hybridBlocksPrefetch" + v.suffix
		doc = []string{
			name + " is hybridBlocks" + v.suffix + " that also prefetches, every",
			"step, the lines of the next group of six blocks at the same position:"}
	}
	sig, pre := "func(dst *uint32, p *byte, groups, blockLen, stride int, fold *[2]uint64)",
		"Preconditions: groups >= 1, blockLen >= 32, stride >= blockLen;"
	if v.sub == 2 {
		sig = "func(dst *uint32, p *byte, groups, blockLen, stride int, fold *[2]uint64, k uint64)"
		pre = "Preconditions: groups >= 1, blockLen a multiple of 64, stride >= blockLen; k = hybridKS[blockLen/64-1];"
	}
	text(name, sig)
	ctx.Pragma("noescape")
	ctx.Doc(append(append(doc, v.what...),
		"",
		pre,
		"fold = &foldTable.Fold[2].",
	)...)
	fp := ctx.Load(ctx.Param("fold"), ctx.GP64())
	kf := foldConst(v, operand.Mem{Base: fp})
	ctx.Comment("The initial CRC register, 0xffffffff, in the first 32 bits of a vector.")
	ones := ctx.GP32()
	ctx.MOVL(operand.U32(0xffffffff), ones)
	init := ctx.XMM()
	if v.ymm {
		ctx.VMOVD(ones, init)
	} else {
		ctx.MOVQ(ones.As64(), init)
	}
	p, dst := ctx.GP64(), ctx.GP64()
	ctx.Load(ctx.Param("p"), p)
	ctx.Load(ctx.Param("dst"), dst)
	ctx.Label(name + "_group")
	si, stride, r8 := ctx.GP64(), ctx.GP64(), ctx.GP64()
	ctx.Load(ctx.Param("stride"), stride)
	ctx.MOVQ(p, si)
	ctx.LEAQ(operand.Mem{Base: si, Index: stride, Scale: 2}, r8)
	ctx.ADDQ(stride, r8)
	s := segs{si: si, r8: r8, stride: stride}
	crcs := make([]reg.GPVirtual, v.crcSegs)
	for c := range crcs {
		crcs[c] = ctx.GP64()
		ctx.MOVL(operand.U32(0xffffffff), crcs[c].As32())
	}
	iter := ctx.GP64()
	ctx.Load(ctx.Param("blockLen"), iter)
	ctx.SHRQ(operand.U8(5), iter)
	var six reg.Register
	if prefetch {
		six = ctx.GP64()
		ctx.LEAQ(operand.Mem{Base: stride, Index: stride, Scale: 2}, six)
		ctx.ADDQ(six, six)
	}
	var ch *chains
	if v.sub == 2 {
		ctx.Comment("Chain A of every CRC block from its start, chain B from zero at D = 16·(blockLen/32).")
		ch = &chains{a: ctx.GP64(), b: ctx.GP64(), stride: stride, ra: crcs}
		ctx.MOVQ(si, ch.a)
		ctx.MOVQ(iter, ch.b)
		ctx.SHLQ(operand.U8(4), ch.b)
		ctx.ADDQ(si, ch.b)
		for range crcs {
			r := ctx.GP64()
			ctx.XORL(r.As32(), r.As32())
			ch.rb = append(ch.rb, r)
		}
	}
	acc := lockstep(v, s, crcs, iter, kf, init, six, name, ch)
	if ch != nil {
		ch.merge()
	}
	regs := append(append([]reg.GPVirtual{}, crcs...), reduceFold(v, acc)...)

	if v.sub != 2 { // (with two chains blockLen is a multiple of 64: no tail)
		blocksTail(name, s, regs)
	}
	for k, r := range regs {
		ctx.NOTL(r.As32())
		ctx.MOVL(r.As32(), operand.Mem{Base: dst, Disp: 4 * k})
	}
	ctx.ADDQ(operand.U8(24), dst)
	st := ctx.Load(ctx.Param("stride"), ctx.GP64())
	ctx.LEAQ(operand.Mem{Base: st, Index: st, Scale: 2}, st)
	ctx.LEAQ(operand.Mem{Base: p, Index: st, Scale: 2}, p) // p += 6·stride
	ctx.DECQ(scaffold.ParamAddr(ctx, "groups"))
	ctx.JNZ(operand.LabelRef(name + "_group"))
	if v.ymm {
		ctx.VZEROUPPER()
	}
	ctx.RET()
}

// blocksTail emits the CRC of the last blockLen mod 32 bytes of every
// block into regs (the registers of the six blocks, in order).
func blocksTail(name string, s segs, regs []reg.GPVirtual) {
	ctx.Comment("The last blockLen mod 32 bytes of every block.")
	t := ctx.Load(ctx.Param("blockLen"), ctx.GP64())
	for _, w := range []int{16, 8, 4, 2, 1} {
		skip := fmt.Sprintf("%s_tail%d", name, w)
		ctx.TESTQ(operand.U32(w), t)
		ctx.JZ(operand.LabelRef(skip))
		for k, r := range regs {
			switch w {
			case 16:
				ctx.CRC32Q(s.addr(k, 0), r)
				ctx.CRC32Q(s.addr(k, 8), r)
			case 8:
				ctx.CRC32Q(s.addr(k, 0), r)
			case 4:
				ctx.CRC32L(s.addr(k, 0), r.As32())
			case 2:
				ctx.CRC32W(s.addr(k, 0), r.As32())
			case 1:
				ctx.CRC32B(s.addr(k, 0), r.As32())
			}
		}
		ctx.ADDQ(operand.U8(w), s.si)
		ctx.ADDQ(operand.U8(w), s.r8)
		ctx.Label(skip)
	}
}

// short generates hybridShort, the kernel of inputs too short for a chunk:
// one CRC32 stream, 16 bytes a loop step (two CRC32Q), then 8, 4, 2 and 1
// as the length has them. It is latency-bound (3 cycles per CRC32Q on Zen 2
// and Zen 3, 2.7 bytes a cycle); what it saves is the fixed cost of a call,
// which in hash/crc32 took several times the two CRC32Q of a 16-byte input
// (docs/perf/poly1305-generator.md).
func short() {
	text("hybridShort", "func(reg uint32, p *byte, n int) uint32")
	ctx.Pragma("noescape")
	ctx.Doc("hybridShort returns the CRC-32C register (not finalised) after p[0:n],",
		"given the register reg before it, with one CRC32 instruction stream;",
		"needs SSE4.2.")
	crc, p, n := ctx.GP64(), ctx.GP64(), ctx.GP64()
	ctx.Load(ctx.Param("reg"), crc.As32())
	ctx.Load(ctx.Param("p"), p)
	ctx.Load(ctx.Param("n"), n)
	stream("short", crc, p, n, false)
	ctx.Store(crc.As32(), ctx.ReturnIndex(0))
	ctx.RET()
}

// stream runs the n bytes at p through the register crc as one CRC32
// stream, 16 bytes a step, then 8, 4, 2 and 1 by the bits of n; p ends
// past them, or (with !whole) before the last odd byte. Labels start with
// prefix.
//
// The loop is rotated (its test at the bottom) and a length that is a
// multiple of 16 skips the four tests of the rest, so that a 16-byte
// input takes one taken branch, not five, which measured faster at 16 and
// 64 bytes (BenchmarkAnchor; docs/perf/poly1305-generator.md).
func stream(prefix string, crc, p, n reg.GPVirtual, whole bool) {
	ctx.CMPQ(n, operand.U8(16))
	ctx.JB(operand.LabelRef(prefix + "_rest"))
	ctx.Label(prefix + "_loop")
	ctx.CRC32Q(operand.Mem{Base: p}, crc)
	ctx.CRC32Q(operand.Mem{Base: p, Disp: 8}, crc)
	ctx.ADDQ(operand.U8(16), p)
	ctx.SUBQ(operand.U8(16), n)
	ctx.CMPQ(n, operand.U8(16))
	ctx.JAE(operand.LabelRef(prefix + "_loop"))
	ctx.Label(prefix + "_rest")
	ctx.TESTQ(operand.U32(15), n)
	ctx.JZ(operand.LabelRef(prefix + "_done"))
	for _, w := range []int{8, 4, 2, 1} {
		ctx.Label(fmt.Sprintf("%s_%d", prefix, w))
		next := prefix + "_done"
		if w > 1 {
			next = fmt.Sprintf("%s_%d", prefix, w/2)
		}
		ctx.TESTQ(operand.U32(w), n)
		ctx.JZ(operand.LabelRef(next))
		switch w {
		case 8:
			ctx.CRC32Q(operand.Mem{Base: p}, crc)
		case 4:
			ctx.CRC32L(operand.Mem{Base: p}, crc.As32())
		case 2:
			ctx.CRC32W(operand.Mem{Base: p}, crc.As32())
		case 1:
			ctx.CRC32B(operand.Mem{Base: p}, crc.As32())
		}
		if w > 1 || whole {
			ctx.ADDQ(operand.U8(w), p)
		}
	}
	ctx.Label(prefix + "_done")
}

// short3 is the kernel of medium inputs (a few hundred bytes): too short
// for the six-segment chunk, whose merge costs about 100 cycles, and long
// enough that one CRC32 stream, bound by the instruction's latency of 3
// cycles, leaves two thirds of its throughput unused.
//
// The math (that of kernels/_asm/crcgen, hybrid.go). The tail p[0:tail]
// (under 24 bytes) runs first, from reg, as one stream; then three
// segments A, B, C of s bytes run in lockstep, A from the register after
// the tail, B and C from zero. The register is linear in the message and
// appending m zero bytes multiplies it by x^(8m), so the register after
// A‖B‖C is r_A·x^(16s) ⊕ r_B·x^(8s) ⊕ r_C. Held in the low 32 bits of a
// quadword, r_A and r_B are multiplied by hybridK3[s/8-2] = {C(16s-64),
// C(8s-64)} with one PCLMULQDQ each; the sum V of the two 128-bit products
// has V·x^32 ≡ r_A·x^(16s) ⊕ r_B·x^(8s) (mod P), which two CRC32Q of V's
// quadwords from a zero register compute exactly; r_C is added last.
func short3() {
	text("hybridShort3", "func(reg uint32, p *byte, tail, s int, k *[2]uint64) uint32")
	ctx.Pragma("noescape")
	ctx.Doc("hybridShort3 returns the CRC-32C register (not finalised) after",
		"p[0:tail+3s], given the register reg before it: the tail p[0:tail] as",
		"one CRC32 stream, then three CRC32 streams over three segments of s",
		"bytes, merged with PCLMULQDQ (kernels/_asm/crc32hybrid, short3);",
		"needs SSE4.2, SSE4.1 and PCLMULQDQ.",
		"",
		"Preconditions: s is a multiple of 8 and at least 16; k = &hybridK3[s/8-2].")
	a, p, n, s, kp := ctx.GP64(), ctx.GP64(), ctx.GP64(), ctx.GP64(), ctx.GP64()
	ctx.Load(ctx.Param("reg"), a.As32())
	ctx.Load(ctx.Param("p"), p)
	ctx.Load(ctx.Param("tail"), n)
	ctx.Load(ctx.Param("s"), s)
	ctx.Load(ctx.Param("k"), kp)
	stream("short3_tail", a, p, n, true)
	b, c := ctx.GP64(), ctx.GP64()
	ctx.XORL(b.As32(), b.As32())
	ctx.XORL(c.As32(), c.As32())
	ctx.MOVQ(s, n)
	ctx.Comment("Three streams, 8 bytes of each a step.")
	ctx.Label("short3_loop")
	ctx.CRC32Q(operand.Mem{Base: p}, a)
	ctx.CRC32Q(operand.Mem{Base: p, Index: s, Scale: 1}, b)
	ctx.CRC32Q(operand.Mem{Base: p, Index: s, Scale: 2}, c)
	ctx.ADDQ(operand.U8(8), p)
	ctx.SUBQ(operand.U8(8), n)
	ctx.JNZ(operand.LabelRef("short3_loop"))
	ctx.Comment("V = r_A·C(16s-64) ⊕ r_B·C(8s-64); the register is V·x^32 mod P ⊕ r_C.")
	v := variant{}
	var sum reg.VecVirtual
	xorClmul(v, &sum, pair(v, a, b), operand.Mem{Base: kp}, true)
	out, t := ctx.GP64(), ctx.GP64()
	ctx.XORL(out.As32(), out.As32())
	ctx.MOVQ(sum, t)
	ctx.CRC32Q(t, out)
	ctx.PEXTRQ(operand.U8(1), sum, t)
	ctx.CRC32Q(t, out)
	ctx.XORL(c.As32(), out.As32())
	ctx.Store(out.As32(), ctx.ReturnIndex(0))
	ctx.RET()
}
