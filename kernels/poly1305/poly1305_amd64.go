//go:build !purego

package poly1305

import (
	"github.com/difctl/difctl/kernels/internal/impl"
	"golang.org/x/sys/cpu"
)

//go:generate sh -c "cd ../_asm && go run ./poly1305 -out ../poly1305/zblocks_amd64.s -stubs ../poly1305/zblocks_amd64.go"

var hasAVX2 = cpu.X86.HasAVX2

// registerArch registers the lane kernel of zblocks_amd64.s: four blocks in
// the 64-bit lanes of YMM registers (AVX2).
func registerArch() {
	impl.Register(pkgName, "avx2", hasAVX2, func() { blocks = blocksAVX2 })
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
