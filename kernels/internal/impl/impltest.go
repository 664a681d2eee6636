package impl

import (
	"os"
	"testing"
)

// ForEach runs f once for every implementation of pkg that the CPU can run,
// each as a subtest named "impl=NAME" with that implementation active, and
// restores the default afterwards. Implementations the CPU cannot run are
// reported as skipped subtests, except that on CI (CI=true) an implementation
// named in mustRun fails the test when it is unavailable: a machine that
// should exercise a path and silently does not is a defect.
//
// ForEach must not be used from parallel tests of the same package: the
// active implementation is global.
func ForEach(t *testing.T, pkg string, f func(t *testing.T)) {
	t.Helper()
	list := List(pkg)
	if len(list) == 0 {
		t.Fatalf("impl: no implementations registered for %q", pkg)
	}
	defer Reset(pkg)
	for _, im := range list {
		t.Run("impl="+im.Name, func(t *testing.T) {
			if !im.Available {
				t.Skipf("%s/%s: not supported by this CPU", pkg, im.Name)
			}
			if err := Select(pkg, im.Name); err != nil {
				t.Fatal(err)
			}
			f(t)
		})
	}
}

// ForEachB is ForEach for benchmarks.
func ForEachB(b *testing.B, pkg string, f func(b *testing.B)) {
	b.Helper()
	defer Reset(pkg)
	for _, im := range List(pkg) {
		if !im.Available {
			continue
		}
		b.Run("impl="+im.Name, func(b *testing.B) {
			if err := Select(pkg, im.Name); err != nil {
				b.Fatal(err)
			}
			f(b)
		})
	}
}

// OnCI reports whether the tests run under CI (the CI environment variable
// is "true").
func OnCI() bool { return os.Getenv("CI") == "true" }
