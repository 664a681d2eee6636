//go:build !purego

package crc32c

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// BenchmarkHybridZVariants is the measurement behind blocksZ and
// blocksHybridZ: the
// avx512 fold kernel and each AVX-512 blocks kernel (c CRC32 streams beside
// 16-c fold blocks) over blocks in cache, at the layouts Blocks meets and
// at the segment lengths of Update's chunks, timed by the thread's CPU
// time in interleaved rounds (-benchtime Nx is N rounds, each side about
// 5 ms); it reports the median GB/s of each kernel.
func BenchmarkHybridZVariants(b *testing.B) {
	if !hasHybridZ {
		b.Skip("the CPU lacks AVX-512 VPCLMULQDQ")
	}
	kernels := []blocksZFunc{hybridBlocksZ0, hybridBlocksZ1, hybridBlocksZ2, hybridBlocksZ3}
	// {block, stride, bytes of blocks, misalignment of the buffer}
	for _, l := range [][4]int{{256, 256, 1 << 20, 0}, {512, 512, 1 << 20, 0}, {512, 520, 1 << 20, 0}, {1024, 1024, 1 << 20, 0},
		{2048, 2048, 1 << 20, 0}, {4096, 4096, 1 << 20, 0}, {4096, 4104, 1 << 20, 0}, {512, 512, 32 << 10, 0}, {1024, 1024, 32 << 10, 0},
		{512, 512, 1 << 20, 8}, {4096, 4096, 1 << 20, 8}, {512, 512, 32 << 10, 8}, {2048, 2048, 32 << 10, 0}, {2048, 2048, 32 << 10, 8},
		{1024, 1032, 1 << 20, 0}, {2048, 2056, 1 << 20, 0}, {4096, 4112, 1 << 20, 0}, {256, 264, 1 << 20, 0}} {
		bl, stride := l[0], l[1]
		n := l[2] / bl / 16 * 16
		p := make([]byte, (n-1)*stride+bl+64)[l[3]:]
		for i := range p {
			p[i] = byte(i * 7)
		}
		dst := make([]uint32, n)
		runs := []func(){func() { blocksAVX512(dst, p, bl, stride) }}
		names := []string{"fold"}
		for c, k := range kernels {
			runs = append(runs, func() { k(&dst[0], &p[0], n/16, bl, stride, 0xffffffff, 0xffffffff, &foldTable.Fold[4]) })
			names = append(names, fmt.Sprintf("c=%d", c))
		}
		runs = append(runs, func() { hybridBlocksZ0U4(&dst[0], &p[0], n/16, bl, stride, 0xffffffff, 0xffffffff, &foldTable.Fold[4]) })
		names = append(names, "c=0U4")
		runs = append(runs, func() { hybridBlocksZ2U4(&dst[0], &p[0], n/16, bl, stride, 0xffffffff, 0xffffffff, &foldTable.Fold[4]) })
		names = append(names, "c=2U4")
		for c, k := range map[int]blocksZFunc{3: hybridBlocksZ3U4, 4: hybridBlocksZ4U4, 5: hybridBlocksZ5U4} {
			runs = append(runs, func() { k(&dst[0], &p[0], n/16, bl, stride, 0xffffffff, 0xffffffff, &foldTable.Fold[4]) })
			names = append(names, fmt.Sprintf("c=%dU4", c))
		}
		kc := hybridKS[bl/64-1]
		for _, k := range []struct {
			name string
			f    blocksZSFunc
		}{{"c=3S", hybridBlocksZ3S}, {"c=2SU4", hybridBlocksZ2SU4}, {"c=3SU4", hybridBlocksZ3SU4}} {
			runs = append(runs, func() { k.f(&dst[0], &p[0], n/16, bl, stride, 0xffffffff, 0xffffffff, &foldTable.Fold[4], kc) })
			names = append(names, k.name)
		}
		for c, k := range []blocksZFunc{hybridBlocksZA0, hybridBlocksZA1, hybridBlocksZA2} {
			runs = append(runs, func() { k(&dst[0], &p[0], n/16, bl, stride, 0xffffffff, 0xffffffff, &foldTable.Fold[4]) })
			names = append(names, fmt.Sprintf("za%d", c))
		}
		b.Run(fmt.Sprintf("block=%d/stride=%d/bytes=%d/misaligned=%d", bl, stride, n*bl, l[3]), func(b *testing.B) {
			benchRounds(b, runs, names, n*bl)
		})
	}
}

// BenchmarkSmallZ is the measurement behind smallZMax: smallUpdateZ, one
// CRC32 stream, three, and the avx512 fold kernel,
// on independent calls at the lengths around them.
func BenchmarkSmallZ(b *testing.B) {
	if !hasHybridZ {
		b.Skip("the CPU lacks AVX-512 VPCLMULQDQ")
	}
	var sink uint32
	for _, n := range []int{16, 32, 64, 96, 128, 192, 256, 384, 512, 1024, 2048} {
		p := make([]byte, n)
		b.Run(fmt.Sprintf("size=%d/kernel=small", n), func(b *testing.B) {
			for b.Loop() {
				sink ^= smallUpdateZ(0, &p[0], n, foldTables)
			}
		})
		b.Run(fmt.Sprintf("size=%d/kernel=one", n), func(b *testing.B) {
			for b.Loop() {
				sink ^= updateShort(0, p)
			}
		})
		if n >= 48 {
			b.Run(fmt.Sprintf("size=%d/kernel=three", n), func(b *testing.B) {
				s := medium(n)
				for b.Loop() {
					sink ^= ^hybridShort3(^uint32(0), &p[0], n-3*s, s, &hybridK3[s/hybridShortUnit-2])
				}
			})
		}
		if n >= 16 {
			b.Run(fmt.Sprintf("size=%d/kernel=fold", n), func(b *testing.B) {
				for b.Loop() {
					sink ^= foldUpdateAVX512(0, p, foldTables)
				}
			})
		}
	}
	_ = sink
}

