//go:build !purego

#include "textflag.h"

// CRC-16/T10-DIF folding kernels for arm64; see crct10dif_arm64.go for the
// design and crcmath.FoldUpdate for the model they follow step by step.
//
// Lanes are held "canonical" (pmull): the 16 message bytes m0..m15 loaded
// and byte-reversed by one TBL, so quadword 0 is Lo = m8..m15 big-endian and
// quadword 1 is Hi = m0..m7 big-endian, bit i of the register the coefficient
// of x^i. crcmath.FoldTable stores Fold[n] = {C(128n+64), C(128n)}, the Hi
// constant first; the kernels swap the two quadwords once when they load it,
// so that PMULL pairs Lo with C(128n) and PMULL2 pairs Hi with C(128n+64).

// Byte-shuffle indices for TBL (not CRC constants). An index >= 16 (>= 32
// for a two-register table) selects zero.
//   +0   15, 14, .., 0 then 16 x 0xff: at +0 the full byte reversal that
//        loads a lane; at +16-r the head lane of r bytes, zero-padded in
//        front (index r-1-j for register byte j < r, zero above).
//   +32  SPLIT: split position u <- lane byte splitOrder[u]
//        (0,2,4,6, 1,3,5,7, 8,10,12,14, 9,11,13,15).
//   +48  RSPLIT: split lane straight from the loaded bytes, 15-splitOrder[u].
//   +64  OSHIFT, +80 GATHERA, +96 GATHERB: the pmull8 fold (see P8SHIFT).
DATA t10shuf<>+0(SB)/8, $0x08090a0b0c0d0e0f
DATA t10shuf<>+8(SB)/8, $0x0001020304050607
DATA t10shuf<>+16(SB)/8, $0xffffffffffffffff
DATA t10shuf<>+24(SB)/8, $0xffffffffffffffff
DATA t10shuf<>+32(SB)/8, $0x0705030106040200
DATA t10shuf<>+40(SB)/8, $0x0f0d0b090e0c0a08
DATA t10shuf<>+48(SB)/8, $0x080a0c0e090b0d0f
DATA t10shuf<>+56(SB)/8, $0x0002040601030507
DATA t10shuf<>+64(SB)/8, $0x06050403020100ff
DATA t10shuf<>+72(SB)/8, $0xff0f0e0d0c0b0a09
DATA t10shuf<>+80(SB)/8, $0x0705030106040200
DATA t10shuf<>+88(SB)/8, $0xffffff0fffffff0e
DATA t10shuf<>+96(SB)/8, $0x0d0b09180c0a08ff
DATA t10shuf<>+104(SB)/8, $0xffffffffffffff17
GLOBL t10shuf<>(SB), RODATA|NOPTR, $112

// crcmath.FoldTable offsets.
#define FT_FOLD1 16
#define FT_FINAL 1040
#define FT_MU 1056
#define FT_POLY 1064

// pmull8Consts offsets.
#define P8_KE 0
#define P8_KO 80
#define P8_C0 160
#define P8_C1 176
#define P8_POLY 192

// ---------------------------------------------------------------------------
// Common prologue of the Update kernels: the head and the CRC.
//
// In: R0 crc, R1 p, R2 len(p) >= 16, R4 &t10shuf. Out: R5 = r = len%16 head
// bytes, R6 = number of full lanes (>= 1), R7 = first full lane, R8 = the
// CRC byte-swapped (its bytes in message order: XORed into the first two
// message bytes it is the initial register), R10 = the part of R8 that
// falls into the first full lane (all of it when r = 0, its second byte
// when r = 1, nothing otherwise).
#define UPDATE_PROLOGUE \
	AND	$15, R2, R5      \
	LSR	$4, R2, R6       \
	ADD	R1, R5, R7       \
	REV16W	R0, R8           \
	LSL	$3, R5, R9       \
	LSR	R9, R8, R10      \
	CMP	$2, R5           \
	CSEL	LO, R10, ZR, R10

// ---------------------------------------------------------------------------
// pmull: 64x64 PMULL folding.

#define REV V30
#define ZERO V31

// Load Fold[n] (at byte offset off of the table in T) into K as {klo, khi}.
#define LOADK(off, T, K, FK) \
	FMOVQ	off(T), FK \
	VEXT	$8, K.B16, K.B16, K.B16

// Fold step, first half: T = Lo(A)·klo, A = Hi(A)·khi.
#define MUL2(A, K, T) \
	VPMULL	K.D1, A.D1, T.Q1 \
	VPMULL2	K.D2, A.D2, A.Q1

