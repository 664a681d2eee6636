package main

import (
	"go/types"

	"github.com/mmcloughlin/avo/gotypes"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
)

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
// register, h in memory), not the other kernels': on Zen 3 that form made
// BlocksADCopy faster, as llvm-mca's znver3 model of the main loop
// predicts; staggering the adds behind their multiplies, through the
// split's temporaries, gained nothing there.
//
// There is no hybrid form. lanesHybridR8 uses every general register: the
// two the copy needs for its pointers into p cost more than the scalar
// lanes gain, and there is none left for a prefetch pointer, which over a
// source in memory is what decides at 512-byte blocks. Every form tried
// measured slower than this kernel over a source in memory: the scalar
// lanes' h2 in the frame; the moves bundled where the scalar temporaries
// are free; one scalar lane (five blocks), which leaves registers for the
// pointers; and six-block kernels that prefetch without a pointer register
// (at a constant displacement from the copy's addresses, or for a fixed
// stride of 512 or 4096 bytes with every block address a displacement
// from one pointer, all groups in one call, the associated data in the
// kernel). The prefetch was not what they lacked: it is the moves
// themselves (24 loads and 24 stores per step of six blocks' 128 bytes,
// beside some 1,100 instructions) that cost what the scalar lanes gain,
// while the copy costs this kernel's four lanes little.
// docs/perf/poly1305-generator.md has the measurements of each.
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
// larger than the L3 cache ran well behind copy-then-BlocksAD at 512-byte
// blocks (docs/perf/poly1305-generator.md).
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

// absorbAD emits the copying kernel's first part: the adLen/16 chunks of
// associated data of each block, block j's at ad + j·adLen, absorbed into
// the zero accumulators before the blocks, as the eight-chunk kernel would
// absorb them (steps of eight, then at most one each of four, two and
// one). It saves the separate kernel call per group for the associated
// data, and the caller's clearing of h, which shows at 512-byte blocks
// with the source in the cache (docs/perf/poly1305-generator.md). The
// steps are those of the data, emitted with the block pointers rP, rP3 and
// the stride rS rebound to AX, BX and R14 (registers the copying kernel
// leaves free), the count in R15.
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
