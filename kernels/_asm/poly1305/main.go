// Command poly1305 generates the amd64 lane kernels of kernels/poly1305:
// the Poly1305 accumulators of several blocks evaluated side by side under
// one shared r. lanesAVX2 puts four blocks in the 64-bit lanes of YMM
// registers (radix 2^26, below); lanesHybridAVX2 adds two more blocks in
// general registers (see lanesAVX2 and scalarChunk); lanesAVX2R8 and
// lanesHybridR8 are those two with eight chunks per carry chain (key
// laneKey8, r..r^8); lanesAVX2R8Copy is lanesAVX2R8 copying its blocks to
// a second buffer and absorbing them from there (see lanesAVX2Copy);
// lanesIFMA puts eight in ZMM registers with 52-bit multiplies (radix
// 2^44, see lanesIFMA's comment), prefetching a sequential stream as it
// goes (see prefetch44); lanesIFMAS and lanesIFMASCopy are its
// arithmetic for blocks of whole 64-byte rows without gathers, a pair of
// blocks at a time as four chunk streams each (see lanesIFMAS), the
// second copying each row as it loads it.
//
// Run it from kernels/_asm (go generate in kernels/poly1305 does):
//
//	go run ./poly1305 -out ../poly1305/zblocks_amd64.s -stubs ../poly1305/zblocks_amd64.go
//
// The math is that of kernels/poly1305/poly1305_lanes.go (laneModel), which
// the package tests against the generic code; the assembly does exactly
// what the model does, in the same order, four lanes at once.
//
// Radix 2^26. Each accumulator h < 2^131 is five limbs h0..h4 with h =
// Σ hk·2^(26k), one YMM register per limb, lane l holding block l's limb.
// VPMULUDQ multiplies the low 32 bits of each lane into 64 bits, so a
// product of a limb (< 2^27) and a key limb (< 2^29) never loses a bit, and
// sums of up to ten such products (< 2^60) never overflow a lane.
//
// Multiplication by r mod p = 2^130-5. With r = Σ rk·2^(26k):
//
//	d_k = Σ_{i<=k} h_i·r_{k-i} + Σ_{i>k} h_i·(5·r_{k-i+5})
//
// because h_i·r_j with i+j >= 5 carries weight 2^(26(i+j)) = 2^130·2^(26(i+j-5))
// ≡ 5·2^(26(i+j-5)) (mod p). The key table holds r_k and s_k = 5·r_k
// (< 2^29) for r and r^2, each broadcast to the four lanes (laneKey), so
// the kernel never multiplies by 5 except in the carry chain.
//
// Four chunks per step, with the shared powers r^4, r^3, r^2 and r:
//
//	h' = (((h + m1)·r + m2)·r + m3)·r + m4)·r
//	   = (h + m1)·r^4 + m2·r^3 + m3·r^2 + m4·r
//
// The m2, m3, m4 products do not depend on h, so only one multiply-and-carry
// chain per four chunks is on the critical path, and one carry chain serves
// four chunks: 100 VPMULUDQ per step for four blocks (64 bytes of each).
// The multiplier (one VPMULUDQ per cycle on AMD Zen 2) is the bound, but
// not the only cost: a kernel without carry chains (wrong, for timing only)
// ran 1.21 times as fast as the two-chunk step, so halving them pays. Two
// chunks left take one step (h + m1)·r^2 + m2·r, an odd last one h' =
// (h + m)·r.
//
// A chunk, 16 bytes lo + hi·2^64 of each block, splits into limbs
//
//	m0 = lo & M   m1 = lo>>26 & M   m2 = (lo>>52 | hi<<12) & M
//	m3 = hi>>14 & M   m4 = hi>>40 | 2^24
//
// (M = 2^26-1; 2^24 in limb 4 is the pad bit 2^128 = 2^(104+24)). The four
// blocks' chunks are gathered by two 16-byte loads and two VINSERTI128 into
// [b0 | b2] and [b1 | b3], and VPUNPCKLQDQ/VPUNPCKHQDQ of those give the lo
// and hi words in lanes 0..3.
//
// Carry chain, two chains interleaved: d0→d1, d3→d4; d1→d2, d4→d0 (times
// 5: c + 4c); d2→d3, d0→d1; d3→d4, where dk→dl is c = dk>>26, dk &= M,
// dl += c. It leaves every limb below 2^26 + 2^12 (poly1305_lanes.go has
// the bounds), small enough for the next step.
//
// The only data are the two lane constants M and 2^24 (polyConsts). The
// kernel reads exactly the chunks it is asked for and nothing else. The
// output depends only on the flags, so regenerating is reproducible.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/types"

	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/gotypes"
	"github.com/mmcloughlin/avo/ir"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
)

// Layout of poly1305.laneKey (its doc comment fixes it): R(j,k), limb k of
// r^(j+1) for j = 0..3, at keyR + 32(5j+k); S(j,k) = 5·R(j,k) at keyS +
// 32(5j+k); each a 32-byte vector of four equal quadwords; then r itself,
// clamped, as two quadwords r0, r1 at keyScalar for the hybrid kernel's
// scalar lane.
const (
	powers    = 4
	keyR      = 0
	keyS      = 32 * limbs * powers
	keyScalar = 2 * keyS
	keySize   = keyScalar + 16
	limbs     = 5
	lanes     = 4
)

// Layout of poly1305.laneKey8, the key of the eight-chunk kernels
// (lanesAVX2R8, lanesHybridR8): laneKey's with r^1..r^8, R(j,k) for j =
// 0..7 at keyR + 32(5j+k), S(j,k) at key8S + 32(5j+k), r0, r1 at
// key8Scalar.
const (
	powers8    = 8
	key8S      = 32 * limbs * powers8
	key8Scalar = 2 * key8S
	key8Size   = key8Scalar + 16
)

// keyS and keyScalar of a key of n powers.
func keySOf(n int) int      { return 32 * limbs * n }
func keyScalarOf(n int) int { return 2 * keySOf(n) }

const (
	mask44   = 1<<44 - 1
	mask42   = 1<<42 - 1
	padBit44 = 1 << (128 - 88)
	lanes44  = 8
	key44    = key44K + 5*3*lanes44 // words of poly1305.ifmaKey
	// Where in it the eight-lane vectors of r^3 and r^4 start: word w
	// (r0 r1 r2 s1 s2) of r^(j+1), j = 2, 3, at word key44Vec + 40(j-2) +
	// 8w, in eight lanes.
	key44Vec = 20
	// The stream kernels' words (lanesIFMAS): from key44B, word w of
	// r^(4(P+1)), P = 0..3 (r^4, r^8, r^12, r^16), at key44B + 5P + w
	// (broadcast operands); from key44F, the last step's per-lane factor
	// F, word w at key44F + 8w in eight lanes, lane 2s+b holding that of
	// r^(4-s). From key44K, the pad bits' part of a step, the limbs of c
	// = 2^128·Σ r^e over the powers e the step's chunk-vectors take (mod
	// 2^130-5, radix 2^44), limb k in eight lanes at key44K + 24V + 8k: V
	// = 0 an ordinary step's (e = 4, 8, 12, 16), V = R the bracket's of a
	// last step of R rows (e = 0, 4, ..., 4(R-1)).
	key44B = key44Vec + 2*5*lanes44
	key44F = key44B + 4*5
	key44K = key44F + 5*lanes44
)

const (
	limbBits = 26
	limbMask = 1<<limbBits - 1
	padBit   = 1 << (128 - 4*limbBits) // 2^128 in limb 4: bit 24
)

func main() {
	var out, stubs string
	scaffold.Main("poly1305", func(fs *flag.FlagSet) {
		fs.StringVar(&out, "out", "", "assembly output file")
		fs.StringVar(&stubs, "stubs", "", "Go declarations output file")
	}, func(cmd []string) ([]scaffold.File, error) {
		if out == "" || stubs == "" {
			return nil, scaffold.Usage("poly1305 -out file.s -stubs file.go")
		}
		asm, src, err := generate(cmd)
		return []scaffold.File{{Path: out, Data: asm}, {Path: stubs, Data: src}}, err
	})
}

// generate returns the assembly and the Go declarations of the kernels,
// made by cmd.
func generate(cmd []string) (asm, src []byte, err error) {
	c := build.NewContext()
	c.ConstraintExpr("!purego")
	consts := c.StaticGlobal("polyConsts")
	c.DataAttributes(attr.RODATA | attr.NOPTR)
	// Four lanes of M = 2^26-1 (the limb mask), then four of 2^24 (the pad
	// bit 2^128 in limb 4, 128 = 4·26 + 24).
	for i := 0; i < lanes; i++ {
		c.AddDatum(8*i, operand.U64(limbMask))
	}
	for i := 0; i < lanes; i++ {
		c.AddDatum(32+8*i, operand.U64(padBit))
	}
	consts44 := c.StaticGlobal("polyConsts44")
	c.DataAttributes(attr.RODATA | attr.NOPTR)
	// The IFMA kernel's lane constants, broadcast at its start: M44 =
	// 2^44-1 and M42 = 2^42-1 (limb masks of radix 2^44, the top limb
	// holding bits 88..129), and 2^40 (the pad bit 2^128 in limb 2, 128 =
	// 88 + 40).
	c.AddDatum(0, operand.U64(mask44))
	c.AddDatum(8, operand.U64(mask42))
	c.AddDatum(16, operand.U64(padBit44))
	g := &gen{c: c, mask: consts, pad: consts.Offset(32)}
	g.lanesAVX2("lanesAVX2", false, powers)
	g.lanesAVX2("lanesHybridAVX2", true, powers)
	g.lanesAVX2("lanesAVX2R8", false, powers8)
	g.lanesAVX2("lanesHybridR8", true, powers8)
	g.lanesAVX2Copy("lanesAVX2R8Copy")
	g.lanesIFMA("lanesIFMA", consts44)
	g.lanesIFMAS("lanesIFMAS", consts44, false)
	g.lanesIFMAS("lanesIFMASCopy", consts44, true)
	if g.err != nil {
		return nil, nil, g.err
	}
	if asm, err = scaffold.Asm(c, cmd, "poly1305"); err != nil {
		return nil, nil, err
	}
	src, err = writeStubs(scaffold.Warning(cmd))
	return asm, src, err
}

// The signature: lanesAVX2(h *[20]uint64, p []byte, stride, chunks int,
// key *[162]uint64), the arrays being poly1305.laneState and laneKey
// (laneKey8, [322]uint64, for the eight-chunk kernels).
func lanesSig(hWords, keyWords int) *gotypes.Signature {
	u64 := types.Typ[types.Uint64]
	return scaffold.Signature([]*types.Var{
		scaffold.Param("h", types.NewPointer(types.NewArray(u64, int64(hWords)))),
		scaffold.Param("p", scaffold.Bytes),
		scaffold.Param("stride", scaffold.Int),
		scaffold.Param("chunks", scaffold.Int),
		scaffold.Param("key", types.NewPointer(types.NewArray(u64, int64(keyWords)))),
	}, nil)
}

