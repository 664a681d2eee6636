//go:build linux

package guest

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/u-root/u-root/pkg/cpio"
)

// Markers framing the test binary's output on the guest's console.
const (
	beginMarker = "DIFCTL-GUEST-BEGIN"
	exitMarker  = "DIFCTL-GUEST-EXIT"
)

// initScript is the guest's /init: mount the pseudo file systems, load the
// modules in /modules.list in order, wait for the NVMe namespaces, run the
// test binary between the markers, and power off. A failure before the test
// binary runs prints the exit marker with status 125.
const initScript = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/usr/sbin:/usr/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
fail() { echo "guest init: $*"; echo "` + exitMarker + ` 125"; poweroff -f; }
while read -r m; do
	insmod "/$m" || fail "insmod $m"
done </modules.list
. /guest.env
i=1
while [ "$i" -le "$GUEST_NAMESPACES" ]; do
	n=0
	while [ ! -b "/dev/nvme0n$i" ]; do
		n=$((n + 1))
		[ "$n" -le 300 ] || fail "no /dev/nvme0n$i after 30 s"
		sleep 0.1
	done
	i=$((i + 1))
done
cd /tmp
echo ` + beginMarker + `
/test -test.run "$GUEST_RUN" -test.v -test.count=1
echo "` + exitMarker + ` $?"
poweroff -f
`

// writeInitramfs writes the guest's initramfs (cpio newc, gzip) to dst:
// busybox, /init, the modules (relative to a.modDir, in load order), the
// test binary and the environment file.
func writeInitramfs(dst string, a *assets, modules []string, testBin string, env map[string]string, hostFiles []string) error {
	f, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	zw, err := gzip.NewWriterLevel(bw, gzip.BestSpeed)
	if err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	w := cpio.NewDedupWriter(cpio.Newc.Writer(zw))

	var recs []cpio.Record
	var closers []*os.File
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	file := func(name, src string, perm uint64) error {
		r, err := os.Open(src)
		if err != nil {
			return fmt.Errorf("guest: %w", err)
		}
		closers = append(closers, r)
		st, err := r.Stat()
		if err != nil {
			return fmt.Errorf("guest: %w", err)
		}
		recs = append(recs, cpio.Record{ReaderAt: r, Info: cpio.Info{
			Name: name, Mode: cpio.S_IFREG | perm, FileSize: uint64(st.Size()), NLink: 1,
		}})
		return nil
	}
	// The kernel opens /dev/console for init's standard streams before
	// init mounts devtmpfs.
	recs = append(recs, cpio.CharDev("dev/console", 0o600, 5, 1))
	for _, d := range []string{"proc", "sys", "tmp"} {
		recs = append(recs, cpio.Directory(d, 0o755))
	}
	recs = append(recs, cpio.StaticFile("init", initScript, 0o755))
	if err := file("bin/busybox", a.busybox, 0o755); err != nil {
		return err
	}
	var list strings.Builder
	for _, m := range modules {
		name := path.Join("modules", filepath.Base(m))
		if err := file(name, filepath.Join(a.modDir, m), 0o644); err != nil {
			return err
		}
		list.WriteString(name + "\n")
	}
	recs = append(recs, cpio.StaticFile("modules.list", list.String(), 0o644))
	if err := file("test", testBin, 0o755); err != nil {
		return err
	}
	recs = append(recs, cpio.StaticFile("guest.env", envFile(env), 0o644))
	for _, h := range hostFiles {
		// The file's content at its path, a symbolic link followed.
		if err := file(strings.TrimPrefix(h, "/"), h, 0o755); err != nil {
			return err
		}
	}

	if err := cpio.WriteRecordsAndDirs(w, recs); err != nil {
		return fmt.Errorf("guest: initramfs: %w", err)
	}
	if err := cpio.WriteTrailer(w); err != nil {
		return fmt.Errorf("guest: initramfs: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	return f.Close()
}

// hostFiles returns the host files that the programs bins need in the
// guest: each program and the shared objects ldd lists for it (the
// dynamic loader included), once each, in order.
func hostFiles(bins []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, b := range bins {
		if !filepath.IsAbs(b) {
			return nil, fmt.Errorf("guest: binary %q: not an absolute path", b)
		}
		if _, err := os.Stat(b); err != nil {
			return nil, fmt.Errorf("%w: %v (install the package that has it)", errUnavailable, err)
		}
		add(b)
		ldd, err := exec.Command("ldd", b).Output()
		if err != nil {
			// A static program: ldd says "not a dynamic executable" and fails.
			continue
		}
		for line := range strings.Lines(string(ldd)) {
			// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
			// "/lib64/ld-linux-x86-64.so.2 (0x...)"; the vDSO has no file.
			f := strings.Fields(line)
			for i, w := range f {
				if filepath.IsAbs(w) && (i == 0 || f[i-1] == "=>") {
					add(w)
				}
			}
		}
	}
	return out, nil
}

// envFile renders env as shell export lines, in key order.
func envFile(env map[string]string) string {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "export %s='%s'\n", k, strings.ReplaceAll(env[k], "'", `'\''`))
	}
	return b.String()
}