// FOLD(A, K, T, D): A = fold(A, K) ^ D, one accumulator.
#define FOLD(A, K, T, D) \
	MUL2(A, K, T)               \
	VEOR	T.B16, A.B16, A.B16 \
	VEOR	D.B16, A.B16, A.B16

// LREV byte-reverses a loaded lane: REV64 then swap the quadwords. (One
// TBL would do, and is one instruction instead of two on Cortex-A53, but
// it is three micro-ops on Cortex-A72, where this loop is bound by them.)
// The two halves are separate macros so that in-order cores can overlap
// them; LREV is both, for code off the hot loops.
#define REV8(D) VREV64 D.B16, D.B16
#define SWAP(D) VEXT $8, D.B16, D.B16, D.B16
#define LREV(D) REV8(D); SWAP(D)
#define XOR(S, D) VEOR S.B16, D.B16, D.B16

// Barrett reduction in stages, so that several chains can be interleaved.
// KR = {Poly, C(80)}, KM = {Mu, 0}. A is the lane; T, Q temporaries; the CRC
// ends in the low 16 bits of A.
//   RED1, RED2: T = Lo·(x^16 mod P) ^ Hi·C(80), congruent to A·x^16, deg < 80;
//               q = T div x^16.
//   RED3, RED4: q = q ^ floor(q·mu_low / x^64) = floor(T·mu / x^80).
//   RED5, RED6: CRC = (T ^ q·p) mod x^16 (q·x^16 vanishes mod x^16).
#define KR V28
#define KM V27
#define RED1(A, T, Q) \
	VPMULL	KR.D1, A.D1, T.Q1 \
	VPMULL2	KR.D2, A.D2, Q.Q1
#define RED2(A, T, Q) \
	VEOR	Q.B16, T.B16, T.B16 \
	VEXT	$2, ZERO.B16, T.B16, Q.B16
#define RED3(A, T, Q) \
	VPMULL	KM.D1, Q.D1, A.Q1
#define RED4(A, T, Q) \
	VEXT	$8, ZERO.B16, A.B16, A.B16 \
	VEOR	A.B16, Q.B16, Q.B16
#define RED5(A, T, Q) \
	VPMULL	KR.D1, Q.D1, A.Q1
#define RED6(A, T, Q) \
	VEOR	T.B16, A.B16, A.B16

#define LOAD_KR_KM(T) \
	MOVD	FT_POLY(T), R11  \
	FMOVD	R11, F28         \
	MOVD	FT_FINAL(T), R11 \
	VMOV	R11, KR.D[1]     \
	MOVD	FT_MU(T), R11    \
	FMOVD	R11, F27

// func foldUpdatePMULL(crc uint16, p []byte, t *crcmath.FoldTable) uint16
TEXT ·foldUpdatePMULL(SB), NOSPLIT, $0-42
	MOVHU	crc+0(FP), R0
	MOVD	p_base+8(FP), R1
	MOVD	p_len+16(FP), R2
	MOVD	t+32(FP), R3
	MOVD	$t10shuf<>(SB), R4
	VLD1	(R4), [REV.B16]
	VEOR	ZERO.B16, ZERO.B16, ZERO.B16
	LOADK(FT_FOLD1, R3, V29, F29)
	UPDATE_PROLOGUE

	// Lane 0, with the CRC.
	VLD1.P	16(R7), [V0.B16]
	FMOVD	R10, F16
	XOR(V16, V0)
	LREV(V0)
	CBZ	R5, nohead

	// The head: r bytes, zero-padded in front, CRC in its first two
	// message bytes; folded by one lane into lane 0.
	VLD1	(R1), [V1.B16]
	FMOVD	R8, F16
	XOR(V16, V1)
	SUB	R5, R4, R11
	FMOVQ	16(R11), F17
	VTBL	V17.B16, [V1.B16], V1.B16
	FOLD(V1, V29, V16, V0)
	VMOV	V1.B16, V0.B16

nohead:
	SUB	$1, R6
	CMP	$7, R6
	BLT	tail

	// Eight accumulators V0..V7, one lane apart.
	VLD1.P	64(R7), [V1.B16, V2.B16, V3.B16, V4.B16]
	VLD1.P	48(R7), [V5.B16, V6.B16, V7.B16]
	REV8(V1)
	REV8(V2)
	REV8(V3)
	REV8(V4)
	REV8(V5)
	REV8(V6)
	REV8(V7)
	SWAP(V1)
	SWAP(V2)
	SWAP(V3)
	SWAP(V4)
	SWAP(V5)
	SWAP(V6)
	SWAP(V7)
	SUB	$7, R6
	LOADK(128, R3, V24, F24) // Fold[8]
	CMP	$8, R6
	BLT	collapse