// The copying kernel's signature: lanesAVX2R8Copy(h *[20]uint64, q, p
// []byte, stride, chunks, ahead int, ad []byte, adLen int, key
// *[322]uint64).
func lanesCopySig(hWords, keyWords int) *gotypes.Signature {
	u64 := types.Typ[types.Uint64]
	return scaffold.Signature([]*types.Var{
		scaffold.Param("h", types.NewPointer(types.NewArray(u64, int64(hWords)))),
		scaffold.Param("q", scaffold.Bytes),
		scaffold.Param("p", scaffold.Bytes),
		scaffold.Param("stride", scaffold.Int),
		scaffold.Param("chunks", scaffold.Int),
		scaffold.Param("ahead", scaffold.Int),
		scaffold.Param("ad", scaffold.Bytes),
		scaffold.Param("adLen", scaffold.Int),
		scaffold.Param("key", types.NewPointer(types.NewArray(u64, int64(keyWords)))),
	}, nil)
}

// The IFMA kernels' signatures: lanesIFMA(h *[24]uint64, p []byte,
// stride, chunks int, key *[420]uint64, pf uintptr), the arrays being
// poly1305.laneState44 and ifmaKey.
func lanesIFMASig() *gotypes.Signature {
	return scaffold.Signature(lanesIFMAParams(), nil)
}

// lanesIFMAParams is lanesIFMA's parameters.
func lanesIFMAParams() []*types.Var {
	u64 := types.Typ[types.Uint64]
	return []*types.Var{
		scaffold.Param("h", types.NewPointer(types.NewArray(u64, 3*lanes44))),
		scaffold.Param("p", scaffold.Bytes),
		scaffold.Param("stride", scaffold.Int),
		scaffold.Param("chunks", scaffold.Int),
		scaffold.Param("key", types.NewPointer(types.NewArray(u64, key44))),
		scaffold.Param("pf", types.Typ[types.Uintptr]),
	}
}

// The stream kernels' signatures: lanesIFMAS is lanesIFMA's;
// lanesIFMASCopy adds q *byte.
func lanesIFMASSig(cp bool) *gotypes.Signature {
	if cp {
		return scaffold.Signature(append(lanesIFMAParams(), scaffold.Param("q", types.NewPointer(types.Typ[types.Byte]))), nil)
	}
	return lanesIFMASig()
}

func mem(base reg.Register, disp int) operand.Mem { return operand.Mem{Base: base, Disp: disp} }

// Registers.
var (
	rH, rKey = reg.RDX, reg.RDI
	rP       = reg.RSI // block 0 at the current chunk
	rS       = reg.R8  // stride
	rP3      = reg.R9  // block 3 at the current chunk: p + 3·stride
	rN       = reg.RCX // chunks left (lanesAVX2; the hybrid kernel counts in its frame)

	yH    = []reg.VecPhysical{reg.Y0, reg.Y1, reg.Y2, reg.Y3, reg.Y4}
	yD    = []reg.VecPhysical{reg.Y5, reg.Y6, reg.Y7, reg.Y8, reg.Y9}
	yLo   = reg.Y10 // the chunks' low quadwords; a carry temporary
	yT    = reg.Y11 // temporary
	yL    = reg.Y12 // the limb being split off
	yP    = reg.Y13 // a product
	yMask = reg.Y14 // M in every lane
	yHi   = reg.Y15 // the chunks' high quadwords
)

type gen struct {
	c         *build.Context
	mask, pad operand.Mem
	powers    int   // of r in the key of the kernel being built: 4 or 8
	cp        bool  // the kernel being built copies p to q (lanesAVX2Copy)
	ks        bool  // its steps hold the key vectors in a register (vecStepKS)
	pf        bool  // the kernel being built prefetches (lanesIFMA)
	copying   bool  // the steps being built store their rows to q (lanesIFMASCopy)
	err       error // the first error outside c's own
}

func (g *gen) fail(err error) {
	if g.err == nil {
		g.err = err
	}
}

func xmm(y reg.VecPhysical) reg.VecPhysical { return y.AsX().(reg.VecPhysical) }

// block is byte disp of block j (0..5) at the current chunk: p + j·stride +
// disp, blocks 3..5 from the second pointer p + 3·stride.
func block(j, disp int) operand.Mem {
	switch j {
	case 0:
		return mem(rP, disp)
	case 1:
		return operand.Mem{Base: rP, Index: rS, Scale: 1, Disp: disp}
	case 2:
		return operand.Mem{Base: rP, Index: rS, Scale: 2, Disp: disp}
	case 3:
		return mem(rP3, disp)
	case 4:
		return operand.Mem{Base: rP3, Index: rS, Scale: 1, Disp: disp}
	}
	return operand.Mem{Base: rP3, Index: rS, Scale: 2, Disp: disp}
}

func (g *gen) keyRMem(j, k int) operand.Mem { return mem(rKey, keyR+32*(limbs*j+k)) }
func (g *gen) keySMem(j, k int) operand.Mem {
	return mem(rKey, keySOf(g.powers)+32*(limbs*j+k))
}

// keyFor is the key vector limb i of h multiplies for d_k under r^(j+1):
// r_{k-i} if i <= k, else 5·r_{k-i+5}.
func (g *gen) keyFor(j, i, k int) operand.Mem {
	if i <= k {
		return g.keyRMem(j, k-i)
	}
	return g.keySMem(j, k-i+limbs)
}

// split loads the chunk at disp of the four blocks and calls use with each
// limb in yL, in order 0..4.
func (g *gen) split(disp int, use func(i int)) {
	c := g.c
	g.gather(disp, yLo, yHi, yT)
	c.VPAND(g.maskOp(), yLo, yL)
	use(0)
	c.VPSRLQ(operand.U8(26), yLo, yL)
	c.VPAND(g.maskOp(), yL, yL)
	use(1)
	c.VPSRLQ(operand.U8(52), yLo, yL)
	c.VPSLLQ(operand.U8(12), yHi, yT)
	c.VPOR(yT, yL, yL)
	c.VPAND(g.maskOp(), yL, yL)
	use(2)
	c.VPSRLQ(operand.U8(14), yHi, yL)
	c.VPAND(g.maskOp(), yL, yL)
	use(3)
	c.VPSRLQ(operand.U8(40), yHi, yL)
	c.VPOR(g.pad, yL, yL)
	use(4)
}

// gather loads the chunk at disp of the four blocks into lo (their low
// quadwords, lanes 0..3) and hi (the high ones), through t: two 16-byte
// loads and two VINSERTI128 make [b0 | b2] and [b1 | b3], and VPUNPCKLQDQ
// and VPUNPCKHQDQ of those the lo and hi words.
func (g *gen) gather(disp int, lo, hi, t reg.VecPhysical) {
	c := g.c
	c.VMOVDQU(block(0, disp), xmm(lo))
	c.VINSERTI128(operand.U8(1), block(2, disp), lo, lo)
	c.VMOVDQU(block(1, disp), xmm(t))
	c.VINSERTI128(operand.U8(1), block(3, disp), t, t)
	c.VPUNPCKHQDQ(t, lo, hi) // hi words of blocks 0..3
	c.VPUNPCKLQDQ(t, lo, lo) // lo words
}

// maskOp is the limb mask M: yMask, or in the eight-chunk kernels (whose
// products take Y14 as a third temporary) the constant in memory.
func (g *gen) maskOp() operand.Op {
	if g.ks {
		return ksMask
	}
	if g.powers == powers8 {
		return g.mask
	}
	return yMask
}

// mulAdd adds x·r^(j+1) to the d registers (x one limb, i its index);
// first sets them instead of adding.
func (g *gen) mulAdd(x reg.VecPhysical, i, j int, first bool) {
	if g.powers == powers8 && !first {
		// Three product temporaries, each add two multiplies after its
		// own, so that the multiplies stay ahead of the adds in the
		// scheduler (the port that multiplies also adds).
		tmp := [3]reg.VecPhysical{yP, yT, yMask}
		for k := 0; k < limbs+2; k++ {
			if k < limbs {
				g.c.VPMULUDQ(g.keyFor(j, i, k), x, tmp[k%3])
			}
			if k >= 2 {
				g.c.VPADDQ(tmp[(k-2)%3], yD[k-2], yD[k-2])
			}
		}
		return
	}
	for k := 0; k < limbs; k++ {
		if first {
			g.c.VPMULUDQ(g.keyFor(j, i, k), x, yD[k])
			continue
		}
		g.c.VPMULUDQ(g.keyFor(j, i, k), x, yP)
		g.c.VPADDQ(yP, yD[k], yD[k])
	}
}

// carry is dk→dl of the carry chain with temporary t (and yP for times 5).
func (g *gen) carry(from, to int, times5 bool, t reg.VecPhysical) {
	c := g.c
	c.VPSRLQ(operand.U8(26), yD[from], t)
	c.VPAND(g.maskOp(), yD[from], yD[from])
	if times5 {
		c.VPSLLQ(operand.U8(2), t, yP)
		c.VPADDQ(yP, t, t)
	}
	c.VPADDQ(t, yD[to], yD[to])
}

// carryChain reduces d into h.
func (g *gen) carryChain() {
	g.carry(0, 1, false, yLo)
	g.carry(3, 4, false, yT)
	g.carry(1, 2, false, yLo)
	g.carry(4, 0, true, yT)
	g.carry(2, 3, false, yLo)
	g.carry(0, 1, false, yT)
	g.carry(3, 4, false, yLo)
	for k := 0; k < limbs; k++ {
		if g.ks {
			// h lives in memory (vecStepKS).
			g.c.VMOVDQU(yD[k], mem(rH, 32*k))
			continue
		}
		g.c.VMOVDQA(yD[k], yH[k])
	}
}

// fullCarry carries h (yH) to limbs 0..3 below 2^26 and limb 4 below
// 2^26 + 2^10, so that the caller packs the limbs into words with shifts
// and ors alone (blocksAVX2R8CopyWhole in kernels/poly1305), the carries
// of four lanes in one vector chain instead of packLimbs's four scalar
// ones. After carryChain (0->1, 3->4, 1->2, 4->0, 2->3, 0->1, 3->4) limbs
// 0, 2 and 3 are masked last and below 2^26; limb 1 is below 2^26 plus
// the last carry out of limb 0 (below 2^12: limb 0 is below 2^26 + 5·2^34
// before it), rarely 2^26 or more; limb 4 below 2^26 + 2^9. So 1->2,
// 2->3, 3->4: each carry out is at most 1 but the first's, and limb 4
// gains at most 1.
func (g *gen) fullCarry() {
	c := g.c
	c.Comment("Carry limbs 1..3 below 2^26 (limb 4 stays below 2^26 + 2^10).")
	for k := 1; k < limbs-1; k++ {
		c.VPSRLQ(operand.U8(26), yH[k], yT)
		c.VPAND(g.maskOp(), yH[k], yH[k])
		c.VPADDQ(yT, yH[k+1], yH[k+1])
	}
}

// scalarLanes is the number of blocks the hybrid kernel evaluates in
// general registers beside the four vector lanes.
const scalarLanes = 2

// lanesAVX2 emits lanesAVX2, or with hybrid lanesHybridAVX2: the same four
// vector lanes plus two more blocks, p + 4·stride and p + 5·stride, in
// general registers with 64-bit MULX multiplies (the generic code's
// mulReduce, step for step), so that the integer multiplier works while the
// vector one is the bottleneck. The scalar instructions of a step are
// spread evenly among the vector ones (interleave), so that the
// out-of-order window always holds work for both multipliers.
//
// With pw = 8 (lanesAVX2R8, lanesHybridR8, key laneKey8) the main loop takes
// eight chunks per step under r^8..r, one carry chain per eight chunks: 28
// vector instructions fewer per eight chunks of four blocks, and the vector
// instructions compete with the multiplies for the one port (FP0 on Zen 2)
// that runs VPMULUDQ. Those kernels also keep the limb mask in memory and
// use Y14 as a third product register, so that each VPADDQ comes two
// multiplies after its own (mulAdd): under load, with the add right behind
// its multiply the hybrid kernel ran 2-3% slower than the four-chunk one at
// 512 B, with the stagger 3-4% faster (BenchmarkEightChunk in
// kernels/poly1305; on a quiet machine level, and 1.4% faster at 4 KiB).
func (g *gen) lanesAVX2(name string, hybrid bool, pw int) {
	g.lanesKernel(name, hybrid, pw, false)
}

