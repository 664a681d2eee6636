package blockdev

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// TestCreateMaxSparse protects a device of holes as large as a volume may
// be (store.MaxPages pages of 1,024 blocks of 512 bytes: 128 TiB), keyed
// or not: Create makes a handful of small store commits (the manifest with
// its one empty run, the protect cursor), whatever the size, in bounded
// memory and time; the volume then writes, reads, checks and inspects,
// and reopens.
func TestCreateMaxSparse(t *testing.T) {
	f := dif.MustFormat("512+8")
	size := int64(store.MaxPages) * store.DefaultPageTuples * 512
	for _, keyed := range []bool{false, true} {
		t.Run(fmt.Sprintf("keyed=%v", keyed), func(t *testing.T) {
			dev, err := device.NewMem(size, 512)
			if err != nil {
				t.Fatal(err)
			}
			kv := &countingKV{KV: store.NewMem()}
			defer kv.Close()
			opts := CreateOptions{Format: f}
			if keyed {
				opts.Key = testKey(t, 3)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			t0 := time.Now()
			v, err := Create(context.Background(), dev, kv, opts)
			d := time.Since(t0)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("created in %v with %d store commits, %d bytes allocated", d, kv.commits.Load(), alloc)
			if c := kv.commits.Load(); c > 5 {
				t.Errorf("Create made %d store commits", c)
			}
			if alloc > 64<<20 {
				t.Errorf("Create allocated %d bytes", alloc)
			}
			if d > 10*time.Second {
				t.Errorf("Create took %v", d)
			}
			// The last blocks: written, read back, checked.
			p := blocktest.Pattern(3*512, 4)
			off := size - int64(len(p))
			if _, err := v.WriteAt(p, off); err != nil {
				t.Fatal(err)
			}
			if err := v.Sync(); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4096)
			if _, err := v.ReadAt(buf, size-4096); err != nil {
				t.Fatal(err)
			}
			if string(buf[4096-len(p):]) != string(p) {
				t.Fatal("the last blocks read back differently")
			}
			n := 2048
			scratch := make([]byte, v.ScratchSize(n))
			st, err := v.CheckRun(context.Background(), v.Blocks()-int64(n), n, scratch, CheckOptions{}, func(p Problem) { t.Errorf("problem: %+v", p) })
			if err != nil || st.OK != 3 || st.Unwritten != int64(n-3) {
				t.Fatalf("CheckRun = %+v, %v; want 3 blocks ok, the rest unwritten", st, err)
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			if v, err = Open(context.Background(), dev, kv, opts.Options); err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			ov, err := Inspect(context.Background(), v.Tuples(), "")
			if err != nil || ov.Written != 3 {
				t.Fatalf("Inspect = %+v, %v; want 3 blocks written", ov, err)
			}
			if d := time.Since(t0); d > 20*time.Second {
				t.Errorf("all of it took %v", d)
			}
		})
	}
}

// TestSparseRunDeleted: the empty run that records the unwritten pages of
// a volume protected over holes, deleted from the store, leaves those
// pages with no record: reads and checks of them fail as a damaged store
// (store.ErrCorrupt, never unwritten blocks), keyed or not; with the key,
// the keyed tags of those pages are missing too.
func TestSparseRunDeleted(t *testing.T) {
	f := dif.MustFormat("512+8")
	const pages = 3
	size := int64(pages) * store.DefaultPageTuples * 512
	for _, keyed := range []bool{false, true} {
		t.Run(fmt.Sprintf("keyed=%v", keyed), func(t *testing.T) {
			dev, err := device.NewMem(size, 512)
			if err != nil {
				t.Fatal(err)
			}
			kv := store.NewMem()
			defer kv.Close()
			opts := CreateOptions{Format: f, Options: Options{Rereads: -1}}
			if keyed {
				opts.Key = testKey(t, 5)
			}
			v, err := Create(context.Background(), dev, kv, opts)
			if err != nil {
				t.Fatal(err)
			}
			// Page 1 written: the runs [0, 1) and [2, 3).
			if _, err := v.WriteAt(blocktest.Pattern(512, 1), store.DefaultPageTuples*512); err != nil {
				t.Fatal(err)
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			kvDelete(t, kv, pageRecKey(DefaultVolumeName, 'R', pages-1))
			if v, err = Open(context.Background(), dev, kv, opts.Options); err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			buf := make([]byte, 512)
			if _, err := v.ReadAt(buf, 0); err != nil { // page 0: still in its run
				t.Fatalf("a block of page 0: %v", err)
			}
			if _, err := v.ReadAt(buf, store.DefaultPageTuples*512); err != nil {
				t.Fatalf("the block written: %v", err)
			}
			_, err = v.ReadAt(buf, 2*store.DefaultPageTuples*512+9)
			if !errors.Is(err, store.ErrCorrupt) || errors.Is(err, dif.ErrIntegrity) {
				t.Fatalf("a block of the page whose run was deleted: %v, want store.ErrCorrupt", err)
			}
			scratch := make([]byte, v.ScratchSize(int(v.Blocks())))
			if _, err := v.CheckRun(context.Background(), 0, int(v.Blocks()), scratch, CheckOptions{}, func(Problem) {}); !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("CheckRun: %v, want store.ErrCorrupt", err)
			}
			if keyed {
				var pe *store.PageMACError
				err := v.Tuples().ReadTags(2*store.DefaultPageTuples, make([]store.KeyedTag, 8))
				if !errors.As(err, &pe) || !pe.IsMissing(2) {
					t.Fatalf("ReadTags of page 2: %v, want it missing", err)
				}
				if _, _, err := v.Tuples().CheckSeal(); !errors.Is(err, store.ErrSealMismatch) {
					t.Fatalf("CheckSeal: %v, want ErrSealMismatch", err)
				}
			}
		})
	}
}
