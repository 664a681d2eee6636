package keyedcopy

import (
	"encoding/binary"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/difctl/difctl/kernels/internal/kerneltest"
	"github.com/difctl/difctl/kernels/poly1305"
	"github.com/difctl/difctl/kernels/t10crc32c"
)

// BenchmarkFusedRatio measures, alternately within every iteration and in
// thread CPU time (so that the sides of each ratio share the machine's
// load), over the same 256 KiB of blocks with a keyed volume's associated
// data:
//
//   - fused: BlocksCopy with the active implementation, then
//     poly1305.Key.TagsFromPartials (the keyed read's computation now);
//   - twoPass: t10crc32c.BlocksCopy, then poly1305.Key.BlocksAD over the
//     copy (the keyed read's computation before);
//   - crc: t10crc32c.BlocksCopy alone (the unkeyed read's computation).
//
// and, for the split, each half of fused (kernel: BlocksCopy; finish:
// TagsFromPartials) and of twoPass's Poly1305 (blocksAD) alone. It reports
// every side's MB per CPU second (MB/cpu-s-NAME) and x-twoPass, how many times faster fused is than twoPass, and
// pct-crc, fused's speed as a percentage of crc's (the kernel-level
// counterpart of BenchmarkVolumeReadKeyed's %unkeyed), each the median of
// the per-iteration ratios. Each side runs 8 times back to back (about 0.5
// ms at 512-byte blocks) so that the AVX2 code is in its steady state (see
// kernels/poly1305's BenchmarkRatio on the warm-up of this CPU's vector
// units):
//
//	go test -run '^$' -bench FusedRatio -benchtime 200x ./kernels/keyedcopy
func BenchmarkFusedRatio(b *testing.B) {
	key := testKey(b, 6)
	const size, rounds = 256 << 10, 8
	for _, bl := range []int{512, 4096} {
		n := size / bl
		p, q := kerneltest.SeedBytes(size), make([]byte, size)
		d, s, pt := make([]uint16, n), make([]uint32, n), make([]poly1305.Partial, n)
		tags := make([]poly1305.Tag, n)
		ad := make([]byte, n*adLen)
		for i := range n {
			copy(ad[i*adLen:], "volume-identity!")
			binary.BigEndian.PutUint64(ad[i*adLen+16:], uint64(1000+i))
			binary.BigEndian.PutUint64(ad[i*adLen+24:], 77)
		}
		var nonce poly1305.Nonce
		sides := []func(){
			func() {
				_ = BlocksCopy(d, s, pt, q, p, bl, bl, key)
				_ = key.TagsFromPartials(tags, &nonce, ad, adLen, pt, bl)
			},
			func() {
				_ = t10crc32c.BlocksCopy(d, s, q, p, bl, bl)
				_ = key.BlocksAD(tags, &nonce, ad, adLen, q, bl, bl)
			},
			func() { _ = t10crc32c.BlocksCopy(d, s, q, p, bl, bl) },
			func() { _ = BlocksCopy(d, s, pt, q, p, bl, bl, key) },
			func() { _ = key.TagsFromPartials(tags, &nonce, ad, adLen, pt, bl) },
			func() { _ = key.BlocksAD(tags, &nonce, ad, adLen, q, bl, bl) },
		}
		names := []string{"fused", "twoPass", "crc", "kernel", "finish", "blocksAD"}
		b.Run("block="+kerneltest.SizeName(bl), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var two, crc []float64
			var tSide [6]time.Duration
			b.SetBytes(size * rounds)
			for b.Loop() {
				var t [6]time.Duration
				for i, f := range sides {
					t0 := kerneltest.ThreadCPU()
					for range rounds {
						f()
					}
					t[i] = kerneltest.ThreadCPU() - t0
				}
				for i := range t {
					tSide[i] += t[i]
				}
				if t[0] > 0 {
					two = append(two, float64(t[1])/float64(t[0]))
					crc = append(crc, 100*float64(t[2])/float64(t[0]))
				}
			}
			if len(two) > 0 {
				slices.Sort(two)
				slices.Sort(crc)
				b.ReportMetric(two[len(two)/2], "x-twoPass")
				b.ReportMetric(crc[len(crc)/2], "pct-crc")
				for i, name := range names {
					b.ReportMetric(float64(size*rounds)*float64(b.N)/tSide[i].Seconds()/1e6, "MB/cpu-s-"+name)
				}
			}
		})
	}
}
