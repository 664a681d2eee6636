//go:build !purego

package t10crc32c

import (
	"golang.org/x/sys/cpu"

	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/kernels/crct10dif"
	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/x86"
)

// hasTwoPassAVX512 is whether the avx512 implementation is registered
// available: the CPU runs the AVX-512 kernels of both CRC packages
// (crct10dif's avx512 fold kernel, crc32c's avx512hybrid).
var hasTwoPassAVX512 = cpu.X86.HasAVX2 && cpu.X86.HasPCLMULQDQ && x86.HasVPCLMULQDQ && cpu.X86.HasSSE42 &&
	cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VPCLMULQDQ

// twoPassChunk is the bytes of blocks each pair of passes covers when the
// stride is under twoPassLong: 16 KiB, which the second pass reads from L1
// (Emerald Rapids, 512-byte blocks against two ISA-L calls a block: 1.09-1.13
// at a stride of 512 and 1.02-1.10 at 520, against 1.06-1.09 and 0.95-1.02
// with 256 KiB chunks; 8 KiB measured no better). Longer blocks take
// twoPassLongChunk, a quarter of the L2 of the CPUs with AVX-512 VPCLMULQDQ
// (1-2 MiB a core), so that the second pass reads what the first left
// there: at 4 KiB blocks that measured 0.99-1.01 where 64 KiB chunks
// measured 0.95-0.97.
const (
	twoPassChunk     = 16 << 10
	twoPassLong      = 2048
	twoPassLongChunk = 256 << 10
)

// registerAVX512 registers the avx512 implementation, ahead of the fused
// AVX2 kernels: on a CPU with AVX-512 VPCLMULQDQ, Blocks by fusedBlocksZ or
// fusedBlocksZG (the guard folded on ZMM registers, the sum split between
// ZMM folds and CRC32 streams, in one pass; see blocksAVX512) for blocks of
// a multiple of 64 bytes, and else as two passes, each over a chunk of the
// batch in turn, the guard on ZMM folds and the CRC-32C by crc32c's
// avx512hybrid. Against two ISA-L by16_10 calls a block on Emerald Rapids
// the fused kernels measured 1.18-1.33 where the two passes measured
// 0.92-1.06 (docs/performance.md).
// The fused AVX2 kernel's CRC-32C runs only on the CRC32 instruction, 8
// bytes a cycle, under a third of what the AVX-512 kernels read.
// BlocksCopy by fusedBlocksCopyZG where the CPU has GFNI (see
// blocksCopyAVX512).
func registerAVX512() {
	impl.Register(pkgName, "avx512", hasTwoPassAVX512, func() {
		blocks, blocksCopy = blocksAVX512, blocksCopyAVX512
	})
}

// twoPassBlocks is the number of blocks of a chunk: a multiple of 16 (the
// group of crc32c's AVX-512 kernels) of about twoPassChunk bytes, or
// twoPassLongChunk for strides of twoPassLong bytes and more.
func twoPassBlocks(stride int) int {
	chunk := twoPassChunk
	if stride >= twoPassLong {
		chunk = twoPassLongChunk
	}
	return max(16, chunk/max(stride, 1)&^15)
}

// crc32cTables are the CRC-32C fold constants of fusedBlocksZ.
var crc32cTables = crcmath.NewRevFoldTable(crcmath.NewFoldTable(crcmath.CRC32C))

// t10Reflected is T10-DIF reflected (the same polynomial, input and output
// reflected), in which fusedBlocksZG folds the guard: its CRC of a message
// whose bytes have their bits reversed is the bit reversal of the T10-DIF
// of the message.
var t10Reflected = crcmath.Params{Name: "CRC-16/T10-DIF reflected", Width: 16, Poly: crcmath.T10DIF.Poly, Reflected: true}

// t10ReflectedTables are the fold constants of t10Reflected.
var t10ReflectedTables = crcmath.NewRevFoldTable(crcmath.NewFoldTable(t10Reflected))

