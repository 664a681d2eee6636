//go:build !purego

package t10crc32c

import (
	"golang.org/x/sys/cpu"

	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/kernels/crct10dif"
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
// kernels: on a CPU with AVX-512 VPCLMULQDQ, Blocks as two passes, each
// over a chunk of the batch in turn, the guard on ZMM folds and the CRC-32C
// on ZMM folds beside CRC32 streams (crc32c's avx512hybrid). They beat the
// fused AVX2 kernel, whose CRC-32C runs only on the CRC32 instruction: that
// unit reads 8 bytes a cycle, under a third of what the pair of ZMM passes
// reads (docs/perf/crc32c-avx512.md has the port counts and figures).
// BlocksCopy stays the fused AVX2 kernel's: crct10dif.BlocksCopy then
// crc32c.Blocks over the copy, or a copy then the two passes, measured
// 0.5-0.8 of ISA-L's memcpy and two calls on Emerald Rapids, the fused
// copying kernel 0.85-1.1.
func registerAVX512() {
	impl.Register(pkgName, "avx512", hasTwoPassAVX512, func() {
		blocks, blocksCopy = blocksTwoPass, blocksCopyAVX2
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
