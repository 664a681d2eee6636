// Command poly1305neon generates the arm64 NEON lane kernel of
// kernels/poly1305, lanesNEON: the Poly1305 accumulators of two blocks
// evaluated side by side under one shared r, one block per 64-bit lane of
// the vector registers, radix 2^26 as in the amd64 kernels (see
// kernels/_asm/poly1305 and kernels/poly1305/poly1305_lanes.go for the
// math and the bounds).
//
// Run it from kernels/_asm (go generate in kernels/poly1305 does):
//
//	go run ./poly1305neon -out ../poly1305/zblocks_arm64.s
//
// # Why a generator
//
// The kernel's multiplies are UMULL and UMLAL (by element): 32x32->64-bit
// unsigned multiply, and multiply-accumulate, of the two low 32-bit
// elements of a vector by one 32-bit element of another. Go's arm64
// assembler has neither (its vector instruction list, in
// cmd/internal/obj/arm64, has VPMULL but no VUMULL or VUMLAL), nor XTN. So
// this program emits them as WORD directives, each encoded by encodeMulElem
// from the field layout of the Arm Architecture Reference Manual (A64,
// "Advanced SIMD vector x indexed element"), with the instruction it
// stands for in a comment beside it. Everything else is written in Go's
// own syntax, and the narrowing XTN is done with UZP1, which Go has. The
// encodings are checked by TestEncodings (against llvm-mc, when installed)
// and the kernel's results by the kernels/poly1305 tests under
// qemu-aarch64.
//
// # The kernel
//
// Registers: h limb k of both blocks in V(k) as two 64-bit lanes (block 0
// in lane 0), k = 0..4; the products' sums d_k in V(5+k); narrowed
// operands (the two low words of each lane, UMULL's 2S input) in V10..V14;
// the chunks and their limbs in V15..V19 (V17, V18 also the carry chain's
// temporaries); the key words in V20..V28 (four 32-bit words each,
// neonKey); the limb mask 2^26-1 and the pad bit 2^24 in both lanes of V29
// and V30.
//
// Four chunks per step, as the amd64 kernels' quad step:
//
//	h' = (h + m1)·r^4 + m2·r^3 + m3·r^2 + m4·r
//
// so the m2..m4 products do not wait for h and one carry chain serves four
// chunks (on an in-order core, Cortex-A53, the carry chain's latency is
// what a step costs beyond its multiplies); then at most one step of two,
// (h + m1)·r^2 + m2·r, and one of one, (h + m)·r. A product of a limb of h
// + m1 (< 2^27) and a key word (< 5·2^26 < 2^29), summed twenty times per
// limb, stays below 2^61: no lane overflows. The carry chain is the amd64
// kernels' (d0→d1, d3→d4; d1→d2, d4→d0 times 5; d2→d3, d0→d1; d3→d4), so
// its output bounds (every limb below 2^26 + 2^12) are those
// poly1305_lanes.go proves.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("poly1305neon: ")
	fs := flag.NewFlagSet("poly1305neon", flag.ExitOnError)
	out := fs.String("out", "", "assembly output file")
	fs.Parse(os.Args[1:])
	if *out == "" {
		log.Fatal("usage: poly1305neon -out file.s")
	}
	if err := os.WriteFile(*out, generate(*out), 0o644); err != nil {
		log.Fatal(err)
	}
}

// Limbs, the mask and the pad bit: radix 2^26, five limbs, the 2^128 pad
// bit of a chunk in limb 4 (128 = 4·26 + 24).
const (
	limbs    = 5
	limbBits = 26
	limbMask = 1<<limbBits - 1
	padBit   = 1 << (128 - 4*limbBits)
)

