//go:build !purego

package crct10dif

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/impl"
)

// The fused kernel reads crcmath.RevFoldTable at the offsets its generator
// assumed (zfused_amd64.go).
func TestFusedTableOffsets(t *testing.T) {
	var tab crcmath.RevFoldTable
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"Fold", unsafe.Offsetof(tab.Fold), fusedTableFold},
		{"Final", unsafe.Offsetof(tab.Final), fusedTableFinal},
		{"Mu", unsafe.Offsetof(tab.Mu), fusedTableMu},
		{"Poly", unsafe.Offsetof(tab.Poly), fusedTablePoly},
	} {
		if c.got != c.want {
			t.Errorf("FoldTable.%s at %d, the fused kernel assumes %d", c.name, c.got, c.want)
		}
	}
}

// Each implementation dispatches BlocksCRC32C as documented: the fused
// kernel under avx512 and avx2 when the CPU has SSE4.2, the two passes
// otherwise. A CPU that can run the fused kernel must run it.
func TestBlocksCRC32CDispatch(t *testing.T) {
	ptr := func(f any) uintptr { return reflect.ValueOf(f).Pointer() }
	impl.ForEach(t, pkgName, func(t *testing.T) {
		name := impl.Active(pkgName)
		fused := ptr(blocksSums) == ptr(blocksSumsAVX2)
		want := hasFusedAVX2 && (name == "avx2" || name == "avx512")
		if fused != want {
			t.Errorf("%s: fused kernel in use = %v, want %v", name, fused, want)
		}
	})
}
