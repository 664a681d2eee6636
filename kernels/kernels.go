// Package kernels reports and selects the checksum kernel implementations
// of difctl: CRC-16/T10-DIF (package crct10dif), CRC-32C (crc32c),
// CRC-64/NVME (crc64nvme), the one-pass T10-DIF guard and CRC-32C of a
// block (t10crc32c), Poly1305 and Poly1305-AES (poly1305), and the keyed
// read's one pass that copies blocks and computes their guard, CRC-32C and
// Poly1305 partial (keyedcopy), and the scan of packed 8-byte PI tuples
// against the expected ones (piscan).
//
// Each kernel package picks the fastest implementation the CPU can run when
// the program starts. The environment variable DIFCTL_KERNELS overrides that
// choice, as a comma-separated list of package=implementation pairs, for
// example DIFCTL_KERNELS=crct10dif=generic,crc32c=generic.
package kernels

import (
	"runtime"
	"slices"

	"golang.org/x/sys/cpu"

	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/kernels/crc64nvme"
	"github.com/difctl/difctl/kernels/crct10dif"
	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/x86"
	"github.com/difctl/difctl/kernels/keyedcopy"
	"github.com/difctl/difctl/kernels/piscan"
	"github.com/difctl/difctl/kernels/poly1305"
	"github.com/difctl/difctl/kernels/t10crc32c"
)

// Packages are the kernel package names as the registry knows them: the
// CRCs in guard-width order, the fused CRC pass, then Poly1305, the
// keyed read's fused pass, and the scan of packed PI tuples.
var Packages = []string{"crct10dif", "crc32c", "crc64nvme", "t10crc32c", "poly1305", "keyedcopy", "piscan"}

// The kernel packages register their implementations in init; importing
// them here guarantees List sees all of them.
var _ = []any{crct10dif.Checksum, crc32c.Checksum, crc64nvme.Checksum, t10crc32c.Blocks, poly1305.Sum, keyedcopy.BlocksCopy, piscan.Scan16}

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

// A feature is one CPU feature a kernel's dispatch tests, under the name
// CPUFeatures reports.
type feature struct {
	name string
	has  bool
}

// archFeatures are, per GOARCH, the CPU features the kernels dispatch on,
// in the order CPUFeatures reports them. Every feature test in the kernel
// packages (x/sys/cpu's cpu.X86.Has* and cpu.ARM64.Has*, internal/x86's
// Has*) has an entry here, and every entry is such a test:
// TestCPUFeaturesMatchDispatch parses the kernel sources, for every GOARCH,
// to hold both. Two tests of the same feature share its name.
var archFeatures = map[string][]feature{
	"amd64": {
		{"ssse3", cpu.X86.HasSSSE3},
		{"sse4.1", cpu.X86.HasSSE41},
		{"sse4.2", cpu.X86.HasSSE42},
		{"pclmulqdq", cpu.X86.HasPCLMULQDQ},
		{"avx", cpu.X86.HasAVX},
		{"avx2", cpu.X86.HasAVX2},
		{"bmi2", cpu.X86.HasBMI2},
		{"avx512f", cpu.X86.HasAVX512F},
		{"avx512bw", cpu.X86.HasAVX512BW},
		{"avx512vl", cpu.X86.HasAVX512VL},
		{"avx512dq", cpu.X86.HasAVX512DQ},
		{"avx512ifma", cpu.X86.HasAVX512IFMA},
		{"gfni", cpu.X86.HasAVX512GFNI},
		// x/sys/cpu sets its bit only with AVX-512; the VEX form on YMM
		// needs only the CPUID bit, which internal/x86 reads.
		{"vpclmulqdq", x86.HasVPCLMULQDQ},
		{"vpclmulqdq", cpu.X86.HasAVX512VPCLMULQDQ},
	},
	"arm64": {
		{"asimd", cpu.ARM64.HasASIMD},
		{"crc32", cpu.ARM64.HasCRC32},
		{"pmull", cpu.ARM64.HasPMULL},
	},
}

// CPUFeatures lists the CPU features the kernels dispatch on that this CPU
// has.
func CPUFeatures() []string {
	var f []string
	for _, ft := range archFeatures[runtime.GOARCH] {
		if ft.has && !slices.Contains(f, ft.name) {
			f = append(f, ft.name)
		}
	}
	return f
}
