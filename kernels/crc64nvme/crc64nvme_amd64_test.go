//go:build !purego

package crc64nvme

import (
	"testing"

	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

func TestArchImplementations(t *testing.T) { kerneltest.CheckFoldImplementations(t, kernel) }

// The kernels read crcmath.RevFoldTable through a pointer at the offsets the
// generator assumed (zfold_amd64.go).
func TestFoldTableOffsets(t *testing.T) {
	kerneltest.CheckFoldOffsets(t, kerneltest.FoldOffsets{
		Fold: foldTableFold, Final: foldTableFinal, Mu: foldTableMu,
		Poly: foldTablePoly, Rev: foldTableRev, Size: foldTableSize,
	})
}
