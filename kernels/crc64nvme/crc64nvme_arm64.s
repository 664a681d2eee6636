//go:build !purego

#include "textflag.h"

// CRC-64/NVME by carry-less folding with PMULL/PMULL2 (64x64 -> 128), the
// assembly twin of crcmath.FoldUpdate and crcmath.Reduce. The CRC is
// reflected: a 16-byte lane is loaded as is, its low quadword is Hi (the 64
// coefficients of higher degree) and its high quadword Lo. The constants are
// read through a pointer to a crcmath.FoldTable:
//
//	offset 16·i   Fold[i] = {C(128i+64), C(128i)}  (lane D[0] multiplies Hi, D[1] Lo)
//	offset 1040   Final[0] = C(128)
//	offset 1056   Mu, then Poly at 1064
#define FOLD_FINAL 1040
#define FOLD_MU 1056
#define FOLD_POLY 1064

// FOLD advances accumulator acc by the distance of the constants k and adds
// the lane d: acc = Hi·k[0] ⊕ Lo·k[1] ⊕ d (crcmath.Fold). PMULL multiplies
// the low quadwords, PMULL2 the high ones; tmp is clobbered.
#define FOLD(acc, k, d, tmp) \
	FOLD_MUL(acc, k, tmp); \
	FOLD_ADD(acc, d, tmp)

// FOLD_MUL and FOLD_ADD are the two halves of FOLD. The main loops issue the
// multiplies of all accumulators before the XORs that consume them (and
// split the XORs in two rounds), so that an in-order core (Cortex-A53) does
// not stall on each product.
#define FOLD_MUL(acc, k, tmp) \
	VPMULL2	k.D2, acc.D2, tmp.Q1; \
	VPMULL	k.D1, acc.D1, acc.Q1

#define FOLD_ADD(acc, d, tmp) \
	VEOR	d.B16, tmp.B16, tmp.B16; \
	VEOR	tmp.B16, acc.B16, acc.B16

// REDUCE turns the last lane v into the finalised CRC in out: crcmath.Reduce
// with w = 64, then xorout (all ones). It stays in the vector registers up to
// the final move, as transfers to and from the general registers cost 5 to
// 8 cycles each. fin = {Final[0], 0}, mu = {Mu, 0}, pl = {Poly, 0}, z = 0;
// t, x and c are clobbered.
//
//	t = Hi·C(128) ⊕ {Lo, 0}      Lo·x^64 lands in the low quadword: t.Q0 = q =
//	                             T div x^64 (reflected), t.Q1 = T mod x^64
//	c = (q·Mu) << 1 ⊕ t          c.Q0 = q ⊕ floor(q·mu / x^64); the shift by one
//	                             place is that of the reflected product
//	x = c.Q0·Poly                q·p
//	out = ^(t.Q1 ⊕ x.Q1<<1 ⊕ x.Q0>>63)   T mod x^64 ⊕ q·p mod x^64, xorout
//
// VEXT $8, m, n, d sets d = {n.Q1, m.Q0}.
#define REDUCE(v, fin, mu, pl, z, t, x, c, out) \
	VPMULL	fin.D1, v.D1, t.Q1; \
	VEXT	$8, z.B16, v.B16, x.B16; \
	VEOR	x.B16, t.B16, t.B16; \
	VPMULL	mu.D1, t.D1, c.Q1; \
	VSHL	$1, c.D2, c.D2; \
	VEOR	t.B16, c.B16, c.B16; \
	VPMULL	pl.D1, c.D1, x.Q1; \
	VSHL	$1, x.D2, c.D2; \
	VUSHR	$63, x.D2, x.D2; \
	VEXT	$8, x.B16, z.B16, x.B16; \
	VEOR	c.B16, t.B16, t.B16; \
	VEOR	x.B16, t.B16, t.B16; \
	VMOV	t.D[1], out; \
	MVN	out, out

// LOADRED loads the constants of REDUCE from the FoldTable at tab.
#define LOADRED(tab, fin, mu, pl, z) \
	FMOVD	FOLD_FINAL(tab), fin; \
	FMOVD	FOLD_MU(tab), mu; \
	FMOVD	FOLD_POLY(tab), pl; \
	VEOR	z.B16, z.B16, z.B16

