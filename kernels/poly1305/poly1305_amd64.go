//go:build !purego

package poly1305

import (
	"github.com/difctl/difctl/kernels/internal/impl"
	"golang.org/x/sys/cpu"
)

//go:generate go run -C ../_asm ./poly1305 -out ../poly1305/zblocks_amd64.s -stubs ../poly1305/zblocks_amd64.go

var (
	hasAVX2 = cpu.X86.HasAVX2
	hasIFMA = cpu.X86.HasAVX512F && cpu.X86.HasAVX512IFMA
)

// registerArch registers the lane kernels of zblocks_amd64.s, best first:
// eight blocks in the 64-bit lanes of ZMM registers with 52-bit multiplies
// (avx512ifma); four in YMM registers plus a fifth in general registers
// (hybrid: the vector multiplier is the bottleneck of the YMM lanes, and the
// integer one is idle); four in YMM registers alone (avx2).
func registerArch() {
	impl.Register(pkgName, "avx512ifma", hasIFMA, func() { blocks = blocksIFMA })
	impl.Register(pkgName, "hybrid", hasAVX2, func() { blocks = blocksHybrid })
	impl.Register(pkgName, "avx2", hasAVX2, func() { blocks = blocksAVX2 })
}

// blocksHybrid runs groups of five blocks through the hybrid kernel and
// the rest through the AVX2 one (groups of four, then the generic code),
// splitting len(acc) as hybridGroups says.
func blocksHybrid(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, p []byte, blockLen, stride int) {
	m := 5 * hybridGroups(len(acc))
	blocksLanes(&kernelHybrid, k, acc[:m], h, ad, adLen, p, blockLen, stride)
	if m < len(acc) {
		blocksAVX2(k, acc[m:], h, ad[m*adLen:], adLen, p[m*stride:], blockLen, stride)
	}
}

// hybridGroups returns how many groups of five of n blocks go to the hybrid
// kernel: the a that minimises the cost of 5a blocks there, then groups of
// four through the AVX2 kernel and the rest through the generic code, at
// relative costs per block of 57, 60 and 120. The kernels alone, alternating
// (BenchmarkHybridOverAVX2), put the hybrid one at 1.12-1.25 times the AVX2
// one's speed, and Blocks over 256 KiB (BenchmarkHybridBlocks) at 1.08-1.10
// (512-byte blocks) and 1.14-1.15 (4 KiB); but over 16 blocks of 4 KiB
// three groups of five and a generic block ran no faster than four groups
// of four, hence 57 rather than 53; the generic code runs at about half the
// AVX2 speed. So 16 blocks go as four groups of four
// (960) rather than three of five and one generic block (975), and 128 as
// 24 groups of five and two of four, nothing left to the generic code.
func hybridGroups(n int) int {
	best, bestCost := 0, -1
	for a := n / 5; a >= 0 && a >= n/5-4; a-- {
		rem := n - 5*a
		cost := 57*5*a + 60*4*(rem/4) + 120*(rem%4)
		if bestCost < 0 || cost < bestCost {
			best, bestCost = a, cost
		}
	}
	return best
}

// kernelHybrid: lanes 0..3 in radix 2^26 at h[0:20], lane 4 in the generic
// form at h[20:23].
var kernelHybrid = laneKernel{
	lanes: lanes + 1,
	absorb: func(h *laneBuf, p []byte, stride, chunks int, k *polyKey) {
		lanesHybridAVX2((*[24]uint64)(h), p, stride, chunks, (*[162]uint64)(&k.lanes))
	},
	state: func(h *laneBuf, l int, r0, r1 uint64) state {
		if l == lanes {
			return state{h0: h[20], h1: h[21], h2: h[22], r0: r0, r1: r1}
		}
		return laneToState(laneState26(h), l, r0, r1)
	},
}

func blocksIFMA(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, p []byte, blockLen, stride int) {
	blocksLanes(&kernelIFMA, k, acc, h, ad, adLen, p, blockLen, stride)
}

var kernelIFMA = laneKernel{
	lanes: lanes44,
	absorb: func(h *laneBuf, p []byte, stride, chunks int, k *polyKey) {
		lanesIFMA((*[24]uint64)(h), p, stride, chunks, (*[10]uint64)(&k.ifma))
	},
	state: func(h *laneBuf, l int, r0, r1 uint64) state { return laneToState44(laneState44Of(h), l, r0, r1) },
}

func blocksAVX2(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, p []byte, blockLen, stride int) {
	blocksLanes(&kernelAVX2, k, acc, h, ad, adLen, p, blockLen, stride)
}

var kernelAVX2 = laneKernel{
	lanes: lanes,
	absorb: func(h *laneBuf, p []byte, stride, chunks int, k *polyKey) {
		lanesAVX2Kernel(laneState26(h), p, stride, chunks, &k.lanes)
	},
	state: func(h *laneBuf, l int, r0, r1 uint64) state { return laneToState(laneState26(h), l, r0, r1) },
}

// lanesAVX2Kernel is lanesAVX2 with the package's types.
func lanesAVX2Kernel(h *laneState, p []byte, stride, chunks int, key *laneKey) {
	lanesAVX2((*[20]uint64)(h), p, stride, chunks, (*[162]uint64)(key))
}
