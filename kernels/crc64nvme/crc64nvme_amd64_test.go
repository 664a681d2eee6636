//go:build !purego

package crc64nvme

import (
	"testing"
	"unsafe"

	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/x86"
	"golang.org/x/sys/cpu"
)

// An implementation the CPU can run must be registered and available: a
// machine with AVX-512 that silently runs a slower path is a defect, so this
// fails rather than skips. The features are derived here independently of the
// package's own checks.
func TestArchImplementations(t *testing.T) {
	x := cpu.X86
	_, _, ecx7, _ := x86.CPUID(7, 0)
	vpclmul := ecx7&(1<<10) != 0
	want := []struct {
		name string
		can  bool
	}{
		{"avx512", x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VPCLMULQDQ && x.HasAVX2 && x.HasPCLMULQDQ},
		{"avx2", x.HasAVX2 && x.HasPCLMULQDQ && vpclmul},
		{"pclmul", x.HasPCLMULQDQ && x.HasSSSE3 && x.HasSSE41},
	}
	list := impl.List(pkgName)
	for _, w := range want {
		var got *impl.Impl
		for i := range list {
			if list[i].Name == w.name {
				got = &list[i]
			}
		}
		switch {
		case got == nil:
			t.Errorf("%s is not registered", w.name)
		case w.can && !got.Available:
			t.Errorf("the CPU has the features of %s but it is not available", w.name)
		case !w.can && got.Available:
			t.Errorf("%s is available but the CPU lacks its features", w.name)
		case !w.can:
			t.Logf("%s: the CPU lacks its features; not run on this machine", w.name)
		default:
			if err := impl.Select(pkgName, w.name); err != nil {
				t.Fatal(err)
			}
			if got := Checksum([]byte("123456789")); got != 0xAE8B14860A799888 {
				t.Errorf("%s: check value %#x", w.name, got)
			}
		}
	}
	impl.Reset(pkgName)
	if best := want[0]; best.can && impl.Active(pkgName) != best.name {
		t.Errorf("active implementation %q, want %q", impl.Active(pkgName), best.name)
	}
}

// The kernels read crcmath.RevFoldTable through a pointer at the offsets the
// generator assumed (zfold_amd64.go).
func TestFoldTableOffsets(t *testing.T) {
	var tab crcmath.RevFoldTable
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"Fold", unsafe.Offsetof(tab.Fold), foldTableFold},
		{"Final", unsafe.Offsetof(tab.Final), foldTableFinal},
		{"Mu", unsafe.Offsetof(tab.Mu), foldTableMu},
		{"Poly", unsafe.Offsetof(tab.Poly), foldTablePoly},
		{"Rev", unsafe.Offsetof(tab.Rev), foldTableRev},
		{"size", unsafe.Sizeof(tab), foldTableSize},
	} {
		if c.got != c.want {
			t.Errorf("FoldTable.%s at %d, the generated kernels assume %d", c.name, c.got, c.want)
		}
	}
}
