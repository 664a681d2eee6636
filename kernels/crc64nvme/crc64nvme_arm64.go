//go:build !purego

package crc64nvme

import (
	"golang.org/x/sys/cpu"

	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/foldgo"
	"github.com/difctl/difctl/kernels/internal/impl"
)

// arm64 implementation: pmull, carry-less folding with PMULL/PMULL2 (the
// 64x64 multiply of the Crypto Extensions), eight accumulators, Barrett
// reduction; Blocks runs four blocks per pass with two accumulators each.
// Go does dispatch and the tails (the last len%16 bytes, with the table
// code); the assembly mirrors crcmath.FoldUpdate and crcmath.Reduce.
func registerArch() {
	impl.Register(pkgName, "pmull", cpu.ARM64.HasPMULL, func() {
		update, blocks = updatePMULL, blocksPMULL
	})
}

const (
	// pmullMin is the smallest input folded. The fixed cost of the fold is
	// the reduction, three dependent PMULLs: 43 cycles on a Cortex-A72, 78
	// on a Cortex-A53, 39 on an Apple M1 as modelled by llvm-mca
	// (kernels/_mca/crc_nvme.sh), against 23, 67 and 28 cycles per 8 bytes of
	// the table code: one lane is already about even on the A72 and a win
	// on the others.
	pmullMin = 16
	// blocksMin is the smallest block length run four blocks at a time
	// (two lanes per block).
	blocksMin = 32
)

// foldUpdatePMULL returns crc (finalised) updated with p. Preconditions: len(p)
// is a positive multiple of 16; t is the package's foldTable.
//
//go:noescape
func foldUpdatePMULL(crc uint64, p []byte, t *crcmath.FoldTable) uint64

// foldBlocksPMULL sets dst[i] to the finalised CRC-64/NVME (from a start of
// 0) of the blockLen bytes at p[i·stride:] for every i, four blocks at a
// time. Preconditions: len(dst) is a positive multiple of 4; blockLen is a
// multiple of 16 and at least 32; stride >= blockLen;
// len(p) >= (len(dst)-1)·stride + blockLen; t is the package's foldTable.
//
//go:noescape
func foldBlocksPMULL(dst []uint64, p []byte, blockLen, stride int, t *crcmath.FoldTable)

func updatePMULL(crc uint64, p []byte) uint64 {
	if len(p) >= pmullMin {
		n := len(p) &^ 15
		crc = foldUpdatePMULL(crc, p[:n], &foldTable)
		p = p[n:]
	}
	if len(p) > 0 {
		crc = updateGeneric(crc, p)
	}
	return crc
}

// blocksPMULL runs the blocks four at a time through foldBlocksPMULL
// (foldgo.Blocks): the table code finishes each block's last blockLen%16
// bytes, and updatePMULL the last len(dst)%4 blocks, or all of them when
// they are shorter than blocksMin.
func blocksPMULL(dst []uint64, p []byte, blockLen, stride int) {
	foldgo.Blocks(dst, p, blockLen, stride, 16, 4, blocksMin, &foldTable, foldBlocksPMULL, updateGeneric, updatePMULL)
}
