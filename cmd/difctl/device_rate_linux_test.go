//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/difctl/difctl/internal/guest"
)

// rateEnv asks for TestGuestDevicePIRate, a measurement rather than a
// check: CI does not boot it.
const rateEnv = "DIFCTL_GUEST_RATE"

// TestGuestDevicePIRate measures, in one guest, difctl verify of a 64 MiB
// 4096+8 Type 1 namespace (every block written by the kernel) against dd
// of the same namespace (O_DIRECT, 1 MiB reads: busybox dd), three rounds
// each, interleaved, and logs the rates and their ratio
// (docs/performance.md, "Device PI under QEMU").
func TestGuestDevicePIRate(t *testing.T) {
	const bs, blocks = 4096, 16384
	img := ""
	if !guest.InGuest() {
		if os.Getenv(rateEnv) != "1" {
			t.Skipf("a measurement: set %s=1 (and %s=1)", rateEnv, guest.EnableEnv)
		}
		img = filepath.Join(t.TempDir(), "ns.img")
		if err := os.WriteFile(img, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(img, blocks*(bs+8)); err != nil {
			t.Fatal(err)
		}
	}
	if !guest.Run(t, guest.Config{Namespaces: []guest.Namespace{{Image: img, LBASize: bs, MS: 8, PI: 1}}, Timeout: 15 * time.Minute}) {
		return
	}
	const dev = "/dev/nvme0n1"
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for off := 0; off < blocks*bs; off += len(chunk) {
		copy(chunk, blockPattern(off, len(chunk)))
		if _, err := f.WriteAt(chunk, int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	size := float64(blocks * bs)
	var dd, vf []float64
	for round := range 3 {
		t0 := time.Now()
		out, err := exec.Command("dd", "if="+dev, "of=/dev/null", "bs=1M", "iflag=direct").CombinedOutput()
		if err != nil {
			t.Fatalf("dd: %v\n%s", err, out)
		}
		dd = append(dd, size/time.Since(t0).Seconds())
		t0 = time.Now()
		if code := run(context.Background(), []string{"verify", "--device-pi", dev}, strings.NewReader(""), io.Discard, io.Discard); code != 0 {
			t.Fatalf("verify: exit %d", code)
		}
		vf = append(vf, size/time.Since(t0).Seconds())
		t.Logf("round %d: dd %.1f MB/s, difctl verify %.1f MB/s, ratio %.2f", round, dd[round]/1e6, vf[round]/1e6, vf[round]/dd[round])
	}
	med := func(x []float64) float64 {
		a, b, c := x[0], x[1], x[2]
		return max(min(a, b), min(max(a, b), c))
	}
	fmt.Printf("RATE dd %.1f MB/s, verify %.1f MB/s (medians of 3), verify/dd %.2f\n", med(dd)/1e6, med(vf)/1e6, med(vf)/med(dd))
}
