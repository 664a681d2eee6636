// Package kernels reports and selects the checksum kernel implementations
// of difctl: CRC-16/T10-DIF (package crct10dif), CRC-32C (crc32c),
// CRC-64/NVME (crc64nvme), the one-pass T10-DIF guard and CRC-32C of a
// block (t10crc32c), Poly1305 and Poly1305-AES (poly1305), and the keyed
// read's one pass that copies blocks and computes their guard, CRC-32C and
// Poly1305 partial (keyedcopy).
//
// Each kernel package picks the fastest implementation the CPU can run when
// the program starts. The environment variable DIFCTL_KERNELS overrides that
// choice, as a comma-separated list of package=implementation pairs, for
// example DIFCTL_KERNELS=crct10dif=generic,crc32c=generic.
package kernels

import (
	"runtime"

	"golang.org/x/sys/cpu"

	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/kernels/crc64nvme"
	"github.com/difctl/difctl/kernels/crct10dif"
	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/x86"
	"github.com/difctl/difctl/kernels/keyedcopy"
	"github.com/difctl/difctl/kernels/poly1305"
	"github.com/difctl/difctl/kernels/t10crc32c"
)

// Packages are the kernel package names as the registry knows them: the
// CRCs in guard-width order, the fused CRC pass, then Poly1305 and the
// keyed read's fused pass.
var Packages = []string{"crct10dif", "crc32c", "crc64nvme", "t10crc32c", "poly1305", "keyedcopy"}

// The kernel packages register their implementations in init; importing
// them here guarantees List sees all of them.
var _ = []any{crct10dif.Checksum, crc32c.Checksum, crc64nvme.Checksum, t10crc32c.Blocks, poly1305.Sum, keyedcopy.BlocksCopy}

// Impl describes one implementation of one kernel.
type Impl struct {
	Package   string `json:"package"`
	Name      string `json:"name"`
	Available bool   `json:"available"` // the CPU can run it
	Active    bool   `json:"active"`    // it is in use
}

// List returns every implementation of every kernel, each package's best
// first.
func List() []Impl {
	var out []Impl
	for _, p := range Packages {
		for _, im := range impl.List(p) {
			out = append(out, Impl(im))
		}
	}
	return out
}

// Active returns the implementation of pkg in use.
func Active(pkg string) string { return impl.Active(pkg) }

// Select makes the named implementation of pkg the active one. It is meant
// for start-up configuration and benchmarks; it must not run concurrently
// with checksum computations.
func Select(pkg, name string) error { return impl.Select(pkg, name) }

// Reset restores the default implementation of pkg.
func Reset(pkg string) { impl.Reset(pkg) }

// CPUFeatures lists the CPU features the kernels use that this CPU has.
func CPUFeatures() []string {
	var f []string
	add := func(has bool, name string) {
		if has {
			f = append(f, name)
		}
	}
	switch runtime.GOARCH {
	case "amd64":
		add(cpu.X86.HasSSE41, "sse4.1")
		add(cpu.X86.HasSSE42, "sse4.2")
		add(cpu.X86.HasPCLMULQDQ, "pclmulqdq")
		add(cpu.X86.HasAVX2, "avx2")
		add(cpu.X86.HasAVX512F, "avx512f")
		add(cpu.X86.HasAVX512VL, "avx512vl")
		add(cpu.X86.HasAVX512BW, "avx512bw")
		add(x86.HasVPCLMULQDQ, "vpclmulqdq")
	case "arm64":
		add(cpu.ARM64.HasASIMD, "asimd")
		add(cpu.ARM64.HasCRC32, "crc32")
		add(cpu.ARM64.HasPMULL, "pmull")
		add(cpu.ARM64.HasAES, "aes")
	}
	return f
}
