//go:build !purego

#include "textflag.h"

// CRC-32C with the ARMv8 CRC32C instructions and PMULL.
//
// Every function here works on the CRC register (the finalised CRC
// inverted): the Go wrappers in crc32c_arm64.go apply init and xorout.
// CRC32CX Rm, Rd computes Rd = (Rd·x^64 + Rm·x^32) mod P over the reflected
// register and data, so a stream of CRC32CX over 8-byte words is the CRC of
// those bytes; CRC32CW/H/B do the same for 4, 2 and 1 bytes.

// STEP16 loads 16 bytes from each of four streams (post-incrementing their
// pointers) and runs them into four independent CRC registers. The loads are
// issued first so that an in-order core has them back before the first
// CRC32CX needs them; the CRC32CX of the four streams alternate so that
// consecutive instructions never depend on each other.
#define STEP16(p0, p1, p2, p3, c0, c1, c2, c3) \
	LDP.P	16(p0), (R12, R13); \
	LDP.P	16(p1), (R14, R15); \
	LDP.P	16(p2), (R16, R17); \
	LDP.P	16(p3), (R19, R20); \
	CRC32CX	R12, c0; \
	CRC32CX	R14, c1; \
	CRC32CX	R16, c2; \
	CRC32CX	R19, c3; \
	CRC32CX	R13, c0; \
	CRC32CX	R15, c1; \
	CRC32CX	R17, c2; \
	CRC32CX	R20, c3

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
// Each chunk of 4·stripe bytes is cut into four stripes, run as four CRC32C
// streams (the first starting from crc, the others from 0) and merged:
//
//	crc' = c0·x^(24·stripe) + c1·x^(16·stripe) + c2·x^(8·stripe) + c3  mod P.
//
// A shift c·x^n mod P is one PMULL and one CRC32CX: with c and
// k = Reflect(x^(n-33) mod P, 32) as 64-bit values, the low quadword d of
// PMULL(c, k) stands for c·k·x (see crcmath.FoldTable on reflected
// products), and CRC32CX d, ZR gives d·x^32 mod P = c·x^n mod P. The three
// products are XORed before the single CRC32CX, which is linear.
TEXT ·crc4way(SB), NOSPLIT, $0-52
	MOVWU	crc+0(FP), R0
	MOVD	p_base+8(FP), R1
	MOVD	p_len+16(FP), R2
	MOVD	stripe+32(FP), R3
	MOVD	k+40(FP), R4
	FMOVD	0(R4), F28 // k[0]: x^(8·stripe)
	FMOVD	8(R4), F29 // k[1]: x^(16·stripe)
	FMOVD	16(R4), F30 // k[2]: x^(24·stripe)

chunk:
	ADD	R3, R1, R5
	ADD	R3, R5, R6
	ADD	R3, R6, R7
	MOVW	ZR, R8
	MOVW	ZR, R9
	MOVW	ZR, R10
	MOVD	R3, R11

stripes:
	STEP16(R1, R5, R6, R7, R0, R8, R9, R10)
	STEP16(R1, R5, R6, R7, R0, R8, R9, R10)
	SUBS	$32, R11, R11
	BNE	stripes

	// Merge. R7 now points at the next chunk.
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

	MOVD	R7, R1
	SUB	R3<<2, R2, R2
	CBNZ	R2, chunk

	MOVW	R0, ret+48(FP)
	RET

// func crcBlocks4(crc *[4]uint32, p []byte, n int, stride int)
//
// Runs the first n bytes of the four blocks p[0:], p[stride:],
// p[2·stride:], p[3·stride:] into the four registers crc[0..3], each block on
// its own CRC32C stream: four independent dependency chains, no merge.
TEXT ·crcBlocks4(SB), NOSPLIT, $0-48
	MOVD	crc+0(FP), R0
	MOVD	p_base+8(FP), R1
	MOVD	n+32(FP), R2
	MOVD	stride+40(FP), R3
	MOVWU	0(R0), R8
	MOVWU	4(R0), R9
	MOVWU	8(R0), R10
	MOVWU	12(R0), R11
	ADD	R3, R1, R5
	ADD	R3, R5, R6
	ADD	R3, R6, R7

	// 32 bytes of each block per iteration, then 16 if n is an odd multiple
	// of 16. R2 runs 32 below the bytes left, as in crcHW.
	SUBS	$32, R2, R2
	BLT	blocks16
blocks32:
	STEP16(R1, R5, R6, R7, R8, R9, R10, R11)
	STEP16(R1, R5, R6, R7, R8, R9, R10, R11)
	SUBS	$32, R2, R2
	BGE	blocks32
blocks16:
	TBZ	$4, R2, blocksdone
	STEP16(R1, R5, R6, R7, R8, R9, R10, R11)
blocksdone:
	MOVW	R8, 0(R0)
	MOVW	R9, 4(R0)
	MOVW	R10, 8(R0)
	MOVW	R11, 12(R0)
	RET
