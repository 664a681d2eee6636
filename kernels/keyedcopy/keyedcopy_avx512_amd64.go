//go:build !purego

package keyedcopy

import (
	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/poly1305"
	"golang.org/x/sys/cpu"
)

// The avx512 implementation: fusedPolyCopyZ (kernels/_asm/fusedpoly,
// zmm.go), one pass over each pair of blocks that copies them, folds the
// guard and the sector sum from the loaded rows and runs Poly1305 in the
// IFMA lanes of poly1305's avx512ifma kernels, for blocks of at least
// zMinLen bytes; shorter ones take pair's two passes (see zMinLen).

// hasZ: the CPU features of fusedPolyCopyZ (AVX-512 F and BW, IFMA,
// VPCLMULQDQ and GFNI on ZMM registers) and of pair, its path for short
// blocks.
var hasZ = cpu.X86.HasAVX512BW && cpu.X86.HasAVX512GFNI && hasPair

// zMinLen is the shortest block fusedPolyCopyZ takes. The one pass and
// pair's two issue the same vector µops (the guard's and the sum's folds,
// the IFMA lanes) on the same two ports, so the one pass gains only the
// second pass's loads and the overlap of the copy's stores, and each pair
// of blocks ends with its own lane sums and CRC reductions, which weigh
// the most on short blocks: on Emerald Rapids it ran a few percent ahead
// of pair at 4 KiB, level at 1 and 2 KiB and behind at 512 bytes
// (docs/perf/keyedcopy-avx512.md).
const zMinLen = 2048

// t10Reflected is CRC-16/T10-DIF reflected (the same polynomial, input and
// output reflected), in which fusedPolyCopyZ folds the guard: its CRC of a
// message whose bytes have their bits reversed is the bit reversal of the
// T10-DIF of the message (t10crc32c's fusedBlocksCopyZG does the same).
var t10Reflected = crcmath.Params{Name: "CRC-16/T10-DIF reflected", Width: 16, Poly: crcmath.T10DIF.Poly, Reflected: true}

// foldTableR and foldTable32 are the fold tables of t10Reflected and of
// CRC-32C that fusedPolyCopyZ reads beside foldTable.
var (
	foldTableR  = crcmath.NewRevFoldTable(crcmath.NewFoldTable(t10Reflected))
	foldTable32 = crcmath.NewRevFoldTable(crcmath.NewFoldTable(crcmath.CRC32C))
)

// zRun is the pairs of blocks of one fusedPolyCopyZ call: their lane
// accumulators stay on the stack.
const zRun = 16

// blocksCopyZ runs fusedPolyCopyZ over the whole pairs of blocks if
// blockLen is a multiple of 64 of at least zMinLen, zRun pairs a call, and
// turns each block's accumulator into its Partial; a last odd block takes
// the generic path, and blocks of other lengths pair's. The layout was
// checked.
func blocksCopyZ(dst []uint16, sums []uint32, parts []poly1305.Partial, q, p []byte, blockLen, stride int, key *poly1305.Key) {
	if blockLen < zMinLen || blockLen%64 != 0 {
		blocksCopyPair(dst, sums, parts, q, p, blockLen, stride, key)
		return
	}
	g := len(dst) &^ (fusedZGroup - 1)
	kt := (*[fusedZKeyWords]uint64)(key.IFMAKey())
	var h [zRun * fusedZHWords]uint64
	for i := 0; i < g; i += zRun * fusedZGroup {
		m := min(zRun*fusedZGroup, g-i)
		fusedPolyCopyZ(dst[i:i+m], sums[i:i+m], h[:m/fusedZGroup*fusedZHWords], q[i*stride:], p[i*stride:], blockLen, stride, foldTable, foldTableR, foldTable32, kt)
		for b := range m {
			w := h[b/fusedZGroup*fusedZHWords:]
			l := b % fusedZGroup
			parts[i+b] = poly1305.PartialFrom44(w[l], w[fusedZGroup+l], w[2*fusedZGroup+l])
		}
	}
	if g < len(dst) {
		blocksCopyGeneric(dst[g:], sums[g:], parts[g:], q[g*stride:], p[g*stride:], blockLen, stride, key)
	}
}
