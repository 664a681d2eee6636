package kernels

import (
	"runtime"
	"slices"
	"testing"
)

func TestList(t *testing.T) {
	l := List()
	for _, p := range Packages {
		var active, generic int
		for _, im := range l {
			if im.Package != p {
				continue
			}
			if im.Active {
				active++
				if !im.Available {
					t.Errorf("%s/%s active but unavailable", p, im.Name)
				}
				if Active(p) != im.Name {
					t.Errorf("Active(%s) = %q, List says %q", p, Active(p), im.Name)
				}
			}
			if im.Name == "generic" {
				generic++
			}
		}
		if active != 1 || generic != 1 {
			t.Errorf("%s: %d active, %d generic implementations; want 1 and 1", p, active, generic)
		}
	}
}

func TestSelect(t *testing.T) {
	defer Reset("crct10dif")
	if err := Select("crct10dif", "generic"); err != nil {
		t.Fatal(err)
	}
	if Active("crct10dif") != "generic" {
		t.Fatal("Select did not take effect")
	}
	if err := Select("crct10dif", "no-such"); err == nil {
		t.Fatal("Select of an unknown implementation succeeded")
	}
}

func TestCPUFeatures(t *testing.T) {
	f := CPUFeatures()
	if runtime.GOARCH == "arm64" && !slices.Contains(f, "asimd") {
		t.Errorf("arm64 without asimd: %v", f)
	}
}
