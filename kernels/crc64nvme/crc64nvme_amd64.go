//go:build !purego

package crc64nvme

import "github.com/difctl/difctl/kernels/internal/impl"

// registerArch registers the fold kernels of zfold_amd64.s, best first: avx
// is pclmul's kernel with VEX encodings (three-operand forms, unaligned
// memory operands), for CPUs with AVX but without VPCLMULQDQ such as AMD
// Zen 2: there, fastest of 400 runs, two rounds on a loaded machine, 30.4
// and 30.7 against 32.8 and 33.0 ns at 256 bytes, 13.7 and 14.0 against
// 14.5 at 64; 512 bytes and Blocks the same within the noise.
func registerArch() {
	impl.Register(pkgName, "avx512", hasFoldAVX512, func() {
		update, blocks, blocksCopy = updateAVX512, blocksAVX512, blocksCopyAVX512
	})
	impl.Register(pkgName, "avx2", hasFoldAVX2, func() {
		update, blocks, blocksCopy = updateAVX2, blocksAVX2, blocksCopyAVX2
	})
	impl.Register(pkgName, "avx", hasFoldAVX, func() {
		update, blocks, blocksCopy = updateAVX, blocksAVX, blocksCopyAVX
	})
	impl.Register(pkgName, "pclmul", hasFoldPCLMUL, func() {
		update, blocks, blocksCopy = updatePCLMUL, blocksPCLMUL, blocksCopyPCLMUL
	})
}
