package scaffold

import (
	"testing"
	"unsafe"

	"github.com/difctl/difctl/kernels/internal/crcmath"
)

// TestOffsets checks the table offsets the generators emit against
// crcmath.RevFoldTable itself.
func TestOffsets(t *testing.T) {
	var tab crcmath.RevFoldTable
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"Fold", unsafe.Offsetof(tab.Fold), TableFold},
		{"Final", unsafe.Offsetof(tab.Final), TableFinal},
		{"Mu", unsafe.Offsetof(tab.Mu), TableMu},
		{"Poly", unsafe.Offsetof(tab.Poly), TablePoly},
		{"Rev", unsafe.Offsetof(tab.Rev), TableRev},
		{"size", unsafe.Sizeof(tab), TableSize},
	} {
		if c.got != c.want {
			t.Errorf("RevFoldTable.%s at %d, the generators assume %d", c.name, c.got, c.want)
		}
	}
	if len(tab.Fold) != MaxFold+1 {
		t.Errorf("Fold has %d entries, the generators assume %d", len(tab.Fold), MaxFold+1)
	}
}
