package blockdev

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// pagedVol is a keyed 512+8 volume of three tag pages (the last short),
// every block written by Create, and blocks of page 1 rewritten later.
const pagedBlocks = 3*store.DefaultPageTuples - 100

func newPagedVol(t *testing.T) *keyedVol {
	t.Helper()
	f := dif.MustFormat("512+8")
	dev, err := device.NewMem(pagedBlocks*512, 512)
	if err != nil {
		t.Fatal(err)
	}
	kv := store.NewMem()
	t.Cleanup(func() { kv.Close() })
	dev.WriteAt(blocktest.Pattern(pagedBlocks*512, 5), 0)
	key := testKey(t, 3)
	v, err := Create(context.Background(), dev, kv, CreateOptions{Format: f, Options: Options{Key: key}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteAt(blocktest.Pattern(16*512, 6), 1100*512); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	return &keyedVol{t: t, f: f, dev: dev, kv: kv, key: key}
}

func kvDelete(t *testing.T, kv store.KV, k []byte) {
	t.Helper()
	b := kv.NewBatch()
	if err := b.Delete(k); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
}

// wantPageMissing checks that every block of tag page page, and no other,
// fails as a keyed-tag page-missing failure, in a check and in a read.
func wantPageMissing(t *testing.T, k *keyedVol, page int64) {
	t.Helper()
	v := k.mustOpen(k.key)
	defer v.Close()
	P := int64(store.DefaultPageTuples)
	first, end := page*P, min((page+1)*P, pagedBlocks)
	probs := keyedFailures(t, v)
	if int64(len(probs)) != end-first {
		t.Errorf("%d problems, want %d (every block of page %d)", len(probs), end-first, page)
	}
	for i, p := range probs {
		var ke *KeyedTagError
		if p.Kind != KindKeyedTag || !errors.As(p.Err, &ke) || ke.Reason != "page-missing" || p.LBA != first+int64(i) || ke.LBA != p.LBA {
			t.Fatalf("problem %d: %+v, want block %d keyed-tag page-missing", i, p, first+int64(i))
		}
	}
	buf := make([]byte, 512)
	lba := first + (end-first)/2
	_, err := v.ReadAt(buf, lba*512)
	var ke *KeyedTagError
	if !errors.As(err, &ke) || !errors.Is(err, dif.ErrIntegrity) || ke.LBA != lba || ke.Reason != "page-missing" {
		t.Fatalf("read of block %d: %v, want a keyed-tag page-missing failure", lba, err)
	}
	if _, err := v.ReadAt(buf, ((page+1)%3)*P*512); err != nil {
		t.Fatalf("read of a block of another page: %v", err)
	}
}

// TestKeyedPageMissing is the attack of issue 17's gap: an attacker without
// the key zeroes the written blocks of a page on the device, puts the
// empty record in place of their tuple page and deletes their tag page.
// The blocks then read as unwritten zeros without the key; with it, every
// one of them is a keyed-tag failure (page-missing), since every tag page
// is recorded from Create on. Deleting any one tag page alone fails the
// same way.
func TestKeyedPageMissing(t *testing.T) {
	t.Run("attack=zero-empty-delete", func(t *testing.T) {
		k := newPagedVol(t)
		P := int64(store.DefaultPageTuples)
		if _, err := k.dev.WriteAt(make([]byte, P*512), P*512); err != nil {
			t.Fatal(err)
		}
		at, err := store.OpenTuples(k.kv, DefaultVolumeName, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := at.Discard(P, P, true); err != nil {
			t.Fatal(err)
		}
		kvDelete(t, k.kv, tagPageKey(DefaultVolumeName, 1))
		// Without the key the page reads as unwritten zeros, cleanly.
		nv := k.mustOpen(nil)
		if probs := keyedFailures(t, nv); len(probs) != 0 {
			t.Fatalf("without the key: %v", probs)
		}
		nv.Close()
		wantPageMissing(t, k, 1)
	})
	for page := range int64(3) {
		t.Run(fmt.Sprintf("attack=delete-tag-page/page=%d", page), func(t *testing.T) {
			k := newPagedVol(t)
			kvDelete(t, k.kv, tagPageKey(DefaultVolumeName, uint64(page)))
			wantPageMissing(t, k, page)
		})
	}
}

// TestKeyedPagesAfterCreateAndDiscard: a keyed volume created over holes
// records every tag page in one empty run sealed with the key, a write
// gives its pages their tag pages, and a discard of whole pages seals them
// empty again rather than deleting them; the volume checks clean
// throughout, and a tag page deleted from the discarded pages fails.
func TestKeyedPagesAfterCreateAndDiscard(t *testing.T) {
	dir := t.TempDir()
	dev, err := device.CreateImage(dir+"/img", pagedBlocks*512, device.FileOptions{}) // all holes
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	kv := store.NewMem()
	defer kv.Close()
	key := testKey(t, 4)
	v, err := Create(context.Background(), dev, kv, CreateOptions{Format: dif.MustFormat("512+8"), Options: Options{Key: key}})
	if err != nil {
		t.Fatal(err)
	}
	count := func(typ byte) int {
		it, err := kv.NewIter(pageRecKey(DefaultVolumeName, typ, 0), pageRecKey(DefaultVolumeName, typ, 1<<40))
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		n := 0
		for it.Next() {
			n++
		}
		return n
	}
	countPages := func() int { return count('K') }
	if n, r := countPages(), count('R'); n != 0 || r != 1 {
		t.Fatalf("%d tag pages and %d empty runs after Create over holes, want 0 and 1", n, r)
	}
	if probs := keyedFailures(t, v); len(probs) != 0 {
		t.Fatalf("after Create: %v", probs)
	}
	if _, err := v.WriteAt(blocktest.Pattern(pagedBlocks*512, 9), 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Discard(0, 2*store.DefaultPageTuples*512); err != nil {
		t.Fatal(err)
	}
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := countPages(); n != 3 {
		t.Fatalf("%d tag pages after a discard of two whole pages, want 3", n)
	}
	if probs := keyedFailures(t, v); len(probs) != 0 {
		t.Fatalf("after the discard: %v", probs)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	kvDelete(t, kv, tagPageKey(DefaultVolumeName, 0))
	v, err = Open(context.Background(), dev, kv, Options{Key: key, Rereads: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	probs := keyedFailures(t, v)
	if len(probs) != store.DefaultPageTuples {
		t.Fatalf("%d problems after deleting the discarded page's tag page, want %d", len(probs), store.DefaultPageTuples)
	}
}

// TestKeyedImportRefused: an import creates no keyed volume (its bulk load
// cannot commit tuples with their tags): a key is refused before anything
// is written.
func TestKeyedImportRefused(t *testing.T) {
	f := dif.MustFormat("512+8")
	img := blocktest.Pattern(64*f.ExtendedBlockSize(), 5)
	if err := f.Generate(img, nil, dif.Params{}); err != nil {
		t.Fatal(err)
	}
	src := newMemImage(t, f, dif.Params{}, img, nil)
	mem, _ := device.NewMem(64*512, 512)
	kv := store.NewMem()
	defer kv.Close()
	_, _, err := ImportImage(context.Background(), src, mem, kv, ImportOptions{Options: Options{Key: testKey(t, 1)}})
	if !errors.Is(err, ErrNotKeyed) {
		t.Fatalf("keyed import: %v, want ErrNotKeyed", err)
	}
	if vols, _ := store.Volumes(kv); len(vols) != 0 || mem.Allocated() != 0 {
		t.Fatalf("refused import left volumes %v and %d bytes of data", vols, mem.Allocated())
	}
}
