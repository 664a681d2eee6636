package main

import (
	"bytes"
	"fmt"

	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
)

func writeStubs(warning string) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\n\n//go:build !purego\n\npackage poly1305\n\n", warning)
	fmt.Fprintf(&b, `// Byte offsets of the laneKey fields the kernels read, and its size.
const (
	laneKeyR      = %d
	laneKeyS      = %d
	laneKeyScalar = %d
	laneKeySize   = %d
)

// Byte offsets of the laneKey8 fields the eight-chunk kernels read, and its
// size.
const (
	laneKey8S      = %d
	laneKey8Scalar = %d
	laneKey8Size   = %d
)

// lanesAVX2 absorbs chunks 16-byte chunks of each of four blocks into the
// accumulators h (laneState: limb k of block l at h[4k+l], radix 2^26),
// block l's chunks at p[l*stride:][:16*chunks], each chunk with the 2^128
// pad bit: what laneModel computes, four lanes of YMM registers at once,
// four chunks per step under r^4..r from key (laneKey), then at most one
// step of two and one of one.
//
// Preconditions: chunks >= 0; len(p) >= 3*stride + 16*chunks; the limbs of
// h below 2^27 (zero, or left by an earlier call); the CPU has AVX2. It
// reads only the chunks.
//
//go:noescape
func lanesAVX2(h *[%d]uint64, p []byte, stride, chunks int, key *[%d]uint64)

// lanesHybridAVX2 is lanesAVX2 with two more blocks, p[4*stride:] and
// p[5*stride:], in general registers: h[20+3i:23+3i] is block 4+i's
// accumulator h0 + h1·2^64 + h2·2^128 (the generic form, h2 <= 4 between
// calls), absorbed by 64-bit MULX multiplies with r from key[160:162] while
// the vector lanes run.
//
// Preconditions: those of lanesAVX2, with len(p) >= 5*stride + 16*chunks;
// the CPU has BMI2.
//
//go:noescape
func lanesHybridAVX2(h *[%d]uint64, p []byte, stride, chunks int, key *[%d]uint64)

// lanesAVX2R8 is lanesAVX2 with eight chunks per step under r^8..r from
// key (laneKey8): one carry chain per eight chunks (then at most one step
// of four, two and one), what modelLanesKey computes with eight powers.
//
// Preconditions: those of lanesAVX2.
//
//go:noescape
func lanesAVX2R8(h *[%d]uint64, p []byte, stride, chunks int, key *[%d]uint64)

// lanesHybridR8 is lanesHybridAVX2 with the vector lanes of lanesAVX2R8,
// r for the scalar lanes from key[320:322].
//
// Preconditions: those of lanesHybridAVX2.
//
//go:noescape
func lanesHybridR8(h *[%d]uint64, p []byte, stride, chunks int, key *[%d]uint64)

// lanesAVX2R8Copy is lanesAVX2R8 that also copies the chunks it absorbs:
// block l's chunks p[l*stride:][:16*chunks] go to q[l*stride:][:16*chunks],
// and are absorbed from q after the kernel's own stores to it (never from
// a second load of p, which may change under the call). It writes nothing
// else of q.
//
// While it works on a step of the blocks it prefetches the same step of
// the blocks ahead bytes on in p, block l at p[ahead+l*stride:] (the group
// the caller will pass next, or the one after); ahead = 0 prefetches the
// blocks themselves.
//
// Unlike lanesAVX2R8 it starts from zero accumulators (it does not read h)
// and first absorbs the adLen/16 chunks of associated data of each block,
// block l's at ad[l*adLen:]: h = Poly1305_r(ad_l || chunks of block l)
// without the final reduction, lanesAVX2R8's from zero over the two in
// turn, and carried: limbs 0..3 below 2^26, limb 4 below 2^26 + 2^10,
// so that h0 + h1·2^64 + h2·2^128 is the limbs' shifts and ors alone.
//
// Preconditions: those of lanesAVX2R8, for q as for p; q's chunks do not
// overlap p's; len(p) >= ahead + 3*stride + 16*chunks, ahead >= 0; adLen a
// multiple of 16, len(ad) >= 4*adLen.
//
//go:noescape
func lanesAVX2R8Copy(h *[%d]uint64, q, p []byte, stride, chunks, ahead int, ad []byte, adLen int, key *[%d]uint64)

// lanesIFMA is lanesAVX2 for eight blocks in radix 2^44, with 52-bit
// multiplies: it absorbs chunks chunks of each of eight blocks, block l at
// p[l*stride:], into h (laneState44: limb k of block l at h[8k+l]), four
// chunks per step under r^4..r from key (ifmaKey), then two and one:
// what laneModel44 computes, in the 64-bit lanes of ZMM registers. Each
// four-chunk step also prefetches (PREFETCHT1 of each line) the next 512
// bytes of a sequential stream starting at pf: as many bytes as the step
// absorbs. A prefetch never faults; pf may be any address.
//
// Preconditions: chunks >= 0; len(p) >= 7*stride + 16*chunks; the limbs of
// h below 2^45 (zero, or left by an earlier call); the CPU has AVX512F and
// AVX512IFMA. It reads only the chunks.
//
//go:noescape
func lanesIFMA(h *[%d]uint64, p []byte, stride, chunks int, key *[%d]uint64, pf uintptr)

// lanesIFMAS is lanesIFMA, the same h before and after, for blocks of
// whole rows (chunks a multiple of 4) without its gathers: the eight
// blocks as four pairs in turn, each pair's two blocks in the eight lanes
// as four interleaved chunk streams, the streams summed at the end (see
// kernels/_asm/poly1305, lanesIFMAS). Its h limbs end below 2^44, 2^44 +
// 1 and 2^42, as combine44 leaves them. It prefetches as lanesIFMA does,
// 128 bytes of the stream at pf for each row of a pair it absorbs.
//
// Preconditions: those of lanesIFMA, with chunks a multiple of 4 (chunks
// = 0 returns at once, h unchanged). It reads only the chunks.
//
//go:noescape
func lanesIFMAS(h *[%d]uint64, p []byte, stride, chunks int, key *[%d]uint64, pf uintptr)

// lanesIFMASCopy is lanesIFMAS that also copies the chunks it absorbs:
// block l's p[l*stride:][:16*chunks] to q[l*stride:][:16*chunks], each
// 64-byte row stored as it is loaded and absorbed from the register
// (never from a second load of p, which may change under the call). It
// writes nothing else at q.
//
// Preconditions: those of lanesIFMAS; the blocks at q writable and not
// overlapping p's.
//
//go:noescape
func lanesIFMASCopy(h *[%d]uint64, p []byte, stride, chunks int, key *[%d]uint64, pf uintptr, q *byte)
`, keyR, keyS, keyScalar, keySize, key8S, key8Scalar, key8Size,
		limbs*lanes, keySize/8, hybridWords, keySize/8,
		limbs*lanes, key8Size/8, hybridWords, key8Size/8,
		limbs*lanes, key8Size/8, 3*lanes44, key44,
		3*lanes44, key44, 3*lanes44, key44)
	return scaffold.Go(b.Bytes())
}
