//go:build linux

package guest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestAnchored(t *testing.T) {
	for _, tc := range []struct{ name, match, nomatch string }{
		{"TestX", "TestX", "TestXY"},
		{"TestX/size=4096", "TestX/size=4096", "TestX/size=40960"},
		{"TestX/a.b(c)", "TestX/a.b(c)", "TestX/aXb(c)"},
	} {
		pat := anchored(tc.name)
		for _, part := range strings.Split(pat, "/") {
			if _, err := regexp.Compile(part); err != nil {
				t.Fatalf("anchored(%q) = %q: %v", tc.name, pat, err)
			}
		}
		if !matchRun(pat, tc.match) || matchRun(pat, tc.nomatch) {
			t.Errorf("anchored(%q) = %q: matches %q %v, %q %v", tc.name, pat, tc.match, matchRun(pat, tc.match), tc.nomatch, matchRun(pat, tc.nomatch))
		}
	}
}

// matchRun applies a -test.run pattern to a test name as the testing
// package does for names of the same depth.
func matchRun(pat, name string) bool {
	ps, ns := strings.Split(pat, "/"), strings.Split(name, "/")
	if len(ps) != len(ns) {
		return false
	}
	for i := range ps {
		if !regexp.MustCompile(ps[i]).MatchString(ns[i]) {
			return false
		}
	}
	return true
}

func TestEnvFile(t *testing.T) {
	got := envFile(map[string]string{"B": "it's", "A": "x y"})
	want := "export A='x y'\nexport B='it'\\''s'\n"
	if got != want {
		t.Errorf("envFile = %q, want %q", got, want)
	}
}

// TestGuestResolveModules resolves the default modules in the cached kernel
// package: every module comes after its dependencies.
func TestGuestResolveModules(t *testing.T) {
	if os.Getenv(EnableEnv) != "1" {
		t.Skipf("needs the kernel package: set %s=1", EnableEnv)
	}
	a, err := getAssets()
	if err != nil {
		skip(t, "%v", err)
	}
	mods, err := resolveModules(a.modDir, DefaultModules)
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, m := range mods {
		pos[modName(m)] = i
	}
	for _, m := range mods {
		deps, err := moduleDeps(filepath.Join(a.modDir, m))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range deps {
			if p, ok := pos[modName(d)]; !ok || p > pos[modName(m)] {
				t.Errorf("%s: dependency %s missing or loaded after it (%v)", m, d, mods)
			}
		}
	}
	for _, want := range []string{"nvme", "nvme_core", "t10_pi", "crc_t10dif", "crct10dif_generic", "nbd"} {
		if _, ok := pos[want]; !ok {
			t.Errorf("modules %v lack %s", mods, want)
		}
	}
}
