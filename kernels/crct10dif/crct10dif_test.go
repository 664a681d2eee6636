package crct10dif

import (
	"testing"

	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

var kernel = kerneltest.Kernel[uint16]{
	Pkg:        pkgName,
	Params:     Params,
	Update:     Update,
	Checksum:   Checksum,
	Blocks:     Blocks,
	BlocksCopy: BlocksCopy,
	Combine:    Combine,
	New:        New,
	Cutoffs:    archCutoffs,
}

func TestKernel(t *testing.T) { kerneltest.Run(t, kernel) }

func FuzzKernel(f *testing.F) { kerneltest.Fuzz(f, kernel) }

func BenchmarkKernel(b *testing.B) { kerneltest.Bench(b, kernel) }

func BenchmarkKernelDRAM(b *testing.B) { kerneltest.BenchDRAM(b, kernel) }

// The generated table equals what crcmath derives now (go generate is fresh
// in spirit even where CI's regeneration check does not run).
func TestFoldTable(t *testing.T) {
	if got := crcmath.NewFoldTable(Params); *got != foldTable {
		t.Fatal("zfold_consts.go is stale: run go generate")
	}
}

// The pure-Go model of the fold, with this package's generated constants,
// against the oracle.
func TestFoldModel(t *testing.T) {
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte(i*7 + i>>8)
	}
	for _, n := range []int{1, 4, 8} {
		for l := 16 * n; l <= len(buf); l += 16 {
			want := uint16(crcmath.Bitwise(Params, 0x1234, buf[:l]))
			if got := uint16(crcmath.FoldUpdate(Params, &foldTable, n, 0x1234, buf[:l])); got != want {
				t.Fatalf("accumulators=%d len=%d: fold model %#x, oracle %#x", n, l, got, want)
			}
		}
	}
}

// Baselines for the benchmarks: a byte-at-a-time table and slicing-by-8.
func BenchmarkBaseline(b *testing.B) {
	buf := make([]byte, 1<<20)
	for _, n := range kerneltest.Sizes {
		b.Run("impl=bytewise/op=update/size="+kerneltest.SizeName(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			var crc uint16
			for b.Loop() {
				crc = updateBytes(crc, buf[:n])
			}
			kerneltest.Sink += uint64(crc)
		})
		b.Run("impl=slicing8/op=update/size="+kerneltest.SizeName(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			var crc uint16
			for b.Loop() {
				crc = updateSlicing8(crc, buf[:n])
			}
			kerneltest.Sink += uint64(crc)
		})
	}
}

// updateSlicing8 is a slicing-by-8 table loop, the common hand-rolled
// implementation, kept as a benchmark baseline.
func updateSlicing8(crc uint16, p []byte) uint16 {
	t := table
	for len(p) >= 8 {
		crc = t[7][p[0]^byte(crc>>8)] ^ t[6][p[1]^byte(crc)] ^
			t[5][p[2]] ^ t[4][p[3]] ^ t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]]
		p = p[8:]
	}
	return updateBytes(crc, p)
}