// lanesAVX2Copy emits lanesAVX2R8Copy: lanesAVX2R8 that also copies the
// chunks it absorbs from p to q, block j from p + j·stride to q + j·stride,
// and absorbs them from q, after its own stores: the bytes hashed are those
// written to q, never a second load of p (p may be a shared mapping that
// changes during the call; q is the caller's). One pass over the data:
//
//   - the prologue copies the first eight chunks of every block (when
//     there are eight);
//   - each eight-chunk step but the last copies the next step's 128 bytes
//     of every block with 32-byte loads and stores (YMM, two pairs after
//     each chunk's split, through the split's temporaries, free then) while
//     the lanes absorb the current step from q, stored a step earlier, so
//     that no load of a chunk waits on a store just issued;
//   - the last eight-chunk step only absorbs;
//   - the steps of four, two and one chunk left copy their chunks first
//     (64, 32 or 16 bytes of each block) and then absorb them;
//   - every eight-chunk step and the prologue also prefetch the same step
//     of the blocks ahead bytes on (withPrefetch).
//
// Its steps are vecStepKS's (each key vector loaded once per chunk into a
// register, h in memory), not the other kernels': on Zen 3 that made
// BlocksADCopy 7-11% faster against the unchanged copy-then-BlocksAD in the
// same runs (x-twoPass of BenchmarkBlocksADCopy, 512 B and 4 KiB blocks, in
// the cache and from memory, three rounds of the old and new test binaries
// alternating: avx2r8 1.07-1.14 to 1.20-1.23 at 512 B in the cache, 1.29-
// 1.32 to 1.38-1.42 from memory, 1.01-1.04 to 1.11-1.16 and 1.20-1.23 to
// 1.31-1.34 at 4 KiB), and llvm-mca's znver3 model of its main loop went
// from 226 to 165 cycles (znver2: 228 to 225). Staggering the adds two or
// three multiplies behind their own, through the split's temporaries, gained
// nothing measurable there.
//
// The copy costs 1-4% over lanesAVX2R8 with source and copy in the cache
// (alternating the two; 512 B and 4 KiB blocks; measured before
// vecStepKS, on Zen 2). There is no hybrid form:
// lanesHybridR8 uses every general register, and the two the copy needs
// for its pointers into p cost more than the scalar lanes gain. Measured
// on the build machine, under load, alternating with lanesHybridR8: with
// the scalar lanes' h2 in the frame (two registers free, moves spread as
// here) 1.11-1.21 times its time at 4 KiB and 1.33-1.41 at 512 B, slower
// per byte than this kernel at 512 B; with the moves in one bundle before
// each step, where the scalar temporaries are free, 1.27-1.80; and it
// cannot prefetch (no register for the pointer), which over a source in
// memory is what decides at 512-byte blocks (BenchmarkBlocksADCopy). A
// third form, one scalar lane (five blocks), which leaves registers for
// the copy's pointers and a prefetch walking the next groups' span, ran
// BlocksADCopy at 0.93-0.97 times this kernel's speed at 4 KiB (in the
// cache and from memory) and level at 512 B.
//
// Branch hcopy tried the prefetch without a pointer register, and lost too.
// Its six-block kernels: (a) pcopy's form (h2 in the frame, the stride an
// argument) with PREFETCHT0 at a constant displacement (6144) from the
// copy's own block addresses; (b) kernels for a fixed stride of 512 and of
// 4096 bytes (blocks side by side, stride = blockLen, blockdev's case),
// every block address a displacement from one pointer, which frees the
// stride's register and both second pointers: h2 back in registers, the
// prefetch 6144 (512 B) or 24576 (4 KiB) bytes on, and the prologue's copy
// of the scalar lanes' blocks (absorbed right after) through AX, 8-byte
// stores their 8-byte loads are forwarded from; (c) (b) taking all the
// groups of a call in one call, the last step of each group copying the
// next group's first 128 bytes of every block; (d) (c) with blockdev's 32
// bytes of associated data absorbed in the kernel. All passed the package's
// BlocksADCopy tests (which reach the fixed-stride path), (a) and (b) the
// emulator test too. Their BlocksADCopy under hybrid8 against this
// kernel's, alternating test binaries, three rounds each, machine shared
// (x-twoPass, the ratio to copy-then-BlocksAD; this kernel's figures in
// brackets), 64 MiB source: (a) 512 B 1.11-1.14 (1.42-1.44), 4 KiB
// 1.11-1.16 (1.24-1.26); (b) 1.16-1.20 (1.43-1.44), 1.21-1.24 (1.26); (c)
// 1.28-1.30 (1.41-1.43), 1.23-1.25 (1.24-1.26); (c) with r0 of the scalar
// lanes in a register and the count in the frame 1.33-1.35 (1.41-1.45),
// 1.25-1.28 (1.25-1.28); (d) 1.22-1.26 (1.39-1.44), 1.22-1.24 (1.22-1.26);
// in the cache (256 KiB) (d) 1.02-1.03 (1.17-1.18) at 512 B and 1.00-1.03
// (0.98-0.99) at 4 KiB. The prefetch was not what it lacked: over 64 KiB in
// the cache the kernel of (c) took 1.2-1.35 times lanesHybridR8's time per
// byte at 512 B and 1.15-1.2 at 4 KiB, where the copy costs this kernel's
// four lanes 1-4%; the same without its prefetches; level with
// lanesHybridR8 without the copy's loads and stores, and nearly as slow as
// with both without either alone. So it is the moves themselves (24 loads
// and 24 stores per step of six blocks' 128 bytes, beside some 1,100
// instructions) that cost what the scalar lanes gain.
func (g *gen) lanesAVX2Copy(name string) {
	g.lanesKernel(name, false, powers8, true)
}

// The registers of vecStepKS: the five limbs of a chunk in yH (h itself is
// in memory), the products' sums in yD, the key vector in ksKey, a product
// in ksProd, the split's temporaries ksLo, ksHi and ksT (the copy's moves
// use the first two), the limb mask in ksMask.
var (
	ksKey  = reg.Y10
	ksProd = reg.Y11
	ksLo   = reg.Y12
	ksHi   = reg.Y13
	ksT    = reg.Y14
	ksMask = reg.Y15
)

// vecStepKS is the vector code of a step of s chunks in lanesAVX2R8Copy,
// the same sums as the other kernels' steps in another order: each chunk
// is split into all five limbs first (yH), then each of the nine key
// vectors of its power (r_0..r_4, 5r_1..5r_4) is loaded once into ksKey and
// multiplied with every limb it pairs with (keyFor), instead of being a
// memory operand of each of its 25 multiplies; the two used once stay
// memory operands. The limbs take the registers of h, so h is kept in
// memory at h (the kernel's argument) between steps: the last chunk's limbs
// (at disp 0) get h added from there, and the carried d is stored back.
// The copy's moves ms go after each chunk's split, len(ms)/s after each,
// through ksLo and ksHi. On Zen 3 (two VPMULUDQ pipes) the other form keeps
// the 64-entry FP scheduler full, each multiply waiting on its key load
// (kernels/_mca/README.md); this one loads 7 key vectors per chunk instead
// of 25.
func (g *gen) vecStepKS(s int, ms []move) {
	c := g.c
	first := [limbs]bool{true, true, true, true, true}
	for i := 1; i <= s; i++ {
		j := i - 1 // the power r^(j+1)
		g.splitKS(16 * (s - i))
		if i == s {
			for l := 0; l < limbs; l++ {
				c.VPADDQ(mem(rH, 32*l), yH[l], yH[l])
			}
		}
		g.emitMoves(ms[(i-1)*len(ms)/s : i*len(ms)/s])
		g.keyLoop(j, &first)
	}
	g.carryChain()
}

// keyLoop adds the products of the limbs in yH with the key vectors of
// r^(j+1) to yD, one key vector at a time, each product paired with its
// key by keyFor; a d_k whose first[k] is set is set by its first product
// instead, and first[k] cleared.
func (g *gen) keyLoop(j int, first *[limbs]bool) {
	c := g.c
	type pair struct{ l, k int }
	keys := make([]operand.Mem, 0, 2*limbs-1) // r_0..r_4, then 5r_1..5r_4
	for x := 0; x < limbs; x++ {
		keys = append(keys, g.keyRMem(j, x))
	}
	for x := 1; x < limbs; x++ {
		keys = append(keys, g.keySMem(j, x))
	}
	for _, key := range keys {
		var ps []pair
		for l := 0; l < limbs; l++ {
			for k := 0; k < limbs; k++ {
				if g.keyFor(j, l, k) == key {
					ps = append(ps, pair{l, k})
				}
			}
		}
		var kop operand.Op = key
		if len(ps) > 1 {
			c.VMOVDQU(key, ksKey)
			kop = ksKey
		}
		for _, p := range ps {
			if first[p.k] {
				c.VPMULUDQ(kop, yH[p.l], yD[p.k])
				first[p.k] = false
				continue
			}
			c.VPMULUDQ(kop, yH[p.l], ksProd)
			c.VPADDQ(ksProd, yD[p.k], yD[p.k])
		}
	}
}

// splitKS loads the chunk at disp of the four blocks and splits it into
// its five limbs in yH (see split).
func (g *gen) splitKS(disp int) {
	c := g.c
	g.gather(disp, ksLo, ksHi, ksT)
	m := yH
	c.VPAND(ksMask, ksLo, m[0])
	c.VPSRLQ(operand.U8(26), ksLo, m[1])
	c.VPAND(ksMask, m[1], m[1])
	c.VPSRLQ(operand.U8(52), ksLo, m[2])
	c.VPSLLQ(operand.U8(12), ksHi, ksT)
	c.VPOR(ksT, m[2], m[2])
	c.VPAND(ksMask, m[2], m[2])
	c.VPSRLQ(operand.U8(14), ksHi, m[3])
	c.VPAND(ksMask, m[3], m[3])
	c.VPSRLQ(operand.U8(40), ksHi, m[4])
	c.VPOR(g.pad, m[4], m[4])
}

// The copying kernel's pointers into p (block 0 and block 3 at the current
// chunk), beside rP and rP3, which point into q.
var rX, rX3 = reg.R10, reg.R11

// pblock is block(j, disp) in p, for the copying kernels.
func (g *gen) pblock(j, disp int) operand.Mem {
	m := block(j, disp)
	switch m.Base {
	case rP:
		m.Base = rX
	case rP3:
		m.Base = rX3
	}
	return m
}

// copyMove copies width (16 or 32) bytes of block j at disp from p to q
// through t.
func (g *gen) copyMove(j, disp, width int, t reg.VecPhysical) {
	if width == 16 {
		t = xmm(t)
	}
	g.c.VMOVDQU(g.pblock(j, disp), t)
	g.c.VMOVDQU(t, block(j, disp))
}

