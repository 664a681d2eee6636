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
// the low quadwords, PMULL2 the high ones; tmp is clobbered. Each product is
// followed at once by the EOR that consumes it, the pair some cores fuse.
#define FOLD(acc, k, d, tmp) \
	VPMULL2	k.D2, acc.D2, tmp.Q1; \
	VEOR	d.B16, tmp.B16, tmp.B16; \
	VPMULL	k.D1, acc.D1, acc.Q1; \
	VEOR	tmp.B16, acc.B16, acc.B16

// REDUCE turns the last lane v into the finalised CRC in out (crcmath.Reduce
// with w = 64, then xorout = all ones). fin = {Final[0], 0}, mp = {Mu, Poly};
// t and q are vector temporaries, r1 and r2 general ones.
//
//	T = Hi·C(128) ⊕ Lo·x^64      (Lo·x^64: Lo XORed into T's low quadword)
//	q = T.Q0                     (T div x^64, reflected)
//	q ^= (q·Mu).Q0 << 1          (floor(q·mu / x^64), one place up: reflected product)
//	out = T.Q1 ⊕ ((q·Poly) >> 63) (T mod x^64 ⊕ q·p mod x^64)
#define REDUCE(v, fin, mp, t, q, r1, r2, out) \
	VPMULL	fin.D1, v.D1, t.Q1; \
	VMOV	v.D[1], r1; \
	VMOV	t.D[0], r2; \
	VMOV	t.D[1], out; \
	EOR	r1, r2, r2; \
	VDUP	r2, q.D2; \
	VPMULL	mp.D1, q.D1, t.Q1; \
	VMOV	t.D[0], r1; \
	EOR	r1<<1, r2, r2; \
	VDUP	r2, q.D2; \
	VPMULL2	mp.D2, q.D2, t.Q1; \
	VMOV	t.D[0], r1; \
	VMOV	t.D[1], r2; \
	EOR	r1>>63, out, out; \
	EOR	r2<<1, out, out; \
	MVN	out, out

// func foldPMULL(crc uint64, p []byte, t *crcmath.FoldTable) uint64
//
// Eight accumulators (128 bytes per iteration) while 128 bytes remain, then
// collapsed into one with Fold[1], Fold[2], Fold[4]; inputs shorter than 128 bytes
// start with one accumulator. The remaining lanes fold one at a time.
TEXT ·foldPMULL(SB), NOSPLIT, $0-48
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
	FOLD(V0, V30, V16, V8)
	FOLD(V1, V30, V17, V9)
	FOLD(V2, V30, V18, V10)
	FOLD(V3, V30, V19, V11)
	FOLD(V4, V30, V20, V12)
	FOLD(V5, V30, V21, V13)
	FOLD(V6, V30, V22, V14)
	FOLD(V7, V30, V23, V15)
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
	FMOVD	FOLD_FINAL(R3), F20
	ADD	$FOLD_MU, R3, R4
	VLD1	(R4), [V21.D2]
	REDUCE(V0, V20, V21, V22, V23, R5, R6, R7)
	MOVD	R7, ret+40(FP)
	RET

// func blocksPMULL(crc *[4]uint64, p []byte, lanes int, stride int, t *crcmath.FoldTable)
//
// The finalised CRCs (from a start of 0) of the first 16·lanes bytes of the
// four blocks p[0:], p[stride:], p[2·stride:], p[3·stride:], into crc[0..3].
// Each block has two accumulators one lane apart, so eight independent
// folds are in flight; they collapse with Fold[1], an odd last lane folds in
// with Fold[1], and the four reductions interleave.
TEXT ·blocksPMULL(SB), NOSPLIT, $0-56
	MOVD	crc+0(FP), R0
	MOVD	p_base+8(FP), R1
	MOVD	lanes+32(FP), R2
	MOVD	stride+40(FP), R3
	MOVD	t+48(FP), R8
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
	FOLD(V0, V25, V16, V8)
	FOLD(V1, V25, V17, V9)
	FOLD(V2, V25, V18, V10)
	FOLD(V3, V25, V19, V11)
	FOLD(V4, V25, V20, V12)
	FOLD(V5, V25, V21, V13)
	FOLD(V6, V25, V22, V14)
	FOLD(V7, V25, V23, V15)
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
	FMOVD	FOLD_FINAL(R8), F26
	ADD	$FOLD_MU, R8, R9
	VLD1	(R9), [V27.D2]
	REDUCE(V0, V26, V27, V16, V17, R10, R11, R12)
	REDUCE(V2, V26, V27, V18, V19, R13, R14, R15)
	REDUCE(V4, V26, V27, V20, V21, R16, R17, R19)
	REDUCE(V6, V26, V27, V22, V23, R20, R21, R22)
	MOVD	R12, 0(R0)
	MOVD	R15, 8(R0)
	MOVD	R19, 16(R0)
	MOVD	R22, 24(R0)
	RET
