//go:build !purego

package poly1305

import (
	"github.com/difctl/difctl/kernels/internal/impl"
	"golang.org/x/sys/cpu"
)

//go:generate sh -c "cd ../_asm && go run ./poly1305 -out ../poly1305/zblocks_amd64.s -stubs ../poly1305/zblocks_amd64.go"

var (
	hasAVX2 = cpu.X86.HasAVX2
	hasIFMA = cpu.X86.HasAVX512F && cpu.X86.HasAVX512IFMA
)

// registerArch registers the lane kernels of zblocks_amd64.s, best first:
// eight blocks in the 64-bit lanes of ZMM registers with 52-bit multiplies
// (AVX-512 IFMA), and four in YMM registers (AVX2).
func registerArch() {
	impl.Register(pkgName, "avx512ifma", hasIFMA, func() { blocks = blocksIFMA })
	impl.Register(pkgName, "avx2", hasAVX2, func() { blocks = blocksAVX2 })
}

func blocksIFMA(k *polyKey, acc [][2]uint64, ad []byte, adLen int, p []byte, blockLen, stride int) {
	blocksLanes(&kernelIFMA, k, acc, ad, adLen, p, blockLen, stride)
}

var kernelIFMA = laneKernel{
	lanes: lanes44,
	absorb: func(h *laneBuf, p []byte, stride, chunks int, k *polyKey) {
		lanesIFMA((*[24]uint64)(h), p, stride, chunks, (*[10]uint64)(&k.ifma))
	},
	state: func(h *laneBuf, l int, r0, r1 uint64) state { return laneToState44(laneState44Of(h), l, r0, r1) },
}

func blocksAVX2(k *polyKey, acc [][2]uint64, ad []byte, adLen int, p []byte, blockLen, stride int) {
	blocksLanes(&kernelAVX2, k, acc, ad, adLen, p, blockLen, stride)
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
	lanesAVX2((*[20]uint64)(h), p, stride, chunks, (*[80]uint64)(key))
}