loop8:
	// Fold each accumulator by 128 bytes and add the next eight lanes;
	// ordered for in-order cores (a result is used six instructions or
	// more after it is produced).
	VLD1.P	64(R7), [V8.B16, V9.B16, V10.B16, V11.B16]
	VLD1.P	64(R7), [V12.B16, V13.B16, V14.B16, V15.B16]
	MUL2(V0, V24, V16)
	MUL2(V1, V24, V17)
	REV8(V8)
	REV8(V9)
	REV8(V10)
	REV8(V11)
	MUL2(V2, V24, V18)
	MUL2(V3, V24, V19)
	SWAP(V8)
	SWAP(V9)
	SWAP(V10)
	SWAP(V11)
	REV8(V12)
	REV8(V13)
	REV8(V14)
	REV8(V15)
	MUL2(V4, V24, V20)
	MUL2(V5, V24, V21)
	MUL2(V6, V24, V22)
	MUL2(V7, V24, V23)
	SWAP(V12)
	SWAP(V13)
	SWAP(V14)
	SWAP(V15)
	XOR(V16, V0)
	XOR(V17, V1)
	XOR(V18, V2)
	XOR(V19, V3)
	XOR(V20, V4)
	XOR(V21, V5)
	XOR(V22, V6)
	XOR(V23, V7)
	XOR(V8, V0)
	XOR(V9, V1)
	XOR(V10, V2)
	XOR(V11, V3)
	XOR(V12, V4)
	XOR(V13, V5)
	XOR(V14, V6)
	XOR(V15, V7)
	SUB	$8, R6
	CMP	$8, R6
	BGE	loop8

collapse:
	// V7 ^= fold(V_i, Fold[7-i]), i = 0..6.
	LOADK(112, R3, V8, F8)
	LOADK(96, R3, V9, F9)
	LOADK(80, R3, V10, F10)
	LOADK(64, R3, V11, F11)
	LOADK(48, R3, V12, F12)
	LOADK(32, R3, V13, F13)
	MUL2(V0, V8, V16)
	MUL2(V1, V9, V17)
	MUL2(V2, V10, V18)
	MUL2(V3, V11, V19)
	MUL2(V4, V12, V20)
	MUL2(V5, V13, V21)
	MUL2(V6, V29, V22)
	XOR(V16, V0)
	XOR(V17, V1)
	XOR(V18, V2)
	XOR(V19, V3)
	XOR(V20, V4)
	XOR(V21, V5)
	XOR(V22, V6)
	XOR(V1, V0)
	XOR(V3, V2)
	XOR(V5, V4)
	XOR(V7, V6)
	XOR(V2, V0)
	XOR(V6, V4)
	XOR(V4, V0)

tail:
	// The remaining lanes one at a time.
	CBZ	R6, reduce

tailloop:
	VLD1.P	16(R7), [V8.B16]
	LREV(V8)
	FOLD(V0, V29, V16, V8)
	SUB	$1, R6
	CBNZ	R6, tailloop

reduce:
	LOAD_KR_KM(R3)
	RED1(V0, V16, V17)
	RED2(V0, V16, V17)
	RED3(V0, V16, V17)
	RED4(V0, V16, V17)
	RED5(V0, V16, V17)
	RED6(V0, V16, V17)
	VMOV	V0.D[0], R0
	MOVH	R0, ret+40(FP)
	RET

// func foldBlocksPMULL(dst []uint16, p []byte, blockLen, stride int, t *crcmath.FoldTable)
TEXT ·foldBlocksPMULL(SB), NOSPLIT, $0-72
	MOVD	dst_base+0(FP), R0
	MOVD	dst_len+8(FP), R19
	MOVD	p_base+24(FP), R1
	MOVD	blockLen+48(FP), R2
	MOVD	stride+56(FP), R3
	MOVD	t+64(FP), R4

	// One group of eight blocks a pass; R0 to R4 hold across passes.
