//go:build !purego

package crct10dif

import (
	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// archCutoffs are the lengths where the amd64 implementations change
// strategy (the generated fold kernels'); the harness tests around each.
var archCutoffs = foldCutoffs

// archWants are the amd64 implementations, best first: the fold kernels.
var archWants = append(kerneltest.FoldWants(), kerneltest.Want{Name: "generic", Can: true})