// copyMoves returns the moves that copy bytes bytes (a multiple of 32, or
// 16) of each of nb blocks from disp, block by block, and emits them with
// emit(i) for the i-th.
type move struct{ j, disp, width int }

func copyMoves(nb, disp, bytes int) []move {
	var out []move
	for j := range nb {
		if bytes == 16 {
			out = append(out, move{j, disp, 16})
			continue
		}
		for o := 0; o < bytes; o += 32 {
			out = append(out, move{j, disp + o, 32})
		}
	}
	return out
}

// emitMoves emits moves, alternating the temporaries yLo and yHi (ksLo and
// ksHi under vecStepKS); a move of width 0 is a prefetch (see withPrefetch).
func (g *gen) emitMoves(ms []move) {
	for i, m := range ms {
		if m.width == 0 {
			g.c.PREFETCHT0(g.nblock(m.j, m.disp))
			continue
		}
		t := [2]reg.VecPhysical{yLo, yHi}
		if g.ks {
			t = [2]reg.VecPhysical{ksLo, ksHi}
		}
		g.copyMove(m.j, m.disp, m.width, t[i%2])
	}
}

// The prefetch pointers of lanesAVX2R8Copy: block 0 and block 3 at the
// current chunk in the blocks ahead bytes on, p + ahead and p + ahead +
// 3·stride.
var rN1, rN3 = reg.R12, reg.R13

// nblock is block(j, disp) in the blocks ahead bytes on in p.
func (g *gen) nblock(j, disp int) operand.Mem {
	m := block(j, disp)
	switch m.Base {
	case rP:
		m.Base = rN1
	case rP3:
		m.Base = rN3
	}
	return m
}

// withPrefetch returns ms with, in lanesAVX2R8Copy, the prefetches of the
// two cache lines at disp of each of nb blocks ahead bytes on merged in,
// spread evenly: a step's lines in the group of blocks the glue calls
// next (or two on), so that a source in memory, a page cache mapping, is
// in the cache by the time the next call copies it. Six or more streams of
// short blocks (512 bytes: eight lines each) are more than the hardware
// prefetchers follow; without the prefetches the kernel over a source
// larger than the L3 cache ran at 0.65-0.75 times copy-then-BlocksAD at
// 512-byte blocks.
func (g *gen) withPrefetch(ms []move, nb, disp int) []move {
	if !g.cp {
		return ms
	}
	var pf []move
	for j := range nb {
		pf = append(pf, move{j, disp, 0}, move{j, disp + 64, 0})
	}
	if len(ms) == 0 {
		return pf
	}
	var out []move
	for i, p := range pf {
		out = append(out, ms[i*len(ms)/len(pf):(i+1)*len(ms)/len(pf)]...)
		out = append(out, p)
	}
	return out
}

// lanesKernel emits the radix-2^26 lane kernels: lanesAVX2, lanesHybridAVX2
// and (pw = 8) lanesAVX2R8 and lanesHybridR8; with cp, the copying
// lanesAVX2R8Copy and lanesHybridR8Copy (see lanesAVX2Copy).
func (g *gen) lanesKernel(name string, hybrid bool, pw int, cp bool) {
	c := g.c
	g.powers = pw
	g.cp = cp
	g.ks = cp && pw == powers8
	defer func() { g.cp, g.ks = false, false }()
	keyWords := keyScalarOf(pw)/8 + 2
	hWords := limbs * lanes
	if hybrid {
		hWords = hybridWords
	}
	sig := lanesSig(hWords, keyWords)
	if cp {
		if hybrid {
			g.fail(fmt.Errorf("%s: no hybrid copying kernel", name))
			return
		}
		sig = lanesCopySig(hWords, keyWords)
	}
	nb := lanes // blocks of the kernel
	if hybrid {
		nb += scalarLanes
	}
	c.Function(name)
	c.Attributes(attr.NOSPLIT)
	c.Signature(sig)
	c.Load(c.Param("h"), rH)
	if cp {
		c.Load(c.Param("q").Base(), rP)
		c.Load(c.Param("p").Base(), rX)
	} else {
		c.Load(c.Param("p").Base(), rP)
	}
	c.Load(c.Param("stride"), rS)
	if !hybrid {
		c.Load(c.Param("chunks"), rN)
	}
	c.Load(c.Param("key"), rKey)
	if cp {
		c.Comment("Block j is absorbed from q + j*stride (rP, and rP3 for blocks 3..)")
		c.Comment("and copied there from p + j*stride (the same from rX and rX3).")
		c.LEAQ(operand.Mem{Base: rS, Index: rS, Scale: 2}, rX3)
		c.ADDQ(rX, rX3)
		c.Comment("The prefetches: block j at p + ahead + j*stride (rN1, rN3).")
		c.Load(c.Param("ahead"), rN1)
		c.ADDQ(rX, rN1)
		c.LEAQ(operand.Mem{Base: rS, Index: rS, Scale: 2}, rN3)
		c.ADDQ(rN1, rN3)
	} else {
		c.Comment("Block j starts at p + j*stride, blocks 3.. from p + 3*stride.")
	}
	c.LEAQ(operand.Mem{Base: rS, Index: rS, Scale: 2}, rP3)
	c.ADDQ(rP, rP3)
	if g.powers != powers8 {
		c.VMOVDQU(g.mask, yMask)
	}
	if g.ks {
		c.Comment("h lives at h (vecStepKS), from zero; the limb mask in Y15.")
		c.VMOVDQU(g.mask, ksMask)
		c.VPXOR(yH[0], yH[0], yH[0])
		for k := 0; k < limbs; k++ {
			c.VMOVDQU(yH[0], mem(rH, 32*k))
		}
	}
	for k := 0; k < limbs && !g.ks; k++ {
		if cp {
			// The copying kernel starts from zero: h is only written.
			c.VPXOR(yH[k], yH[k], yH[k])
			continue
		}
		c.VMOVDQU(mem(rH, 32*k), yH[k])
	}
	// The chunk count: CX, or in the hybrid kernel (every general register
	// in use) the frame word of the chunks argument.
	var n operand.Op = rN
	if hybrid {
		c.Comment("The scalar lanes' accumulators h0 + h1·2^64 + h2·2^128.")
		for l := range scalarLanes {
			for i, r := range sH[l] {
				c.MOVQ(mem(rH, 8*(limbs*lanes+3*l+i)), r)
			}
		}
		b, err := c.Param("chunks").Resolve()
		if err != nil {
			g.fail(err)
			return
		}
		n = b.Addr
	}
	// step emits the vector code vec and, in the hybrid kernel, chunks
	// chunks of each scalar lane, interleaved.
	step := func(chunks int, vec func()) {
		if !hybrid {
			vec()
			return
		}
		v := g.record(vec)
		s := g.record(func() {
			for i := range chunks {
				for l := range scalarLanes {
					g.scalarChunk(l, 16*i)
				}
			}
		})
		g.interleave(v, s)
	}
	// vecStep is the vector code of a step of s chunks (1, 2, 4 or 8):
	// d = m_s·r + m_(s-1)·r^2 + ... + m_2·r^(s-1), independent of h; then
	// h += m_1; d += h·r^s; h = d, carried. The copying kernels' moves ms
	// go after the splits, len(ms)/s after each (the split's temporaries
	// are free there).
	vecStep := func(s int, ms []move) func() {
		if g.ks {
			return func() { g.vecStepKS(s, ms) }
		}
		return func() {
			split := 0
			after := func() {
				g.emitMoves(ms[split*len(ms)/s : (split+1)*len(ms)/s])
				split++
			}
			for i := 1; i < s; i++ {
				j := i - 1
				g.split(16*(s-i), func(l int) { g.mulAdd(yL, l, j, j == 0 && l == 0) })
				after()
			}
			g.split(0, func(l int) { g.c.VPADDQ(yL, yH[l], yH[l]) })
			after()
			for l := 0; l < limbs; l++ {
				g.mulAdd(yH[l], l, s-1, s == 1 && l == 0)
			}
			g.carryChain()
		}
	}
	// advance moves the pointers on by bytes.
	advance := func(bytes int) {
		c.ADDQ(operand.U32(bytes), rP)
		c.ADDQ(operand.U32(bytes), rP3)
		if cp {
			c.ADDQ(operand.U32(bytes), rX)
			c.ADDQ(operand.U32(bytes), rX3)
			c.ADDQ(operand.U32(bytes), rN1)
			c.ADDQ(operand.U32(bytes), rN3)
		}
	}
	// tail emits a step of s < 8 chunks: in the copying kernels the copy of
	// its chunks first.
	tail := func(s int) {
		if cp {
			c.Comment("Copy the step's chunks, then absorb them from q.")
			g.emitMoves(copyMoves(nb, 0, 16*s))
		}
		step(s, vecStep(s, nil))
	}
	if cp {
		g.absorbAD(name, step, vecStep)
	}
	if g.powers == powers8 && cp {
		c.CMPQ(n, operand.U32(8))
		c.JB(operand.LabelRef(name + "quad"))
		c.Comment("Copy the first eight chunks of every block.")
		g.emitMoves(g.withPrefetch(copyMoves(nb, 0, 128), nb, 0))

		c.Label(name + "oct")
		c.CMPQ(n, operand.U32(16))
		c.JB(operand.LabelRef(name + "octlast"))
		c.Comment("Eight chunks, absorbed from q, while the next eight of every")
		c.Comment("block are copied from p to q.")
		step(8, vecStep(8, g.withPrefetch(copyMoves(nb, 128, 128), nb, 0)))
		advance(128)
		c.SUBQ(operand.U32(8), n)
		c.JMP(operand.LabelRef(name + "oct"))

		c.Label(name + "octlast")
		c.Comment("The last eight chunks, copied by the step before.")
		step(8, vecStep(8, g.withPrefetch(nil, nb, 0)))
		advance(128)
		c.SUBQ(operand.U32(8), n)

		c.Label(name + "quad")
		c.CMPQ(n, operand.U32(4))
		c.JB(operand.LabelRef(name + "pair"))
		c.Comment("Four chunks: h' = (h + m1)·r^4 + m2·r^3 + m3·r^2 + m4·r.")
		tail(4)
		advance(64)
		c.SUBQ(operand.U32(4), n)
	} else if g.powers == powers8 {
		c.CMPQ(n, operand.U32(8))
		c.JB(operand.LabelRef(name + "quad"))

		c.Label(name + "oct")
		c.Comment("Eight chunks: h' = (h + m1)·r^8 + m2·r^7 + ... + m8·r, one")
		c.Comment("carry chain (poly1305_lanes.go has the bounds: every d_k below 2^60).")
		step(8, vecStep(8, nil))
		advance(128)
		c.SUBQ(operand.U32(8), n)
		c.CMPQ(n, operand.U32(8))
		c.JAE(operand.LabelRef(name + "oct"))

		c.Label(name + "quad")
		c.CMPQ(n, operand.U32(4))
		c.JB(operand.LabelRef(name + "pair"))
		c.Comment("Four chunks: h' = (h + m1)·r^4 + m2·r^3 + m3·r^2 + m4·r.")
		tail(4)
		advance(64)
		c.SUBQ(operand.U32(4), n)
	} else {
		c.CMPQ(n, operand.U32(4))
		c.JB(operand.LabelRef(name + "pair"))

		c.Label(name + "quad")
		c.Comment("Four chunks: h' = (h + m1)·r^4 + m2·r^3 + m3·r^2 + m4·r, one")
		c.Comment("carry chain. First d = m4·r + m3·r^2 + m2·r^3, independent of h;")
		c.Comment("then h += m1; d += h·r^4; h = d, carried.")
		tail(4)
		advance(64)
		c.SUBQ(operand.U32(4), n)
		c.CMPQ(n, operand.U32(4))
		c.JAE(operand.LabelRef(name + "quad"))
	}

	c.Label(name + "pair")
	c.CMPQ(n, operand.U32(2))
	c.JB(operand.LabelRef(name + "single"))
	c.Comment("Two chunks: d = m2·r, then h += m1; d += h·r^2.")
	tail(2)
	advance(32)
	c.SUBQ(operand.U32(2), n)

	c.Label(name + "single")
	c.CMPQ(n, operand.U32(0))
	c.JZ(operand.LabelRef(name + "done"))
	c.Comment("One chunk left: h = (h + m)·r, carried.")
	tail(1)

	c.Label(name + "done")
	if g.ks {
		for k := 0; k < limbs; k++ {
			c.VMOVDQU(mem(rH, 32*k), yH[k])
		}
	}
	if cp {
		g.fullCarry()
	}
	if hybrid {
		c.Load(c.Param("h"), rH) // DX went to the multiplies
		for l := range scalarLanes {
			for i, r := range sH[l] {
				c.MOVQ(r, mem(rH, 8*(limbs*lanes+3*l+i)))
			}
		}
	}
	for k := 0; k < limbs; k++ {
		c.VMOVDQU(yH[k], mem(rH, 32*k))
	}
	c.VZEROUPPER()
	c.RET()
}

