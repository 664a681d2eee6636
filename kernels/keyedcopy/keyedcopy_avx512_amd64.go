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
// IFMA lanes of poly1305's avx512ifma kernels.

// hasZ: the CPU features of fusedPolyCopyZ (AVX-512 F and BW, IFMA,
// VPCLMULQDQ and GFNI on ZMM registers).
var hasZ = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512IFMA &&
	cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasAVX512GFNI

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

// blocksCopyZ runs fusedPolyCopyZ over the whole pairs of blocks (if
// blockLen is a positive multiple of 64), zRun pairs a call, and turns each
// block's accumulator into its Partial; a last odd block and the blocks of
// other lengths take the generic path. The layout was checked.
func blocksCopyZ(dst []uint16, sums []uint32, parts []poly1305.Partial, q, p []byte, blockLen, stride int, key *poly1305.Key) {
	blocksCopyZK(false, dst, sums, parts, q, p, blockLen, stride, key)
}

func blocksCopyZS(dst []uint16, sums []uint32, parts []poly1305.Partial, q, p []byte, blockLen, stride int, key *poly1305.Key) {
	blocksCopyZK(true, dst, sums, parts, q, p, blockLen, stride, key)
}

func blocksCopyZK(stream bool, dst []uint16, sums []uint32, parts []poly1305.Partial, q, p []byte, blockLen, stride int, key *poly1305.Key) {
	g := len(dst) &^ (fusedZGroup - 1)
	if blockLen < 64 || blockLen%64 != 0 {
		g = 0
	}
	kt := (*[fusedZKeyWords]uint64)(key.IFMAKey())
	var h [zRun * fusedZHWords]uint64
	for i := 0; i < g; i += zRun * fusedZGroup {
		m := min(zRun*fusedZGroup, g-i)
		if stream {
			fusedPolyCopyZS(dst[i:i+m], sums[i:i+m], h[:m/fusedZGroup*fusedZHWords], q[i*stride:], p[i*stride:], blockLen, stride, foldTable, foldTableR, foldTable32, kt)
		} else {
			fusedPolyCopyZ(dst[i:i+m], sums[i:i+m], h[:m/fusedZGroup*fusedZHWords], q[i*stride:], p[i*stride:], blockLen, stride, foldTable, foldTableR, foldTable32, kt)
		}
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
