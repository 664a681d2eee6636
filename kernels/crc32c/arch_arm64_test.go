//go:build !purego

package crc32c

import (
	"golang.org/x/sys/cpu"

	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// archCutoffs are the lengths where this architecture's implementations
// change strategy; the harness tests around each: the 4-way threshold and
// its stripe granule, the largest chunk, and the 4-block Blocks minimum.
var archCutoffs = []int{fourWayMin, fourWayMin + stripeUnit, 4 * stripeUnit * 3, maxChunk, maxChunk + fourWayMin, blocksMin}

// archWants are the arm64 implementations, best first.
var archWants = []kerneltest.Want{
	{Name: "pmull4way", Can: cpu.ARM64.HasCRC32 && cpu.ARM64.HasPMULL},
	{Name: "crc", Can: cpu.ARM64.HasCRC32},
	{Name: "generic", Can: true},
}
