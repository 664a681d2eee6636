//go:build !purego

package crc32c

import (
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/x86"
)

// The AVX-512 hybrid implementation (avx512hybrid) keeps the CRC32
// instruction unit and the carry-less multiplier busy at once on CPUs with
// VPCLMULQDQ on ZMM registers: sixteen blocks run in lockstep, c of them as
// CRC32 streams and 16-c folded 64 bytes a step (hybridBlocksZ*,
// kernels/_asm/crc32hybrid/zmm.go, which has the port counts behind the
// shape). Blocks runs sixteen blocks at a time so; Update cuts a long input
// into chunks of sixteen segments, runs them as blocks from a zero register
// and merges the sixteen registers with hybridMergeZ (the constants
// hybridKZ, from kernels/_asm/crcgen). BlocksCopy is the avx512 fold
// kernel's.
//
// Update of up to smallZMax bytes is one call of smallUpdateZ
// (kernels/_asm/small), which also needs AVX512VL and AVX512DQ (EVEX forms
// on X16-X31); every CPU with VPCLMULQDQ on ZMM registers has them.
var hasHybridZ = hasFoldAVX512 && cpu.X86.HasSSE42 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPCLMULQDQ &&
	cpu.X86.HasAVX512VL && cpu.X86.HasAVX512DQ

//go:generate go run -C ../_asm ./small -crc crc32c -out ../crc32c/zsmall_amd64.s -stubs ../crc32c/zsmall_amd64.go -avx2out ../crc32c/zsmall_avx2_amd64.s -avx2stubs ../crc32c/zsmall_avx2_amd64.go

const (
	// hybridZMin is the shortest input Update runs through the chunk
	// kernels; below it the avx512 fold kernel does.
	hybridZMin = 16 * hybridZMinSeg
	// hybridZMinSeg is the shortest segment of a chunk: shorter ones leave
	// the lockstep loop too short for the merge's cost.
	hybridZMinSeg = 256
	// smallZMax bounds the lengths Update runs through smallUpdateZ, the
	// kernel of one short call: from 1 to 1024 bytes (the most its
	// generator lets it take) it was faster than one CRC32 stream and the
	// avx512 fold kernel (docs/perf/small-calls.md).
	smallZMax = 1024
	// hybridZBlocksMin is the shortest block Blocks runs sixteen at a
	// time (the kernels' first step is 64 bytes).
	hybridZBlocksMin = 64
)

type blocksZFunc func(dst *uint32, p *byte, groups, blockLen, stride int, init, xorout uint32, fold *[2]uint64)

type blocksZSFunc func(dst *uint32, p *byte, groups, blockLen, stride int, init, xorout uint32, fold *[2]uint64, k uint64)

// blocksZ runs groups of sixteen blocks through the blocks kernel that
// measured fastest for blocks of blockLen bytes (docs/perf/crc32c-avx512.md):
// one CRC32 stream below 256 bytes; from there two, each as two chains
// (hybridKS merges them) and the loop four steps a round, and past the
// rows of hybridKS the same with one chain a stream.
func blocksZ(dst *uint32, p *byte, groups, blockLen, stride int, init, xorout uint32) {
	if zen4 && blockLen >= 256 {
		blocksZen4(dst, p, groups, blockLen, stride, init, xorout)
		return
	}
	switch s := blockLen / 64; {
	case blockLen < 256:
		hybridBlocksZ1(dst, p, groups, blockLen, stride, init, xorout, &foldTable.Fold[4])
	case s <= hybridSubMaxSteps:
		hybridBlocksZ2SU4(dst, p, groups, blockLen, stride, init, xorout, &foldTable.Fold[4], hybridKS[s-1])
	default:
		hybridBlocksZ2U4(dst, p, groups, blockLen, stride, init, xorout, &foldTable.Fold[4])
	}
}

// zen4 is set on AMD Zen 4 (family 25 with AVX-512; Zen 3, family 25
// too, has none), where blocksZ takes blocksZen4's kernels from 256 bytes
// a block.
var zen4 = hasHybridZ && x86.AMD && x86.Family == 25

