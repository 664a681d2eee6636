//go:build !purego

package poly1305

import (
	"github.com/difctl/difctl/kernels/internal/impl"
	"golang.org/x/sys/cpu"
)

// hasNEON: Advanced SIMD is part of every ARMv8-A CPU; the check keeps the
// registry honest on a kernel that reports otherwise.
var hasNEON = cpu.ARM64.HasASIMD

// registerArch registers the NEON lane kernel of zblocks_arm64.s: two
// blocks in the 64-bit lanes of the vector registers, radix 2^26,
// UMULL/UMLAL by element.
func registerArch() {
	impl.Register(pkgName, "neon", hasNEON, func() { blocks, blocksCopy = blocksNEON, copyThenBlocks })
}

// lanesNEON absorbs chunks 16-byte chunks of each of two blocks, block l at
// p[l*stride:][:16*chunks], each chunk with the 2^128 pad bit, into the
// accumulators h (neonState: limb k of block l at h[2k+l], radix 2^26):
// what neonModel computes, four chunks per step under r^4..r from key
// (neonKey).
//
// Preconditions: chunks >= 0; len(p) >= stride + 16*chunks; the limbs of
// h below 2^27 (zero, or left by an earlier call). It reads only the
// chunks.
//
//go:noescape
func lanesNEON(h *[10]uint64, p []byte, stride, chunks int, key *[18]uint64)

func blocksNEON(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, p []byte, blockLen, stride int) {
	blocksLanes(&kernelNEON, k, acc, h, ad, adLen, p, blockLen, stride)
}

var kernelNEON = laneKernel{
	lanes: neonLanes,
	absorb: func(h *laneBuf, p []byte, stride, chunks int, k *polyKey) {
		lanesNEON((*[10]uint64)(h[:10]), p, stride, chunks, (*[18]uint64)(&k.neon))
	},
	pack: packNEON,
}
