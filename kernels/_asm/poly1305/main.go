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
// The output depends only on the flags, so regenerating is reproducible.
//
// The generator's files, by kernel family: main.go (this driver, the gen
// type and the helpers every family uses), avx2.go (the radix-2^26 lanes:
// their key layout, registers, split and carry chain, and lanesKernel,
// which emits lanesAVX2, lanesAVX2R8 and the hybrid and copying forms),
// avx2_hybrid.go (the hybrid kernels' scalar lanes), avx2_copy.go
// (lanesAVX2R8Copy: its moves, prefetches, associated data and vecStepKS),
// ifma.go (lanesIFMA, radix 2^44), ifma_stream.go (lanesIFMAS and
// lanesIFMASCopy) and stubs.go (the Go declarations, with their doc
// comments).
package main

import (
	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/difctl/difctl/kernels/_asm/internal/ifma"
	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
)

func main() { scaffold.MainAsm("poly1305", generate) }

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
	c.AddDatum(0, operand.U64(ifma.Mask44))
	c.AddDatum(8, operand.U64(ifma.Mask42))
	c.AddDatum(16, operand.U64(padBit44))
	g := &gen{c: c, mask: consts, pad: consts.Offset(32)}
	g.a = g.newIFMA()
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

func mem(base reg.Register, disp int) operand.Mem { return operand.Mem{Base: base, Disp: disp} }

type gen struct {
	c         *build.Context
	mask, pad operand.Mem
	powers    int         // of r in the key of the kernel being built: 4 or 8
	cp        bool        // the kernel being built copies p to q (lanesAVX2Copy)
	ks        bool        // its steps hold the key vectors in a register (vecStepKS)
	pf        bool        // the kernel being built prefetches (lanesIFMA)
	copying   bool        // the steps being built store their rows to q (lanesIFMASCopy)
	a         *ifma.Arith // the IFMA kernels' arithmetic
	err       error       // the first error outside c's own
}

func (g *gen) fail(err error) {
	if g.err == nil {
		g.err = err
	}
}

func xmm(y reg.VecPhysical) reg.VecPhysical { return y.AsX().(reg.VecPhysical) }