// hasFusedGFNI is whether fusedBlocksZG runs: VGF2P8AFFINEQB on ZMM.
var hasFusedGFNI = hasTwoPassAVX512 && cpu.X86.HasAVX512GFNI

// blocksAVX512 is Blocks by the avx512 implementation: blocks of a multiple
// of 64 bytes eight at a time through fusedBlocksZG where the CPU has GFNI
// (the guard folded in the reflected domain, five sums of eight folded; one
// load of a block's 64 bytes serves its guard and its sum, so the loads split
// across lines at strides of 520 or 4104 cost it no more than fusedBlocksZ,
// whose byte reversal takes port 5: on Emerald Rapids 4096/4104 1.37-1.44 of
// two ISA-L calls against 1.22-1.28, docs/perf/crc32c-avx512.md), else
// through fusedBlocksZ (the guard and the sum in one pass, kernels/_asm/fused,
// zmm.go), the rest as blocksTwoPass.
func blocksAVX512(dst []uint16, sums []uint32, p []byte, blockLen, stride int) {
	g := len(dst) / 8
	if blockLen%64 != 0 || blockLen == 0 || g == 0 {
		blocksTwoPass(dst, sums, p, blockLen, stride)
		return
	}
	if hasFusedGFNI {
		fusedBlocksZG(&dst[0], &sums[0], &p[0], g, blockLen, stride, foldTables, t10ReflectedTables, crc32cTables)
	} else {
		fusedBlocksZ(&dst[0], &sums[0], &p[0], g, blockLen, stride, foldTables, crc32cTables)
	}
	if i := 8 * g; i < len(dst) {
		blocksTwoPass(dst[i:], sums[i:], p[i*stride:], blockLen, stride)
	}
}

// blocksTwoPass is Blocks as crct10dif.Blocks and crc32c.Blocks over each
// chunk of blocks in turn, by the packages' active implementations. The
// layout was checked.
func blocksTwoPass(dst []uint16, sums []uint32, p []byte, blockLen, stride int) {
	n := twoPassBlocks(stride)
	for i := 0; i < len(dst); i += n {
		j := min(i+n, len(dst))
		c := p[i*stride : (j-1)*stride+blockLen]
		if crct10dif.Blocks(dst[i:j], c, blockLen, stride) != nil || crc32c.Blocks(sums[i:j], c, blockLen, stride) != nil {
			panic("t10crc32c: a CRC package refused a checked layout")
		}
	}
}

// blocksCopyAVX512 is BlocksCopy by the avx512 implementation: where the
// CPU has GFNI, blocks of a multiple of 128 bytes fusedCopyGroup at a time
// through fusedBlocksCopyZG (the copy, the guard and the sum in one pass,
// kernels/_asm/fused, zmmcopy.go); the rest, and other lengths, by the
// fused AVX2 kernel. On Emerald Rapids against ISA-L's memcpy and two
// by16_10 calls a block it measured 1.02-1.10 at 512-byte blocks and
// 1.19-1.41 at 4 KiB, where the AVX2 kernel measured 0.86-1.09
// (docs/perf/copy-avx512.md).
func blocksCopyAVX512(dst []uint16, sums []uint32, q, p []byte, blockLen, stride int) {
	g := len(dst) / fusedCopyGroup
	if !hasFusedGFNI || blockLen%128 != 0 || blockLen == 0 || g == 0 {
		blocksCopyAVX2(dst, sums, q, p, blockLen, stride)
		return
	}
	fusedBlocksCopyZG(&dst[0], &sums[0], &q[0], &p[0], g, blockLen, stride, foldTables, t10ReflectedTables, crc32cTables)
	if i := fusedCopyGroup * g; i < len(dst) {
		blocksCopyAVX2(dst[i:], sums[i:], q[i*stride:], p[i*stride:], blockLen, stride)
	}
}
