//go:build !purego

package crc32c

import (
	"testing"

	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/kerneltest"
	"github.com/difctl/difctl/kernels/internal/layout"
)

// The fold kernels (zfold_amd64.s, crc32c_fold_amd64.go) run the whole
// harness under a registry name of their own, whatever registerArch makes
// the package use.
const foldTestPkg = "crc32c-fold"

var (
	foldTestUpdate     = updateGeneric
	foldTestBlocks     = blocksGeneric
	foldTestBlocksCopy = blocksCopyPortable
)

func init() {
	impl.Register(foldTestPkg, "avx512", hasFoldAVX512, func() {
		foldTestUpdate, foldTestBlocks, foldTestBlocksCopy = updateAVX512, blocksAVX512, blocksCopyAVX512
	})
	impl.Register(foldTestPkg, "avx2", hasFoldAVX2, func() {
		foldTestUpdate, foldTestBlocks, foldTestBlocksCopy = updateAVX2, blocksAVX2, blocksCopyAVX2
	})
	impl.Register(foldTestPkg, "avx", hasFoldAVX, func() {
		foldTestUpdate, foldTestBlocks, foldTestBlocksCopy = updateAVX, blocksAVX, blocksCopyAVX
	})
	impl.Register(foldTestPkg, "pclmul", hasFoldPCLMUL, func() {
		foldTestUpdate, foldTestBlocks, foldTestBlocksCopy = updatePCLMUL, blocksPCLMUL, blocksCopyPCLMUL
	})
}

func foldTestKernel() kerneltest.Kernel[uint32] {
	k := kernel
	k.Pkg = foldTestPkg
	k.Update = func(crc uint32, p []byte) uint32 { return foldTestUpdate(crc, p) }
	k.Checksum = func(p []byte) uint32 { return foldTestUpdate(0, p) }
	k.Blocks = func(dst []uint32, p []byte, blockLen, stride int) error {
		if !layout.Valid(len(dst), len(p), blockLen, stride) {
			return ErrLayout
		}
		if len(dst) > 0 {
			foldTestBlocks(dst, p, blockLen, stride)
		}
		return nil
	}
	k.BlocksCopy = func(dst []uint32, q, p []byte, blockLen, stride int) error {
		if !layout.Valid(len(dst), len(p), blockLen, stride) || !layout.Valid(len(dst), len(q), blockLen, stride) {
			return ErrLayout
		}
		if len(dst) == 0 {
			return nil
		}
		if n := layout.Span(len(dst), blockLen, stride); layout.Overlap(q[:n], p[:n]) {
			return ErrOverlap
		}
		foldTestBlocksCopy(dst, q, p, blockLen, stride)
		return nil
	}
	k.Cutoffs = append(k.Cutoffs, foldCutoffs...)
	return k
}

// foldCutoffs are the lengths where the fold wrappers change strategy.
var foldCutoffs = []int{foldMinPCLMUL, foldMinAVX2, foldMinAVX512, foldMinBlockLen,
	foldVecAVX2, foldVecAVX512, 16 * foldAccsPCLMUL, foldVecAVX2 * foldAccsAVX2, foldVecAVX512 * foldAccsAVX512}

func TestFoldKernels(t *testing.T) { kerneltest.Run(t, foldTestKernel()) }

func FuzzFoldKernels(f *testing.F) { kerneltest.Fuzz(f, foldTestKernel()) }

func BenchmarkFoldKernels(b *testing.B) { kerneltest.Bench(b, foldTestKernel()) }

func TestFoldTableOffsets(t *testing.T) {
	kerneltest.CheckFoldOffsets(t, kerneltest.FoldOffsets{
		Fold: foldTableFold, Final: foldTableFinal, Mu: foldTableMu,
		Poly: foldTablePoly, Rev: foldTableRev, Size: foldTableSize,
	})
}

// The fold kernels that the crc32c-fold registry holds are available as
// the CPU allows (the package's own registry prefers the hybrid kernels).
func TestFoldImplementations(t *testing.T) { kerneltest.CheckFoldImplementations(t, foldTestKernel()) }