// Key layout (poly1305.neonKey, 36 32-bit words in V20..V28): for power j
// (0: r, 1: r^2, 2: r^3, 3: r^4) at word 9j: R(j,0..4), the limbs of
// r^(j+1), then S(j,1..4) = 5·R(j,1..4).
//
// keyWord is the word of the key table limb i of h multiplies for d_k
// under r^(j+1): R(j, k-i) if i <= k, else S(j, k-i+5), because h_i·r_m
// with i+m >= 5 carries weight 2^(26(i+m)) = 2^130·2^(26(i+m-5)) ≡
// 5·2^(26(i+m-5)) (mod 2^130-5).
func keyWord(j, i, k int) int {
	if i <= k {
		return 9*j + (k - i)
	}
	return 9*j + 5 + (k - i + 5) - 1
}

// Register numbers.
const (
	vH    = 0  // V0..V4: h
	vD    = 5  // V5..V9: d
	vX    = 10 // V10..V14: narrowed operands
	vLo   = 15 // low words of the two blocks' chunk
	vHi   = 16 // high words
	vA    = 17 // block 0's chunk; a limb being split off
	vB    = 18 // block 1's chunk
	vT    = 19 // temporary of the split
	vKey  = 20 // V20..V28
	vMask = 29
	vPad  = 30
	vC    = vA // carry temporaries (the split's registers are free then)
	vC5   = vB
)

// encodeMulElem returns the A64 encoding of UMULL (acc false) or UMLAL (acc
// true), by element, 32-bit elements, low halves (Q = 0):
//
//	UMULL Vd.2D, Vn.2S, Vm.S[idx]   d.D[i] = n.S[i] · m.S[idx]
//	UMLAL Vd.2D, Vn.2S, Vm.S[idx]   d.D[i] += n.S[i] · m.S[idx]
//
// "Advanced SIMD vector x indexed element": bit 31 0, 30 Q, 29 U (1:
// unsigned), 28..24 01111, 23..22 size (10: 32-bit elements), 21 L, 20 M,
// 19..16 Rm, 15..12 opcode (1010 UMULL, 0010 UMLAL), 11 H, 10 0, 9..5 Rn,
// 4..0 Rd. With size 10 the element index is H:L and the register Vm is
// M:Rm, any of V0..V31.
func encodeMulElem(acc bool, d, n, m, idx int) uint32 {
	if d|n|m > 31 || d < 0 || n < 0 || m < 0 || idx < 0 || idx > 3 {
		panic(fmt.Sprintf("poly1305neon: bad operands %d %d %d [%d]", d, n, m, idx))
	}
	opcode := uint32(0b1010)
	if acc {
		opcode = 0b0010
	}
	const (
		q    = 0
		u    = 1
		size = 0b10
	)
	w := uint32(q)<<30 | u<<29 | 0b01111<<24 | size<<22
	w |= uint32(idx&1)<<21 | uint32(m>>4)<<20 | uint32(m&15)<<16
	w |= opcode<<12 | uint32(idx>>1)<<11 | uint32(n)<<5 | uint32(d)
	return w
}

type gen struct{ b bytes.Buffer }

func (g *gen) ins(format string, a ...any) { fmt.Fprintf(&g.b, "\t"+format+"\n", a...) }
func (g *gen) label(l string)              { fmt.Fprintf(&g.b, "%s:\n", l) }
func (g *gen) comment(lines ...string) {
	for _, l := range lines {
		fmt.Fprintf(&g.b, "\t// %s\n", l)
	}
}

// mul emits d_k (+)= x_i · key word w, as WORD.
func (g *gen) mul(acc bool, k, i, w int) {
	op := "UMULL"
	if acc {
		op = "UMLAL"
	}
	g.ins("WORD $0x%08x // %s V%d.2D, V%d.2S, V%d.S[%d]", encodeMulElem(acc, vD+k, vX+i, vKey+w/4, w%4), op, vD+k, vX+i, vKey+w/4, w%4)
}

// mulAdd adds x·r^(j+1) to d (x narrowed in V10..V14); first sets d. The
// products go limb of x by limb of x, so that consecutive multiplies feed
// five different sums: an in-order core (Cortex-A53, A55) then issues one
// per cycle instead of waiting on each accumulation.
func (g *gen) mulAdd(j int, first bool) {
	for i := 0; i < limbs; i++ {
		for k := 0; k < limbs; k++ {
			g.mul(!(first && i == 0), k, i, keyWord(j, i, k))
		}
	}
}

