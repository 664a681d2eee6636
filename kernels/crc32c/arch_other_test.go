//go:build (!amd64 && !arm64) || purego

package crc32c

import (
	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// archCutoffs are the lengths where this architecture's implementations
// change strategy; the harness tests around each.
var archCutoffs []int

// archWants are this build's implementations, best first.
var archWants = []kerneltest.Want{kerneltest.Want{Name: "generic", Can: true}}
