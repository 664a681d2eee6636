//go:build !purego

package crc32c

import "github.com/difctl/difctl/kernels/internal/impl"

// amd64 implementations, best first:
//
//   - avx512: VPCLMULQDQ folding on ZMM registers (crc32c_fold_amd64.go),
//     on CPUs with AVX-512 (not measured here: the EPYC these kernels were
//     tuned on has VPCLMULQDQ but no AVX-512);
//   - hybrid: three CRC32 streams beside VPCLMULQDQ folding on YMM
//     registers (crc32c_hybrid_amd64.go), 1.7 to 1.9 times hash/crc32 from
//     4 KiB up on an AMD EPYC (Zen 3);
//   - hybrid128: four CRC32 streams beside PCLMULQDQ folding on XMM
//     registers, 1.3 to 1.5 times hash/crc32 there;
//
// then generic (hash/crc32, itself three CRC32 streams). The plain fold
// kernels avx2, avx and pclmul of crc32c_fold_amd64.go are not registered: on
// that EPYC they run at 1.0-1.2 and 0.5-0.6 times hash/crc32, below
// hybrid128, which needs no more of the CPU than they do (they are tested
// under the registry name crc32c-fold).
//
// BlocksCopy: avx512 runs the copying fold kernel; the hybrid kernels have
// no copying variant (their generator, kernels/_asm/crc32hybrid, mixes
// CRC32Q streams that read memory with fold streams, and a copy would need
// its own store per stream), so they copy, then run Blocks over the copy.
func registerArch() {
	impl.Register(pkgName, "avx512", hasFoldAVX512, func() {
		update, blocks, blocksCopy = updateAVX512, blocksAVX512, blocksCopyAVX512
	})
	impl.Register(pkgName, "hybrid", hasHybrid256, func() {
		update, blocks, blocksCopy = updateHybrid256, blocksHybrid256, blocksCopyPortable
	})
	impl.Register(pkgName, "hybrid128", hasHybrid128, func() {
		update, blocks, blocksCopy = updateHybrid128, blocksHybrid128, blocksCopyPortable
	})
}