// func foldUpdatePMULL(crc uint64, p []byte, t *crcmath.FoldTable) uint64
//
// Eight accumulators (128 bytes per iteration) while 128 bytes remain, then
// collapsed into one with Fold[1], Fold[2], Fold[4]; inputs shorter than 128 bytes
// start with one accumulator. The remaining lanes fold one at a time.
TEXT ·foldUpdatePMULL(SB), NOSPLIT, $0-48
	MOVD	crc+0(FP), R0
	MOVD	p_base+8(FP), R1
	MOVD	p_len+16(FP), R2
	MOVD	t+32(FP), R3
	MVN	R0, R0 // the register: crc ⊕ xorout
	FMOVD	R0, F30 // {register, 0}: XORed into the Hi half of the first lane
	ADD	$16, R3, R4
	VLD1	(R4), [V24.D2, V25.D2, V26.D2, V27.D2] // Fold[1..4]; [3] unused

	CMP	$128, R2
	BLT	one
	VLD1.P	64(R1), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	64(R1), [V4.B16, V5.B16, V6.B16, V7.B16]
	VEOR	V30.B16, V0.B16, V0.B16
	SUB	$128, R2, R2
	CMP	$128, R2
	BLT	collapse8
	ADD	$128, R3, R4
	VLD1	(R4), [V30.D2] // Fold[8]

loop8:
	VLD1.P	64(R1), [V16.B16, V17.B16, V18.B16, V19.B16]
	VLD1.P	64(R1), [V20.B16, V21.B16, V22.B16, V23.B16]
	FOLD_MUL(V0, V30, V8)
	FOLD_MUL(V1, V30, V9)
	FOLD_MUL(V2, V30, V10)
	FOLD_MUL(V3, V30, V11)
	FOLD_MUL(V4, V30, V12)
	FOLD_MUL(V5, V30, V13)
	FOLD_MUL(V6, V30, V14)
	FOLD_MUL(V7, V30, V15)
	// The XORs in two rounds, data into products first, so that no XOR
	// waits on the one just before it.
	VEOR	V16.B16, V8.B16, V8.B16
	VEOR	V17.B16, V9.B16, V9.B16
	VEOR	V18.B16, V10.B16, V10.B16
	VEOR	V19.B16, V11.B16, V11.B16
	VEOR	V20.B16, V12.B16, V12.B16
	VEOR	V21.B16, V13.B16, V13.B16
	VEOR	V22.B16, V14.B16, V14.B16
	VEOR	V23.B16, V15.B16, V15.B16
	VEOR	V8.B16, V0.B16, V0.B16
	VEOR	V9.B16, V1.B16, V1.B16
	VEOR	V10.B16, V2.B16, V2.B16
	VEOR	V11.B16, V3.B16, V3.B16
	VEOR	V12.B16, V4.B16, V4.B16
	VEOR	V13.B16, V5.B16, V5.B16
	VEOR	V14.B16, V6.B16, V6.B16
	VEOR	V15.B16, V7.B16, V7.B16
	SUB	$128, R2, R2
	CMP	$128, R2
	BGE	loop8

collapse8:
	// acc7 ⊕ Σ acc_i·Fold[7-i] (crcmath.FoldUpdate), summed as a tree,
	// which the linearity of the fold allows: pairs first, then the halves.
	FOLD(V0, V24, V1, V8) // acc0 at distance 1 from acc1
	FOLD(V2, V24, V3, V9)
	FOLD(V4, V24, V5, V10)
	FOLD(V6, V24, V7, V11)
	FOLD(V0, V25, V2, V8) // pairs at distance 2
	FOLD(V4, V25, V6, V10)
	FOLD(V0, V27, V4, V8) // halves at distance 4
	B	single

one:
	VLD1.P	16(R1), [V0.B16]
	VEOR	V30.B16, V0.B16, V0.B16
	SUB	$16, R2, R2

single:
	CBZ	R2, reduce
loop1:
	VLD1.P	16(R1), [V16.B16]
	FOLD(V0, V24, V16, V8)
	SUBS	$16, R2, R2
	BNE	loop1

reduce:
	LOADRED(R3, F20, F21, F22, V23)
	REDUCE(V0, V20, V21, V22, V23, V16, V17, V18, R7)
	MOVD	R7, ret+40(FP)
	RET

// func foldBlocksPMULL(dst []uint64, p []byte, blockLen, stride int, t *crcmath.FoldTable)
//
// The finalised CRCs (from a start of 0) of the first 16·lanes bytes
// (lanes = blockLen/16) of the blocks p[i·stride:], into dst[i], four
// blocks at a time.
// Each block has two accumulators one lane apart, so eight independent
// folds are in flight; they collapse with Fold[1], an odd last lane folds in
// with Fold[1], and the four blocks are reduced one after the other.
TEXT ·foldBlocksPMULL(SB), NOSPLIT, $0-72
	MOVD	dst_base+0(FP), R0
	MOVD	dst_len+8(FP), R14
	MOVD	p_base+24(FP), R7
	MOVD	blockLen+48(FP), R15
	MOVD	stride+56(FP), R3
	MOVD	t+64(FP), R8
	LSR	$4, R15, R15 // lanes

	// One group of four blocks a pass, from R7; R0, R3, R7, R8, R14 and
	// R15 hold across passes.
