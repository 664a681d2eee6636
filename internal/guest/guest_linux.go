//go:build linux

package guest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// GuestEnv is set to "1" by the guest's /init for the test binary.
const GuestEnv = "DIFCTL_GUEST"

// EnableEnv must be "1" for the host to boot guests: guest tests are slow
// (a TCG boot is about 15 s of CPU), so the ordinary test legs skip them and
// CI runs them in a leg of their own.
const EnableEnv = "DIFCTL_GUEST_TESTS"

// DefaultModules are loaded in every guest, with their dependencies: the
// NVMe driver, the CRC providers that t10-pi's CRC libraries look up through
// the crypto API (a softdep, which .modinfo's depends= does not list), and
// the NBD client.
var DefaultModules = []string{"crct10dif_generic", "crc64_rocksoft_generic", "nvme", "nbd"}

// Namespace is one NVMe namespace of the guest's controller, backed by a raw
// image file on the host. QEMU keeps a namespace's data first and its
// metadata after it in the image (whatever MSet), so an image of
// N*(LBASize+MS) bytes is a namespace of N blocks.
type Namespace struct {
	// Image is the backing file; it must exist. Required.
	Image string
	// LBASize is the logical block size. Default 4096.
	LBASize int
	// MS is the metadata size per block. Default 0: no metadata.
	MS int
	// MSet 1 formats the namespace with extended LBAs (metadata interleaved
	// with the data, DIF); 0 with a separate metadata buffer (DIX).
	// Default 0.
	MSet int
	// PI is the protection information type, 0 to 3. Default 0: none.
	PI int
	// PIL 1 puts the PI tuple in the first bytes of the metadata, 0 in the
	// last. Default 0.
	PIL int
	// PIF is the guard format: 0 the 16-bit guard, 2 the 64-bit guard with
	// 48-bit reference tags. Default 0.
	PIF int
}

// qemuArgs are the -drive and -device arguments of namespace i (from 1).
func (n Namespace) qemuArgs(i int) []string {
	lba := n.LBASize
	if lba == 0 {
		lba = 4096
	}
	id := fmt.Sprintf("ns%d", i)
	return []string{
		"-drive", fmt.Sprintf("file=%s,if=none,id=%s,format=raw,cache=writeback", n.Image, id),
		"-device", fmt.Sprintf("nvme-ns,drive=%s,bus=nvme0,nsid=%d,logical_block_size=%d,physical_block_size=%d,ms=%d,mset=%d,pi=%d,pil=%d,pif=%d",
			id, i, lba, lba, n.MS, n.MSet, n.PI, n.PIL, n.PIF),
	}
}

// Config describes a guest.
type Config struct {
	// Namespaces are the NVMe namespaces, /dev/nvme0n1 onwards in the
	// guest. Default none: then no NVMe controller either.
	Namespaces []Namespace
	// Modules are kernel modules to load beyond DefaultModules.
	Modules []string
	// Binaries are programs of the host (absolute paths, for example
	// "/usr/sbin/mkfs.ext4") put in the guest at the same paths, with the
	// shared libraries and the dynamic loader that ldd lists for them: the
	// tools a test runs that busybox lacks. A program the host lacks skips
	// the test (fails it on CI).
	Binaries []string
	// Env is set for the test binary in the guest.
	Env map[string]string
	// Timeout bounds the boot and the run; QEMU is killed after it.
	// Default 5 minutes.
	Timeout time.Duration
}

// InGuest reports whether the process runs inside a guest.
func InGuest() bool { return os.Getenv(GuestEnv) == "1" }

// Run returns true inside a guest, where the caller goes on with the test
// body. On the host it boots a guest that runs the calling test (t.Name(),
// anchored) in the test's own package, fails t if that run fails, and
// returns false.
func Run(t *testing.T, cfg Config) bool {
	t.Helper()
	if InGuest() {
		return true
	}
	Boot(t, cfg, anchored(t.Name()))
	return false
}

// anchored turns a test name into a -test.run pattern matching it alone.
func anchored(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// skip skips t with the reason given, or fails it on CI, where guest tests must run.
func skip(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format+" (on CI guest tests must run)", args...)
	}
	t.Skipf(format, args...)
}