// absorbAD emits the copying kernel's first part: the adLen/16 chunks of
// associated data of each block, block j's at ad + j·adLen, absorbed into
// the zero accumulators before the blocks, as the eight-chunk kernel would
// absorb them (steps of eight, then at most one each of four, two and
// one). It saves the separate kernel call per group for the associated
// data, and the caller's clearing of h: BlocksADCopy at 512-byte blocks
// with 32 bytes of associated data, source in the cache, went from
// 1.03-1.05 to 1.07-1.08 times copy-then-BlocksAD (level at 4 KiB and from
// memory; alternating test binaries of the two). The steps are those of the data,
// emitted with the block pointers rP, rP3 and the stride rS rebound to
// AX, BX and R14 (registers the copying kernel leaves free), the count in
// R15.
func (g *gen) absorbAD(name string, step func(int, func()), vecStep func(int, []move) func()) {
	c := g.c
	saveP, saveP3, saveS := rP, rP3, rS
	defer func() { rP, rP3, rS = saveP, saveP3, saveS }()
	rP, rP3, rS = reg.RAX, reg.RBX, reg.R14
	n := reg.R15
	c.Comment("The associated data: block j's adLen bytes at ad + j*adLen.")
	c.Load(c.Param("adLen"), rS)
	c.MOVQ(rS, n)
	c.SHRQ(operand.U8(4), n)
	c.Load(c.Param("ad").Base(), rP)
	c.LEAQ(operand.Mem{Base: rS, Index: rS, Scale: 2}, rP3)
	c.ADDQ(rP, rP3)
	adv := func(bytes int) {
		c.ADDQ(operand.U32(bytes), rP)
		c.ADDQ(operand.U32(bytes), rP3)
	}
	l := name + "ad"
	c.CMPQ(n, operand.U32(8))
	c.JB(operand.LabelRef(l + "quad"))
	c.Label(l + "oct")
	step(8, vecStep(8, nil))
	adv(128)
	c.SUBQ(operand.U32(8), n)
	c.CMPQ(n, operand.U32(8))
	c.JAE(operand.LabelRef(l + "oct"))
	c.Label(l + "quad")
	c.CMPQ(n, operand.U32(4))
	c.JB(operand.LabelRef(l + "pair"))
	step(4, vecStep(4, nil))
	adv(64)
	c.SUBQ(operand.U32(4), n)
	c.Label(l + "pair")
	c.CMPQ(n, operand.U32(2))
	c.JB(operand.LabelRef(l + "single"))
	step(2, vecStep(2, nil))
	adv(32)
	c.SUBQ(operand.U32(2), n)
	c.Label(l + "single")
	c.CMPQ(n, operand.U32(0))
	c.JZ(operand.LabelRef(l + "done"))
	step(1, vecStep(1, nil))
	c.Label(l + "done")
}

// hybridWords is the size of the hybrid kernel's h: the vector lanes' 20
// words, then h0, h1, h2 of each scalar lane.
const hybridWords = limbs*lanes + 3*scalarLanes

// record returns the instructions emit adds, emitted into a scratch
// context instead of the function being built (comments dropped), for
// interleave.
func (g *gen) record(emit func()) []*ir.Instruction {
	saved := g.c
	defer func() { g.c = saved }()
	sc := build.NewContext()
	sc.Function("scratch")
	g.c = sc
	emit()
	f, err := sc.Result()
	if err != nil {
		g.fail(err)
		return nil
	}
	return f.Functions()[0].Instructions()
}

// interleave emits a and b merged, b spread evenly: after the i-th of a,
// the ones of b up to the (i+1)/len(a) fraction. The two streams must be
// independent but for their order within each: a is vector code (it does
// not touch the flags), b the scalar lanes (their carries in the flags).
func (g *gen) interleave(a, b []*ir.Instruction) {
	j := 0
	for i, in := range a {
		g.c.Instruction(in)
		for ; j < (i+1)*len(b)/len(a); j++ {
			g.c.Instruction(b[j])
		}
	}
	for ; j < len(b); j++ {
		g.c.Instruction(b[j])
	}
}

// The scalar lanes of the hybrid kernel: lane l's h in sH[l]; the products'
// low words in sT; DX the implicit MULX source, AX a temporary. With the
// vector kernel's SI, DI, R8 and R9 every general register but SP and BP is
// in use.
var (
	sH = [scalarLanes][]reg.GPPhysical{{reg.R10, reg.R11, reg.R12}, {reg.R13, reg.R14, reg.R15}}
	sT = []reg.GPPhysical{reg.RBX, reg.RCX}
)

// scalarChunk absorbs the chunk at disp of block 4+l into scalar lane l:
// h += chunk + 2^128, then h = h·r partially reduced, as the generic
// chunks and mulReduce do (kernels/poly1305/poly1305_generic.go has the
// bounds: r0, r1 < 2^60, h2 <= 7 before the multiply, so h2·r0 and h2·r1
// fit in 64 bits and no word below overflows):
//
//	h·r = t0 + t1·2^64 + t2·2^128 + t3·2^192
//	h   = t0 + t1·2^64 + (t2&3)·2^128 + (t2&^3 + t3·2^64)·(1 + 1/4)
//
// the last term being 5·floor(h·r / 2^130) as 4H + H, since 2^130 ≡ 5. t2
// and t3 are built in the registers of h0 and h1 once those are read; MULX
// (BMI2) leaves the flags alone, so the carries chain across it.
func (g *gen) scalarChunk(l, disp int) {
	c := g.c
	h0, h1, h2 := sH[l][0], sH[l][1], sH[l][2]
	t0, t1 := sT[0], sT[1]
	t2, t3 := h0, h1
	r0, r1 := mem(rKey, keyScalarOf(g.powers)), mem(rKey, keyScalarOf(g.powers)+8)
	blk := block(4+l, disp)
	c.ADDQ(blk, h0) // h += chunk + 2^128
	blk.Disp += 8
	c.ADCQ(blk, h1)
	c.ADCQ(operand.U32(1), h2)
	c.MOVQ(h0, reg.RDX)
	c.MULXQ(r0, t0, t1)      // t1:t0 = h0·r0
	c.MULXQ(r1, reg.RAX, t2) // t2:AX = h0·r1
	c.ADDQ(reg.RAX, t1)
	c.ADCQ(operand.U32(0), t2)
	c.MOVQ(h1, reg.RDX)
	c.MULXQ(r1, reg.RAX, t3) // t3:AX = h1·r1
	c.ADDQ(reg.RAX, t2)
	c.ADCQ(operand.U32(0), t3)
	c.MULXQ(r0, reg.RAX, reg.RDX) // DX:AX = h1·r0
	c.ADDQ(reg.RAX, t1)
	c.ADCQ(reg.RDX, t2)
	c.ADCQ(operand.U32(0), t3)
	c.MOVQ(r0, reg.RAX)
	c.IMULQ(h2, reg.RAX) // h2·r0
	c.IMULQ(r1, h2)      // h2·r1
	c.ADDQ(reg.RAX, t2)
	c.ADCQ(h2, t3)
	// h = t mod 2^130 + 4H + H.
	c.MOVQ(t2, h2)
	c.ANDQ(operand.U32(3), h2)
	c.ANDQ(operand.I32(-4), t2)
	c.ADDQ(t2, t0)
	c.ADCQ(t3, t1)
	c.ADCQ(operand.U32(0), h2)
	c.SHRQ(operand.U8(2), t3, t2)
	c.SHRQ(operand.U8(2), t3)
	// The last sum goes into t2, t3, which are h0, h1: no moves.
	c.ADDQ(t0, t2)
	c.ADCQ(t1, t3)
	c.ADCQ(operand.U32(0), h2)
}