bgroup:
	MOVD	$t10shuf<>(SB), R5
	VLD1	(R5), [REV.B16]
	VEOR	ZERO.B16, ZERO.B16, ZERO.B16
	LOADK(FT_FOLD1, R4, V29, F29)
	AND	$15, R2, R6
	LSR	$4, R2, R7

	// Block pointers R8..R15, at the block starts.
	MOVD	R1, R8
	ADD	R3, R8, R9
	ADD	R3, R9, R10
	ADD	R3, R10, R11
	ADD	R3, R11, R12
	ADD	R3, R12, R13
	ADD	R3, R13, R14
	ADD	R3, R14, R15

	// Accumulators V0..V7: the head lanes (r bytes zero-padded in
	// front), or zero. The loop folds them into the first full lanes.
	VEOR	V0.B16, V0.B16, V0.B16
	VEOR	V1.B16, V1.B16, V1.B16
	VEOR	V2.B16, V2.B16, V2.B16
	VEOR	V3.B16, V3.B16, V3.B16
	VEOR	V4.B16, V4.B16, V4.B16
	VEOR	V5.B16, V5.B16, V5.B16
	VEOR	V6.B16, V6.B16, V6.B16
	VEOR	V7.B16, V7.B16, V7.B16
	CBZ	R6, bnohead
	SUB	R6, R5, R16
	FMOVQ	16(R16), F26
	VLD1	(R8), [V0.B16]
	VLD1	(R9), [V1.B16]
	VLD1	(R10), [V2.B16]
	VLD1	(R11), [V3.B16]
	VLD1	(R12), [V4.B16]
	VLD1	(R13), [V5.B16]
	VLD1	(R14), [V6.B16]
	VLD1	(R15), [V7.B16]
	VTBL	V26.B16, [V0.B16], V0.B16
	VTBL	V26.B16, [V1.B16], V1.B16
	VTBL	V26.B16, [V2.B16], V2.B16
	VTBL	V26.B16, [V3.B16], V3.B16
	VTBL	V26.B16, [V4.B16], V4.B16
	VTBL	V26.B16, [V5.B16], V5.B16
	VTBL	V26.B16, [V6.B16], V6.B16
	VTBL	V26.B16, [V7.B16], V7.B16
	ADD	R6, R8
	ADD	R6, R9
	ADD	R6, R10
	ADD	R6, R11
	ADD	R6, R12
	ADD	R6, R13
	ADD	R6, R14
	ADD	R6, R15

bnohead:
bloop:
	// One lane of each block: eight independent fold chains.
	VLD1.P	16(R8), [V8.B16]
	VLD1.P	16(R9), [V9.B16]
	VLD1.P	16(R10), [V10.B16]
	VLD1.P	16(R11), [V11.B16]
	VLD1.P	16(R12), [V12.B16]
	VLD1.P	16(R13), [V13.B16]
	VLD1.P	16(R14), [V14.B16]
	VLD1.P	16(R15), [V15.B16]
	MUL2(V0, V29, V16)
	MUL2(V1, V29, V17)
	REV8(V8)
	REV8(V9)
	REV8(V10)
	REV8(V11)
	MUL2(V2, V29, V18)
	MUL2(V3, V29, V19)
	SWAP(V8)
	SWAP(V9)
	SWAP(V10)
	SWAP(V11)
	REV8(V12)
	REV8(V13)
	REV8(V14)
	REV8(V15)
	MUL2(V4, V29, V20)
	MUL2(V5, V29, V21)
	MUL2(V6, V29, V22)
	MUL2(V7, V29, V23)
	SWAP(V12)
	SWAP(V13)
	SWAP(V14)
	SWAP(V15)
	XOR(V16, V0)
	XOR(V17, V1)
	XOR(V18, V2)
	XOR(V19, V3)
	XOR(V20, V4)
	XOR(V21, V5)
	XOR(V22, V6)
	XOR(V23, V7)
	XOR(V8, V0)
	XOR(V9, V1)
	XOR(V10, V2)
	XOR(V11, V3)
	XOR(V12, V4)
	XOR(V13, V5)
	XOR(V14, V6)
	XOR(V15, V7)
	SUBS	$1, R7
	BNE	bloop

	// Eight Barrett reductions, stage by stage.
	LOAD_KR_KM(R4)
	RED1(V0, V8, V16)
	RED1(V1, V9, V17)
	RED1(V2, V10, V18)
	RED1(V3, V11, V19)
	RED1(V4, V12, V20)
	RED1(V5, V13, V21)
	RED1(V6, V14, V22)
	RED1(V7, V15, V23)
	RED2(V0, V8, V16)
	RED2(V1, V9, V17)
	RED2(V2, V10, V18)
	RED2(V3, V11, V19)
	RED2(V4, V12, V20)
	RED2(V5, V13, V21)
	RED2(V6, V14, V22)
	RED2(V7, V15, V23)
	RED3(V0, V8, V16)
	RED3(V1, V9, V17)
	RED3(V2, V10, V18)
	RED3(V3, V11, V19)
	RED3(V4, V12, V20)
	RED3(V5, V13, V21)
	RED3(V6, V14, V22)
	RED3(V7, V15, V23)
	RED4(V0, V8, V16)
	RED4(V1, V9, V17)
	RED4(V2, V10, V18)
	RED4(V3, V11, V19)
	RED4(V4, V12, V20)
	RED4(V5, V13, V21)
	RED4(V6, V14, V22)
	RED4(V7, V15, V23)
	RED5(V0, V8, V16)
	RED5(V1, V9, V17)
	RED5(V2, V10, V18)
	RED5(V3, V11, V19)
	RED5(V4, V12, V20)
	RED5(V5, V13, V21)
	RED5(V6, V14, V22)
	RED5(V7, V15, V23)
	RED6(V0, V8, V16)
	RED6(V1, V9, V17)
	RED6(V2, V10, V18)
	RED6(V3, V11, V19)
	RED6(V4, V12, V20)
	RED6(V5, V13, V21)
	RED6(V6, V14, V22)
	RED6(V7, V15, V23)
	VMOV	V0.D[0], R16
	MOVH	R16, 0(R0)
	VMOV	V1.D[0], R16
	MOVH	R16, 2(R0)
	VMOV	V2.D[0], R16
	MOVH	R16, 4(R0)
	VMOV	V3.D[0], R16
	MOVH	R16, 6(R0)
	VMOV	V4.D[0], R16
	MOVH	R16, 8(R0)
	VMOV	V5.D[0], R16
	MOVH	R16, 10(R0)
	VMOV	V6.D[0], R16
	MOVH	R16, 12(R0)
	VMOV	V7.D[0], R16
	MOVH	R16, 14(R0)
	ADD	$16, R0
	ADD	R3<<3, R1, R1
	SUBS	$8, R19
	BNE	bgroup
	RET

