//go:build linux

package guest

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// errUnavailable marks a failure to get a tool or package the guest needs:
// the test skips, except on CI.
var errUnavailable = errors.New("guest: unavailable")

// assets are the unpacked packages of one kernel and busybox.
type assets struct {
	kernel  string // vmlinuz
	modDir  string // lib/modules/VERSION
	busybox string // the static busybox binary
	key     string // package versions, for the initramfs cache
}

var (
	assetsOnce sync.Once
	assetsVal  *assets
	assetsErr  error
)

// cacheDir is $XDG_CACHE_HOME/difctl-guest or ~/.cache/difctl-guest.
func cacheDir() (string, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("guest: no cache directory: %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "difctl-guest"), nil
}

// getAssets fetches and unpacks the kernel and busybox packages once per
// process; the unpacked trees are kept in the cache across runs.
func getAssets() (*assets, error) {
	assetsOnce.Do(func() { assetsVal, assetsErr = fetchAssets() })
	return assetsVal, assetsErr
}

func fetchAssets() (*assets, error) {
	dir, err := cacheDir()
	if err != nil {
		return nil, err
	}
	// linux-image-amd64 is a metapackage: its versioned dependency is the
	// package that holds the kernel and its modules.
	meta, err := aptShow("linux-image-amd64")
	if err != nil {
		return nil, err
	}
	kpkg := regexp.MustCompile(`(?m)^Depends:.*?\b(linux-image-[0-9][^ ,]*-amd64)\b`).FindStringSubmatch(meta)
	if kpkg == nil {
		return nil, fmt.Errorf("%w: linux-image-amd64 depends on no linux-image-*-amd64 package", errUnavailable)
	}
	kdir, err := unpacked(dir, kpkg[1])
	if err != nil {
		return nil, err
	}
	bdir, err := unpacked(dir, "busybox-static")
	if err != nil {
		return nil, err
	}
	a := &assets{busybox: filepath.Join(bdir, "bin", "busybox"), key: filepath.Base(kdir) + "+" + filepath.Base(bdir)}
	vmlinuz, _ := filepath.Glob(filepath.Join(kdir, "boot", "vmlinuz-*"))
	mods, _ := filepath.Glob(filepath.Join(kdir, "lib", "modules", "*"))
	if len(vmlinuz) != 1 || len(mods) != 1 {
		return nil, fmt.Errorf("guest: %s holds %d kernels and %d module trees, want 1 of each", kdir, len(vmlinuz), len(mods))
	}
	a.kernel, a.modDir = vmlinuz[0], mods[0]
	if _, err := os.Stat(a.busybox); err != nil {
		return nil, fmt.Errorf("guest: busybox-static has no bin/busybox: %w", err)
	}
	return a, nil
}

// aptShow returns apt-cache's record of the candidate version of pkg.
func aptShow(pkg string) (string, error) {
	out, err := exec.Command("apt-cache", "show", "--no-all-versions", pkg).Output()
	if err != nil || len(out) == 0 {
		return "", fmt.Errorf("%w: apt-cache show %s: %v (run apt-get update?)", errUnavailable, pkg, err)
	}
	return string(out), nil
}

// unpacked returns the directory that holds pkg's candidate version
// unpacked, downloading and unpacking it first if the cache lacks it.
func unpacked(cache, pkg string) (string, error) {
	rec, err := aptShow(pkg)
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^Version: (\S+)$`).FindStringSubmatch(rec)
	if m == nil {
		return "", fmt.Errorf("%w: apt-cache show %s gives no version", errUnavailable, pkg)
	}
	name := pkg + "_" + strings.ReplaceAll(m[1], ":", "%3a")
	dir := filepath.Join(cache, name)
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("guest: %w", err)
	}
	tmp, err := os.MkdirTemp(cache, ".fetch-")
	if err != nil {
		return "", fmt.Errorf("guest: %w", err)
	}
	defer os.RemoveAll(tmp)
	// apt-get download writes into the working directory; as root it warns
	// that the _apt user cannot reach it, which is harmless.
	dl := exec.Command("apt-get", "download", pkg+"="+m[1])
	dl.Dir = tmp
	if out, err := dl.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w: apt-get download %s: %v\n%s", errUnavailable, pkg, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("guest: apt-get download %s left %d .deb files", pkg, len(debs))
	}
	root := filepath.Join(tmp, "root")
	if out, err := exec.Command("dpkg", "-x", debs[0], root).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w: dpkg -x %s: %v\n%s", errUnavailable, debs[0], err, out)
	}
	if err := os.WriteFile(filepath.Join(root, ".complete"), nil, 0o644); err != nil {
		return "", fmt.Errorf("guest: %w", err)
	}
	// Another process may have unpacked the same version meanwhile: then
	// its copy is kept.
	if err := os.Rename(root, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, ".complete")); serr != nil {
			return "", fmt.Errorf("guest: %w", err)
		}
	}
	return dir, nil
}

// modName is the kernel's name of a module file: its base name without .ko,
// with '-' read as '_'.
func modName(s string) string {
	s = strings.TrimSuffix(filepath.Base(s), ".ko")
	return strings.ReplaceAll(s, "-", "_")
}

// resolveModules returns the module files (relative to modDir) that loading
// roots needs, in an order that loads every module after its dependencies.
// Dependencies come from each module's .modinfo "depends=" entry, since the
// package ships no modules.dep (depmod writes it at install).
func resolveModules(modDir string, roots []string) ([]string, error) {
	files := map[string]string{}
	err := filepath.WalkDir(filepath.Join(modDir, "kernel"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".ko") {
			rel, _ := filepath.Rel(modDir, p)
			files[modName(p)] = rel
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("guest: %w", err)
	}
	var order []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name, from string) error
	visit = func(name, from string) error {
		name = modName(name)
		switch state[name] {
		case 1:
			return fmt.Errorf("guest: module dependency cycle at %s", name)
		case 2:
			return nil
		}
		rel, ok := files[name]
		if !ok {
			return fmt.Errorf("guest: no module %s in %s (needed by %s)", name, modDir, from)
		}
		state[name] = 1
		deps, err := moduleDeps(filepath.Join(modDir, rel))
		if err != nil {
			return err
		}
		sort.Strings(deps)
		for _, d := range deps {
			if err := visit(d, name); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, rel)
		return nil
	}
	for _, r := range roots {
		if err := visit(r, "the test"); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// moduleDeps reads the "depends=" entry of a module's .modinfo section.
func moduleDeps(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("guest: %w", err)
	}
	defer f.Close()
	s := f.Section(".modinfo")
	if s == nil {
		return nil, fmt.Errorf("guest: %s has no .modinfo", path)
	}
	info, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf("guest: %s: %w", path, err)
	}
	for _, kv := range bytes.Split(info, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			if len(v) == 0 {
				return nil, nil
			}
			return strings.Split(string(v), ","), nil
		}
	}
	return nil, nil
}
