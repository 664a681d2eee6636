//go:build !purego

package crct10dif

import (
	"sync"

	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/foldgo"
	"github.com/difctl/difctl/kernels/internal/x86"
	"golang.org/x/sys/cpu"
)

//go:generate sh -c "cd ../_asm && go run ./fold -crc t10dif -out ../crct10dif/zfold_amd64.s -stubs ../crct10dif/zfold_amd64.go"

// foldTables is what the kernels read: foldTable and its Fold constants
// in reverse order.
var foldTables = crcmath.NewRevFoldTable(&foldTable)

// CPU features of the fold kernels in zfold_amd64.s, checked once.
var (
	hasFoldPCLMUL = cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSSE3 && cpu.X86.HasSSE41
	hasFoldAVX    = hasFoldPCLMUL && cpu.X86.HasAVX
	hasFoldAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasPCLMULQDQ && x86.HasVPCLMULQDQ
	hasFoldAVX512 = hasFoldAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW &&
		cpu.X86.HasAVX512VPCLMULQDQ
)

// Below these lengths Update uses the table code, which is faster there.
// Measured on an AMD EPYC (Zen 3), per CPU-second, with the kernels taking
// the tail themselves: the slicing-by-16 table wins at 16 bytes (1.7 vs 1.1
// GB/s) and ties at 32, but it finishes other lengths byte by byte and loses
// at every other length from 17 on (0.8 vs 1.5 GB/s at 24, 1.0 vs 1.9 at 40).
// On an AMD EPYC (Zen 2), fastest of 400 runs of 1000 calls, the XMM
// kernels win at 16 bytes too: 8.6 (pclmul) and 9.2 ns (avx) against 11.5
// for the table; so the XMM kernels (the only ones Zen 2 runs) take 16.
const (
	foldMinPCLMUL = 16
	foldMinAVX    = 16
	foldMinAVX2   = 17
	foldMinAVX512 = 17
	// Blocks folds groups of blocks from foldMinBlockLen on; shorter blocks
	// go one at a time through Update. The kernels interleave four blocks:
	// enough independent multiplies to cover the multiplier's latency (4
	// cycles, one multiply per 2 cycles, even on YMM), and four streams a
	// multiple of 4 KiB apart still fit the ways of one L1 set, where eight
	// did not. AVX2, per CPU-second against the old eight-block kernel (and
	// its per-block Update from 2 KiB on): 18.1 vs 17.3 GB/s at 512-byte
	// blocks, 24.3 vs 21.1 at 2 KiB, 23.5 vs 23.2 at 4 KiB; two blocks gave
	// 14.0 and 15.2 at 512 and 2 KiB.
	foldMinBlockLen = 64
)

func updatePCLMUL(crc uint16, p []byte) uint16 {
	return updateFold(crc, p, foldMinPCLMUL, foldUpdatePCLMUL)
}
func updateAVX(crc uint16, p []byte) uint16  { return updateFold(crc, p, foldMinAVX, foldUpdateAVX) }
func updateAVX2(crc uint16, p []byte) uint16 { return updateFold(crc, p, foldMinAVX2, foldUpdateAVX2) }
func updateAVX512(crc uint16, p []byte) uint16 {
	return updateFold(crc, p, foldMinAVX512, foldUpdateAVX512)
}

func blocksPCLMUL(dst []uint16, p []byte, blockLen, stride int) {
	blocksFold(dst, p, blockLen, stride, foldVecPCLMUL, foldGroupPCLMUL, foldBlocksPCLMUL, updatePCLMUL)
}

func blocksAVX(dst []uint16, p []byte, blockLen, stride int) {
	blocksFold(dst, p, blockLen, stride, foldVecAVX, foldGroupAVX, foldBlocksAVX, updateAVX)
}

func blocksAVX2(dst []uint16, p []byte, blockLen, stride int) {
	blocksFold(dst, p, blockLen, stride, foldVecAVX2, foldGroupAVX2, foldBlocksAVX2, updateAVX2)
}

func blocksAVX512(dst []uint16, p []byte, blockLen, stride int) {
	blocksFold(dst, p, blockLen, stride, foldVecAVX512, foldGroupAVX512, foldBlocksAVX512, updateAVX512)
}

func blocksCopyPCLMUL(dst []uint16, q, p []byte, blockLen, stride int) {
	if foldgo.UseSubBlocks(blockLen, stride) {
		blocksCopySub(false, dst, q, p, blockLen)
		return
	}
	blocksCopyFold(dst, q, p, blockLen, stride, foldVecPCLMUL, foldGroupPCLMUL, foldBlocksCopyPCLMUL, updatePCLMUL)
}