#undef KR
#undef KM

// ---------------------------------------------------------------------------
// pmull8: the same folds from 8x8 PMULL (base NEON).
//
// A split lane Y holds the lane bytes v_j at positions u with j =
// splitOrder[u]: Y = [Lo even | Lo odd | Hi even | Hi odd] (4 bytes each;
// Lo = v_0..v_7, Hi = v_8..v_15). Folding Y by Fold[n] = {khi, klo} is
// Hi·khi ^ Lo·klo, deg < 80, the sum over bytes i and constant bytes b of
// v·k_b·x^(8(i+b)). With KE = [klo0 | klo1 | khi0 | khi1] and
// KO = [klo1 | klo0 | khi1 | khi0] (each byte four times):
//
//   E = PMULL(Y, KE) ^ PMULL2(Y, KE): quadword 0 holds the 16-bit products
//       v_2L·k_0 at bits 16L, which is where they belong; quadword 1 holds
//       v_2L+1·k_1, which belong 16(L+1): 48 bits lower. So E byte e goes to
//       product byte e (e < 8) or e-6 (e >= 8).
//   O = PMULL(Y, KO) ^ PMULL2(Y, KO): v_2L·k_1 and v_2L+1·k_0, both wanted at
//       16L+8 from bits 16L (quadword 0) and 64+16L (quadword 1): O byte o
//       goes to product byte o+1 (o < 8) or o-7 (o >= 8).
//
// S = E ^ OSHIFT(O) pairs every O byte with an E byte of the same target,
// except O_7 (target 8) and O_8 (target 1), which have no partner. Then the
// new lane in split form is GATHERA([S, O]) ^ GATHERB([S, O]) ^ D: GATHERA
// takes S_e for targets 0..7 and S_14, S_15 for 8, 9; GATHERB takes S_8..S_13
// for targets 2..7 and O_8, O_7 for 1 and 8; both permuted to split order.
// Thirteen instructions per 16-byte lane (four of them PMULL 8x8).

#define IO V6
#define IA V7
#define IB V8
#define RS V9

// P8MUL(Y, KE, KO, S, O, A, B): the four 8x8 product vectors of Y.
#define P8MUL(Y, KE, KO, S, O, A, B) \
	VPMULL	KE.B8, Y.B8, A.H8    \
	VPMULL2	KE.B16, Y.B16, B.H8  \
	VPMULL	KO.B8, Y.B8, O.H8    \
	VPMULL2	KO.B16, Y.B16, S.H8