// narrow puts the low 32 bits of both lanes of V(src+i) in the two low
// words of V(vX+i): UZP1 of a register with itself keeps its even 32-bit
// elements, [s0, s2, s0, s2].
func (g *gen) narrow(src int) {
	for i := 0; i < limbs; i++ {
		g.ins("VUZP1 V%d.S4, V%d.S4, V%d.S4", src+i, src+i, vX+i)
	}
}

// split loads the next chunk of both blocks (post-incrementing R1 and R2)
// and calls use with each limb in V17 (2D), in order 0..4:
//
//	m0 = lo & M   m1 = lo>>26 & M   m2 = (lo>>52 | hi<<12) & M
//	m3 = hi>>14 & M   m4 = hi>>40 | 2^24
func (g *gen) split(use func(i int)) {
	g.ins("VLD1.P 16(R1), [V%d.D2]", vA)
	g.ins("VLD1.P 16(R2), [V%d.D2]", vB)
	g.ins("VZIP1 V%d.D2, V%d.D2, V%d.D2", vB, vA, vLo) // lo0, lo1
	g.ins("VZIP2 V%d.D2, V%d.D2, V%d.D2", vB, vA, vHi) // hi0, hi1
	g.ins("VAND V%d.B16, V%d.B16, V%d.B16", vMask, vLo, vA)
	use(0)
	g.ins("VUSHR $26, V%d.D2, V%d.D2", vLo, vA)
	g.ins("VAND V%d.B16, V%d.B16, V%d.B16", vMask, vA, vA)
	use(1)
	g.ins("VUSHR $52, V%d.D2, V%d.D2", vLo, vA)
	g.ins("VSHL $12, V%d.D2, V%d.D2", vHi, vT)
	g.ins("VORR V%d.B16, V%d.B16, V%d.B16", vT, vA, vA)
	g.ins("VAND V%d.B16, V%d.B16, V%d.B16", vMask, vA, vA)
	use(2)
	g.ins("VUSHR $14, V%d.D2, V%d.D2", vHi, vA)
	g.ins("VAND V%d.B16, V%d.B16, V%d.B16", vMask, vA, vA)
	use(3)
	g.ins("VUSHR $40, V%d.D2, V%d.D2", vHi, vA)
	g.ins("VORR V%d.B16, V%d.B16, V%d.B16", vPad, vA, vA)
	use(4)
}

// carry is d_from → d_to: c = d_from >> 26, d_from &= M, d_to += c (times 5
// for d4 → d0, as c + 4c).
func (g *gen) carry(from, to int, times5 bool) {
	g.ins("VUSHR $26, V%d.D2, V%d.D2", vD+from, vC)
	g.ins("VAND V%d.B16, V%d.B16, V%d.B16", vMask, vD+from, vD+from)
	if times5 {
		g.ins("VSHL $2, V%d.D2, V%d.D2", vC, vC5)
		g.ins("VADD V%d.D2, V%d.D2, V%d.D2", vC5, vC, vC)
	}
	g.ins("VADD V%d.D2, V%d.D2, V%d.D2", vC, vD+to, vD+to)
}

// carryChain reduces d into h.
func (g *gen) carryChain() {
	g.carry(0, 1, false)
	g.carry(3, 4, false)
	g.carry(1, 2, false)
	g.carry(4, 0, true)
	g.carry(2, 3, false)
	g.carry(0, 1, false)
	g.carry(3, 4, false)
	for k := 0; k < limbs; k++ {
		g.ins("VORR V%d.B16, V%d.B16, V%d.B16", vD+k, vD+k, vH+k)
	}
}

