//go:build !purego

package crc32c

import (
	"github.com/difctl/difctl/kernels/internal/x86"
	"golang.org/x/sys/cpu"
)

//go:generate go run -C ../_asm ./crc32hybrid -out ../crc32c/zhybrid_amd64.s -stubs ../crc32c/zhybrid_amd64.go -pkg crc32c

// The hybrid kernels keep the CRC32 instruction unit and the carry-less
// multiplier busy at once: a chunk of 6s bytes is cut into six segments of s
// bytes that advance in lockstep, some as CRC32Q streams, the others folded
// with (V)PCLMULQDQ, and the six parts are merged with PCLMULQDQ into one
// 16-byte value and two CRC32Q (kernels/_asm/crc32hybrid; the constants from kernels/_asm/crcgen).
// Blocks runs six blocks at once the same way, where no merge is needed.
//
//   - the avx2 implementation: three CRC32 streams and three
//     VPCLMULQDQ-on-YMM fold streams (SSE4.2, AVX2, VPCLMULQDQ);
//   - the pclmul implementation: four CRC32 streams and two PCLMULQDQ-on-XMM fold streams
//     (SSE4.2, PCLMULQDQ), for CPUs without VPCLMULQDQ.
//
// x/sys/cpu reports VPCLMULQDQ only with AVX-512; x86.HasVPCLMULQDQ
// reads the CPUID bit of the VEX form on YMM.
var (
	hasHybrid128 = cpu.X86.HasSSE42 && cpu.X86.HasSSE41 && cpu.X86.HasPCLMULQDQ
	hasHybrid256 = hasHybrid128 && cpu.X86.HasAVX2 && x86.HasVPCLMULQDQ
)

const (
	// hybridMin is the shortest input Update runs through the hybrid chunk
	// kernel; below it three CRC32 streams (hybridShort3) are faster, as
	// the chunk's merge costs about 100 cycles (measured on Zen 2, a tie
	// at 2040 bytes; docs/perf/poly1305-generator.md).
	hybridMin = 2048
	// hybridShort3Min is the shortest input updateShort runs through
	// hybridShort3 (at least 3·16 bytes, the shortest segment of
	// hybridK3); below it one stream is as fast (BenchmarkShort3 in
	// crc32c_hybrid_amd64_test.go, Zen 2).
	hybridShort3Min = 128
	// hybridBlocksMin is the shortest block Blocks runs six at a time;
	// shorter blocks go one at a time through update.
	hybridBlocksMin = 64
	// hybridPrefetchMax is the longest block Blocks runs through the
	// prefetching kernels (hybridBlocksPrefetch*), which load the next group
	// of six blocks into L1 while they work on this one: up to 2048 bytes
	// two groups fit the 32 KiB L1 (docs/performance.md, as above).
	hybridPrefetchMax = 2048
)

type chunkFunc func(reg uint32, p *byte, tail, s int, k *[14]uint64, fold *[2][2]uint64) uint32

type blocksFunc func(dst *uint32, p *byte, groups, blockLen, stride int, fold *[2]uint64)

// updateHybrid runs p, at least hybridMin bytes, as chunks of six segments: first a tail of under
// 6·hybridSegUnit bytes and one chunk of six segments of s bytes, in one
// call, then whole chunks of segments of hybridMaxSeg bytes, then whole
// chunks of segments of hybridBigSeg bytes. A call costs about 100 cycles
// beyond its loop (the merge and refilling the pipeline), 3% of a chunk
// of 6·hybridBigSeg bytes.
func updateHybrid(chunk chunkFunc, crc uint32, p []byte) uint32 {
	const (
		unit = 6 * hybridSegUnit
		mid  = 6 * hybridMaxSeg
		big  = 6 * hybridBigSeg
	)
	fold := (*[2][2]uint64)(foldTable.Fold[1:3])
	// nb big and nm mid chunks leave unit <= r < mid+unit bytes for the
	// first call, so that 1 <= s/hybridSegUnit <= hybridMaxSeg/hybridSegUnit
	// and tail < unit.
	nb := (len(p) - unit) / big
	nm := (len(p) - nb*big - unit) / mid
	r := len(p) - nb*big - nm*mid
	s := r / unit * hybridSegUnit
	reg := chunk(^crc, &p[0], r-6*s, s, &hybridK[s/hybridSegUnit-1], fold)
	p = p[r:]
	for ; nm > 0; nm-- {
		reg = chunk(reg, &p[0], 0, hybridMaxSeg, &hybridK[hybridMaxSeg/hybridSegUnit-1], fold)
		p = p[mid:]
	}
	for ; nb > 0; nb-- {
		reg = chunk(reg, &p[0], 0, hybridBigSeg, &hybridKBig[0], fold)
		p = p[big:]
	}
	return ^reg
}