// E in A, O in O.
#define P8EO(S, O, A, B) \
	VEOR	B.B16, A.B16, A.B16 \
	VEOR	S.B16, O.B16, O.B16

#define P8SHIFT(O, B) VTBL IO.B16, [O.B16], B.B16
#define P8S(S, A, B) VEOR B.B16, A.B16, S.B16

// S and O must be consecutive registers (a two-register TBL table).
#define P8GATHER(S, O, A, B) \
	VTBL	IA.B16, [S.B16, O.B16], A.B16 \
	VTBL	IB.B16, [S.B16, O.B16], B.B16

#define P8ADD1(Y, A, D) VEOR D.B16, A.B16, Y.B16
#define P8ADD2(Y, B) VEOR B.B16, Y.B16, Y.B16

// P8FOLD: Yout = fold(Y, KE/KO) ^ D, one chain.
#define P8FOLD(Y, KE, KO, D, Yout, S, O, A, B) \
	P8MUL(Y, KE, KO, S, O, A, B) \
	P8EO(S, O, A, B)             \
	P8SHIFT(O, B)                \
	P8S(S, A, B)                 \
	P8GATHER(S, O, A, B)         \
	P8ADD1(Yout, A, D)           \
	P8ADD2(Yout, B)

#define LOAD_P8_SHUF(SH) \
	FMOVQ	64(SH), F6 \
	FMOVQ	80(SH), F7 \
	FMOVQ	96(SH), F8 \
	FMOVQ	48(SH), F9

#define P8SPLIT(D) VTBL RS.B16, [D.B16], D.B16

// P8REDUCE(Y, K): CRC of the split lane Y into R11 (R12..R15 clobbered;
// V4, V5, V18, V19, V22, V23 too). x = sum over bytes v_j·(x^(8j+16) mod P),
// deg < 23, from 8x8 products; then the bits 22..16 are cleared with P.
#define P8REDUCE(Y, K) \
	FMOVQ	P8_C0(K), F4             \
	FMOVQ	P8_C1(K), F5             \
	VPMULL	V4.B8, Y.B8, V18.H8      \
	VPMULL2	V4.B16, Y.B16, V22.H8    \
	VPMULL	V5.B8, Y.B8, V19.H8      \
	VPMULL2	V5.B16, Y.B16, V23.H8    \
	VEOR	V22.B16, V18.B16, V18.B16 \
	VEOR	V23.B16, V19.B16, V19.B16 \
	VMOV	V18.D[0], R11            \
	VMOV	V18.D[1], R12            \
	VMOV	V19.D[0], R13            \
	VMOV	V19.D[1], R14            \
	EOR	R12, R11                 \
	EOR	R14, R13                 \
	EOR	R11>>32, R11             \
	EOR	R13>>32, R13             \
	EOR	R11>>16, R11             \
	EOR	R13>>16, R13             \
	AND	$0xffff, R11             \
	AND	$0xffff, R13             \
	EOR	R13<<8, R11              \
	MOVD	P8_POLY(K), R12          \
	LSL	$6, R12                  \
	P8BIT(22)                    \
	P8BIT(21)                    \
	P8BIT(20)                    \
	P8BIT(19)                    \
	P8BIT(18)                    \
	P8BIT(17)                    \
	P8BIT(16)

// If bit n of R11 is set, clear it with R12 = P·x^(n-16); then R12 >>= 1.
#define P8BIT(n) \
	TST	$(1<<n), R11       \
	CSEL	NE, R12, ZR, R13  \
	EOR	R13, R11           \
	LSR	$1, R12

// func foldUpdatePMULL8(crc uint16, p []byte, k *pmull8Consts) uint16
TEXT ·foldUpdatePMULL8(SB), NOSPLIT, $0-42
	MOVHU	crc+0(FP), R0
	MOVD	p_base+8(FP), R1
	MOVD	p_len+16(FP), R2
	MOVD	k+32(FP), R3
	MOVD	$t10shuf<>(SB), R4
	LOAD_P8_SHUF(R4)
	FMOVQ	16(R3), F30 // KE, KO of Fold[1]
	FMOVQ	96(R3), F31
	UPDATE_PROLOGUE

	// Lane 0, with the CRC.
	VLD1.P	16(R7), [V0.B16]
	FMOVD	R10, F26
	XOR(V26, V0)
	P8SPLIT(V0)
	CBZ	R5, p8nohead

	// The head, folded by one lane into lane 0.
	VLD1	(R1), [V1.B16]
	FMOVD	R8, F26
	XOR(V26, V1)
	SUB	R5, R4, R11
	FMOVQ	16(R11), F27
	VTBL	V27.B16, [V1.B16], V1.B16
	FMOVQ	32(R4), F27 // SPLIT
	VTBL	V27.B16, [V1.B16], V1.B16
	P8FOLD(V1, V30, V31, V0, V0, V10, V11, V18, V22)

