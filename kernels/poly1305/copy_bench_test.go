package poly1305

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// copyPiece is the bytes of one BlocksADCopy call in the benchmark: the
// pieces of consecutive blocks blockdev's keyed read passes.
const copyPiece = 64 << 10

// BenchmarkBlocksADCopy compares, per implementation (impl=NAME), block
// size (512 B and 4 KiB, 32 bytes of associated data per block) and
// source, the two ways of getting verified tags of a copy: side fused is
// BlocksADCopy, one pass; side twoPass is copy (the builtin, memmove) then
// BlocksAD over the copy. Both sides run within every iteration, in an
// order that alternates, each over a window of the source in 64 KiB calls
// into a 64 KiB destination (the caller's buffer, in the L1/L2 cache). The
// sources: src=256KiB, the window is the whole source, in the L2 cache;
// src=64MiB, larger than the L3 cache (16 MiB per CCX on the build
// machine), each side's window the next 1 MiB of it, walked sequentially
// and wrapping, so that every window is cold, as a page cache read is.
// Metrics: fused-MB/s and twoPass-MB/s (thread CPU time), x-twoPass (the
// median of the per-iteration ratios twoPass time / fused time: above 1,
// fused is faster). The default MB/s counts both sides.
func BenchmarkBlocksADCopy(b *testing.B) {
	aesKey, r := kerneltest.SeedBytes(16), kerneltest.SeedBytes(32)[16:]
	k, err := NewKey(aesKey, r)
	if err != nil {
		b.Fatal(err)
	}
	srcs := []struct {
		name         string
		size, window int
	}{{"256KiB", 256 << 10, 256 << 10}, {"64MiB", 64 << 20, 1 << 20}}
	big := kerneltest.SeedBytes(64 << 20)
	kerneltest.ForEachB(b, pkgName, func(b *testing.B) {
		for _, bl := range benchBlocks {
			for _, src := range srcs {
				b.Run(fmt.Sprintf("block=%s/src=%s", kerneltest.SizeName(bl), src.name), func(b *testing.B) {
					copyRun(b, k, big[:src.size], src.window, bl)
				})
			}
		}
	})
}

func copyRun(b *testing.B, k *Key, src []byte, window, bl int) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const adLen = 32
	n := copyPiece / bl
	q := make([]byte, copyPiece)
	tags := make([]Tag, n)
	ad := kerneltest.SeedBytes(n * adLen)
	var nonce Nonce
	off := 0
	// next returns the next window of src.
	next := func() []byte {
		if off+window > len(src) {
			off = 0
		}
		w := src[off : off+window]
		off += window
		return w
	}
	sides := [2]func(w []byte){
		func(w []byte) { // fused
			for i := 0; i < len(w); i += copyPiece {
				if err := k.BlocksADCopy(tags, &nonce, ad, adLen, q, w[i:i+copyPiece], bl, bl); err != nil {
					b.Fatal(err)
				}
			}
		},
		func(w []byte) { // twoPass
			for i := 0; i < len(w); i += copyPiece {
				copy(q, w[i:i+copyPiece])
				if err := k.BlocksAD(tags, &nonce, ad, adLen, q, bl, bl); err != nil {
					b.Fatal(err)
				}
			}
		},
	}
	// Warm up both sides (the vector unit's clock: see BenchmarkRatio).
	for t0 := kerneltest.ThreadCPU(); kerneltest.ThreadCPU()-t0 < 3*time.Millisecond; {
		sides[0](next())
		sides[1](next())
	}
	var tot [2]time.Duration
	var ratios []float64
	b.SetBytes(int64(2 * window))
	for it := 0; b.Loop(); it++ {
		var t [2]time.Duration
		for j := range 2 {
			s := (j + it) % 2
			w := next()
			t0 := kerneltest.ThreadCPU()
			sides[s](w)
			t[s] = kerneltest.ThreadCPU() - t0
		}
		tot[0] += t[0]
		tot[1] += t[1]
		if t[0] > 0 {
			ratios = append(ratios, float64(t[1])/float64(t[0]))
		}
	}
	sinkTag = tags[n-1]
	if len(ratios) > 0 && tot[0] > 0 && tot[1] > 0 {
		mb := float64(window) * float64(b.N) / 1e6
		b.ReportMetric(mb/tot[0].Seconds(), "fused-MB/s")
		b.ReportMetric(mb/tot[1].Seconds(), "twoPass-MB/s")
		b.ReportMetric(median(ratios), "x-twoPass")
	}
}
