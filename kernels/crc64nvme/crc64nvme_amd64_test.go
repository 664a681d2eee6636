//go:build !purego

package crc64nvme

import (
	"testing"

	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/foldgo"
	"github.com/difctl/difctl/kernels/internal/impl"
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

// The sub-block path hands the kernel whole groups: the sub-blocks of a
// block of foldgo.SubBlockAlias bytes, and of each call, fill groups of
// foldBlocksCopyPCLMUL.
func TestSubBlockGroups(t *testing.T) {
	per := foldgo.SubBlockAlias / foldgo.SubBlockLen
	if per%foldGroupPCLMUL != 0 || subChunk%foldGroupPCLMUL != 0 {
		t.Errorf("group of %d blocks: %d sub-blocks a block, %d a call", foldGroupPCLMUL, per, subChunk)
	}
}

// The sub-block path allocates nothing: the partial CRCs stay on the stack.
func TestSubBlockAllocs(t *testing.T) {
	defer impl.Reset(pkgName)
	if err := impl.Select(pkgName, "pclmul"); err != nil {
		t.Skip(err)
	}
	p, q, dst := make([]byte, 1<<20), make([]byte, 1<<20), make([]uint64, 256)
	if n := testing.AllocsPerRun(10, func() {
		if BlocksCopy(dst, q, p, 4096, 4096) != nil {
			t.Fatal("refused")
		}
	}); n != 0 {
		t.Errorf("%v allocations a call", n)
	}
}

// BenchmarkBlocksCopyPaths: BlocksCopy over contiguous blocks by the copying
// kernel of pclmul and of avx2 over whole blocks (path=whole) and over 1 KiB
// sub-blocks with the partial CRCs joined (path=sub), side by side
// (benchstat -col /path). pclmul takes path=sub for 4 KiB blocks, avx2
// keeps path=whole, which streams faster from memory.
func BenchmarkBlocksCopyPaths(b *testing.B) {
	dst := make([]uint64, 1<<10)
	for _, k := range []struct {
		name  string
		has   bool
		vec   int
		group int
		copy  func([]uint64, []byte, []byte, int, int, *crcmath.RevFoldTable)
		upd   func(uint64, []byte) uint64
	}{
		{"pclmul", hasFoldPCLMUL, foldVecPCLMUL, foldGroupPCLMUL, foldBlocksCopyPCLMUL, updatePCLMUL},
		{"avx2", hasFoldAVX2, foldVecAVX2, foldGroupAVX2, foldBlocksCopyAVX2, updateAVX2},
	} {
		if !k.has {
			continue
		}
		b.Run("impl="+k.name, func(b *testing.B) {
			kerneltest.BenchCopyPaths(b, []kerneltest.CopyPath{
				{Name: "whole", Run: func(q, p []byte, bl int) uint64 {
					n := len(p) / bl
					blocksCopyFold(dst[:n], q, p, bl, bl, k.vec, k.group, k.copy, k.upd)
					return dst[n-1]
				}},
				{Name: "sub", Run: func(q, p []byte, bl int) uint64 {
					n := len(p) / bl
					subBlocksCopyWith(k.copy, dst[:n], q, p, bl)
					return dst[n-1]
				}},
			}, []int{4096, 8192, 65536})
		})
	}
}

// subBlocksCopyWith is blocksCopySub with the kernel as a parameter
// (its scratch array then escapes), for the benchmark.
func subBlocksCopyWith(kernel func([]uint64, []byte, []byte, int, int, *crcmath.RevFoldTable), dst []uint64, q, p []byte, blockLen int) {
	const s = foldgo.SubBlockLen
	j := foldgo.NewJoiner(dst, blockLen/s, subShift())
	var part [subChunk]uint64
	for o, end := 0, len(dst)*blockLen; o < end; {
		k := min(subChunk, (end-o)/s)
		kernel(part[:k], q[o:], p[o:], s, s, foldTables)
		j.Add(part[:k])
		o += k * s
	}
}
