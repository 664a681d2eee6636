//go:build !purego

package poly1305

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// The generated offsets are those of laneKey.
func TestLaneKeyLayout(t *testing.T) {
	var k laneKey
	if unsafe.Sizeof(k) != laneKeySize || laneKeyR != 0 || laneKeyS != 8*80 || laneKeyScalar != 8*160 {
		t.Fatalf("laneKey: %d bytes, generator %d (R at %d, S at %d)", unsafe.Sizeof(k), laneKeySize, laneKeyR, laneKeyS)
	}
	var k8 laneKey8
	if unsafe.Sizeof(k8) != laneKey8Size || laneKey8S != 8*160 || laneKey8Scalar != 8*320 {
		t.Fatalf("laneKey8: %d bytes, generator %d (S at %d, r at %d)", unsafe.Sizeof(k8), laneKey8Size, laneKey8S, laneKey8Scalar)
	}
	// laneKey8 starts with laneKey's powers r..r^4, its S part with theirs.
	pk := newPolyKey(kerneltest.SeedBytes(16))
	for w := range 80 {
		if pk.lanes8[w] != pk.lanes[w] || pk.lanes8[160+w] != pk.lanes[80+w] {
			t.Fatalf("laneKey8 word %d differs from laneKey", w)
		}
	}
	if pk.lanes8[320] != pk.r0 || pk.lanes8[321] != pk.r1 {
		t.Fatal("laneKey8: r0, r1 not at [320:322]")
	}
}