func writeStubs(warning string) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\n\n//go:build !purego\n\npackage poly1305\n\n", warning)
	fmt.Fprintf(&b, `// Byte offsets of the laneKey fields the kernels read, and its size.
const (
	laneKeyR      = %d
	laneKeyS      = %d
	laneKeyScalar = %d
	laneKeySize   = %d
)

// Byte offsets of the laneKey8 fields the eight-chunk kernels read, and its
// size.
const (
	laneKey8S      = %d
	laneKey8Scalar = %d
	laneKey8Size   = %d
)

// lanesAVX2 absorbs chunks 16-byte chunks of each of four blocks into the
// accumulators h (laneState: limb k of block l at h[4k+l], radix 2^26),
// block l's chunks at p[l*stride:][:16*chunks], each chunk with the 2^128
// pad bit: what laneModel computes, four lanes of YMM registers at once,
// four chunks per step under r^4..r from key (laneKey), then at most one
// step of two and one of one.
//
// Preconditions: chunks >= 0; len(p) >= 3*stride + 16*chunks; the limbs of
// h below 2^27 (zero, or left by an earlier call); the CPU has AVX2. It
// reads only the chunks.
//
//go:noescape
func lanesAVX2(h *[%d]uint64, p []byte, stride, chunks int, key *[%d]uint64)

// lanesHybridAVX2 is lanesAVX2 with two more blocks, p[4*stride:] and
// p[5*stride:], in general registers: h[20+3i:23+3i] is block 4+i's
// accumulator h0 + h1·2^64 + h2·2^128 (the generic form, h2 <= 4 between
// calls), absorbed by 64-bit MULX multiplies with r from key[160:162] while
// the vector lanes run.
//
// Preconditions: those of lanesAVX2, with len(p) >= 5*stride + 16*chunks;
// the CPU has BMI2.
//
//go:noescape
func lanesHybridAVX2(h *[%d]uint64, p []byte, stride, chunks int, key *[%d]uint64)

// lanesAVX2R8 is lanesAVX2 with eight chunks per step under r^8..r from
// key (laneKey8): one carry chain per eight chunks (then at most one step
// of four, two and one), what modelLanesKey computes with eight powers.
//
// Preconditions: those of lanesAVX2.
//
//go:noescape
func lanesAVX2R8(h *[%d]uint64, p []byte, stride, chunks int, key *[%d]uint64)

// lanesHybridR8 is lanesHybridAVX2 with the vector lanes of lanesAVX2R8,
// r for the scalar lanes from key[320:322].
//
// Preconditions: those of lanesHybridAVX2.
//
//go:noescape
func lanesHybridR8(h *[%d]uint64, p []byte, stride, chunks int, key *[%d]uint64)

// lanesAVX2R8Copy is lanesAVX2R8 that also copies the chunks it absorbs:
// block l's chunks p[l*stride:][:16*chunks] go to q[l*stride:][:16*chunks],
// and are absorbed from q after the kernel's own stores to it (never from
// a second load of p, which may change under the call). It writes nothing
// else of q.
//
// While it works on a step of the blocks it prefetches the same step of
// the blocks ahead bytes on in p, block l at p[ahead+l*stride:] (the group
// the caller will pass next, or the one after); ahead = 0 prefetches the
// blocks themselves.
//
// Unlike lanesAVX2R8 it starts from zero accumulators (it does not read h)
// and first absorbs the adLen/16 chunks of associated data of each block,
// block l's at ad[l*adLen:]: h = Poly1305_r(ad_l || chunks of block l)
// without the final reduction, lanesAVX2R8's from zero over the two in
// turn, and carried: limbs 0..3 below 2^26, limb 4 below 2^26 + 2^10,
// so that h0 + h1·2^64 + h2·2^128 is the limbs' shifts and ors alone.
//
// Preconditions: those of lanesAVX2R8, for q as for p; q's chunks do not
// overlap p's; len(p) >= ahead + 3*stride + 16*chunks, ahead >= 0; adLen a
// multiple of 16, len(ad) >= 4*adLen.
//
//go:noescape
func lanesAVX2R8Copy(h *[%d]uint64, q, p []byte, stride, chunks, ahead int, ad []byte, adLen int, key *[%d]uint64)

// lanesIFMA is lanesAVX2 for eight blocks in radix 2^44, with 52-bit
// multiplies: it absorbs chunks chunks of each of eight blocks, block l at
// p[l*stride:], into h (laneState44: limb k of block l at h[8k+l]), four
// chunks per step under r^4..r from key (ifmaKey), then two and one:
// what laneModel44 computes, in the 64-bit lanes of ZMM registers. Each
// four-chunk step also prefetches (PREFETCHT1 of each line) the next 512
// bytes of a sequential stream starting at pf: as many bytes as the step
// absorbs. A prefetch never faults; pf may be any address.
//
// Preconditions: chunks >= 0; len(p) >= 7*stride + 16*chunks; the limbs of
// h below 2^45 (zero, or left by an earlier call); the CPU has AVX512F and
// AVX512IFMA. It reads only the chunks.
//
//go:noescape
func lanesIFMA(h *[%d]uint64, p []byte, stride, chunks int, key *[%d]uint64, pf uintptr)

// lanesIFMAS is lanesIFMA, the same h before and after, for blocks of
// whole rows (chunks a multiple of 4) without its gathers: the eight
// blocks as four pairs in turn, each pair's two blocks in the eight lanes
// as four interleaved chunk streams, the streams summed at the end (see
// kernels/_asm/poly1305, lanesIFMAS). Its h limbs end below 2^44, 2^44 +
// 1 and 2^42, as combine44 leaves them. It prefetches as lanesIFMA does,
// 128 bytes of the stream at pf for each row of a pair it absorbs.
//
// Preconditions: those of lanesIFMA, with chunks a multiple of 4 (chunks
// = 0 returns at once, h unchanged). It reads only the chunks.
//
//go:noescape
func lanesIFMAS(h *[%d]uint64, p []byte, stride, chunks int, key *[%d]uint64, pf uintptr)

// lanesIFMASCopy is lanesIFMAS that also copies the chunks it absorbs:
// block l's p[l*stride:][:16*chunks] to q[l*stride:][:16*chunks], each
// 64-byte row stored as it is loaded and absorbed from the register
// (never from a second load of p, which may change under the call). It
// writes nothing else at q.
//
// Preconditions: those of lanesIFMAS; the blocks at q writable and not
// overlapping p's.
//
//go:noescape
func lanesIFMASCopy(h *[%d]uint64, p []byte, stride, chunks int, key *[%d]uint64, pf uintptr, q *byte)
`, keyR, keyS, keyScalar, keySize, key8S, key8Scalar, key8Size,
		limbs*lanes, keySize/8, hybridWords, keySize/8,
		limbs*lanes, key8Size/8, hybridWords, key8Size/8,
		limbs*lanes, key8Size/8, 3*lanes44, key44,
		3*lanes44, key44, 3*lanes44, key44)
	return scaffold.Go(b.Bytes())
}

// The IFMA kernel (see poly1305_lanes44.go in kernels/poly1305 for the
// math): eight blocks, one per 64-bit lane of ZMM registers, three limbs of
// 44, 44 and 42 bits. Every product of a limb and a key word is a
// VPMADD52LUQ into a lo accumulator and a VPMADD52HUQ into a hi one; the
// hi sums join the next limb up shifted left by 8 (weight 2^52 = 2^8·2^44),
// the top one limb 0 times 5120 (2^140 ≡ 5·2^10 mod 2^130-5). Four chunks
// per step, h' = (h + m1)·r^4 + m2·r^3 + m3·r^2 + m4·r, so that one carry
// chain serves four chunks (with two per step, as at first, the kernel ran
// 12-23% slower on the Zen 4 build machine: BenchmarkKeyed, alternating);
// two or three chunks left take one step (h + m1)·r^2 + m2·r, an odd last
// one (h + m)·r. The key words r0, r1, r2, 20·r1, 20·r2 of r and r^2 stay
// in ten registers, broadcast once; those of r^3 and r^4 are memory
// operands, eight-lane vectors in the key (there are not registers for
// twenty). Block j of the eight is at p + j·stride, blocks 4..7 addressed
// from a second pointer p + 4·stride.

var (
	rQ = reg.R10 // block 4 at the current chunk

	zA, zB   = reg.Z0, reg.Z1 // gathers; carry temporaries
	zLo, zHi = reg.Z2, reg.Z3
	zL, zT   = reg.Z4, reg.Z5
	zH       = []reg.VecPhysical{reg.Z6, reg.Z7, reg.Z8}
	zDLo     = []reg.VecPhysical{reg.Z9, reg.Z10, reg.Z11}
	zDHi     = []reg.VecPhysical{reg.Z12, reg.Z13, reg.Z14}
	zKey     = [2][5]reg.VecPhysical{
		{reg.Z15, reg.Z16, reg.Z17, reg.Z18, reg.Z19}, // r: r0 r1 r2 s1 s2
		{reg.Z20, reg.Z21, reg.Z22, reg.Z23, reg.Z24}, // r^2
	}
	zM44, zM42, zPad = reg.Z25, reg.Z26, reg.Z27
)

// words44[k][i] is the key word (index into r0 r1 r2 s1 s2) that limb i
// multiplies for output limb k: d0 = x0·r0 + x1·s2 + x2·s1, d1 = x0·r1 +
// x1·r0 + x2·s2, d2 = x0·r2 + x1·r1 + x2·r0.
var words44 = [3][3]int{{0, 4, 3}, {1, 0, 4}, {2, 1, 0}}

// block8 is byte disp of block j of eight at the current chunk.
func block8(j, disp int) operand.Mem {
	switch {
	case j < 4:
		return block(j, disp)
	case j == 7:
		return operand.Mem{Base: rP3, Index: rS, Scale: 4, Disp: disp}
	}
	m := block(j-4, disp)
	m.Base = rQ
	return m
}

// split44 gathers the chunk at disp of the eight blocks and calls use with
// each radix-2^44 limb in zL, in order 0..2.
//
// The gathers are a large part of the kernel's time: with their inserts
// left out (wrong, for timing only) Blocks ran 20% faster at 512-byte
// blocks and 33% at 4 KiB on the Zen 4 build machine (BenchmarkKeyed). A
// four-chunk step that loaded 64 bytes of each block into a register and
// transposed the 8x8 quadwords (VPUNPCKLQDQ/HQDQ of each pair of blocks,
// then two rounds of VSHUFI64X2: 24 shuffles for four chunks against 32
// here, and 8 loads against 24; nine registers, with M42 and the pad bit
// taken from memory) passed the emulator and the package tests and ran
// level with this one (BenchmarkKeyed, three alternating runs: 512 bytes
// 9.7-11.6 GB/s against 10.1-11.1, 4 KiB 13.1-13.3 against 13.2-13.9), so
// it was not kept. Nor was a copying kernel built on it (lanesIFMACopy:
// each row stored to q as loaded, and absorbed from the register, for
// poly1305.blocksIFMACopy): it passed the emulator and the package tests,
// and against the group copy then lanesIFMA it ran 1.12 times as
// fast with the source in the L2 cache at 512-byte blocks but level from
// memory (x-twoPass 1.48-1.51 for both, BenchmarkBlocksADCopy), level in
// blockdev's keyed read (its stall moved from memmove into the kernel),
// and slower at 4 KiB (0.69-0.74 in the cache: eight rows 4 KiB apart and
// their copies share an L1 set).
//
// On the Sapphire Rapids guest (5 December) the inserts cost 10-15%:
// with them left out (wrong, for timing only) BenchmarkKeyed under
// avx512ifma at 512 bytes ran at 13.6-15.1 GB/s against 11.5-13.6 (two
// alternating runs of -count 3). The stream kernels (lanesIFMAS) are the
// layout without them, for blocks of whole 64-byte rows; this one is
// left for the associated data and blocks of other lengths.
func (g *gen) split44(disp int, use func(i int)) {
	c := g.c
	c.VMOVDQU(block8(0, disp), xmm(zA))
	c.VMOVDQU(block8(1, disp), xmm(zB))
	for l := 1; l < 4; l++ {
		c.VINSERTI32X4(operand.U8(l), block8(2*l, disp), zA, zA)
		c.VINSERTI32X4(operand.U8(l), block8(2*l+1, disp), zB, zB)
	}
	c.VPUNPCKHQDQ(zB, zA, zHi) // hi words of blocks 0..7
	c.VPUNPCKLQDQ(zB, zA, zLo) // lo words
	c.VPANDQ(zM44, zLo, zL)
	use(0)
	c.VPSRLQ(operand.U8(44), zLo, zL)
	c.VPSLLQ(operand.U8(20), zHi, zT)
	c.VPORQ(zT, zL, zL)
	c.VPANDQ(zM44, zL, zL)
	use(1)
	c.VPSRLQ(operand.U8(24), zHi, zL)
	c.VPORQ(zPad, zL, zL)
	use(2)
}

// madd44 adds x·r^(j+1) (x limb i) to the lo and hi accumulators: the
// key words of r and r^2 from their registers, those of r^3 and r^4 as
// memory operands, their eight-lane vectors in the key.
func (g *gen) madd44(x reg.VecPhysical, i, j int) {
	for k := 0; k < 3; k++ {
		var w operand.Op
		if j < 2 {
			w = zKey[j][words44[k][i]]
		} else {
			w = mem(rKey, 8*(key44Vec+40*(j-2)+8*words44[k][i]))
		}
		g.c.VPMADD52LUQ(w, x, zDLo[k])
		g.c.VPMADD52HUQ(w, x, zDHi[k])
	}
}