func generate(out string) []byte {
	g := &gen{}
	fmt.Fprintf(&g.b, "// Code generated by command: go run ./poly1305neon -out %s. DO NOT EDIT.\n\n", out)
	g.b.WriteString("//go:build !purego\n\n#include \"textflag.h\"\n\n")
	g.b.WriteString(strings.TrimLeft(`
// func lanesNEON(h *[10]uint64, p []byte, stride int, chunks int, key *[18]uint64)
TEXT ·lanesNEON(SB), NOSPLIT, $0-56
`, "\n"))
	g.ins("MOVD h+0(FP), R0")
	g.ins("MOVD p_base+8(FP), R1")
	g.ins("MOVD stride+32(FP), R2")
	g.ins("MOVD chunks+40(FP), R3")
	g.ins("MOVD key+48(FP), R4")
	g.comment("Block 0 at R1, block 1 at R2 = p + stride.")
	g.ins("ADD R1, R2, R2")
	g.ins("VLD1 (R0), [V0.D2, V1.D2, V2.D2, V3.D2]")
	g.ins("ADD $64, R0, R5")
	g.ins("VLD1 (R5), [V4.D2]")
	g.ins("VLD1.P 64(R4), [V20.S4, V21.S4, V22.S4, V23.S4]")
	g.ins("VLD1.P 64(R4), [V24.S4, V25.S4, V26.S4, V27.S4]")
	g.ins("VLD1 (R4), [V28.S4]")
	g.ins("MOVD $%#x, R6", limbMask)
	g.ins("VDUP R6, V%d.D2", vMask)
	g.ins("MOVD $%#x, R6", padBit)
	g.ins("VDUP R6, V%d.D2", vPad)
	g.ins("CMP $4, R3")
	g.ins("BLT pair")

	g.label("quad")
	g.comment("Four chunks: h += m1; d = m2·r^3 + m3·r^2 + m4·r; d += (h + m1)·r^4;",
		"h = d, carried. The chunks in memory order: m1 into h, then each",
		"of m2..m4 narrowed into V10..V14 and multiplied.")
	g.split(func(i int) { g.ins("VADD V%d.D2, V%d.D2, V%d.D2", vA, vH+i, vH+i) })
	for c, j := range []int{2, 1, 0} {
		g.split(func(i int) { g.ins("VUZP1 V%d.S4, V%d.S4, V%d.S4", vA, vA, vX+i) })
		g.mulAdd(j, c == 0)
	}
	g.narrow(vH)
	g.mulAdd(3, false)
	g.carryChain()
	g.ins("SUB $4, R3, R3")
	g.ins("CMP $4, R3")
	g.ins("BGE quad")

	g.label("pair")
	g.ins("CMP $2, R3")
	g.ins("BLT single")
	g.comment("Two chunks: d = m2·r, then h += m1; d += (h + m1)·r^2; h = d, carried.",
		"m1 is the first chunk: split it into h, then m2 into V10..V14.")
	g.split(func(i int) { g.ins("VADD V%d.D2, V%d.D2, V%d.D2", vA, vH+i, vH+i) })
	g.split(func(i int) { g.ins("VUZP1 V%d.S4, V%d.S4, V%d.S4", vA, vA, vX+i) })
	g.mulAdd(0, true)
	g.narrow(vH)
	g.mulAdd(1, false)
	g.carryChain()
	g.ins("SUB $2, R3, R3")

	g.label("single")
	g.ins("CBZ R3, done")
	g.comment("One chunk left: h = (h + m)·r, carried.")
	g.split(func(i int) { g.ins("VADD V%d.D2, V%d.D2, V%d.D2", vA, vH+i, vH+i) })
	g.narrow(vH)
	g.mulAdd(0, true)
	g.carryChain()

	g.label("done")
	g.ins("VST1 [V0.D2, V1.D2, V2.D2, V3.D2], (R0)")
	g.ins("ADD $64, R0, R5")
	g.ins("VST1 [V4.D2], (R5)")
	g.ins("RET")
	return g.b.Bytes()
}