// blocksCopyAVX takes the paths of blocksCopyPCLMUL, with the VEX kernel.
func blocksCopyAVX(dst []uint16, q, p []byte, blockLen, stride int) {
	if foldgo.UseSubBlocks(blockLen, stride) {
		blocksCopySub(true, dst, q, p, blockLen)
		return
	}
	blocksCopyFold(dst, q, p, blockLen, stride, foldVecAVX, foldGroupAVX, foldBlocksCopyAVX, updateAVX)
}

func blocksCopyAVX2(dst []uint16, q, p []byte, blockLen, stride int) {
	blocksCopyFold(dst, q, p, blockLen, stride, foldVecAVX2, foldGroupAVX2, foldBlocksCopyAVX2, updateAVX2)
}

func blocksCopyAVX512(dst []uint16, q, p []byte, blockLen, stride int) {
	blocksCopyFold(dst, q, p, blockLen, stride, foldVecAVX512, foldGroupAVX512, foldBlocksCopyAVX512, updateAVX512)
}

// updateFold runs a fold kernel over p, or the table code below min bytes.
func updateFold(crc uint16, p []byte, min int, fold func(uint16, []byte, *crcmath.RevFoldTable) uint16) uint16 {
	return foldgo.Update(crc, p, min, foldTables, fold, updateGeneric)
}

// blocksFold runs a blocks kernel over groups of blocks (foldgo.Blocks).
func blocksFold(dst []uint16, p []byte, blockLen, stride, vec, group int,
	kernel func([]uint16, []byte, int, int, *crcmath.RevFoldTable), update func(uint16, []byte) uint16) {
	foldgo.Blocks(dst, p, blockLen, stride, vec, group, foldMinBlockLen, foldTables, kernel, updateBytes, update)
}

// blocksCopyFold runs a copying blocks kernel over groups of blocks
// (foldgo.BlocksCopy).
func blocksCopyFold(dst []uint16, q, p []byte, blockLen, stride, vec, group int,
	kernel func([]uint16, []byte, []byte, int, int, *crcmath.RevFoldTable), update func(uint16, []byte) uint16) {
	foldgo.BlocksCopy(dst, q, p, blockLen, stride, vec, group, foldMinBlockLen, foldTables, kernel, updateBytes, update)
}

// BlocksCopy over contiguous 4 KiB blocks (the sub-block path of
// foldgo.UseSubBlocks): pclmul runs foldBlocksCopyPCLMUL over the blocks'
// 1 KiB sub-blocks, whose streams do not share L1 sets, and joins each
// block's partial guards. Against folding whole blocks, 1 MiB a call
// (BenchmarkBlocksCopyPaths, AMD EPYC Zen 3 with pclmul forced, medians
// of alternating runs, per CPU-second), that ran 1.3 times as fast from a
// source in memory into a destination in cache (1.4 in the first runs),
// 1.2 times with both in memory and 2.1 with both in cache. At 8 and 64
// KiB it still gained with the destination in cache but lost up to a
// quarter with both in memory. avx2 keeps the whole blocks: its kernel
// streams them faster from memory (0.8 times with sub-blocks from a source
// in memory, against 1.5 to 1.8 with both in cache); avx512 was not
// measured.
//
// avx picks the VEX kernel (the avx implementation); the kernels are called
// by name, not through a parameter, so that the partial guards stay on the
// stack.
func blocksCopySub(avx bool, dst []uint16, q, p []byte, blockLen int) {
	const s = foldgo.SubBlockLen
	j := foldgo.NewJoiner(dst, blockLen/s, guardShift())
	var part [subChunk]uint16
	for o, end := 0, len(dst)*blockLen; o < end; {
		k := min(subChunk, (end-o)/s)
		if avx {
			foldBlocksCopyAVX(part[:k], q[o:], p[o:], s, s, foldTables)
		} else {
			foldBlocksCopyPCLMUL(part[:k], q[o:], p[o:], s, s, foldTables)
		}
		j.Add(part[:k])
		o += k * s
	}
}

// subChunk is the number of sub-blocks per kernel call of the sub-block
// paths: their partial CRCs are kept in arrays of this length on the
// stack, and it is a multiple of every kernel's group. 16, 64 and 256
// measured the same.
const subChunk = 64

// guardShift is L_1024 of T10-DIF (foldgo.Shift), built on first use.
var guardShift = sync.OnceValue(func() *foldgo.Shift[uint16] {
	return foldgo.NewShift[uint16](Params, foldgo.SubBlockLen)
})