bgroup:
	MOVD	R7, R1
	MOVD	R15, R2
	ADD	R3, R1, R4
	ADD	R3, R4, R5
	ADD	R3, R5, R6
	ADD	$16, R8, R9
	VLD1	(R9), [V24.D2, V25.D2] // Fold[1], Fold[2]
	MOVD	$-1, R9
	FMOVD	R9, F30 // {register of CRC 0 = all ones, 0}

	VLD1.P	32(R1), [V0.B16, V1.B16]
	VLD1.P	32(R4), [V2.B16, V3.B16]
	VLD1.P	32(R5), [V4.B16, V5.B16]
	VLD1.P	32(R6), [V6.B16, V7.B16]
	VEOR	V30.B16, V0.B16, V0.B16
	VEOR	V30.B16, V2.B16, V2.B16
	VEOR	V30.B16, V4.B16, V4.B16
	VEOR	V30.B16, V6.B16, V6.B16
	SUBS	$4, R2, R2 // R2 runs two lanes below the lanes left
	BLT	bcollapse

bloop:
	VLD1.P	32(R1), [V16.B16, V17.B16]
	VLD1.P	32(R4), [V18.B16, V19.B16]
	VLD1.P	32(R5), [V20.B16, V21.B16]
	VLD1.P	32(R6), [V22.B16, V23.B16]
	FOLD_MUL(V0, V25, V8)
	FOLD_MUL(V1, V25, V9)
	FOLD_MUL(V2, V25, V10)
	FOLD_MUL(V3, V25, V11)
	FOLD_MUL(V4, V25, V12)
	FOLD_MUL(V5, V25, V13)
	FOLD_MUL(V6, V25, V14)
	FOLD_MUL(V7, V25, V15)
	// The XORs in two rounds, as in loop8.
	VEOR	V16.B16, V8.B16, V8.B16
	VEOR	V17.B16, V9.B16, V9.B16
	VEOR	V18.B16, V10.B16, V10.B16
	VEOR	V19.B16, V11.B16, V11.B16
	VEOR	V20.B16, V12.B16, V12.B16
	VEOR	V21.B16, V13.B16, V13.B16
	VEOR	V22.B16, V14.B16, V14.B16
	VEOR	V23.B16, V15.B16, V15.B16
	VEOR	V8.B16, V0.B16, V0.B16
	VEOR	V9.B16, V1.B16, V1.B16
	VEOR	V10.B16, V2.B16, V2.B16
	VEOR	V11.B16, V3.B16, V3.B16
	VEOR	V12.B16, V4.B16, V4.B16
	VEOR	V13.B16, V5.B16, V5.B16
	VEOR	V14.B16, V6.B16, V6.B16
	VEOR	V15.B16, V7.B16, V7.B16
	SUBS	$2, R2, R2
	BGE	bloop

bcollapse:
	FOLD(V0, V24, V1, V8)
	FOLD(V2, V24, V3, V9)
	FOLD(V4, V24, V5, V10)
	FOLD(V6, V24, V7, V11)
	TBZ	$0, R2, breduce // an odd lane count leaves one lane
	VLD1	(R1), [V16.B16]
	VLD1	(R4), [V18.B16]
	VLD1	(R5), [V20.B16]
	VLD1	(R6), [V22.B16]
	FOLD(V0, V24, V16, V8)
	FOLD(V2, V24, V18, V9)
	FOLD(V4, V24, V20, V10)
	FOLD(V6, V24, V22, V11)

breduce:
	LOADRED(R8, F26, F27, F28, V29)
	REDUCE(V0, V26, V27, V28, V29, V16, V17, V1, R10)
	REDUCE(V2, V26, V27, V28, V29, V18, V19, V3, R11)
	REDUCE(V4, V26, V27, V28, V29, V20, V21, V5, R12)
	REDUCE(V6, V26, V27, V28, V29, V22, V23, V7, R13)
	MOVD	R10, 0(R0)
	MOVD	R11, 8(R0)
	MOVD	R12, 16(R0)
	MOVD	R13, 24(R0)
	ADD	$32, R0
	ADD	R3<<2, R7, R7
	SUBS	$4, R14
	BNE	bgroup
	RET