func (g *gen) zeroAcc44() {
	for k := 0; k < 3; k++ {
		g.c.VPXORQ(zDLo[k], zDLo[k], zDLo[k])
		g.c.VPXORQ(zDHi[k], zDHi[k], zDHi[k])
	}
}

func (g *gen) carry44(from, to, bits int, mask reg.VecPhysical, times5 bool) {
	c := g.c
	c.VPSRLQ(operand.U8(bits), zDLo[from], zT)
	c.VPANDQ(mask, zDLo[from], zDLo[from])
	if times5 {
		c.VPSLLQ(operand.U8(2), zT, zA)
		c.VPADDQ(zA, zT, zT)
	}
	c.VPADDQ(zT, zDLo[to], zDLo[to])
}

// joinHi44 joins the hi sums to the limbs above (hi2 times 5120 = 2^12 +
// 2^10).
func (g *gen) joinHi44() {
	c := g.c
	c.VPSLLQ(operand.U8(12), zDHi[2], zT)
	c.VPADDQ(zT, zDLo[0], zDLo[0])
	c.VPSLLQ(operand.U8(10), zDHi[2], zT)
	c.VPADDQ(zT, zDLo[0], zDLo[0])
	c.VPSLLQ(operand.U8(8), zDHi[0], zT)
	c.VPADDQ(zT, zDLo[1], zDLo[1])
	c.VPSLLQ(operand.U8(8), zDHi[1], zT)
	c.VPADDQ(zT, zDLo[2], zDLo[2])
}

// combine44 joins the hi sums to the limbs above (joinHi44) and carries
// into h.
func (g *gen) combine44() {
	c := g.c
	g.joinHi44()
	g.carry44(0, 1, 44, zM44, false)
	g.carry44(1, 2, 44, zM44, false)
	g.carry44(2, 0, 42, zM42, true)
	g.carry44(0, 1, 44, zM44, false)
	for k := 0; k < 3; k++ {
		c.VMOVDQA64(zDLo[k], zH[k])
	}
}

// step44 emits one step over the next k (4, 2 or 1) chunks of the eight
// blocks, m1..mk: h = (h + m1)·r^k + m2·r^(k-1) + ... + mk·r, the products
// of m2..mk first (they do not depend on h), then the carry chain; then it
// moves the block pointers on by 16k bytes and counts k chunks off rN.
//
// Each accumulator takes twelve dependent VPMADD52s a four-chunk step
// (four cycles each on Intel cores). Two sets of accumulators, m4·r and
// (h + m1)·r^4 in one and m3·r^2 and m2·r^3 in the other, added before the
// carries (r^2 taken from memory, for the registers), halved those chains;
// it passed the emulator and the package tests and ran about 10% slower
// on the Sapphire Rapids guest (BenchmarkKeyed, 11.9-12.0 against
// 13.0-13.3 GB/s at 512 bytes, three alternating runs), so it was not kept.
func (g *gen) step44(k int) {
	c := g.c
	g.zeroAcc44()
	if k > 1 {
		c.Comment(fmt.Sprintf("m2..m%d times r^%d..r: independent of h.", k, k-1))
	}
	for m := k - 1; m >= 1; m-- {
		g.split44(16*m, func(i int) { g.madd44(zL, i, k-1-m) })
		g.prefetch44(k, k-1-m)
	}
	c.Comment(fmt.Sprintf("h += m1; (h + m1)·r^%d.", k))
	g.split44(0, func(i int) { c.VPADDQ(zL, zH[i], zH[i]) })
	g.prefetch44(k, k-1)
	for i := 0; i < 3; i++ {
		g.madd44(zH[i], i, k-1)
	}
	g.combine44()
	for _, r := range []reg.Register{rP, rQ, rP3} {
		c.ADDQ(operand.U32(16*k), r)
	}
	if g.pf && k == 4 {
		c.ADDQ(operand.U32(pfStep44), rPf44)
	}
	c.SUBQ(operand.U32(k), rN)
}

// prefetch44 emits, in lanesIFMA's four-chunk steps, the
// prefetches of the step's quarter q of its pfStep44 bytes: after each of
// the step's four gathers, two PREFETCHT1, and the stream's pointer moved
// on at the step's end. A stream as long as the chunks of the eight
// blocks, one sequential run where the blocks lie side by side
// (blockdev's data), so the hardware prefetcher need not follow eight
// interleaved streams. poly1305.groupsIFMA points it at the blocks it will
// pass next, so that the hash's arithmetic covers the memory's latency;
// PREFETCHT1 rather than T0 because at 4 KiB blocks a
// group ahead is 32 KiB, the L1 cache (see the poly1305 package doc for
// the measurements). Shorter steps do not prefetch: at most three chunks
// of a call.
func (g *gen) prefetch44(k, q int) {
	if !g.pf || k != 4 {
		return
	}
	for off := q * pfStep44 / 4; off < (q+1)*pfStep44/4; off += 64 {
		g.c.PREFETCHT1(mem(rPf44, off))
	}
}

// rCq is lanesIFMASCopy's pointer to block 0 of its pair's row in q.
var rCq = reg.R12

// pfStep44 is the bytes lanesIFMA prefetches per four-chunk step:
// those the step absorbs, 64 of each of eight blocks.
const pfStep44 = 64 * lanes44

var rPf44 = reg.R11

func (g *gen) lanesIFMA(name string, consts operand.Mem) {
	c := g.c
	g.pf = true
	defer func() { g.pf = false }()
	c.Function(name)
	c.Attributes(attr.NOSPLIT)
	c.Signature(lanesIFMASig())
	c.Load(c.Param("pf"), rPf44)
	c.Load(c.Param("h"), rH)
	c.Load(c.Param("p").Base(), rP)
	c.Load(c.Param("stride"), rS)
	c.Load(c.Param("chunks"), rN)
	c.Load(c.Param("key"), rKey)
	c.Comment("Block j starts at p + j*stride; blocks 3 and 7 from p + 3*stride,")
	c.Comment("4..6 from p + 4*stride.")
	c.LEAQ(operand.Mem{Base: rS, Index: rS, Scale: 2}, rP3)
	c.ADDQ(rP, rP3)
	c.LEAQ(operand.Mem{Base: rP, Index: rS, Scale: 4}, rQ)
	c.VPBROADCASTQ(consts, zM44)
	c.VPBROADCASTQ(consts.Offset(8), zM42)
	c.VPBROADCASTQ(consts.Offset(16), zPad)
	c.Comment("The key words of r and r^2 in every lane.")
	for j := 0; j < 2; j++ {
		for w := 0; w < 5; w++ {
			c.VPBROADCASTQ(mem(rKey, 8*(5*j+w)), zKey[j][w])
		}
	}
	for k := 0; k < 3; k++ {
		c.VMOVDQU64(mem(rH, 64*k), zH[k])
	}
	c.CMPQ(rN, operand.U32(4))
	c.JB(operand.LabelRef("pair44"))

	c.Label("quad44")
	g.step44(4)
	c.CMPQ(rN, operand.U32(4))
	c.JAE(operand.LabelRef("quad44"))

	c.Label("pair44")
	c.CMPQ(rN, operand.U32(2))
	c.JB(operand.LabelRef("single44"))
	c.Comment("Two or three chunks left.")
	g.step44(2)

	c.Label("single44")
	c.TESTQ(rN, rN)
	c.JZ(operand.LabelRef("done44"))
	c.Comment("One chunk left.")
	g.step44(1)

	c.Label("done44")
	for k := 0; k < 3; k++ {
		c.VMOVDQU64(zH[k], mem(rH, 64*k))
	}
	c.VZEROUPPER()
	c.RET()
}

// The stream kernels, lanesIFMAS and lanesIFMASCopy: lanesIFMA's
// arithmetic (radix 2^44, madd44's products) in a layout that needs no
// gathers. The eight blocks go as four pairs, one after the other; a pair
// fills the eight lanes as two blocks times four chunk streams, lane 2s+b
// holding chunks s, s+4, s+8, ... of block b. One 64-byte load of each
// block (a row: chunks 4u..4u+3) and VPUNPCKLQDQ/HQDQ of the two give the
// lo and hi words of chunk-vector u, lane 2s+b holding chunk 4u+s of
// block b: two loads and two shuffles per chunk-vector, against
// lanesIFMA's eight loads (six of them VINSERTI32X4, a shuffle each) and
// two shuffles.
//
// Each stream is a Horner evaluation in r^4, one row a term, four rows a
// step: h' = (h + v1)·r^16 + v2·r^12 + v3·r^8 + v4·r^4. The last step,
// of the R = 1..4 rows left, takes the bracket B = (h + v1)·r^(4(R-1)) +
// ... + vR (vR added, not multiplied), carries it, and multiplies it by
// F, lane 2s+b holding r^(4-s), so that chunk 4u+s of a block of n = 4U
// chunks ends with r^(n-4u-s), as Poly1305 has it. The accumulator h
// (h[8k+l], limb k of block l, from the associated data or zero) seeds
// stream 0 of its block, which the steps multiply by r^n in all.
//
// Three vector operations a chunk-vector fewer than lanesIFMA's split and
// carries, where every one counts (the multiplies and the shuffles share
// two ports, and on the Sapphire Rapids guest independent ZMM VPMADD52LUQ
// ran two a cycle):
//   - No pad bit is ORed into the chunks: each step's accumulators start
//     from its pad bits' part instead, c = 2^128·Σ r^e over the step's
//     powers e (by linearity; key44K), a load in place of a zeroing.
//   - Limb 1 is (lo>>44 | hi<<20) & M44 in one VPTERNLOGD for the OR and
//     the AND.
//   - The carry chain (combineS44) leaves out combine44's last d0→d1.
//
// Then the four streams of each block are summed (two VSHUFI64X2 and
// VPADDQ a limb) and carried: each stream left combineS44 below 2^44 +
// 5·2^22, 2^44 and 2^42, so the sum is below 2^46 + 2^25, 2^46 and 2^44,
// and after the chain d0→d1, d1→d2, d2→d0 (times 5), d0→d1 its limbs are
// below 2^44, 2^44 + 1 and 2^42, combine44's bounds (packReduce44 relies
// on them).
//
// lanesIFMASCopy stores each row to q as it loads it (q's block l at
// q + l·stride, as p's) and absorbs the row from the register: the bytes
// hashed are the bytes copied, read once.
//
// The key words of r^16 and r^12 stay in ten registers and F's in five;
// those of r^8 and r^4 are broadcast quadword operands ({1to8}) of the
// multiplies. Full 512-bit memory operands were the cost: the first
// stream kernels took every key word but r^16's and r^12's that way, and
// the last step's eight-lane L_j (r^(4j-s) a lane, j = R-t) for every
// row; on the Sapphire Rapids guest (5 December, BenchmarkKeyed under
// avx512ifma, -benchtime 2000x) moving r^8 to registers took 4 KiB from
// 19.5 to 22.3 GB/s, and the broadcast form for r^4 with the bracket and
// F in place of the L_j to 25.4 (512 bytes 12.8-13.4 -> 16.6-17.3). The
// emulator counts more instructions for it (0.3005 a byte over 4 KiB
// blocks, 0.3184 copying; it was 0.297): the gain is in the operands,
// not the count. Eight-row steps (h' = (h + v1)·r^32 + ... + v8·r^4,
// 0.264 instructions a byte) ran slower: with one set of accumulators
// each takes a chain of 24 dependent multiplies, and with two the key
// no longer fits the registers (4 KiB 16.8 GB/s against 19.7); they were
// not kept.
//
// Each step prefetches, as lanesIFMA's do, as many bytes of the stream at
// pf as it absorbs (128 a row), in order, into all cache levels
// (PREFETCHT0; PREFETCHT1 measured the same).
var (
	rSBase, rSQBase = reg.R10, reg.R13 // the pair's block 0 in p and q
	rSPairs, rSRows = reg.R9, reg.RAX  // pairs left; rows of a block
	zKS             = [2][5]reg.VecPhysical{
		{reg.Z15, reg.Z16, reg.Z17, reg.Z18, reg.Z19}, // r^16
		{reg.Z20, reg.Z21, reg.Z22, reg.Z23, reg.Z24}, // r^12
	}
	zF = [5]reg.VecPhysical{reg.Z27, reg.Z28, reg.Z29, reg.Z30, reg.Z31} // F
)