// TestBlocksZCutoffs runs blocksHybridZ at the block lengths where it
// changes kernels (blocksZ's, the rows of hybridKS), on and off a line
// (where the avx512 fold kernel runs), against hash/crc32: kerneltest's
// BlockCases do not reach all of them.
func TestBlocksZCutoffs(t *testing.T) {
	if !hasHybridZ {
		t.Skip("the CPU lacks AVX-512 VPCLMULQDQ")
	}
	// Both CPU families' picks, whichever this CPU is: they run on any
	// CPU with the kernels' features.
	defer func(z bool) { zen4 = z }(zen4)
	for _, z := range []bool{false, true} {
		zen4 = z
		t.Run(fmt.Sprintf("zen4=%v", z), testBlocksZCutoffs)
	}
}

func testBlocksZCutoffs(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	// Update's chunks run through blocksZ too.
	long := make([]byte, 3*16*hybridZMaxSeg+777)
	for i := range long {
		long[i] = byte(r.Uint32())
	}
	for _, n := range []int{hybridZMin, hybridZMin + 1000, 16*hybridZMaxSeg + 777, len(long)} {
		crc := r.Uint32()
		if got, want := updateHybridZ(crc, long[:n]), crc32.Update(crc, castagnoli, long[:n]); got != want {
			t.Fatalf("Update of %d bytes: %#x, want %#x", n, got, want)
		}
	}
	for _, bl := range []int{255, 256, 257, 319, 320, 512, 767, 768, 4096, 64*hybridSubMaxSteps + 63, 64 * (hybridSubMaxSteps + 1)} {
		for _, gap := range []int{0, 8, 64} {
			for _, align := range []int{0, 8} {
				n := 17
				stride := bl + gap
				buf := make([]byte, align+(n-1)*stride+bl)
				for i := range buf {
					buf[i] = byte(r.Uint32())
				}
				p := buf[align:]
				dst := make([]uint32, n)
				blocksHybridZ(dst, p, bl, stride)
				for i := range dst {
					if want := crc32.Checksum(p[i*stride:][:bl], castagnoli); dst[i] != want {
						t.Fatalf("block=%d stride=%d align=%d: dst[%d] = %#x, want %#x", bl, stride, align, i, dst[i], want)
					}
				}
			}
		}
	}
}

// TestEntryTarget checks that updateEntry's own path is live under
// avx512hybrid: the dispatch variable then holds the same function value as
// entryTarget, which updateEntry compares word for word. (Were they to
// differ, every call would take the fallback: correct, and slower.)
func TestEntryTarget(t *testing.T) {
	if !hasHybridZ {
		t.Skip("the CPU lacks AVX-512 VPCLMULQDQ")
	}
	if err := impl.Select(pkgName, "avx512hybrid"); err != nil {
		t.Fatal(err)
	}
	defer impl.Reset(pkgName)
	if *(*unsafe.Pointer)(unsafe.Pointer(&update)) != *(*unsafe.Pointer)(unsafe.Pointer(&entryTarget)) {
		t.Fatal("update under avx512hybrid is not the word entryTarget holds")
	}
	if err := impl.Select(pkgName, "avx512"); err != nil {
		t.Fatal(err)
	}
	if *(*unsafe.Pointer)(unsafe.Pointer(&update)) == *(*unsafe.Pointer)(unsafe.Pointer(&entryTarget)) {
		t.Fatal("update under avx512 is the word entryTarget holds")
	}
}

// benchRounds times runs side by side in interleaved rounds (one round per
// b.Loop iteration), each run repeated about 5 ms of the thread's CPU
// time, and reports the median GB/s of each (bytes a run) under its name.
// It locks the benchmark's goroutine to its thread, whose CPU time is then
// its own.
func benchRounds(b *testing.B, runs []func(), names []string, bytes int) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	reps := 1
	for t := kerneltest.ThreadCPU(); kerneltest.ThreadCPU()-t < 5*time.Millisecond; reps *= 2 {
		for range reps {
			runs[0]()
		}
	}
	gbs := make([][]float64, len(runs))
	for b.Loop() {
		for i, r := range runs {
			t := kerneltest.ThreadCPU()
			for range reps {
				r()
			}
			gbs[i] = append(gbs[i], float64(reps*bytes)/float64(kerneltest.ThreadCPU()-t))
		}
	}
	var s []string
	for i, g := range gbs {
		slices.Sort(g)
		s = append(s, fmt.Sprintf("%s %.1f", names[i], g[len(g)/2]))
		b.ReportMetric(g[len(g)/2], names[i]+"-GB/s")
	}
	b.Log(strings.Join(s, ", "))
}
