//go:build !purego

package crc32c

import "github.com/difctl/difctl/kernels/internal/impl"

// registerArch registers the amd64 implementations, best first:
//
//   - avx512hybrid: CRC32 streams beside VPCLMULQDQ folding on ZMM
//     registers, sixteen blocks or segments in lockstep
//     (crc32c_hybridz_amd64.go), with the avx512 fold kernels for short
//     inputs and BlocksCopy;
//   - avx512: VPCLMULQDQ folding on ZMM registers (zfold_amd64.s, generated
//     by kernels/_asm/fold), the only fold kernel crc32c ships;
//   - avx2: three CRC32 streams beside three VPCLMULQDQ fold streams on YMM
//     registers (crc32c_hybrid_amd64.go, zhybrid_amd64.s);
//   - pclmul: four CRC32 streams beside two PCLMULQDQ fold streams on XMM
//     registers;
//
// then generic (hash/crc32, itself three CRC32 streams). Plain folding on
// YMM or XMM registers runs below the kernels that mix in CRC32 streams
// (docs/performance.md, "Why the kernels are shaped as they are"), so it is not generated for crc32c.
//
// BlocksCopy: avx512 runs the copying fold kernel; avx2 and pclmul have no
// copying variant (their generator, kernels/_asm/crc32hybrid, mixes CRC32Q
// streams that read memory with fold streams, and a copy would need its
// own store per stream), so they copy, then run Blocks over the copy.
func registerArch() {
	registerHybridZ()
	registerFold()
	impl.Register(pkgName, "avx2", hasHybrid256, func() {
		update, blocks, blocksCopy = updateHybrid256, blocksHybrid256, blocksCopyPortable
	})
	impl.Register(pkgName, "pclmul", hasHybrid128, func() {
		update, blocks, blocksCopy = updateHybrid128, blocksHybrid128, blocksCopyPortable
	})
}
