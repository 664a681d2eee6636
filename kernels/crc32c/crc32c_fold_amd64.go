//go:build !purego

package crc32c

import (
	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/foldgo"
	"github.com/difctl/difctl/kernels/internal/x86"
	"golang.org/x/sys/cpu"
)

//go:generate sh -c "cd ../_asm && go run ./fold -crc crc32c -out ../crc32c/zfold_amd64.s -stubs ../crc32c/zfold_amd64.go"

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

// Below these lengths the wrappers use updateGeneric (hash/crc32, the SSE4.2
// CRC32 instruction), which is faster on short inputs. Provisional: the
// crc32c registration (crc32c_amd64.go) decides which implementation runs
// where and should measure this crossover.
const (
	foldMinPCLMUL = 64
	foldMinAVX    = 64
	foldMinAVX2   = 64
	foldMinAVX512 = 64
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

func updatePCLMUL(crc uint32, p []byte) uint32 {
	return updateFold(crc, p, foldMinPCLMUL, foldUpdatePCLMUL)
}
func updateAVX(crc uint32, p []byte) uint32  { return updateFold(crc, p, foldMinAVX, foldUpdateAVX) }
func updateAVX2(crc uint32, p []byte) uint32 { return updateFold(crc, p, foldMinAVX2, foldUpdateAVX2) }
func updateAVX512(crc uint32, p []byte) uint32 {
	return updateFold(crc, p, foldMinAVX512, foldUpdateAVX512)
}

func blocksPCLMUL(dst []uint32, p []byte, blockLen, stride int) {
	blocksFold(dst, p, blockLen, stride, foldVecPCLMUL, foldGroupPCLMUL, foldBlocksPCLMUL, updatePCLMUL)
}

func blocksAVX(dst []uint32, p []byte, blockLen, stride int) {
	blocksFold(dst, p, blockLen, stride, foldVecAVX, foldGroupAVX, foldBlocksAVX, updateAVX)
}

func blocksAVX2(dst []uint32, p []byte, blockLen, stride int) {
	blocksFold(dst, p, blockLen, stride, foldVecAVX2, foldGroupAVX2, foldBlocksAVX2, updateAVX2)
}

func blocksAVX512(dst []uint32, p []byte, blockLen, stride int) {
	blocksFold(dst, p, blockLen, stride, foldVecAVX512, foldGroupAVX512, foldBlocksAVX512, updateAVX512)
}

func blocksCopyPCLMUL(dst []uint32, q, p []byte, blockLen, stride int) {
	blocksCopyFold(dst, q, p, blockLen, stride, foldVecPCLMUL, foldGroupPCLMUL, foldBlocksCopyPCLMUL, updatePCLMUL)
}

func blocksCopyAVX(dst []uint32, q, p []byte, blockLen, stride int) {
	blocksCopyFold(dst, q, p, blockLen, stride, foldVecAVX, foldGroupAVX, foldBlocksCopyAVX, updateAVX)
}

func blocksCopyAVX2(dst []uint32, q, p []byte, blockLen, stride int) {
	blocksCopyFold(dst, q, p, blockLen, stride, foldVecAVX2, foldGroupAVX2, foldBlocksCopyAVX2, updateAVX2)
}

func blocksCopyAVX512(dst []uint32, q, p []byte, blockLen, stride int) {
	blocksCopyFold(dst, q, p, blockLen, stride, foldVecAVX512, foldGroupAVX512, foldBlocksCopyAVX512, updateAVX512)
}

// updateFold runs a fold kernel over p, or the table code below min bytes.
func updateFold(crc uint32, p []byte, min int, fold func(uint32, []byte, *crcmath.RevFoldTable) uint32) uint32 {
	return foldgo.Update(crc, p, min, foldTables, fold, updateGeneric)
}

// blocksFold runs a blocks kernel over groups of blocks (foldgo.Blocks).
func blocksFold(dst []uint32, p []byte, blockLen, stride, vec, group int,
	kernel func([]uint32, []byte, int, int, *crcmath.RevFoldTable), update func(uint32, []byte) uint32) {
	foldgo.Blocks(dst, p, blockLen, stride, vec, group, foldMinBlockLen, foldTables, kernel, updateGeneric, update)
}

// blocksCopyFold runs a copying blocks kernel over groups of blocks
// (foldgo.BlocksCopy).
func blocksCopyFold(dst []uint32, q, p []byte, blockLen, stride, vec, group int,
	kernel func([]uint32, []byte, []byte, int, int, *crcmath.RevFoldTable), update func(uint32, []byte) uint32) {
	foldgo.BlocksCopy(dst, q, p, blockLen, stride, vec, group, foldMinBlockLen, foldTables, kernel, updateGeneric, update)
}
