//go:build !purego

package crct10dif

import (
	"golang.org/x/sys/cpu"

	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// archCutoffs are the lengths where this architecture's implementations
// change strategy; the harness tests around each (and their doublings):
//   - 16: the assembly minimum (one lane), below it the tables;
//   - 64, 80: pmull8 starts its four accumulators (four full lanes, with and
//     without a one-lane head), 128 and 192: its loop runs once, twice;
//   - 128, 144: pmull starts its eight accumulators, 256 and 384: its loop.
var archCutoffs = []int{minPMULL, 4 * 16, 5 * 16, 8 * 16, 9 * 16, 12 * 16, 16 * 16, 24 * 16}

// archWants are the arm64 implementations, best first: pmull where the CPU
// has PMULL, pmull8 (NEON) always.
var archWants = []kerneltest.Want{{Name: "pmull", Can: cpu.ARM64.HasPMULL}, {Name: "pmull8", Can: true}}
