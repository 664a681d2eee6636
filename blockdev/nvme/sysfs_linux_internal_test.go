//go:build linux

package nvme

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/difctl/difctl/dif"
)

// fakeSysfs points sysfs at a directory holding files (path: content)
// for the test.
func fakeSysfs(t *testing.T, files map[string]string) {
	t.Helper()
	dir := t.TempDir()
	for p, c := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := sysfs
	sysfs = dir
	t.Cleanup(func() { sysfs = old })
}

func TestReadIntegrity(t *testing.T) {
	fakeSysfs(t, map[string]string{
		"block/nvme0n1/integrity/format":                    "T10-DIF-TYPE1-CRC\n",
		"block/nvme0n1/integrity/tuple_size":                "8\n",
		"block/nvme0n1/integrity/protection_interval_bytes": "4096\n",
		"block/nvme0n2/integrity/format":                    "none\n",
		"block/nvme0n3/integrity/format":                    "T10-DIF-TYPE1-CRC\n",
		"block/nvme0n3/integrity/tuple_size":                "eight\n",
	})
	in, err := ReadIntegrity("nvme0n1")
	if want := (Integrity{Present: true, Format: "T10-DIF-TYPE1-CRC", TupleSize: 8, IntervalBytes: 4096}); err != nil || in != want {
		t.Errorf("nvme0n1: %+v, %v; want %+v", in, err, want)
	}
	if !in.KernelPI() {
		t.Error("T10-DIF-TYPE1-CRC: KernelPI false")
	}
	in, err = ReadIntegrity("nvme0n2")
	if err != nil || in != (Integrity{Present: true, Format: "none"}) || in.KernelPI() {
		t.Errorf("nvme0n2: %+v, %v", in, err)
	}
	if in, err := ReadIntegrity("ng0n1"); err != nil || in.Present {
		t.Errorf("a device without the directory: %+v, %v", in, err)
	}
	if _, err := ReadIntegrity("nvme0n3"); err == nil {
		t.Error("a tuple_size that is no number: no error")
	}
}

// TestMaxBlocks: a command stays within max_hw_sectors_kb and the pages
// max_segments maps, counting the metadata of extended LBAs.
func TestMaxBlocks(t *testing.T) {
	fakeSysfs(t, map[string]string{
		"block/a/queue/max_hw_sectors_kb": "512\n",
		"block/a/queue/max_segments":      "127\n",
		"block/b/queue/max_hw_sectors_kb": "128\n",
		"block/b/queue/max_segments":      "1024\n",
	})
	page := os.Getpagesize()
	for _, tc := range []struct {
		name, format string
		want         int
	}{
		{"a", "4096+8:dix", min(512<<10, 126*page) / 4096},
		{"a", "512+8", min(512<<10, 126*page) / 520},
		{"b", "4096+16:crc64:dix", 32},
		{"c", "4096+8:dix", defaultMaxBytes / 4096}, // no queue directory
	} {
		if got := maxBlocks(tc.name, dif.MustFormat(tc.format)); got != tc.want {
			t.Errorf("%s %s: %d blocks, want %d", tc.name, tc.format, got, tc.want)
		}
	}
}
