package main

import (
	"github.com/mmcloughlin/avo/ir"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
)

// scalarLanes is the number of blocks the hybrid kernel evaluates in
// general registers beside the four vector lanes.
const scalarLanes = 2

// hybridWords is the size of the hybrid kernel's h: the vector lanes' 20
// words, then h0, h1, h2 of each scalar lane.
const hybridWords = limbs*lanes + 3*scalarLanes

// record returns the instructions emit adds (scaffold.Record), for
// scaffold.Interleave.
func (g *gen) record(emit func()) []*ir.Instruction {
	ins, err := scaffold.Record(&g.c, emit)
	if err != nil {
		g.fail(err)
	}
	return ins
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