// blocksHybrid runs the blocks six at a time, the rest one at a time;
// kernel or, up to hybridPrefetchMax bytes a block, prefetch.
func blocksHybrid(kernel, prefetch blocksFunc, update func(uint32, []byte) uint32, dst []uint32, p []byte, blockLen, stride int) {
	i := 0
	if blockLen <= hybridPrefetchMax {
		kernel = prefetch
	}
	if blockLen >= hybridBlocksMin {
		if g := len(dst) / 6; g > 0 {
			kernel(&dst[0], &p[0], g, blockLen, stride, &foldTable.Fold[2])
			i = 6 * g
		}
	}
	for ; i < len(dst); i++ {
		off := i * stride
		dst[i] = update(0, p[off:off+blockLen])
	}
}

// updateShort is Update below hybridShort3Min: hybridShort, one CRC32
// stream, called straight from here (hash/crc32, which this replaced,
// spent several times the CRC32Q's own time on a 16-byte input:
// BenchmarkAnchor; docs/perf/poly1305-generator.md). It is small enough
// to be inlined into the Update wrappers, so that a short input makes one
// Go call before the kernel.
func updateShort(crc uint32, p []byte) uint32 {
	if len(p) == 0 {
		return crc
	}
	return ^hybridShort(^crc, &p[0], len(p))
}

// medium is the segment length s of hybridShort3 for an input of n bytes
// (hybridShort3Min <= n < hybridMin): a multiple of hybridShortUnit, with
// a tail n-3s of under 3·hybridShortUnit bytes.
func medium(n int) int { return n / (3 * hybridShortUnit) * hybridShortUnit }

// updateHybrid256 and updateHybrid128 are Update: updateShort below
// hybridShort3Min and hybridShort3 (three CRC32 streams) below hybridMin,
// checked here, shortest first, so that an input below hybridMin makes one
// Go call before the kernel.
func updateHybrid256(crc uint32, p []byte) uint32 {
	if len(p) < hybridShort3Min {
		return updateShort(crc, p)
	}
	if len(p) < hybridMin {
		s := medium(len(p))
		return ^hybridShort3(^crc, &p[0], len(p)-3*s, s, &hybridK3[s/hybridShortUnit-2])
	}
	return updateHybrid(hybridChunk256, crc, p)
}

func blocksHybrid256(dst []uint32, p []byte, blockLen, stride int) {
	if hybridChains && blockLen%64 == 0 && blockLen/64 >= 1 && blockLen/64 <= hybridSubMaxSteps {
		if g := len(dst) / 6; g > 0 {
			hybridBlocks256S(&dst[0], &p[0], g, blockLen, stride, &foldTable.Fold[2], hybridKS[blockLen/64-1])
			for i := 6 * g; i < len(dst); i++ {
				dst[i] = updateHybrid256(0, p[i*stride:][:blockLen])
			}
			return
		}
	}
	blocksHybrid(hybridBlocks256, hybridBlocksPrefetch256, updateHybrid256, dst, p, blockLen, stride)
}

// hybridChains makes blocksHybrid256 run blocks of a multiple of 64 bytes
// (up to the rows of hybridKS) through hybridBlocks256S, two CRC32 streams
// of two chains each beside four folds, on every CPU but AMD's. On Intel's
// Golden Cove one chain a CRC block sets the pace of hybridBlocks256 at the
// fold's own 16 bytes a cycle, and the two-chain shape balances the CRC32
// unit and the multiplier at 24 (kernels/_asm/crc32hybrid, chains): it ran
// at 1.2-1.35x hybridBlocks256 on Emerald Rapids from 512 bytes to 4 KiB in
// cache, and as fast from DRAM (BenchmarkHybrid256Shapes). On Zen 3 and
// Zen 4, which fold a YMM register at half that rate, three CRC32 streams
// beside three folds already balance the two units; llvm-mca 19 models the
// two-chain loop a third slower there (kernels/_mca/crc32c_avx512.sh), and
// the prefetching kernel is needed from DRAM.
var hybridChains = !x86.AMD

func updateHybrid128(crc uint32, p []byte) uint32 {
	if len(p) < hybridShort3Min {
		return updateShort(crc, p)
	}
	if len(p) < hybridMin {
		s := medium(len(p))
		return ^hybridShort3(^crc, &p[0], len(p)-3*s, s, &hybridK3[s/hybridShortUnit-2])
	}
	return updateHybrid(hybridChunk128, crc, p)
}

func blocksHybrid128(dst []uint32, p []byte, blockLen, stride int) {
	blocksHybrid(hybridBlocks128, hybridBlocksPrefetch128, updateHybrid128, dst, p, blockLen, stride)
}
