package kernels

import (
	"cmp"
	"maps"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/difctl/difctl/kernels/internal/impl"
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

// Every package that registers implementations is in Packages, so that
// List and `difctl kernels` show it: every name the sources pass to
// impl.Register (for every GOARCH), and every name registered in this
// binary.
func TestPackages(t *testing.T) {
	got := slices.Sorted(slices.Values(Packages))
	want := slices.Sorted(maps.Keys(registeredPackages(t, parseKernelSources(t))))
	if !slices.Equal(got, want) {
		t.Errorf("Packages (sorted) = %v; the sources register %v", got, want)
	}
	if want := impl.Packages(); !slices.Equal(got, want) {
		t.Errorf("Packages (sorted) = %v; the registry has %v", got, want)
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

// CPUFeatures names every CPU feature a kernel dispatches on, for every
// GOARCH, and nothing else: the feature tests in the kernel sources and the
// entries of archFeatures are the same set.
func TestCPUFeaturesMatchDispatch(t *testing.T) {
	uses := dispatchFeatureTests(parseKernelSources(t))
	listed := tableFeatureTests(t)
	for _, ft := range slices.SortedFunc(maps.Keys(uses), cmpFeatureTest) {
		if ft.arch == "" {
			t.Errorf("%s tests %s, an architecture CPUFeatures has no table for", uses[ft][0], ft.expr)
			continue
		}
		if _, ok := listed[ft]; !ok {
			t.Errorf("%s (and %d more) tests %s, which archFeatures[%q] lacks", uses[ft][0], len(uses[ft])-1, ft.expr, ft.arch)
		}
	}
	for _, ft := range slices.SortedFunc(maps.Keys(listed), cmpFeatureTest) {
		if _, ok := uses[ft]; !ok {
			t.Errorf("archFeatures[%q] lists %s (%q), which no kernel tests", ft.arch, ft.expr, listed[ft])
		}
	}
}

func cmpFeatureTest(a, b featureTest) int {
	return cmp.Or(cmp.Compare(a.arch, b.arch), cmp.Compare(a.expr, b.expr))
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