// blocksZen4 is blocksZ on Zen 4, chosen on paper: no Zen 4 has run these
// kernels yet. Zen 4 runs a VPCLMULQDQ zmm as two 256-bit halves, one zmm
// every two cycles (so ISA-L's by16_10 folds 16 bytes a cycle there, about
// 55 GB/s, as the Zen 4 guest of issue 43 measured), while its CRC32 unit,
// as Golden Cove's, takes 8 bytes a cycle: beside the fold the CRC32 unit
// adds half, not a quarter, and more streams pay. Per group of sixteen
// blocks of S 64-byte steps with c CRC blocks, a fold block costs 4 cycles
// of the multiplier a step and a CRC block 8 CRC32Q a step, plus 8 CRC32Q
// per fold block for its reduction:
//
//	max(4·S·(16-c), 8·S·c + 8·(16-c)) cycles
//
// which c = 3 minimises at S = 4, c = 4 from S = 5 to 11 and c = 5 from
// S = 12 (768 bytes) on: at 4 KiB, 23 bytes a cycle, 1.45x the fold
// alone and 1.27x the split Golden Cove takes (c = 2, 18 bytes a cycle).
// llvm-mca 19's znver4 model of the kernels' main loops agrees
// (kernels/_mca/crc32c_avx512.sh: Z5U4 176 cycles per four steps, Z2SU4
// 224, Z0 64 per step). A CRC block's one chain, 24 cycles of CRC32Q
// latency a step, fits in the 44-52 cycles a step takes, so one chain a
// stream (no hybridKS merge) is enough there.
func blocksZen4(dst *uint32, p *byte, groups, blockLen, stride int, init, xorout uint32) {
	switch {
	case blockLen < 320:
		hybridBlocksZ3U4(dst, p, groups, blockLen, stride, init, xorout, &foldTable.Fold[4])
	case blockLen < 768:
		hybridBlocksZ4U4(dst, p, groups, blockLen, stride, init, xorout, &foldTable.Fold[4])
	default:
		hybridBlocksZ5U4(dst, p, groups, blockLen, stride, init, xorout, &foldTable.Fold[4])
	}
}

func registerHybridZ() {
	impl.Register(pkgName, "avx512hybrid", hasHybridZ, func() {
		update, blocks, blocksCopy = updateHybridZ, blocksHybridZ, blocksCopyAVX512
	})
}

// updateHybridZ is Update: smallUpdateZ up to smallZMax bytes, the avx512
// fold kernel below hybridZMin; else one CRC32 stream up to the
// first 64-byte boundary, then one chunk of
// sixteen segments of s <= hybridZMaxSeg bytes (a multiple of hybridZUnit,
// at least hybridZMinSeg) and whole chunks of segments of hybridZMaxSeg
// bytes, then the fold kernel over the rest (under 16·hybridZUnit bytes,
// or 16·hybridZMinSeg if it made no chunk). The chunks start on a 64-byte
// boundary: loads that span two lines cost the blocks kernels a third of
// their speed from L2 (kernels/_asm/crc32hybrid/zmm.go).
//
// The kernels of short inputs are called straight from here, so that a
// short input makes one Go call before its kernel. (Three CRC32 streams, hybridShort3, were slower than it or the
// fold kernel at every length on Emerald Rapids: BenchmarkSmallZ.)
func updateHybridZ(crc uint32, p []byte) uint32 {
	if len(p) <= smallZMax {
		if len(p) == 0 {
			return crc
		}
		return smallUpdateZ(crc, &p[0], len(p), foldTables)
	}
	if len(p) < hybridZMin {
		return foldUpdateAVX512(crc, p, foldTables)
	}
	return updateChunksZ(crc, p)
}

// entryTarget is the value of the dispatch variable update under which
// updateEntry (Update and Checksum, kernels/_asm/small) runs smallUpdateZ's
// body itself for 1 to smallZMax bytes: the one call of a short Checksum.
// Under any other value, or for other lengths, updateEntry tail-calls
// updateDispatch.
var entryTarget = updateHybridZ

