//go:build !purego

package keyedcopy

import (
	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/poly1305"
	"golang.org/x/sys/cpu"
)

//go:generate go run -C ../_asm ./fusedpoly -out ../keyedcopy/zfusedpoly_amd64.s -stubs ../keyedcopy/zfusedpoly_amd64.go

// foldTable is the T10-DIF fold table the kernel reads.
var foldTable = crcmath.NewRevFoldTable(crcmath.NewFoldTable(crcmath.T10DIF))

// hasFused: the CPU features of fusedPolyCopyAVX (XMM folds with PCLMULQDQ
// in VEX encodings, YMM lanes with VPMULUDQ, CRC32Q).
var hasFused = cpu.X86.HasAVX2 && cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE42

// hasPair: the CPUs on which pair measured faster than avx: AVX-512 IFMA
// (poly1305's avx512ifma lane kernel, which Partials then runs) and
// VPCLMULQDQ (t10crc32c's AVX-512 kernels), with avx's own features.
var hasPair = cpu.X86.HasAVX512F && cpu.X86.HasAVX512IFMA && cpu.X86.HasAVX512VPCLMULQDQ && hasFused

func registerArch() {
	impl.Register(pkgName, "avx512", hasZ, func() { blocksCopy, fused = blocksCopyZ, true })
	impl.Register(pkgName, "pair", hasPair, func() { blocksCopy, fused = blocksCopyPair, true })
	impl.Register(pkgName, "avx", hasFused, func() { blocksCopy, fused = blocksCopyAVX, true })
}

// kernelRun is the number of groups of one kernel call: the lane
// accumulators of a call stay on the stack.
const kernelRun = 16

// blocksCopyAVX runs the fused kernel over the whole groups of blocks (if
// blockLen is a multiple of fusedStep), kernelRun groups a call, and moves
// each group's lane accumulators into parts; the other blocks take the
// generic path. The layout was checked.
func blocksCopyAVX(dst []uint16, sums []uint32, parts []poly1305.Partial, q, p []byte, blockLen, stride int, key *poly1305.Key) {
	g := len(dst) - len(dst)%fusedGroup
	if blockLen < fusedStep || blockLen%fusedStep != 0 {
		g = 0
	}
	lk := (*[fusedKeyWords]uint64)(key.LaneKey())
	var h [kernelRun * fusedHWords]uint64
	for i := 0; i < g; i += kernelRun * fusedGroup {
		m := min(kernelRun*fusedGroup, g-i)
		fusedPolyCopyAVX(dst[i:i+m], sums[i:i+m], h[:m/fusedGroup*fusedHWords], q[i*stride:], p[i*stride:], blockLen, stride, foldTable, lk)
		for b := range m {
			w := h[b/fusedGroup*fusedHWords:]
			l := b % fusedGroup
			parts[i+b] = poly1305.Partial{w[l], w[fusedGroup+l], w[2*fusedGroup+l], w[3*fusedGroup+l], w[4*fusedGroup+l]}
		}
	}
	if g < len(dst) {
		blocksCopyGeneric(dst[g:], sums[g:], parts[g:], q[g*stride:], p[g*stride:], blockLen, stride, key)
	}
}
