//go:build !purego

package poly1305

import (
	"testing"
	"unsafe"

	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// The generated offsets are those of laneKey.
func TestLaneKeyLayout(t *testing.T) {
	var k laneKey
	if unsafe.Sizeof(k) != laneKeySize || laneKeyR != 0 || laneKeyS != 8*40 {
		t.Fatalf("laneKey: %d bytes, generator %d (R at %d, S at %d)", unsafe.Sizeof(k), laneKeySize, laneKeyR, laneKeyS)
	}
}

// The AVX2 lane kernel against the pure-Go lane model, limb for limb (the
// accumulators it leaves, not only the final tags).
func TestLanesAVX2Model(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2")
	}
	p := kerneltest.SeedBytes(4*4096 + 64)
	k := newPolyKey(kerneltest.SeedBytes(16))
	for chunks := 0; chunks <= 40; chunks++ {
		for _, stride := range []int{16 * chunks, 16*chunks + 16, 4096} {
			var got, want laneState
			for i := range got {
				got[i] = uint64(i) * 12345 % (1 << 26)
			}
			want = got
			lanesAVX2Kernel(&got, p, stride, chunks, &k.lanes)
			laneModel(&want, p, stride, chunks, &k.lanes)
			if got != want {
				t.Fatalf("chunks=%d stride=%d: kernel %x, model %x", chunks, stride, got, want)
			}
		}
	}
}

// The lane kernel alone, four blocks of 4 KiB per call.
func BenchmarkLanesAVX2(b *testing.B) {
	if !hasAVX2 {
		b.Skip("no AVX2")
	}
	p := kerneltest.SeedBytes(4 * 4096)
	k := newPolyKey(kerneltest.SeedBytes(16))
	var h laneState
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		lanesAVX2Kernel(&h, p, 4096, 256, &k.lanes)
	}
	sinkTag[0] = byte(h[0])
}