p8nohead:
	SUB	$1, R6
	CMP	$3, R6
	BLT	p8tail

	// Four accumulators V0..V3, one lane apart.
	VLD1.P	48(R7), [V1.B16, V2.B16, V3.B16]
	P8SPLIT(V1)
	P8SPLIT(V2)
	P8SPLIT(V3)
	SUB	$3, R6
	FMOVQ	64(R3), F4 // Fold[4]
	FMOVQ	144(R3), F5
	CMP	$4, R6
	BLT	p8collapse

p8loop:
	VLD1.P	64(R7), [V26.B16, V27.B16, V28.B16, V29.B16]
	P8MUL(V0, V4, V5, V10, V11, V18, V22)
	P8MUL(V1, V4, V5, V12, V13, V19, V23)
	P8MUL(V2, V4, V5, V14, V15, V20, V24)
	P8MUL(V3, V4, V5, V16, V17, V21, V25)
	P8EO(V10, V11, V18, V22)
	P8EO(V12, V13, V19, V23)
	P8EO(V14, V15, V20, V24)
	P8EO(V16, V17, V21, V25)
	P8SHIFT(V11, V22)
	P8SHIFT(V13, V23)
	P8SHIFT(V15, V24)
	P8SHIFT(V17, V25)
	P8SPLIT(V26)
	P8SPLIT(V27)
	P8SPLIT(V28)
	P8SPLIT(V29)
	P8S(V10, V18, V22)
	P8S(V12, V19, V23)
	P8S(V14, V20, V24)
	P8S(V16, V21, V25)
	P8GATHER(V10, V11, V18, V22)
	P8GATHER(V12, V13, V19, V23)
	P8GATHER(V14, V15, V20, V24)
	P8GATHER(V16, V17, V21, V25)
	P8ADD1(V0, V18, V26)
	P8ADD1(V1, V19, V27)
	P8ADD1(V2, V20, V28)
	P8ADD1(V3, V21, V29)
	P8ADD2(V0, V22)
	P8ADD2(V1, V23)
	P8ADD2(V2, V24)
	P8ADD2(V3, V25)
	SUB	$4, R6
	CMP	$4, R6
	BGE	p8loop

p8collapse:
	// V0 = V3 ^ fold(V0, Fold[3]) ^ fold(V1, Fold[2]) ^ fold(V2, Fold[1]).
	FMOVQ	48(R3), F4
	FMOVQ	128(R3), F5
	FMOVQ	32(R3), F26
	FMOVQ	112(R3), F27
	P8MUL(V0, V4, V5, V10, V11, V18, V22)
	P8MUL(V1, V26, V27, V12, V13, V19, V23)
	P8MUL(V2, V30, V31, V14, V15, V20, V24)
	P8EO(V10, V11, V18, V22)
	P8EO(V12, V13, V19, V23)
	P8EO(V14, V15, V20, V24)
	P8SHIFT(V11, V22)
	P8SHIFT(V13, V23)
	P8SHIFT(V15, V24)
	P8S(V10, V18, V22)
	P8S(V12, V19, V23)
	P8S(V14, V20, V24)
	P8GATHER(V10, V11, V18, V22)
	P8GATHER(V12, V13, V19, V23)
	P8GATHER(V14, V15, V20, V24)
	XOR(V22, V18)
	XOR(V23, V19)
	XOR(V24, V20)
	XOR(V19, V18)
	XOR(V3, V20)
	VEOR	V20.B16, V18.B16, V0.B16

p8tail:
	CBZ	R6, p8reduce

p8tailloop:
	VLD1.P	16(R7), [V26.B16]
	P8SPLIT(V26)
	P8FOLD(V0, V30, V31, V26, V0, V10, V11, V18, V22)
	SUB	$1, R6
	CBNZ	R6, p8tailloop

