//go:build !purego

package crct10dif

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/difctl/difctl/kernels/internal/impl"
)

// TestEntryTarget checks that updateEntry's own path is live under avx512
// where the CPU has the kernel's features: the dispatch variable then holds
// the same function value as entryTarget, which updateEntry compares word
// for word. (Were they to differ, every call would take the fallback:
// correct, and slower.)
func TestEntryTarget(t *testing.T) {
	if !hasFoldAVX512 || !cpu.X86.HasAVX512VL || !cpu.X86.HasAVX512DQ {
		if entryTarget != nil {
			t.Fatal("entryTarget is set on a CPU without the kernel's features")
		}
		t.Skip("the CPU lacks AVX-512 VPCLMULQDQ, VL or DQ")
	}
	word := func(f *func(uint16, []byte) uint16) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(f)) }
	defer impl.Reset(pkgName)
	if err := impl.Select(pkgName, "avx512"); err != nil {
		t.Fatal(err)
	}
	if word(&update) != word(&entryTarget) {
		t.Fatal("update under avx512 is not the word entryTarget holds")
	}
	if err := impl.Select(pkgName, "generic"); err != nil {
		t.Fatal(err)
	}
	if word(&update) == word(&entryTarget) {
		t.Fatal("update under generic is the word entryTarget holds")
	}
}
