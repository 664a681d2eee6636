//go:build !purego

package crct10dif

import "github.com/difctl/difctl/kernels/internal/impl"

// registerArch registers the fold kernels of zfold_amd64.s, best first.
// avx512 and avx2 come with the fused BlocksCRC32C kernel of zfused_amd64.s
// (YMM folding; AVX-512 adds nothing it needs) when the CPU has SSE4.2, and
// pclmul with its XMM variant when the CPU also has AVX; each has a copying
// variant of its Blocks and BlocksCRC32C kernels.
func registerArch() {
	impl.Register(pkgName, "avx512", hasFoldAVX512, func() {
		update, blocks, blocksSums = updateAVX512, blocksAVX512, blocksSumsFor(hasFoldAVX512)
		blocksCopy, blocksSumsCopy = blocksCopyAVX512, blocksSumsCopyFor(hasFoldAVX512)
	})
	impl.Register(pkgName, "avx2", hasFoldAVX2, func() {
		update, blocks, blocksSums = updateAVX2, blocksAVX2, blocksSumsFor(hasFoldAVX2)
		blocksCopy, blocksSumsCopy = blocksCopyAVX2, blocksSumsCopyFor(hasFoldAVX2)
	})
	impl.Register(pkgName, "pclmul", hasFoldPCLMUL, func() {
		update, blocks, blocksSums = updatePCLMUL, blocksPCLMUL, blocksSumsPCLMUL()
		blocksCopy, blocksSumsCopy = blocksCopyPCLMUL, blocksSumsCopyPCLMUL()
	})
}