// lanesAVX2R8Kernel is lanesAVX2R8 with the package's types.
func lanesAVX2R8Kernel(h *laneState, p []byte, stride, chunks int, key *laneKey8) {
	lanesAVX2R8((*[20]uint64)(h), p, stride, chunks, (*[322]uint64)(key))
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
			start := got
			want = got
			lanesAVX2Kernel(&got, p, stride, chunks, &k.lanes)
			laneModel(&want, p, stride, chunks, &k.lanes)
			if got != want {
				t.Fatalf("chunks=%d stride=%d: kernel %x, model %x", chunks, stride, got, want)
			}
			got8, want8 := start, start
			lanesAVX2R8Kernel(&got8, p, stride, chunks, &k.lanes8)
			laneModel8(&want8, p, stride, chunks, &k.lanes8)
			if got8 != want8 {
				t.Fatalf("R8 chunks=%d stride=%d: kernel %x, model %x", chunks, stride, got8, want8)
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

// The hybrid kernel alone, six blocks of 4 KiB per call.
func BenchmarkLanesHybridAVX2(b *testing.B) {
	if !hasHybrid {
		b.Skip("no AVX2 and BMI2")
	}
	p := kerneltest.SeedBytes(6 * 4096)
	k := newPolyKey(kerneltest.SeedBytes(16))
	var h laneBuf
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		lanesHybridAVX2((*[26]uint64)(&h), p, 4096, 256, (*[162]uint64)(&k.lanes))
	}
	sinkTag[0] = byte(h[0])
}

// The hybrid kernel's throughput over the AVX2 one's, alternating within
// every iteration (thread CPU time): x-avx2 > 1 means the scalar lanes pay.
func BenchmarkHybridOverAVX2(b *testing.B) {
	if !hasHybrid {
		b.Skip("no AVX2 and BMI2")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p := kerneltest.SeedBytes(6 * 4096)
	k := newPolyKey(kerneltest.SeedBytes(16))
	var h laneBuf
	var tA, tH time.Duration
	for b.Loop() {
		t0 := kerneltest.ThreadCPU()
		for range 3 {
			lanesAVX2Kernel(laneState26(&h), p, 4096, 256, &k.lanes)
		}
		t1 := kerneltest.ThreadCPU()
		for range 2 {
			lanesHybridAVX2((*[26]uint64)(&h), p, 4096, 256, (*[162]uint64)(&k.lanes))
		}
		t2 := kerneltest.ThreadCPU()
		tA += t1 - t0 // 12 blocks
		tH += t2 - t1 // 12 blocks
	}
	sinkTag[0] = byte(h[0])
	b.ReportMetric(float64(tA)/float64(tH), "x-avx2")
}

// The group planner never leaves more than three blocks to the generic
// code, and splits the cases its comment names as it says.
func TestHybridGroups(t *testing.T) {
	for n := 0; n <= 200; n++ {
		a := hybridGroups(n)
		rem := n - hybridBlocks*a
		if a < 0 || rem < 0 || n >= 4 && rem%4 > 3 || n >= 8 && rem%4 != 0 && n%2 == 0 {
			t.Fatalf("n=%d: %d groups of six", n, a)
		}
	}
	for _, c := range [][2]int{{64, 10}, {16, 2}, {8, 0}, {6, 1}, {4, 0}, {128, 20}} {
		if got := hybridGroups(c[0]); got != c[1] {
			t.Errorf("hybridGroups(%d) = %d, want %d", c[0], got, c[1])
		}
	}
}

// Key.Blocks under the hybrid implementation over under avx2, alternating
// within every iteration (thread CPU time), over 256 KiB of blocks:
// x-avx2 > 1 means the hybrid one is the faster default.
func BenchmarkHybridBlocks(b *testing.B) {
	if !hasAVX2 {
		b.Skip("no AVX2")
	}
	defer impl.Reset(pkgName)
	k, err := NewKey(kerneltest.SeedBytes(16), kerneltest.SeedBytes(32)[16:])
	if err != nil {
		b.Fatal(err)
	}
	p := kerneltest.SeedBytes(256 << 10)
	var nonce Nonce
	for _, bl := range benchBlocks {
		b.Run("block="+kerneltest.SizeName(bl), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			dst := make([]Tag, len(p)/bl)
			var tA, tH time.Duration
			for i := 0; b.Loop(); i++ {
				// Alternate which goes first, against order effects.
				for _, name := range [2][2]string{{"avx2", "hybrid"}, {"hybrid", "avx2"}}[i%2] {
					impl.Select(pkgName, name)
					t0 := kerneltest.ThreadCPU()
					k.Blocks(dst, &nonce, p, bl, bl)
					if d := kerneltest.ThreadCPU() - t0; name == "avx2" {
						tA += d
					} else {
						tH += d
					}
				}
			}
			b.ReportMetric(float64(tA)/float64(tH), "x-avx2")
		})
	}
}

// The hybrid kernel against the models, word for word: lanes 0..3 as the
// lane model leaves them, lanes 4 and 5 as the generic code leaves its
// state.
func TestLanesHybridModel(t *testing.T) {
	if !hasHybrid {
		t.Skip("no AVX2 and BMI2")
	}
	p := kerneltest.SeedBytes(6*4096 + 64)
	k := newPolyKey(kerneltest.SeedBytes(16))
	for chunks := 0; chunks <= 40; chunks++ {
		for _, stride := range []int{16 * chunks, 16*chunks + 16, 4096} {
			var got laneBuf
			for i := range 20 {
				got[i] = uint64(i) * 12345 % (1 << 26)
			}
			got[20], got[21], got[22] = 0x0123456789abcdef, 0xfedcba9876543210, 3
			got[23], got[24], got[25] = 0xffffffffffffffff, 0xfffffffffffffffe, 4
			start := got
			for _, r8 := range []bool{false, true} {
				got, want := start, start
				if r8 {
					lanesHybridR8((*[26]uint64)(&got), p, stride, chunks, (*[322]uint64)(&k.lanes8))
					laneModel8(laneState26(&want), p, stride, chunks, &k.lanes8)
				} else {
					lanesHybridAVX2((*[26]uint64)(&got), p, stride, chunks, (*[162]uint64)(&k.lanes))
					laneModel(laneState26(&want), p, stride, chunks, &k.lanes)
				}
				for l := range 2 {
					w := 20 + 3*l
					s := state{h0: want[w], h1: want[w+1], h2: want[w+2], r0: k.r0, r1: k.r1}
					s.chunks(p[(4+l)*stride : (4+l)*stride+16*chunks])
					want[w], want[w+1], want[w+2] = s.h0, s.h1, s.h2
				}
				if got != want {
					t.Fatalf("r8=%v chunks=%d stride=%d: kernel %x, models %x", r8, chunks, stride, got, want)
				}
			}
		}
	}
}

// The AVX2 and hybrid kernels on extreme inputs: all-ones data, all-ones r
// and the r of the corpus entry FuzzBlocks/1cfde75b9e6d160e (whose
// accumulators end with limbs of exactly 2^26-1 and 2^26-5), accumulators
// starting at zero or at the largest limbs a carry chain leaves. The
// kernels must match the models limb for limb, and every lane, converted
// to the generic form as blocksLanes converts it (kern.state), must reduce
// to what the generic code computes: the limb comparison alone passed while
// the conversion of such limbs lost a carry of 2^52.
func TestLanesExtremes(t *testing.T) {
	if !hasHybrid {
		t.Skip("no AVX2 and BMI2")
	}
	keys := [][]byte{
		bytes.Repeat([]byte{0xff}, 16),
		[]byte("\x00\x00\x00\x00\x00\x00\x00\x12\xff\xff\xff\xff\x00\x00\x00\x00"),
	}
	// The largest limbs after a carry chain: d0, d2, d3 < 2^26, d1, d4 <
	// 2^26 + 2^12; the scalar lanes' h2 <= 4.
	var maxH laneBuf
	for k := range 5 {
		for l := range lanes {
			maxH[4*k+l] = 1<<26 - 1
			if k == 1 || k == 4 {
				maxH[4*k+l] = 1<<26 + 1<<12 - 1
			}
		}
	}
	maxH[20], maxH[21], maxH[22] = ^uint64(0), ^uint64(0), 3
	maxH[23], maxH[24], maxH[25] = ^uint64(0), ^uint64(0), 3
	for _, rb := range keys {
		k := newPolyKey(rb)
		for chunks := 0; chunks <= 17; chunks++ {
			for _, stride := range []int{16 * chunks, 16*chunks + 16} {
				p := bytes.Repeat([]byte{0xff}, 5*stride+16*chunks)
				for _, start := range []laneBuf{{}, maxH} {
					for _, kern := range []struct {
						name string
						k    *laneKernel
					}{{"avx2", &kernelAVX2}, {"hybrid", &kernelHybrid}, {"avx2r8", &kernelAVX2R8}, {"hybrid8", &kernelHybrid8}} {
						got, want := start, start
						kern.k.absorb(&got, p, stride, chunks, &k)
						if strings.HasSuffix(kern.name, "8") {
							laneModel8(laneState26(&want), p, stride, chunks, &k.lanes8)
						} else {
							laneModel(laneState26(&want), p, stride, chunks, &k.lanes)
						}
						for l := range 2 {
							w := 20 + 3*l
							s := state{h0: want[w], h1: want[w+1], h2: want[w+2], r0: k.r0, r1: k.r1}
							s.chunks(p[(4+l)*stride : (4+l)*stride+16*chunks])
							want[w], want[w+1], want[w+2] = s.h0, s.h1, s.h2
						}
						if kern.k.lanes == lanes {
							copy(want[20:], start[20:])
						}
						if got != want {
							t.Fatalf("%s r=%x chunks=%d stride=%d: kernel %x, models %x", kern.name, rb, chunks, stride, got, want)
						}
						if start != (laneBuf{}) {
							continue
						}
						for l := range kern.k.lanes {
							s := kern.k.state(&got, l, k.r0, k.r1)
							g0, g1 := reduce(s.h0, s.h1, s.h2)
							ws := state{r0: k.r0, r1: k.r1}
							ws.chunks(p[l*stride : l*stride+16*chunks])
							w0, w1 := reduce(ws.h0, ws.h1, ws.h2)
							if g0 != w0 || g1 != w1 {
								t.Fatalf("%s r=%x chunks=%d stride=%d lane %d: %016x%016x, generic %016x%016x", kern.name, rb, chunks, stride, l, g1, g0, w1, w0)
							}
						}
					}
				}
			}
		}
	}
}

// BenchmarkEightChunk compares the eight-chunk kernels with the four-chunk
// ones inside Blocks, alternating within every iteration (thread CPU time,
// each side after four untimed calls of its own): pair=hybrid8 is
// lanesHybridR8 over lanesHybridAVX2, pair=avx2r8 lanesAVX2R8 over
// lanesAVX2. x-four > 1 means the eight-chunk kernel is faster.
func BenchmarkEightChunk(b *testing.B) {
	if !hasHybrid {
		b.Skip("no AVX2 and BMI2")
	}
	defer impl.Reset(pkgName)
	k, err := NewKey(kerneltest.SeedBytes(16), kerneltest.SeedBytes(32)[16:])
	if err != nil {
		b.Fatal(err)
	}
	p := kerneltest.SeedBytes(256 << 10)
	var nonce Nonce
	type blocksFunc = func(*polyKey, [][2]uint64, *laneBuf, []byte, int, []byte, int, int)
	for _, pair := range []struct {
		name        string
		four, eight blocksFunc
	}{{"hybrid8", blocksHybrid, blocksHybrid8}, {"avx2r8", blocksAVX2, blocksAVX2R8}} {
		for _, bl := range []int{512, 1024, 2048, 4096} {
			b.Run("pair="+pair.name+"/block="+kerneltest.SizeName(bl), func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				dst := make([]Tag, len(p)/bl)
				var t [2]time.Duration
				for i := 0; b.Loop(); i++ {
					for _, w := range [2][2]int{{0, 1}, {1, 0}}[i%2] {
						blocks = [2]blocksFunc{pair.four, pair.eight}[w]
						for range 4 {
							k.Blocks(dst, &nonce, p, bl, bl)
						}
						t0 := kerneltest.ThreadCPU()
						for range 4 {
							k.Blocks(dst, &nonce, p, bl, bl)
						}
						t[w] += kerneltest.ThreadCPU() - t0
					}
				}
				b.ReportMetric(float64(t[0])/float64(t[1]), "x-four")
			})
		}
	}
}

// state returns lane l of h in the generic form, with r: the lane kernels'
// pack, for the tests.
func (kern *laneKernel) state(h *laneBuf, l int, r0, r1 uint64) state {
	h0, h1, h2 := kern.pack(h, l)
	return state{h0: h0, h1: h1, h2: h2, r0: r0, r1: r1}
}
