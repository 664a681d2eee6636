//go:build !purego

package keyedcopy

import (
	"testing"
	"unsafe"

	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/poly1305"
)

// The kernel reads crcmath.RevFoldTable and poly1305's lane key where its
// generator assumed (zfusedpoly_amd64.go), and its key table is the one
// poly1305.Key.LaneKey hands out.
func TestKernelLayout(t *testing.T) {
	var tab crcmath.RevFoldTable
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"Fold", unsafe.Offsetof(tab.Fold), fusedTableFold},
		{"Final", unsafe.Offsetof(tab.Final), fusedTableFinal},
		{"Mu", unsafe.Offsetof(tab.Mu), fusedTableMu},
		{"Poly", unsafe.Offsetof(tab.Poly), fusedTablePoly},
		{"Rev", unsafe.Offsetof(tab.Rev), fusedTableRev},
	} {
		if c.got != c.want {
			t.Errorf("RevFoldTable.%s at %d, the kernel assumes %d", c.name, c.got, c.want)
		}
	}
	if fusedKeyWords != poly1305.LaneKeyWords {
		t.Errorf("the kernel's key table has %d words, poly1305's lane key %d", fusedKeyWords, poly1305.LaneKeyWords)
	}
	if fusedZKeyWords != poly1305.IFMAKeyWords {
		t.Errorf("the AVX-512 kernel's key table has %d words, poly1305's IFMA key %d", fusedZKeyWords, poly1305.IFMAKeyWords)
	}
	if fusedZHWords != 3*fusedZGroup {
		t.Errorf("%d accumulator words per pair, want %d", fusedZHWords, 3*fusedZGroup)
	}
	if fusedHWords != 5*fusedGroup {
		t.Errorf("%d lane words per group, want %d", fusedHWords, 5*fusedGroup)
	}
}