// Boot boots a guest that runs the tests of the calling package matching
// run (a -test.run pattern), waits for it to power off, and fails t if the
// run failed, matched no test, or did not finish within the timeout. It
// returns the test binary's output. Outside the guest only: inside, it
// fails t.
func Boot(t testing.TB, cfg Config, run string) string {
	t.Helper()
	if InGuest() {
		t.Fatal("guest: Boot called inside the guest")
	}
	if os.Getenv(EnableEnv) != "1" {
		t.Skipf("guest test: set %s=1 to boot a QEMU guest (about 15 s of CPU a boot)", EnableEnv)
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		skip(t, "guest: no qemu-system-x86_64 (apt-get install qemu-system-x86)")
	}
	a, err := getAssets()
	if errors.Is(err, errUnavailable) {
		skip(t, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	mods, err := resolveModules(a.modDir, append(append([]string(nil), DefaultModules...), cfg.Modules...))
	if err != nil {
		t.Fatal(err)
	}
	bin, err := testBinary()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for k, v := range cfg.Env {
		env[k] = v
	}
	env[GuestEnv] = "1"
	env["GUEST_RUN"] = run
	env["GUEST_NAMESPACES"] = strconv.Itoa(len(cfg.Namespaces))
	dir := t.TempDir()
	initrd := filepath.Join(dir, "initramfs.cpio.gz")
	files, err := hostFiles(cfg.Binaries)
	if errors.Is(err, errUnavailable) {
		skip(t, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := writeInitramfs(initrd, a, mods, bin, env, files); err != nil {
		t.Fatal(err)
	}

	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := []string{
		// KVM hangs in the sandboxes this runs in: always TCG.
		"-accel", "tcg", "-m", "1G", "-smp", "1",
		"-display", "none", "-monitor", "none", "-serial", "stdio",
		"-nic", "none", "-no-reboot",
		"-kernel", a.kernel, "-initrd", initrd,
		"-append", "console=ttyS0 panic=-1 quiet loglevel=4 rdinit=/init",
	}
	if len(cfg.Namespaces) > 0 {
		args = append(args, "-device", "nvme,serial=difctl,id=nvme0")
		for i, ns := range cfg.Namespaces {
			args = append(args, ns.qemuArgs(i+1)...)
		}
	}
	cmd := exec.CommandContext(ctx, qemu, args...)
	var console bytes.Buffer
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("guest: %v", err)
	}
	var (
		wg                 sync.WaitGroup
		began              time.Duration
		status             = -1
		testOut            strings.Builder
		inTest, sawNoTests bool
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), "\r")
			console.WriteString(line + "\n")
			switch {
			case line == beginMarker:
				began, inTest = time.Since(start), true
			case strings.HasPrefix(line, exitMarker+" "):
				status, _ = strconv.Atoi(strings.TrimPrefix(line, exitMarker+" "))
				inTest = false
			case inTest:
				testOut.WriteString(line + "\n")
				if strings.Contains(line, "no tests to run") {
					sawNoTests = true
				}
			}
		}
		io.Copy(io.Discard, pr)
	}()
	werr := cmd.Wait()
	pw.Close()
	wg.Wait()
	total := time.Since(start)
	out := testOut.String()
	switch {
	case ctx.Err() != nil:
		t.Fatalf("guest: no power-off within %v; console:\n%s", timeout, console.String())
	case status < 0:
		t.Fatalf("guest: no exit status (qemu: %v); console:\n%s", werr, console.String())
	case status != 0:
		t.Fatalf("guest: test binary exit status %d (-test.run %q); console:\n%s", status, run, console.String())
	case sawNoTests:
		t.Fatalf("guest: -test.run %q matched no test in the guest:\n%s", run, out)
	}
	t.Logf("guest: booted in %v, ran -test.run %q in %v:\n%s", began.Round(time.Millisecond), run, (total - began).Round(time.Millisecond), out)
	return out
}

var binOnce sync.Map // package directory -> *binResult

type binResult struct {
	once sync.Once
	path string
	err  error
}

// testBinary builds the current package's tests (the test's working
// directory is its package's) as a static binary, once per process.
func testBinary() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("guest: %w", err)
	}
	v, _ := binOnce.LoadOrStore(wd, &binResult{})
	r := v.(*binResult)
	r.once.Do(func() {
		cache, err := cacheDir()
		if err != nil {
			r.err = err
			return
		}
		// One binary per package directory, rebuilt by every process.
		dir := filepath.Join(cache, "bin", fmt.Sprintf("%x", sha256.Sum256([]byte(wd)))[:16])
		if err := os.MkdirAll(dir, 0o755); err != nil {
			r.err = fmt.Errorf("guest: %w", err)
			return
		}
		r.path = filepath.Join(dir, "test")
		cmd := exec.Command("go", "test", "-c", "-o", r.path, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if out, err := cmd.CombinedOutput(); err != nil {
			r.err = fmt.Errorf("guest: building the guest's test binary: %v\n%s", err, out)
		}
	})
	return r.path, r.err
}
