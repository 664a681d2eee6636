//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// protect of a block device without --store is refused (exit 16): the
// default store beside the device node would live on devtmpfs.
func TestProtectBlockDeviceNeedsStore(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a loop device")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("no losetup")
	}
	img := filepath.Join(t.TempDir(), "loop.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "-f", "--show", img).Output()
	if err != nil {
		t.Skipf("losetup: %v", err)
	}
	dev := strings.TrimSpace(string(out))
	defer exec.Command("losetup", "-d", dev).Run()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"protect", dev}, nil, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "is a block device") || !strings.Contains(stderr.String(), "--store") {
		t.Errorf("protect %s: exit %d, stderr %q", dev, code, stderr.String())
	}
	if _, err := os.Lstat(dev + storeSuffix); err == nil {
		os.RemoveAll(dev + storeSuffix)
		t.Errorf("protect left a store at %s%s", dev, storeSuffix)
	}
	// With --store it protects.
	url := "pebble:" + filepath.Join(t.TempDir(), "st")
	stdout.Reset()
	stderr.Reset()
	if code := run(context.Background(), []string{"protect", "--store", url, dev}, nil, &stdout, &stderr); code != exitOK {
		t.Errorf("protect --store: exit %d, stderr %q", code, stderr.String())
	}
}
