package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/difctl/difctl/store"
)

// A page a dense volume has no record of, and no empty run holds, is
// corruption, not unwritten blocks: a new volume's run deleted, or the
// record of a page written since; a schema 1 volume's absent pages stay
// unwritten.
func TestMissingPage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write bool   // write block 2050 (page 2) first
		del   []byte // the record deleted
		page  string // the first page missing
		lost  int64  // a page missing
	}{
		{"record=run", false, []byte{'T', 1, 'v', 'R', 0, 0, 0, 0, 0, 0, 0, 3}, "page 0", 2},
		{"record=run-after-write", true, []byte{'T', 1, 'v', 'R', 0, 0, 0, 0, 0, 0, 0, 1}, "page 0", 1},
		{"record=page-in-former-run", true, []byte{'T', 1, 'v', 'P', 0, 0, 0, 0, 0, 0, 0, 2}, "page 2", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := store.NewMem()
			man := store.NewManifest("f", 512, 16, 4096*512, "d")
			tp, err := store.CreateTuples(kv, "v", man)
			if err != nil {
				t.Fatal(err)
			}
			if !tp.Dense() {
				t.Fatal("a new volume is not dense")
			}
			tuples := make([]byte, 4096*16)
			written := store.NewBitmap(4096)
			if n, err := tp.ReadRange(0, tuples, nil, written); err != nil || n != 0 {
				t.Fatalf("fresh volume: %d written, %v", n, err)
			}
			if tc.write {
				if err := tp.WriteRange(2050, tuples[:16], nil, true); err != nil {
					t.Fatal(err)
				}
				if n, err := tp.ReadRange(0, tuples, nil, written); err != nil || n != 1 {
					t.Fatalf("after a write: %d written, %v", n, err)
				}
			}
			// Delete the record behind the store's back.
			if _, err := kv.Get(tc.del); err != nil {
				t.Fatalf("record %q: %v", tc.del, err)
			}
			b := kv.NewBatch()
			b.Delete(tc.del)
			if err := b.Commit(true); err != nil {
				t.Fatal(err)
			}
			var ce *store.CorruptError
			if _, err := tp.ReadRange(0, tuples, nil, written); !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.page+":") {
				t.Errorf("ReadRange over a lost page: %v, want a *CorruptError for %s", err, tc.page)
			}
			lost := tc.lost * 1024
			if _, err := tp.ReadRangeCached(lost, tuples[:1024*16], nil, written); !errors.As(err, &ce) || !strings.Contains(err.Error(), fmt.Sprintf("page %d:", tc.lost)) {
				t.Errorf("ReadRangeCached over a lost page: %v", err)
			}
			if _, err := tp.Coverage(nil); !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.page+":") {
				t.Errorf("Coverage with a lost page: %v", err)
			}
			if err := tp.WriteRange(lost+3, tuples[:16], nil, true); !errors.As(err, &ce) {
				t.Errorf("a partial write into a lost page: %v", err)
			}
			if err := tp.Discard(lost+3, 1, true); !errors.As(err, &ce) {
				t.Errorf("a partial discard in a lost page: %v", err)
			}
			if has, err := store.HasRecords(kv, "v"); err != nil || !has {
				t.Errorf("HasRecords = %v, %v", has, err)
			}
		})
	}
}

// A hostile manifest's device size (2^62 bytes: 2^43 pages, past
// store.MaxPages) is refused at open, at no cost; below the limit,
// Coverage reads each stored page record once and finds the missing ones.
func TestCoverageHostileManifest(t *testing.T) {
	for _, schema := range []int{1, 2} {
		kv := store.NewMem()
		key := []byte{'T', 1, 'v', 'M'}
		b := kv.NewBatch()
		b.Set(key, fmt.Appendf(nil, `{"kind":"difctl.store.manifest","schema":%d,"format":"f","block_size":512,"tuple_size":16,"page_tuples":1024,"device_size":%d,"device_id":"d","created":"2026-01-01T00:00:00Z"}`, schema, uint64(1)<<62))
		if err := b.Commit(true); err != nil {
			t.Fatal(err)
		}
		if _, err := store.OpenTuples(kv, "v", nil); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "pages") {
			t.Errorf("schema %d: open with a device of 2^62 bytes: %v, want ErrCorrupt", schema, err)
		}
		b = kv.NewBatch()
		b.Set(key, fmt.Appendf(nil, `{"kind":"difctl.store.manifest","schema":%d,"format":"f","block_size":512,"tuple_size":16,"page_tuples":1024,"device_size":%d,"device_id":"d","created":"2026-01-01T00:00:00Z"}`, schema, int64(store.MaxPages)*1024*512))
		if err := b.Commit(true); err != nil {
			t.Fatal(err)
		}
		tp, err := store.OpenTuples(kv, "v", nil)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		n, err := tp.Coverage(nil)
		switch {
		case schema == 1 && (err != nil || n != 0):
			t.Errorf("schema 1: Coverage = %d, %v", n, err)
		case schema == 2 && !errors.Is(err, store.ErrCorrupt):
			t.Errorf("schema 2: Coverage = %d, %v, want a missing page", n, err)
		}
		if d := time.Since(t0); d > time.Second {
			t.Errorf("schema %d: Coverage took %v", schema, d)
		}
	}
}

// Volumes of schema 1 (made before empty-page records) record empty pages
// by their absence, and keep working that way.
func TestSchema1Volume(t *testing.T) {
	kv := store.NewMem()
	b := kv.NewBatch()
	b.Set([]byte{'T', 1, 'v', 'M'}, []byte(`{"kind":"difctl.store.manifest","schema":1,"format":"f","block_size":512,"tuple_size":16,"page_tuples":1024,"device_size":2097152,"device_id":"d","created":"2026-01-01T00:00:00Z"}`))
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	tp, err := store.OpenTuples(kv, "v", nil)
	if err != nil {
		t.Fatal(err)
	}
	if tp.Dense() {
		t.Fatal("a schema 1 volume reads as dense")
	}
	tuples := make([]byte, 4096*16)
	if n, err := tp.ReadRange(0, tuples, nil, nil); err != nil || n != 0 {
		t.Fatalf("ReadRange = %d, %v", n, err)
	}
	one := make([]byte, 10*16)
	if err := tp.WriteRange(1030, one, nil, true); err != nil {
		t.Fatal(err)
	}
	if n, err := tp.ReadRange(0, tuples, nil, nil); err != nil || n != 10 {
		t.Fatalf("after a write: ReadRange = %d, %v", n, err)
	}
	if n, err := tp.Coverage(nil); err != nil || n != 10 {
		t.Fatalf("Coverage = %d, %v", n, err)
	}
	if err := tp.Discard(1030, 10, true); err != nil {
		t.Fatal(err)
	}
	pageKey := []byte{'T', 1, 'v', 'P', 0, 0, 0, 0, 0, 0, 0, 1}
	if _, err := kv.Get(pageKey); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a schema 1 volume's empty page is stored: %v", err)
	}
	if has, err := store.HasRecords(kv, "v"); err != nil || !has {
		t.Errorf("HasRecords = %v, %v (the manifest is a record)", has, err)
	}
}
