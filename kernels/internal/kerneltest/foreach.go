package kerneltest

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/difctl/difctl/kernels/internal/impl"
)

// ForEach runs f once for every implementation of pkg that the CPU can run,
// each as a subtest named "impl=NAME" with that implementation active, and
// restores the default afterwards. Implementations the CPU cannot run are
// reported as skipped subtests, except that on CI (CI=true) an implementation
// in mustRun whose CPU features the kernel of the operating system reports
// (the flags of /proc/cpuinfo on linux/amd64) fails the test when the
// registry calls it unavailable: a machine that should exercise a path and
// silently does not is a defect of the feature detection.
//
// ForEach must not be used from parallel tests of the same package: the
// active implementation is global.
func ForEach(t *testing.T, pkg string, f func(t *testing.T)) {
	t.Helper()
	list := impl.List(pkg)
	if len(list) == 0 {
		t.Fatalf("kerneltest: no implementations registered for %q", pkg)
	}
	defer impl.Reset(pkg)
	for _, im := range list {
		t.Run("impl="+im.Name, func(t *testing.T) {
			if !im.Available {
				if msg := mustRunFailure(pkg, im.Name); msg != "" && OnCI() {
					t.Fatal(msg)
				}
				t.Skipf("%s/%s: not supported by this CPU", pkg, im.Name)
			}
			if err := impl.Select(pkg, im.Name); err != nil {
				t.Fatal(err)
			}
			f(t)
		})
	}
}

// ForEachB is ForEach for benchmarks.
func ForEachB(b *testing.B, pkg string, f func(b *testing.B)) {
	b.Helper()
	defer impl.Reset(pkg)
	for _, im := range impl.List(pkg) {
		if !im.Available {
			continue
		}
		b.Run("impl="+im.Name, func(b *testing.B) {
			if err := impl.Select(pkg, im.Name); err != nil {
				b.Fatal(err)
			}
			f(b)
		})
	}
}

// OnCI reports whether the tests run under CI (the CI environment variable
// is "true").
func OnCI() bool { return os.Getenv("CI") == "true" }

// mustRun lists, per "pkg/impl", the /proc/cpuinfo flags of everything the
// implementation needs (ForEach). The AVX-512 kernels are left out: their
// detection also needs the OS to enable the ZMM state, which the flags do
// not say.
var mustRun = map[string][]string{
	"crct10dif/avx2":   {"avx2", "pclmulqdq", "vpclmulqdq"},
	"crct10dif/avx":    {"pclmulqdq", "ssse3", "sse4_1", "avx"},
	"crc64nvme/avx":    {"pclmulqdq", "ssse3", "sse4_1", "avx"},
	"crct10dif/pclmul": {"pclmulqdq", "ssse3", "sse4_1"},
	"crc64nvme/avx2":   {"avx2", "pclmulqdq", "vpclmulqdq"},
	"crc64nvme/pclmul": {"pclmulqdq", "ssse3", "sse4_1"},
	"crc32c/avx2":      {"sse4_2", "sse4_1", "pclmulqdq", "avx2", "vpclmulqdq"},
	"crc32c/pclmul":    {"sse4_2", "sse4_1", "pclmulqdq"},
	"t10crc32c/avx2":   {"avx2", "pclmulqdq", "vpclmulqdq", "sse4_2"},
	"t10crc32c/avx":    {"avx", "pclmulqdq", "sse4_2"},
}

// mustRunFailure returns why pkg/name, unavailable, should have run: its
// mustRun flags, all present in /proc/cpuinfo; "" if there is no reason.
func mustRunFailure(pkg, name string) string {
	flags, ok := mustRun[pkg+"/"+name]
	if !ok || !hasCPUFlags(flags) {
		return ""
	}
	return fmt.Sprintf("kerneltest: %s/%s is unavailable, but the CPU has what it needs: %s (/proc/cpuinfo)", pkg, name, strings.Join(flags, " "))
}

// hasCPUFlags reports whether /proc/cpuinfo lists every flag, on
// linux/amd64; elsewhere, or when it cannot be read, false.
func hasCPUFlags(flags []string) bool {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		return false
	}
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if name, val, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "flags" {
			have := strings.Fields(val)
			for _, f := range flags {
				if !slices.Contains(have, f) {
					return false
				}
			}
			return true
		}
	}
	return false
}

// Want is an implementation CheckImplementations expects, and whether the
// CPU can run it by the test's own reading of the CPU features.
type Want struct {
	Name string
	Can  bool
}

// CheckImplementations checks pkg's registry against want, best first:
// each is registered, available exactly when the CPU can run it, and,
// unless DIFCTL_KERNELS forces a choice, the first one the CPU can run is
// the active one. A registration mistake fails here rather than falling
// back silently to a slower path.
func CheckImplementations(t *testing.T, pkg string, want ...Want) {
	t.Helper()
	list := impl.List(pkg)
	for _, w := range want {
		i := slices.IndexFunc(list, func(im impl.Impl) bool { return im.Name == w.Name })
		switch {
		case i < 0:
			t.Errorf("%s/%s is not registered", pkg, w.Name)
		case w.Can && !list[i].Available:
			t.Errorf("the CPU has the features of %s/%s but it is not available", pkg, w.Name)
		case !w.Can && list[i].Available:
			t.Errorf("%s/%s is available but the CPU lacks its features", pkg, w.Name)
		case !w.Can:
			t.Logf("%s/%s: the CPU lacks its features; not run on this machine", pkg, w.Name)
		}
	}
	if _, forced := impl.Forced(pkg); forced {
		return
	}
	for _, w := range want {
		if w.Can {
			a := impl.Active(pkg)
			// want may be a subset of the package's implementations
			// (the fold kernels): one registered before w, better, may
			// be active.
			ia := slices.IndexFunc(list, func(im impl.Impl) bool { return im.Name == a })
			iw := slices.IndexFunc(list, func(im impl.Impl) bool { return im.Name == w.Name })
			if a != w.Name && !(ia >= 0 && ia < iw && !slices.ContainsFunc(want, func(x Want) bool { return x.Name == a })) {
				t.Errorf("%s: active implementation %q, want %q", pkg, a, w.Name)
			}
			return
		}
	}
}