// keyS44 is the key operand of word w of r^(4e), e = 1..4: registers for
// r^16 and r^12, broadcast quadwords of the key for r^8 and r^4.
func (g *gen) keyS44(e, w int) operand.Op {
	if e >= 3 {
		return zKS[4-e][w]
	}
	return mem(rKey, 8*(key44B+5*(e-1)+w))
}

// maddS44 adds x (limb i of a chunk-vector) times r^(4e) to the
// accumulators, e = 1..4, or times the last step's factor F (e = 0, its
// registers).
func (g *gen) maddS44(x reg.VecPhysical, i, e int) {
	c := g.c
	for k := 0; k < 3; k++ {
		if e == 0 {
			c.VPMADD52LUQ(zF[words44[k][i]], x, zDLo[k])
			c.VPMADD52HUQ(zF[words44[k][i]], x, zDHi[k])
			continue
		}
		switch w := g.keyS44(e, words44[k][i]); w.(type) {
		case operand.Mem:
			c.VPMADD52LUQ_BCST(w, x, zDLo[k])
			c.VPMADD52HUQ_BCST(w, x, zDHi[k])
		default:
			c.VPMADD52LUQ(w, x, zDLo[k])
			c.VPMADD52HUQ(w, x, zDHi[k])
		}
	}
}

// rowS44 loads row t of the pair's two blocks (and with copying stores
// them to q), prefetches its 128 bytes of the stream, and calls use with
// each limb of chunk-vector t in zL, as split44 does.
func (g *gen) rowS44(t int, use func(i int)) {
	c := g.c
	c.VMOVDQU64(mem(rP, 64*t), zA)
	c.VMOVDQU64(operand.Mem{Base: rP, Index: rS, Scale: 1, Disp: 64 * t}, zB)
	if g.copying {
		c.VMOVDQU64(zA, mem(rCq, 64*t))
		c.VMOVDQU64(zB, operand.Mem{Base: rCq, Index: rS, Scale: 1, Disp: 64 * t})
	}
	c.PREFETCHT0(mem(rPf44, 128*t))
	c.PREFETCHT0(mem(rPf44, 128*t+64))
	c.VPUNPCKHQDQ(zB, zA, zHi) // hi words: lane 2s+b chunk s of the row of block b
	c.VPUNPCKLQDQ(zB, zA, zLo) // lo words
	c.VPANDQ(zM44, zLo, zL)
	use(0)
	c.VPSRLQ(operand.U8(44), zLo, zL)
	c.VPSLLQ(operand.U8(20), zHi, zT)
	c.VPTERNLOGD(operand.U8(0xa8), zM44, zT, zL) // (zL | zT) & M44
	use(1)
	c.VPSRLQ(operand.U8(24), zHi, zL) // without the pad bit (stepS44)
	use(2)
}

// stepS44 emits a step over the next R rows of the pair. An ordinary
// step (R = 4) takes row t times r^(4(4-t)). The last (last, R = 1..4)
// takes the bracket, row t times r^(4(R-1-t)) (row R-1 added, times 1),
// carries it and multiplies it by F, lane 2s+b r^(4-s), and carries again.
// Each starts its accumulators from its pad bits' part and takes the
// products of rows 1..R-1 first, then h + row 0; then it moves the
// pointers on.
func (g *gen) stepS44(rows int, last bool) {
	c := g.c
	pow := func(t int) int {
		if last {
			return rows - 1 - t
		}
		return 4 - t
	}
	v := 0
	if last {
		v = rows
	}
	for k := 0; k < 3; k++ {
		c.VMOVDQU64(mem(rKey, 8*(key44K+24*v+8*k)), zDLo[k])
		c.VPXORQ(zDHi[k], zDHi[k], zDHi[k])
	}
	for t := rows - 1; t >= 1; t-- {
		if pow(t) == 0 {
			g.rowS44(t, func(i int) { c.VPADDQ(zL, zDLo[i], zDLo[i]) })
			continue
		}
		g.rowS44(t, func(i int) { g.maddS44(zL, i, pow(t)) })
	}
	g.rowS44(0, func(i int) { c.VPADDQ(zL, zH[i], zH[i]) })
	for i := 0; i < 3; i++ {
		if pow(0) == 0 {
			c.VPADDQ(zH[i], zDLo[i], zDLo[i])
			continue
		}
		g.maddS44(zH[i], i, pow(0))
	}
	g.combineS44()
	if last {
		c.Comment("Times F: stream s times r^(4-s).")
		for k := 0; k < 3; k++ {
			c.VPXORQ(zDLo[k], zDLo[k], zDLo[k])
			c.VPXORQ(zDHi[k], zDHi[k], zDHi[k])
		}
		for i := 0; i < 3; i++ {
			g.maddS44(zH[i], i, 0)
		}
		g.combineS44()
	}
	c.ADDQ(operand.U32(64*rows), rP)
	if g.copying {
		c.ADDQ(operand.U32(64*rows), rCq)
	}
	c.ADDQ(operand.U32(128*rows), rPf44)
}

// combineS44 is combine44 without its last carry, d0→d1: it leaves limb
// 0 below 2^44 + 5·2^22 (d2 below 2^64 carries under 2^22 from bit 42),
// limb 1 below 2^44 and limb 2 below 2^42, so that h + row 0 has limbs
// below 2^46, inside the multiplier's 52 bits. sumS44 carries fully.
func (g *gen) combineS44() {
	c := g.c
	g.joinHi44()
	// The carries d0→d1, d1→d2, d2→d0 (times 5), each masked limb
	// written to h (no moves).
	c.VPSRLQ(operand.U8(44), zDLo[0], zT)
	c.VPANDQ(zM44, zDLo[0], zH[0])
	c.VPADDQ(zT, zDLo[1], zDLo[1])
	c.VPSRLQ(operand.U8(44), zDLo[1], zT)
	c.VPANDQ(zM44, zDLo[1], zH[1])
	c.VPADDQ(zT, zDLo[2], zDLo[2])
	c.VPSRLQ(operand.U8(42), zDLo[2], zT)
	c.VPANDQ(zM42, zDLo[2], zH[2])
	c.VPSLLQ(operand.U8(2), zT, zA)
	c.VPADDQ(zA, zT, zT)
	c.VPADDQ(zT, zH[0], zH[0])
}

// sumS44 sums the four streams of each block of the pair into lanes 0
// and 1, carries them, and stores them to h's words of the pair.
func (g *gen) sumS44() {
	c := g.c
	c.Comment("Sum the four streams of each block (lanes b, 2+b, 4+b, 6+b), carry.")
	for k := 0; k < 3; k++ {
		c.VSHUFI64X2(operand.U8(0x4e), zH[k], zH[k], zT) // units 2, 3, 0, 1
		c.VPADDQ(zT, zH[k], zDLo[k])
		c.VSHUFI64X2(operand.U8(0xb1), zDLo[k], zDLo[k], zT) // units 1, 0, 3, 2
		c.VPADDQ(zT, zDLo[k], zDLo[k])
	}
	g.carry44(0, 1, 44, zM44, false)
	g.carry44(1, 2, 44, zM44, false)
	g.carry44(2, 0, 42, zM42, true)
	g.carry44(0, 1, 44, zM44, false)
	for k := 0; k < 3; k++ {
		c.VMOVDQU(xmm(zDLo[k]), mem(rH, 64*k))
	}
}

func (g *gen) lanesIFMAS(name string, consts operand.Mem, cp bool) {
	c := g.c
	c.Function(name)
	c.Attributes(attr.NOSPLIT)
	c.Signature(lanesIFMASSig(cp))
	if cp {
		c.Load(c.Param("q"), rSQBase)
	}
	c.Load(c.Param("pf"), rPf44)
	c.Load(c.Param("h"), rH)
	c.Load(c.Param("p").Base(), rSBase)
	c.Load(c.Param("stride"), rS)
	c.Load(c.Param("chunks"), rSRows)
	c.Load(c.Param("key"), rKey)
	c.SHRQ(operand.U8(2), rSRows)
	c.JZ(operand.LabelRef("doneS"))
	c.VPBROADCASTQ(consts, zM44)
	c.VPBROADCASTQ(consts.Offset(8), zM42)
	c.Comment("The key words of r^16 and r^12, broadcast, and of F.")
	for j, pw := range []int{3, 2} {
		for w := 0; w < 5; w++ {
			c.VPBROADCASTQ(mem(rKey, 8*(key44B+5*pw+w)), zKS[j][w])
		}
	}
	for w := 0; w < 5; w++ {
		c.VMOVDQU64(mem(rKey, 8*(key44F+8*w)), zF[w])
	}
	c.MOVQ(operand.U32(lanes44/2), rSPairs)

	c.Label("pairS")
	c.Comment("A pair: blocks b = 0, 1 at p + b*stride; h seeds stream 0.")
	c.MOVQ(rSBase, rP)
	if cp {
		c.MOVQ(rSQBase, rCq)
	}
	c.MOVQ(rSRows, rN)
	for k := 0; k < 3; k++ {
		c.VMOVDQU(mem(rH, 64*k), xmm(zH[k]))
	}
	c.CMPQ(rN, operand.U32(5))
	c.JB(operand.LabelRef("lastS"))
	c.Label("quadS")
	g.copying = cp
	g.stepS44(4, false)
	c.SUBQ(operand.U32(4), rN)
	c.CMPQ(rN, operand.U32(5))
	c.JAE(operand.LabelRef("quadS"))

	c.Label("lastS")
	c.Comment("The last 1..4 rows, then stream s times r^(4-s).")
	c.CMPQ(rN, operand.U32(2))
	c.JB(operand.LabelRef("last1S"))
	c.JZ(operand.LabelRef("last2S"))
	c.CMPQ(rN, operand.U32(3))
	c.JZ(operand.LabelRef("last3S"))
	for rows := 4; rows >= 1; rows-- {
		if rows < 4 {
			c.Label(fmt.Sprintf("last%dS", rows))
		}
		g.stepS44(rows, true)
		if rows > 1 {
			c.JMP(operand.LabelRef("sumS"))
		}
	}
	g.copying = false

	c.Label("sumS")
	g.sumS44()
	c.ADDQ(operand.U32(16), rH)
	c.LEAQ(operand.Mem{Base: rSBase, Index: rS, Scale: 2}, rSBase)
	if cp {
		c.LEAQ(operand.Mem{Base: rSQBase, Index: rS, Scale: 2}, rSQBase)
	}
	c.DECQ(rSPairs)
	c.JNZ(operand.LabelRef("pairS"))
	c.VZEROUPPER()

	c.Label("doneS")
	c.RET()
}
