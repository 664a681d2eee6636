package crc64nvme

import (
	"hash"
	"hash/crc64"
	"testing"

	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

var kernel = kerneltest.Kernel[uint64]{
	Pkg:        pkgName,
	Params:     Params,
	Update:     Update,
	Checksum:   Checksum,
	Blocks:     Blocks,
	BlocksCopy: BlocksCopy,
	Combine:    Combine,
	New:        func() hash.Hash { return New() },
	Cutoffs:    archCutoffs,
}

func TestKernel(t *testing.T) { kerneltest.Run(t, kernel) }

func FuzzKernel(f *testing.F) { kerneltest.Fuzz(f, kernel) }

func BenchmarkKernel(b *testing.B) { kerneltest.Bench(b, kernel) }

func BenchmarkKernelDRAM(b *testing.B) { kerneltest.BenchDRAM(b, kernel) }

func TestFoldTable(t *testing.T) {
	if got := crcmath.NewFoldTable(Params); *got != foldTable {
		t.Fatal("zfold_consts.go is stale: run go generate")
	}
}

func TestFoldModel(t *testing.T) {
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte(i*7 + i>>8)
	}
	for _, n := range []int{1, 4, 8} {
		for l := 16 * n; l <= len(buf); l += 16 {
			want := uint64(crcmath.Bitwise(Params, 0x1234, buf[:l]))
			if got := uint64(crcmath.FoldUpdate(Params, &foldTable, n, 0x1234, buf[:l])); got != want {
				t.Fatalf("accumulators=%d len=%d: fold model %#x, oracle %#x", n, l, got, want)
			}
		}
	}
}

// hash/crc64 with the NVMe table is the standard-library baseline.
func BenchmarkBaseline(b *testing.B) {
	tab := crc64.MakeTable(reflectedPoly)
	buf := make([]byte, 1<<20)
	for _, n := range kerneltest.Sizes {
		b.Run("impl=stdlib/op=update/size="+kerneltest.SizeName(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			var crc uint64
			for b.Loop() {
				crc = crc64.Update(crc, tab, buf[:n])
			}
			kerneltest.Sink += crc
		})
	}
}

func TestStdlibAgrees(t *testing.T) {
	tab := crc64.MakeTable(reflectedPoly)
	if got := crc64.Checksum([]byte("123456789"), tab); got != Params.Check {
		t.Fatalf("hash/crc64 = %#x", got)
	}
}
