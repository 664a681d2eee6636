//go:build !purego

package poly1305

import (
	"testing"

	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// The NEON kernel against the pure-Go NEON model, limb for limb (the
// accumulators it leaves, not only the final tags), from accumulators left
// by an earlier call.
func TestLanesNEONModel(t *testing.T) {
	if !hasNEON {
		t.Skip("no Advanced SIMD")
	}
	p := kerneltest.SeedBytes(2*4096 + 64)
	k := newPolyKey(kerneltest.SeedBytes(16))
	for chunks := 0; chunks <= 40; chunks++ {
		for _, stride := range []int{16 * chunks, 16*chunks + 16, 4096} {
			var got, want neonState
			for i := range got {
				got[i] = uint64(i)*12345%(1<<26) + uint64(i%2)<<26
			}
			want = got
			lanesNEON((*[10]uint64)(&got), p, stride, chunks, (*[18]uint64)(&k.neon))
			neonModel(&want, p, stride, chunks, &k.lanes)
			if got != want {
				t.Fatalf("chunks=%d stride=%d: kernel %x, model %x", chunks, stride, got, want)
			}
		}
	}
}

// The NEON kernel alone, two blocks of 4 KiB per call (under qemu this
// measures the emulator, not a CPU: kernels/_mca models the loop).
func BenchmarkLanesNEON(b *testing.B) {
	p := kerneltest.SeedBytes(2 * 4096)
	k := newPolyKey(kerneltest.SeedBytes(16))
	var h neonState
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		lanesNEON((*[10]uint64)(&h), p, 4096, 256, (*[18]uint64)(&k.neon))
	}
	sinkTag[0] = byte(h[0])
}
