package blockdev

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// importSource is an extended 512+8 image of blocks blocks, block bad (if
// not negative) failing its guard.
func importSource(t *testing.T, blocks, bad int) *memImage {
	t.Helper()
	f := dif.MustFormat("512+8")
	img := blocktest.Pattern(blocks*f.ExtendedBlockSize(), 9)
	if err := f.Generate(img, nil, dif.Params{RefTag: 5}); err != nil {
		t.Fatal(err)
	}
	if bad >= 0 {
		img[bad*520+3] ^= 1
	}
	return newMemImage(t, f, dif.Params{RefTag: 5}, img, nil)
}

// TestImportTarget pins the create-or-resume and cleanup policy of an
// import into a new image.
func TestImportTarget(t *testing.T) {
	ctx := context.Background()
	const blocks = 4000
	size := int64(blocks * 512)
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }

	t.Run("case=refused-discards", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "out.img")
		kv := store.NewMem()
		tgt, err := OpenImportTarget(kv, path, size, ImportTargetOptions{})
		if err != nil || tgt.Resume || !exists(path) {
			t.Fatalf("new target: %+v, %v", tgt, err)
		}
		_, _, err = tgt.Import(ctx, importSource(t, blocks, 10), kv, ImportOptions{})
		var ie *IntegrityError
		if !errors.As(err, &ie) || !tgt.Discarded() || exists(path) {
			t.Fatalf("refused import: %v, discarded %v, image left %v", err, tgt.Discarded(), exists(path))
		}
		if err := tgt.Close(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("case=exists", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "out.img")
		os.WriteFile(path, []byte("keep"), 0o600)
		if _, err := OpenImportTarget(store.NewMem(), path, size, ImportTargetOptions{}); !errors.Is(err, ErrImportTargetExists) {
			t.Fatalf("existing image: %v", err)
		}
		if b, _ := os.ReadFile(path); string(b) != "keep" {
			t.Fatal("the existing image was touched")
		}
	})
	t.Run("case=interrupted-resumes", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "out.img")
		kv := store.NewMem()
		src := importSource(t, blocks, -1)
		tgt, err := OpenImportTarget(kv, path, size, ImportTargetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		opts := ImportOptions{RunBytes: 64 * 512, CheckpointBytes: 512 * 512, Force: true}
		opts.Progress = func(done, total int64) {
			if done >= 2000*512 {
				cancel()
			}
		}
		if _, rep, err := tgt.Import(cctx, src, kv, opts); !errors.Is(err, context.Canceled) || rep.Next == 0 || tgt.Discarded() || !exists(path) {
			t.Fatalf("interrupted import: %+v, %v, discarded %v", rep, err, tgt.Discarded())
		}
		tgt.Close()

		// The image gone, the import cannot resume.
		os.Rename(path, path+".away")
		if _, err := OpenImportTarget(kv, path, size, ImportTargetOptions{}); !errors.Is(err, ErrImportTargetGone) || !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("resume without the image: %v", err)
		}
		os.Rename(path+".away", path)

		tgt, err = OpenImportTarget(kv, path, size, ImportTargetOptions{})
		if err != nil || !tgt.Resume {
			t.Fatalf("resumed target: %+v, %v", tgt, err)
		}
		opts.Progress = nil
		v, rep, err := tgt.Import(ctx, src, kv, opts)
		if err != nil || !rep.Resumed || rep.Next != blocks {
			t.Fatalf("resumed import: %+v, %v", rep, err)
		}
		v.Close()
		tgt.Close()

		// A complete volume is not imported over.
		if _, err := OpenImportTarget(kv, path, size, ImportTargetOptions{}); !errors.Is(err, ErrVolumeExists) {
			t.Fatalf("import over a volume: %v", err)
		}
	})
	t.Run("case=interrupted-at-once-discards", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "out.img")
		kv := store.NewMem()
		tgt, err := OpenImportTarget(kv, path, size, ImportTargetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, _, err := tgt.Import(cctx, importSource(t, blocks, -1), kv, ImportOptions{Force: true}); err == nil || !tgt.Discarded() || exists(path) {
			t.Fatalf("import cancelled before it began: %v, discarded %v, image left %v", err, tgt.Discarded(), exists(path))
		}
	})
	t.Run("case=create-fails", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "no", "out.img")
		var te *ImportTargetError
		if _, err := OpenImportTarget(store.NewMem(), path, size, ImportTargetOptions{}); !errors.As(err, &te) || te.Op != "create" || !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("create in a missing directory: %v", err)
		}
	})
}