// entryTargetY is the value of update under which updateEntry jumps to
// updateEntryY (zsmall_avx2_amd64.s, kernels/_asm/small), the AVX2 tier's
// kernel of 1 to 1024 bytes: the avx2 implementation's, where the CPU has
// its SSE4.2, AVX2 and VPCLMULQDQ; nil, which update never is, elsewhere.
var entryTargetY = func() func(uint32, []byte) uint32 {
	if hasHybrid256 {
		return updateHybrid256
	}
	return nil
}()

// updateDispatch is Update through the dispatch variable, updateEntry's
// fallback.
//
//lint:ignore U1000 updateEntry (assembly) tail-calls it
func updateDispatch(crc uint32, p []byte) uint32 { return update(crc, p) }

// updateChunksZ is updateHybridZ from hybridZMin bytes on.
func updateChunksZ(crc uint32, p []byte) uint32 {
	if a := int(-uintptr(unsafe.Pointer(&p[0])) & 63); a > 0 {
		crc = updateShort(crc, p[:a])
		p = p[a:]
	}
	const big = 16 * hybridZMaxSeg
	nb := len(p) / big
	s := (len(p) - nb*big) / 16 &^ (hybridZUnit - 1)
	if s < hybridZMinSeg {
		s = 0
	}
	var regs [17]uint32
	reg := ^crc
	if s > 0 {
		reg = chunkZ(reg, p, s, &regs)
		p = p[16*s:]
	}
	for ; nb > 0; nb-- {
		reg = chunkZ(reg, p, hybridZMaxSeg, &regs)
		p = p[big:]
	}
	if len(p) == 0 {
		return ^reg
	}
	return updateAVX512(^reg, p)
}

// chunkZ returns the register after p[:16·s], given the register reg
// before it: the sixteen segments' registers from zero by a blocks kernel,
// merged. s is a multiple of hybridZUnit, at most hybridZMaxSeg.
func chunkZ(reg uint32, p []byte, s int, regs *[17]uint32) uint32 {
	_ = p[16*s-1]
	regs[0] = reg
	blocksZ(&regs[1], &p[0], 1, s, s, 0, 0)
	return hybridMergeZ((*[16]uint32)(regs[:16]), regs[16], &hybridKZ[s/hybridZUnit-1])
}

// Blocks off a line (the buffer or the stride not a multiple of 64) split
// most of their 64-byte loads across two lines. The sixteen-block kernels
// lose a third of their speed so from L2; the avx512 fold kernel (four
// blocks, two accumulators each, the group two ahead prefetched as one
// stream) loses least, and on Emerald Rapids it is the fastest at every
// such layout measured: 512/520 1.17 of ISA-L against 0.93-0.98 for the
// sixteen-block kernel that only folds (hybridBlocksZ0U4) and 1.03-1.05 for
// one that folded every block from the line holding its start, 4096/4104
// 1.09-1.12 against 0.97-1.03 for hybridBlocksZA1 (docs/perf/crc32c-avx512.md).

// blocksHybridZ is Blocks: sixteen blocks at a time from hybridZBlocksMin
// bytes a block, on a line (the buffer and the stride a multiple of 64), the
// rest (and the other blocks) by the avx512 fold kernel.
func blocksHybridZ(dst []uint32, p []byte, blockLen, stride int) {
	g := len(dst) / 16
	if blockLen < hybridZBlocksMin || g == 0 || (int(uintptr(unsafe.Pointer(&p[0])))|stride)&63 != 0 {
		blocksAVX512(dst, p, blockLen, stride)
		return
	}
	blocksZ(&dst[0], &p[0], g, blockLen, stride, 0xffffffff, 0xffffffff)
	if i := 16 * g; i < len(dst) {
		blocksAVX512(dst[i:], p[i*stride:], blockLen, stride)
	}
}
