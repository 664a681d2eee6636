package main

import (
	"fmt"
	"go/types"

	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/gotypes"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
)

// The radix-2^26 lane kernels: lanesAVX2, lanesAVX2R8, their hybrid forms
// (avx2_hybrid.go adds the scalar lanes) and lanesAVX2R8Copy (avx2_copy.go
// adds the copy).
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
// not the only cost: the carry chains cost enough that halving them pays
// (measured against a two-chunk step, see
// docs/perf/poly1305-generator.md). Two chunks left take one step (h +
// m1)·r^2 + m2·r, an odd last one h' = (h + m)·r.
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
// kernel reads exactly the chunks it is asked for and nothing else.

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
	limbBits = 26
	limbMask = 1<<limbBits - 1
	padBit   = 1 << (128 - 4*limbBits) // 2^128 in limb 4: bit 24
)

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
// multiplies after its own (mulAdd): with the add right behind its multiply
// the eight-chunk hybrid kernel measured slower than the four-chunk one
// under load, with the stagger faster (BenchmarkEightChunk in
// kernels/poly1305; docs/perf/poly1305-generator.md has the figures).
func (g *gen) lanesAVX2(name string, hybrid bool, pw int) {
	g.lanesKernel(name, hybrid, pw, false)
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
		// v is vector code (it does not touch the flags), s the scalar
		// lanes (their carries in the flags).
		scaffold.Interleave(g.c, v, s)
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
