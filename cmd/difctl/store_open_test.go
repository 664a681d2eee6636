package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// diskUsage is the disk space the files under dir take (du, not their
// apparent size).
func diskUsage(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSmallStoreStaysSmall: the store of a 1 MiB image takes a few MiB of
// disk, not the 71 MiB of the engine's default write-ahead log
// preallocation (110% of a 64 MiB memtable), after protect, a write and a
// verify.
func TestSmallStoreStaysSmall(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "a.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	if err := os.WriteFile(data, bytes.Repeat([]byte{7}, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"protect", img},
		{"write", "--offset", "4096", img, data},
		{"verify", img},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, nil, &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
		}
	}
	if n := diskUsage(t, img+".difdb"); n > 4<<20 {
		t.Errorf("the store of a 1 MiB image takes %d bytes of disk", n)
	}
}
