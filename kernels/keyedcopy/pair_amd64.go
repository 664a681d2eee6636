//go:build !purego

package keyedcopy

import "github.com/difctl/difctl/kernels/poly1305"

// The pair implementation: the two passes of blocksCopyGeneric, taken a
// chunk of blocks at a time so that Poly1305 reads the copy from the L1
// cache the CRC pass has just written it to. On a CPU with AVX-512 IFMA
// and VPCLMULQDQ both passes have AVX-512 kernels (t10crc32c's copying
// kernel, poly1305's avx512ifma), which together run about twice as fast
// as the fused AVX2 kernel there (docs/performance.md, "One pass: copy,
// CRCs and Poly1305"); the chunks keep the second pass off L2.

// pairChunk is the bytes of blocks a round of blocksCopyPair covers, about:
// with the source's lines in flight it stays within a 48 KiB L1.
const pairChunk = 16 << 10

// pairGroup is the blocks avx512ifma hashes at a time: a round covers a
// multiple of it, so that no block takes a slower lane kernel.
const pairGroup = 8

// pairBlocks is the blocks of one round of blocksCopyPair at stride bytes
// (0 for a call of one block, or of empty blocks).
func pairBlocks(stride int) int {
	n := pairChunk / max(1, stride)
	return max(pairGroup, n-n%pairGroup)
}

// blocksCopyPair is blocksCopyGeneric a round of pairBlocks blocks at a
// time. The layout was checked.
func blocksCopyPair(dst []uint16, sums []uint32, parts []poly1305.Partial, q, p []byte, blockLen, stride int, key *poly1305.Key) {
	per := pairBlocks(stride)
	for i := 0; i < len(dst); i += per {
		k := min(per, len(dst)-i)
		blocksCopyGeneric(dst[i:i+k], sums[i:i+k], parts[i:i+k], q[i*stride:], p[i*stride:], blockLen, stride, key)
	}
}
