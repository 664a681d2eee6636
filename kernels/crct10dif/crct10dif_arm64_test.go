//go:build !purego

package crct10dif

import (
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// Both arm64 kernels must be registered and must run where the CPU allows:
// pmull whenever the CPU reports PMULL, pmull8 always.
func TestArchImplementations(t *testing.T) {
	t.Logf("cpu: pmull=%v", cpu.ARM64.HasPMULL)
	kerneltest.CheckImplementations(t, pkgName,
		kerneltest.Want{Name: "pmull", Can: cpu.ARM64.HasPMULL},
		kerneltest.Want{Name: "pmull8", Can: true})
}
