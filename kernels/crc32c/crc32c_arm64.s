//go:build !purego

#include "textflag.h"

// CRC-32C with the ARMv8 CRC32C instructions and PMULL.
//
// Every function here works on the CRC register (the finalised CRC
// inverted): the Go wrappers in crc32c_arm64.go apply init and xorout.
// CRC32CX Rm, Rd computes Rd = (Rd·x^64 + Rm·x^32) mod P over the reflected
// register and data, so a stream of CRC32CX over 8-byte words is the CRC of
// those bytes; CRC32CW/H/B do the same for 4, 2 and 1 bytes.

// The four-stream kernels (crc4way, crcBlocks) share one software-pipelined
// loop. The registers are fixed: CRC registers R0, R8, R9, R10 for streams
// 0..3, stream pointers R1, R5, R6, R7, the count of bytes per stream still
// to load in R2; set A (R12:R13, R14:R15, R16:R17, R19:R20) and set B
// (R21:R22, R23:R24, R25:R3, R4:R11) each hold 16 bytes of every stream.
// The CRC32CX of one set run while the loads of the other are in flight, so
// an in-order core (Cortex-A53) never waits on a load; the CRC32CX of the
// four streams alternate so that no instruction waits on the one before it.

// PIPE_PROLOGUE loads the first 16 bytes of every stream into set B.
#define PIPE_PROLOGUE \
	LDP	(R1), (R21, R22); \
	LDP	(R5), (R23, R24); \
	LDP	(R6), (R25, R3); \
	LDP	(R7), (R4, R11); \
	ADD	$16, R1; \
	ADD	$16, R5; \
	ADD	$16, R6; \
	ADD	$16, R7

// PIPE_BODY runs set B (loaded before) and then set A into the CRCs while it
// loads the next 32 bytes of every stream into A and B.
#define PIPE_BODY \
	LDP	(R1), (R12, R13); \
	LDP	(R5), (R14, R15); \
	CRC32CX	R21, R0; \
	CRC32CX	R23, R8; \
	LDP	(R6), (R16, R17); \
	CRC32CX	R25, R9; \
	CRC32CX	R4, R10; \
	LDP	(R7), (R19, R20); \
	CRC32CX	R22, R0; \
	CRC32CX	R24, R8; \
	LDP	16(R1), (R21, R22); \
	CRC32CX	R3, R9; \
	CRC32CX	R11, R10; \
	LDP	16(R5), (R23, R24); \
	CRC32CX	R12, R0; \
	CRC32CX	R14, R8; \
	LDP	16(R6), (R25, R3); \
	CRC32CX	R16, R9; \
	CRC32CX	R19, R10; \
	LDP	16(R7), (R4, R11); \
	CRC32CX	R13, R0; \
	CRC32CX	R15, R8; \
	ADD	$32, R1; \
	CRC32CX	R17, R9; \
	CRC32CX	R20, R10; \
	ADD	$32, R5; \
	ADD	$32, R6; \
	ADD	$32, R7

// PIPE_DRAIN runs set B into the CRCs.
#define PIPE_DRAIN \
	CRC32CX	R21, R0; \
	CRC32CX	R23, R8; \
	CRC32CX	R25, R9; \
	CRC32CX	R4, R10; \
	CRC32CX	R22, R0; \
	CRC32CX	R24, R8; \
	CRC32CX	R3, R9; \
	CRC32CX	R11, R10

// PIPE_LAST16 loads 16 more bytes of every stream into set A and runs them.
#define PIPE_LAST16 \
	LDP	(R1), (R12, R13); \
	LDP	(R5), (R14, R15); \
	LDP	(R6), (R16, R17); \
	LDP	(R7), (R19, R20); \
	CRC32CX	R12, R0; \
	CRC32CX	R14, R8; \
	CRC32CX	R16, R9; \
	CRC32CX	R19, R10; \
	CRC32CX	R13, R0; \
	CRC32CX	R15, R8; \
	CRC32CX	R17, R9; \
	CRC32CX	R20, R10

// PIPE runs n = R2 bytes (a positive multiple of 16) of every stream; label
// names its loop (Go assembler labels are per function, so each function
// expands PIPE once).
#define PIPE(loop, drain, done) \
	PIPE_PROLOGUE; \
	SUB	$16, R2, R2; \
	CMP	$32, R2; \
	BLT	drain; \
loop: \
	PIPE_BODY; \
	SUB	$32, R2, R2; \
	CMP	$32, R2; \
	BGE	loop; \
drain: \
	PIPE_DRAIN; \
	TBZ	$4, R2, done; \
	PIPE_LAST16; \
done:

// func crcHW(crc uint32, p []byte) uint32
TEXT ·crcHW(SB), NOSPLIT, $0-36
	MOVWU	crc+0(FP), R0
	MOVD	p_base+8(FP), R1
	MOVD	p_len+16(FP), R2

	// 64 bytes per iteration. R2 runs 64 below the bytes left; its low six
	// bits stay those of the length, which the tail tests below.
	SUBS	$64, R2, R2
	BLT	tail
