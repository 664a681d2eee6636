package kernels

import (
	"os/exec"
	"runtime"
	"slices"
	"strings"
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

// The library's kernel packages must not link package testing into the
// programs that import them (the registry's test helpers live in
// internal/kerneltest, which only tests import).
func TestNoTestingDependency(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if slices.Contains(strings.Fields(string(out)), "testing") {
		t.Fatal("package kernels depends on package testing (go list -deps .)")
	}
}
