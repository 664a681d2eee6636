package etcd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/scrub"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// TestProtectResume interrupts a protect (a bulk load through etcd's
// staged keys, checkpointed) half way and runs it again: it resumes from
// its last checkpoint, completes, and a scrub finds every block protected.
func TestProtectResume(t *testing.T) {
	c := startCluster(t, 1, 0)
	const blocks = 4096 // 16 MiB of 4 KiB blocks
	img := filepath.Join(t.TempDir(), "disk.img")
	data := make([]byte, blocks*4096)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	if err := os.WriteFile(img, data, 0o644); err != nil {
		t.Fatal(err)
	}
	dev, err := device.OpenFile(img, device.FileOptions{BlockSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	o := testOptions()
	o.MaxTxnOps = 8 // many transactions per checkpoint
	kv := openT(t, c.URL(newPrefix(t)), o)
	defer kv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var reports []int64
	opts := blockdev.CreateOptions{
		Format:          dif.MustFormat("4096+8"),
		ChunkBytes:      256 << 10,
		CheckpointBytes: 1 << 20,
		Progress: func(done, total int64) {
			reports = append(reports, done)
			if done >= total/2 {
				cancel()
			}
		},
	}
	if _, err := blockdev.Create(ctx, dev, kv, opts); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted Create = %v, want context.Canceled", err)
	}
	if len(reports) < 4 {
		t.Fatalf("%d progress reports before the interruption, want several", len(reports))
	}
	if _, err := blockdev.Open(context.Background(), dev, kv, blockdev.Options{}); !errors.Is(err, blockdev.ErrIncomplete) {
		t.Fatalf("Open of a half-protected volume = %v, want ErrIncomplete", err)
	}
	var first int64 = -1
	opts.Progress = func(done, total int64) {
		if first < 0 {
			first = done
		}
	}
	v, err := blockdev.Create(context.Background(), dev, kv, opts)
	if err != nil {
		t.Fatalf("resumed Create: %v", err)
	}
	defer v.Close()
	if first < int64(len(data))/4 {
		t.Errorf("resumed protect reported %d bytes first: it did not resume from its checkpoint", first)
	}
	rep, err := scrub.Run(context.Background(), v, scrub.Options{})
	if err != nil || rep.OK != blocks || rep.Failed != 0 {
		t.Fatalf("scrub after the resumed protect: %d ok, %d failed of %d, %v", rep.OK, rep.Failed, blocks, err)
	}
}

// TestStoreOpen opens through store.Open (the registration hook, options
// from the environment), as every difctl --store flag does.
func TestStoreOpen(t *testing.T) {
	c := startCluster(t, 1, 0)
	t.Setenv(EnvLeaseTTL, "3s")
	url := c.URL(newPrefix(t))
	kv, err := store.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	b := kv.NewBatch()
	b.Set([]byte("k"), []byte("v"))
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Open(url); !errors.Is(err, ErrLocked) {
		t.Fatalf("second store.Open = %v, want ErrLocked", err)
	}
	t.Setenv(EnvPassword, "secret")
	if _, err := store.Open(url); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("store.Open with a password and no user = %v, want ErrInvalid", err)
	}
}
