package pebble_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/difctl/difctl/store"
	"github.com/difctl/difctl/store/pebble"
)

func TestOpenRefuses(t *testing.T) {
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
			kv, err := pebble.Open(tc.path, tc.o)
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
		kv, err := pebble.Open(dir, o)
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
	kv, err := pebble.Open(dir, store.OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	wb := kv.NewBatch()
	wb.Set([]byte("a"), []byte("1"))
	if err := wb.Commit(true); err != nil {
		t.Fatal(err)
	}
	// A writer excludes readers and names itself.
	if _, err := pebble.Open(dir, store.OpenOptions{ReadOnly: true}); !errors.Is(err, store.ErrBusy) {
		t.Errorf("read-only open beside a writer: %v, want ErrBusy", err)
	}
	kv.Close()
	r1, err := pebble.Open(dir, store.OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	r2, err := pebble.Open(dir, store.OpenOptions{ReadOnly: true})
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
	if _, err := pebble.Open(dir, store.OpenOptions{}); !errors.Is(err, store.ErrBusy) {
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
		kv, err := pebble.Open(dir, store.OpenOptions{Create: true})
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

// TestOpenDamagedOptions: an OPTIONS file cut short is a damaged store
// naming that file (Pebble's own error names no file).
func TestOpenDamagedOptions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	kv, err := pebble.Open(dir, store.OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Close(); err != nil {
		t.Fatal(err)
	}
	opts, _ := filepath.Glob(filepath.Join(dir, "OPTIONS-*"))
	if len(opts) == 0 {
		t.Fatal("no OPTIONS file")
	}
	for _, p := range opts {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, fi.Size()/2); err != nil {
			t.Fatal(err)
		}
	}
	_, err = pebble.Open(dir, store.OpenOptions{})
	var cf *store.CorruptFileError
	if !errors.As(err, &cf) || !strings.HasPrefix(filepath.Base(cf.Path), "OPTIONS-") {
		t.Fatalf("open: %v, want a *store.CorruptFileError naming the OPTIONS file", err)
	}
}
