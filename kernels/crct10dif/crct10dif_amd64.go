//go:build !purego

package crct10dif

import "github.com/difctl/difctl/kernels/internal/impl"

// registerArch registers the fold kernels of zfold_amd64.s, best first (avx
// is pclmul's kernel with VEX encodings, for CPUs with AVX but without
// VPCLMULQDQ such as AMD Zen 2: there, fastest of 200 runs, 28.3 against
// 30.5 ns at 256 bytes, 46.7 against 49.1 at 512, 12.9 against 12.7 GB/s
// over 512-byte blocks).
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
	impl.Register(pkgName, "avx", hasFoldAVX, func() {
		update, blocks, blocksSums = updateAVX, blocksAVX, blocksSumsPCLMUL()
		blocksCopy, blocksSumsCopy = blocksCopyAVX, blocksSumsCopyPCLMUL()
	})
	impl.Register(pkgName, "pclmul", hasFoldPCLMUL, func() {
		update, blocks, blocksSums = updatePCLMUL, blocksPCLMUL, blocksSumsPCLMUL()
		blocksCopy, blocksSumsCopy = blocksCopyPCLMUL, blocksSumsCopyPCLMUL()
	})
}
