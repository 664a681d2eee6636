//go:build !purego

package crct10dif

import (
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/difctl/difctl/kernels/internal/impl"
)

// Both arm64 kernels must be registered and must run where the CPU allows:
// pmull whenever the CPU reports PMULL, pmull8 always. A CPU that has PMULL
// and a pmull that did not run is a failure, not a skip.
func TestArm64Available(t *testing.T) {
	avail := map[string]bool{}
	for _, im := range impl.List(pkgName) {
		avail[im.Name] = im.Available
	}
	if !avail["pmull8"] {
		t.Errorf("pmull8 is not available: %v", impl.List(pkgName))
	}
	if cpu.ARM64.HasPMULL && !avail["pmull"] {
		t.Errorf("the CPU has PMULL but pmull is not available: %v", impl.List(pkgName))
	}
	t.Logf("HasPMULL=%v implementations=%v", cpu.ARM64.HasPMULL, impl.List(pkgName))
}
