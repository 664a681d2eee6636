//go:build !purego

package crc64nvme

import (
	"golang.org/x/sys/cpu"

	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// archCutoffs are the lengths where this architecture's implementations
// change strategy; the harness tests around each: the fold threshold, the
// eight-accumulator loop (128 bytes) and its second iteration, and the
// four-block Blocks minimum.
var archCutoffs = []int{pmullMin, 128, 256, blocksMin, 48}

// archWants are the arm64 implementations, best first.
var archWants = []kerneltest.Want{{Name: "pmull", Can: cpu.ARM64.HasPMULL}, {Name: "generic", Can: true}}