loop64:
	LDP.P	16(R1), (R4, R5)
	LDP.P	16(R1), (R6, R7)
	LDP.P	16(R1), (R8, R9)
	LDP.P	16(R1), (R10, R11)
	CRC32CX	R4, R0
	CRC32CX	R5, R0
	CRC32CX	R6, R0
	CRC32CX	R7, R0
	CRC32CX	R8, R0
	CRC32CX	R9, R0
	CRC32CX	R10, R0
	CRC32CX	R11, R0
	SUBS	$64, R2, R2
	BGE	loop64

tail:
	TBZ	$5, R2, tail16
	LDP.P	16(R1), (R4, R5)
	LDP.P	16(R1), (R6, R7)
	CRC32CX	R4, R0
	CRC32CX	R5, R0
	CRC32CX	R6, R0
	CRC32CX	R7, R0
tail16:
	TBZ	$4, R2, tail8
	LDP.P	16(R1), (R4, R5)
	CRC32CX	R4, R0
	CRC32CX	R5, R0
tail8:
	TBZ	$3, R2, tail4
	MOVD.P	8(R1), R4
	CRC32CX	R4, R0
tail4:
	TBZ	$2, R2, tail2
	MOVWU.P	4(R1), R4
	CRC32CW	R4, R0
tail2:
	TBZ	$1, R2, tail1
	MOVHU.P	2(R1), R4
	CRC32CH	R4, R0
tail1:
	TBZ	$0, R2, done
	MOVBU	(R1), R4
	CRC32CB	R4, R0
done:
	MOVW	R0, ret+32(FP)
	RET

// func crc4way(crc uint32, p []byte, stripe int, k *[4]uint64) uint32
//
// The chunk p of 4·stripe bytes is cut into four stripes, run as four CRC32C
// streams (the first starting from crc, the others from 0) and merged:
//
//	crc' = c0·x^(24·stripe) + c1·x^(16·stripe) + c2·x^(8·stripe) + c3  mod P.
//
// A shift c·x^n mod P is one PMULL and one CRC32CX: with c and
// k = Reflect(x^(n-33) mod P, 32) as 64-bit values, the low quadword d of
// PMULL(c, k) stands for c·k·x (see crcmath.FoldTable on reflected
// products), and CRC32CX d from a zero register gives d·x^32 mod P =
// c·x^n mod P. The three products are XORed before the single CRC32CX,
// which is linear.
TEXT ·crc4way(SB), NOSPLIT, $0-52
	MOVWU	crc+0(FP), R0
	MOVD	p_base+8(FP), R1
	MOVD	stripe+32(FP), R2
	MOVD	k+40(FP), R4
	FMOVD	0(R4), F28 // k[0]: x^(8·stripe)
	FMOVD	8(R4), F29 // k[1]: x^(16·stripe)
	FMOVD	16(R4), F30 // k[2]: x^(24·stripe)
	ADD	R2, R1, R5
	ADD	R2, R5, R6
	ADD	R2, R6, R7
	MOVW	ZR, R8
	MOVW	ZR, R9
	MOVW	ZR, R10

	PIPE(stripes, stripesdrain, merge)

	FMOVD	R0, F0
	FMOVD	R8, F1
	FMOVD	R9, F2
	VPMULL	V30.D1, V0.D1, V0.Q1
	VPMULL	V29.D1, V1.D1, V1.Q1
	VPMULL	V28.D1, V2.D1, V2.Q1
	VEOR	V1.B16, V0.B16, V0.B16
	VEOR	V2.B16, V0.B16, V0.B16
	FMOVD	F0, R12
	MOVW	ZR, R0
	CRC32CX	R12, R0
	EORW	R10, R0, R0
	MOVW	R0, ret+48(FP)
	RET

// func crcBlocks(dst []uint32, p []byte, blockLen, stride int)
//
// Sets dst[i] to the CRC-32C of the blockLen bytes at p[i·stride:], four
// blocks at a time, each block on its own CRC32C stream: four independent
// dependency chains, no merge. PIPE takes every register up to R25, so the
// arguments are reloaded for each group and R26 counts the blocks done.
TEXT ·crcBlocks(SB), NOSPLIT, $0-64
	MOVD	ZR, R26

group:
	MOVD	p_base+24(FP), R1
	MOVD	blockLen+48(FP), R2
	MOVD	stride+56(FP), R3
	MUL	R26, R3, R11
	ADD	R11, R1
	MOVW	$-1, R0 // the register of CRC 0
	MOVW	$-1, R8
	MOVW	$-1, R9
	MOVW	$-1, R10
	ADD	R3, R1, R5
	ADD	R3, R5, R6
	ADD	R3, R6, R7

	PIPE(blocks, blocksdrain, blocksdone)

	MOVD	dst_base+0(FP), R4
	ADD	R26<<2, R4, R4
	MVNW	R0, R0
	MVNW	R8, R8
	MVNW	R9, R9
	MVNW	R10, R10
	MOVW	R0, 0(R4)
	MOVW	R8, 4(R4)
	MOVW	R9, 8(R4)
	MOVW	R10, 12(R4)
	ADD	$4, R26
	MOVD	dst_len+8(FP), R11
	CMP	R11, R26
	BLT	group
	RET
