//go:build !purego

package crc32c

import (
	"golang.org/x/sys/cpu"

	"github.com/difctl/difctl/kernels/internal/kerneltest"
	"github.com/difctl/difctl/kernels/internal/x86"
)

// archCutoffs are the lengths where the amd64 implementations change
// strategy; the harness tests around each: those of the avx512 fold kernel
// and those of the kernels that mix CRC32 streams with folds (the chunk
// kernels from hybridMin bytes, three CRC32 streams from hybridShort3Min,
// six blocks at once from hybridBlocksMin; the
// docs/performance.md, "Why the kernels are shaped as they are", has the measurements behind them).
var archCutoffs = append([]int{
	hybridMin, hybridBlocksMin,
	hybridShort3Min,                        // three CRC32 streams up to hybridMin-1, the longest segment of hybridK3
	6 * hybridSegUnit,                      // the tail is under one step of all six segments
	6 * hybridMaxSeg, 6*hybridMaxSeg + 192, // chunks of hybridMaxSeg segments
	6 * hybridBigSeg, 6*hybridBigSeg + 192, // chunks of hybridBigSeg segments
	hybridZMin, hybridZMin + 16*hybridZUnit, // the first chunk, a lead under 16·hybridZUnit
	16 * hybridZMaxSeg, 16*hybridZMaxSeg + 16*hybridZMinSeg - 1, // whole chunks, a lead that makes no chunk
	smallZMax, 16 * hybridZBlocksMin, // sixteen blocks at a time on a line
}, foldCutoffs...)

// archWants are the amd64 implementations, best first: the avx512 fold
// kernel, then the kernels that mix CRC32 streams with folds.
var archWants = []kerneltest.Want{
	{Name: "avx512hybrid", Can: hasHybridZ},
	kerneltest.FoldWants()[0],
	{Name: "avx2", Can: cpu.X86.HasSSE42 && cpu.X86.HasSSE41 && cpu.X86.HasPCLMULQDQ && cpu.X86.HasAVX2 && x86.HasVPCLMULQDQ},
	{Name: "pclmul", Can: cpu.X86.HasSSE42 && cpu.X86.HasSSE41 && cpu.X86.HasPCLMULQDQ},
	{Name: "generic", Can: true},
}