p8reduce:
	P8REDUCE(V0, R3)
	MOVH	R11, ret+40(FP)
	RET

// func foldBlocksPMULL8(dst []uint16, p []byte, blockLen, stride int, k *pmull8Consts)
TEXT ·foldBlocksPMULL8(SB), NOSPLIT, $0-72
	MOVD	dst_base+0(FP), R0
	MOVD	dst_len+8(FP), R19
	MOVD	p_base+24(FP), R1
	MOVD	blockLen+48(FP), R2
	MOVD	stride+56(FP), R3
	MOVD	k+64(FP), R4

	// One group of four blocks a pass; R0 to R4 hold across passes.
b8group:
	MOVD	$t10shuf<>(SB), R5
	LOAD_P8_SHUF(R5)
	FMOVQ	16(R4), F4 // Fold[1]
	FMOVQ	96(R4), F5
	AND	$15, R2, R6
	LSR	$4, R2, R7

	MOVD	R1, R8
	ADD	R3, R8, R9
	ADD	R3, R9, R10
	ADD	R3, R10, R11

	VEOR	V0.B16, V0.B16, V0.B16
	VEOR	V1.B16, V1.B16, V1.B16
	VEOR	V2.B16, V2.B16, V2.B16
	VEOR	V3.B16, V3.B16, V3.B16
	CBZ	R6, b8nohead
	SUB	R6, R5, R16
	FMOVQ	16(R16), F30
	FMOVQ	32(R5), F31 // SPLIT
	VLD1	(R8), [V0.B16]
	VLD1	(R9), [V1.B16]
	VLD1	(R10), [V2.B16]
	VLD1	(R11), [V3.B16]
	VTBL	V30.B16, [V0.B16], V0.B16
	VTBL	V30.B16, [V1.B16], V1.B16
	VTBL	V30.B16, [V2.B16], V2.B16
	VTBL	V30.B16, [V3.B16], V3.B16
	VTBL	V31.B16, [V0.B16], V0.B16
	VTBL	V31.B16, [V1.B16], V1.B16
	VTBL	V31.B16, [V2.B16], V2.B16
	VTBL	V31.B16, [V3.B16], V3.B16
	ADD	R6, R8
	ADD	R6, R9
	ADD	R6, R10
	ADD	R6, R11

b8nohead:
b8loop:
	VLD1.P	16(R8), [V26.B16]
	VLD1.P	16(R9), [V27.B16]
	VLD1.P	16(R10), [V28.B16]
	VLD1.P	16(R11), [V29.B16]
	P8MUL(V0, V4, V5, V10, V11, V18, V22)
	P8MUL(V1, V4, V5, V12, V13, V19, V23)
	P8MUL(V2, V4, V5, V14, V15, V20, V24)
	P8MUL(V3, V4, V5, V16, V17, V21, V25)
	P8EO(V10, V11, V18, V22)
	P8EO(V12, V13, V19, V23)
	P8EO(V14, V15, V20, V24)
	P8EO(V16, V17, V21, V25)
	P8SHIFT(V11, V22)
	P8SHIFT(V13, V23)
	P8SHIFT(V15, V24)
	P8SHIFT(V17, V25)
	P8SPLIT(V26)
	P8SPLIT(V27)
	P8SPLIT(V28)
	P8SPLIT(V29)
	P8S(V10, V18, V22)
	P8S(V12, V19, V23)
	P8S(V14, V20, V24)
	P8S(V16, V21, V25)
	P8GATHER(V10, V11, V18, V22)
	P8GATHER(V12, V13, V19, V23)
	P8GATHER(V14, V15, V20, V24)
	P8GATHER(V16, V17, V21, V25)
	P8ADD1(V0, V18, V26)
	P8ADD1(V1, V19, V27)
	P8ADD1(V2, V20, V28)
	P8ADD1(V3, V21, V29)
	P8ADD2(V0, V22)
	P8ADD2(V1, V23)
	P8ADD2(V2, V24)
	P8ADD2(V3, V25)
	SUBS	$1, R7
	BNE	b8loop

	P8REDUCE(V0, R4)
	MOVH	R11, 0(R0)
	P8REDUCE(V1, R4)
	MOVH	R11, 2(R0)
	P8REDUCE(V2, R4)
	MOVH	R11, 4(R0)
	P8REDUCE(V3, R4)
	MOVH	R11, 6(R0)
	ADD	$8, R0
	ADD	R3<<2, R1, R1
	SUBS	$4, R19
	BNE	b8group
	RET
