package store_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/difctl/difctl/store"
)

func TestOpenWithRefuses(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(dir, "foreign")
	os.Mkdir(foreign, 0o755)
	os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine"), 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink(foreign, link)
	for _, tc := range []struct {
		name, path string
		o          store.OpenOptions
		want       error
	}{
		{"regular-file", file, store.OpenOptions{Create: true}, store.ErrNotStore},
		{"missing/create=false", filepath.Join(dir, "none"), store.OpenOptions{}, store.ErrNotFound},
		{"missing/read-only", filepath.Join(dir, "none"), store.OpenOptions{Create: true, ReadOnly: true}, store.ErrNotFound},
		{"foreign-dir", foreign, store.OpenOptions{Create: true}, store.ErrNotStore},
		{"symlink", link, store.OpenOptions{Create: true}, store.ErrNotStore},
	} {
		t.Run("case="+tc.name, func(t *testing.T) {
			kv, err := store.OpenWith("pebble:"+tc.path, tc.o)
			if err == nil {
				kv.Close()
				t.Fatal("opened")
			}
			if !errors.Is(err, tc.want) || !strings.HasPrefix(err.Error(), "store: ") {
				t.Errorf("error %v, want %v with the store prefix", err, tc.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused open created the store: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(foreign, "notes.txt")); string(b) != "mine" {
		t.Error("the foreign directory changed")
	}
}

// The repro of issue 13: a store whose manifest marker is gone was taken for
// an empty directory, reinitialised, and its tables deleted.
func TestOpenMissingMarker(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	m, man, kv, _ := damageVolume(t, dir)
	if err := kv.Close(); err != nil {
		t.Fatal(err)
	}
	markers, _ := filepath.Glob(filepath.Join(dir, "marker.manifest.*"))
	if len(markers) != 1 {
		t.Fatalf("markers %v", markers)
	}
	os.Remove(markers[0])
	before, _ := os.ReadDir(dir)
	for _, o := range []store.OpenOptions{{}, {Create: true}, {ReadOnly: true}} {
		kv, err := store.OpenWith("pebble:"+dir, o)
		if err == nil {
			kv.Close()
			t.Fatalf("OpenWith(%+v) opened a store without its manifest marker", o)
		}
		var cf *store.CorruptFileError
		if !errors.As(err, &cf) || !strings.Contains(cf.Path, "marker.manifest") {
			t.Errorf("OpenWith(%+v): %v, want a *CorruptFileError naming the marker", o, err)
		}
	}
	after, _ := os.ReadDir(dir)
	if len(after) != len(before) {
		t.Errorf("files %d before, %d after", len(before), len(after))
	}
	os.WriteFile(markers[0], nil, 0o600) // put it back: everything is there
	if ok, err := readAll(dir, m, man); err != nil || !ok {
		t.Errorf("restored store: ok=%v err=%v", ok, err)
	}
}

func TestOpenReadOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	kv, err := store.Open("pebble:" + dir)
	if err != nil {
		t.Fatal(err)
	}
	wb := kv.NewBatch()
	wb.Set([]byte("a"), []byte("1"))
	if err := wb.Commit(true); err != nil {
		t.Fatal(err)
	}
	// A writer excludes readers and names itself.
	if _, err := store.OpenWith("pebble:"+dir, store.OpenOptions{ReadOnly: true}); !errors.Is(err, store.ErrBusy) {
		t.Errorf("read-only open beside a writer: %v, want ErrBusy", err)
	}
	kv.Close()
	r1, err := store.OpenWith("pebble:"+dir, store.OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	r2, err := store.OpenWith("pebble:"+dir, store.OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	defer r2.Close()
	if v, err := r2.Get([]byte("a")); err != nil || string(v) != "1" {
		t.Errorf("Get = %q, %v", v, err)
	}
	b := r1.NewBatch()
	b.Set([]byte("b"), []byte("2"))
	if err := b.Commit(true); !errors.Is(err, store.ErrReadOnly) {
		t.Errorf("commit to a read-only store: %v, want ErrReadOnly", err)
	}
	// Readers exclude a writer.
	if _, err := store.OpenWith("pebble:"+dir, store.OpenOptions{}); !errors.Is(err, store.ErrBusy) {
		t.Errorf("writer beside readers: %v, want ErrBusy", err)
	}
}

func TestOpenModes(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "db")
	_, _, kv, _ := damageVolume(t, dir)
	if err := kv.Close(); err != nil {
		t.Fatal(err)
	}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if fi.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A page a dense volume has no record of is corruption, not unwritten
// blocks; a schema 1 volume's absent pages stay unwritten.
func TestMissingPage(t *testing.T) {
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
	// Delete page 2's record behind the store's back.
	key := append([]byte{'T', 1, 'v', 'P'}, 0, 0, 0, 0, 0, 0, 0, 2)
	b := kv.NewBatch()
	b.Delete(key)
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	var ce *store.CorruptError
	if _, err := tp.ReadRange(0, tuples, nil, written); !errors.As(err, &ce) || !strings.Contains(err.Error(), "page 2") {
		t.Errorf("ReadRange over a lost page: %v, want a *CorruptError for page 2", err)
	}
	if _, err := tp.ReadRangeCached(2048, tuples[:1024*16], nil, written); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("ReadRangeCached over a lost page: %v", err)
	}
	if _, err := tp.Coverage(nil); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("Coverage with a lost page: %v", err)
	}
	if err := tp.WriteRange(2050, tuples[:16], nil, true); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("a partial write into a lost page: %v", err)
	}
	if has, err := store.HasRecords(kv, "v"); err != nil || !has {
		t.Errorf("HasRecords = %v, %v", has, err)
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
		b.Set(key, fmt.Appendf(nil, `{"kind":"difctl.store.manifest","schema":%d,"format":"f","block_size":512,"tuple_size":16,"page_tuples":1024,"device_size":%d,"device_id":"d","created":"2026-01-01T00:00:00Z"}`, schema, store.MaxPages*1024*512))
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

// A creation interrupted before Pebble wrote its manifest marker (no
// table, no logged commit) is created again; the same directory with a
// logged commit is refused as damaged.
func TestOpenInterruptedCreation(t *testing.T) {
	for _, logSize := range []int{0, 100} {
		dir := filepath.Join(t.TempDir(), "db")
		os.Mkdir(dir, 0o700)
		os.WriteFile(filepath.Join(dir, "LOCK"), nil, 0o600)
		os.WriteFile(filepath.Join(dir, "MANIFEST-000001"), []byte("partial"), 0o600)
		os.WriteFile(filepath.Join(dir, "000002.log"), make([]byte, logSize), 0o600)
		kv, err := store.OpenWith("pebble:"+dir, store.OpenOptions{Create: true})
		switch {
		case logSize == 0 && err != nil:
			t.Errorf("interrupted creation: %v", err)
		case logSize > 0 && !errors.Is(err, store.ErrCorrupt):
			t.Errorf("a log with records and no marker: %v, want ErrCorrupt", err)
		}
		if err == nil {
			kv.Close()
		}
	}
}
