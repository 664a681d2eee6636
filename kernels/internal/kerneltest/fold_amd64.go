//go:build !purego

package kerneltest

import (
	"slices"
	"testing"
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/x86"
)

// CheckFoldImplementations checks the registry of a package built on the
// amd64 fold kernels, for the fold implementations it names
// (CheckImplementations, with the features derived here, independently of
// the package's own checks), and runs the check value through each one the
// CPU can run. A machine with AVX-512 that silently runs a slower path is a
// defect, so this fails rather than skips.
func CheckFoldImplementations[T Word](t *testing.T, k Kernel[T], names ...string) {
	t.Helper()
	var want []Want
	for _, w := range FoldWants() {
		if slices.Contains(names, w.Name) {
			want = append(want, w)
		}
	}
	CheckImplementations(t, k.Pkg, want...)
	defer impl.Reset(k.Pkg)
	for _, w := range want {
		if !w.Can {
			continue
		}
		if err := impl.Select(k.Pkg, w.Name); err != nil {
			t.Fatal(err)
		}
		if got := k.Checksum([]byte("123456789")); uint64(got) != k.Params.Check {
			t.Errorf("%s: check value %#x, want %#x", w.Name, got, k.Params.Check)
		}
	}
}

// FoldWants are the amd64 fold implementations, best first, and whether
// this CPU can run each, from CPUID.
func FoldWants() []Want {
	x := cpu.X86
	_, _, ecx7, _ := x86.CPUID(7, 0)
	vpclmul := ecx7&(1<<10) != 0
	return []Want{
		{"avx512", x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VPCLMULQDQ && x.HasAVX512GFNI && x.HasAVX2 && x.HasPCLMULQDQ},
		{"avx2", x.HasAVX2 && x.HasPCLMULQDQ && vpclmul},
		{"avx", x.HasAVX && x.HasPCLMULQDQ && x.HasSSSE3 && x.HasSSE41},
		{"pclmul", x.HasPCLMULQDQ && x.HasSSSE3 && x.HasSSE41},
	}
}

// FoldOffsets are the byte offsets of crcmath.RevFoldTable that a package's
// generated kernels assume (its zfold_amd64.go constants).
type FoldOffsets struct{ Fold, Final, Mu, Poly, Rev, Size uintptr }

// CheckFoldOffsets checks that the kernels read the table where it is.
func CheckFoldOffsets(t *testing.T, o FoldOffsets) {
	t.Helper()
	var tab crcmath.RevFoldTable
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"Fold", unsafe.Offsetof(tab.Fold), o.Fold},
		{"Final", unsafe.Offsetof(tab.Final), o.Final},
		{"Mu", unsafe.Offsetof(tab.Mu), o.Mu},
		{"Poly", unsafe.Offsetof(tab.Poly), o.Poly},
		{"Rev", unsafe.Offsetof(tab.Rev), o.Rev},
		{"size", unsafe.Sizeof(tab), o.Size},
	} {
		if c.got != c.want {
			t.Errorf("FoldTable.%s at %d, the generated kernels assume %d", c.name, c.got, c.want)
		}
	}
}
