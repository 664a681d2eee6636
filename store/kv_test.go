package store_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/difctl/difctl/store"
	"github.com/difctl/difctl/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Run("backend=mem", func(t *testing.T) {
		storetest.RunConformance(t, storetest.Backend{
			Open: func(t *testing.T) store.KV { return store.NewMem() },
		})
	})
	t.Run("backend=pebble", func(t *testing.T) {
		storetest.RunConformance(t, storetest.Backend{
			Open: func(t *testing.T) store.KV {
				kv, err := store.Open("pebble:" + t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				return kv
			},
		})
	})
	t.Run("backend=pebble-crashable", func(t *testing.T) {
		var mu sync.Mutex
		fss := map[store.KV]*vfs.MemFS{}
		openOn := func(t *testing.T, fs *vfs.MemFS) store.KV {
			kv, err := store.OpenPebbleOnFS("db", fs)
			if err != nil {
				t.Fatal(err)
			}
			store.SetBulkFileBytes(kv, 1<<20) // bulk loads of several tables
			mu.Lock()
			fss[kv] = fs
			mu.Unlock()
			return kv
		}
		storetest.RunConformance(t, storetest.Backend{
			Open: func(t *testing.T) store.KV { return openOn(t, vfs.NewCrashableMem()) },
			Crash: func(t *testing.T, kv store.KV) store.KV {
				mu.Lock()
				fs := fss[kv]
				mu.Unlock()
				// Keep exactly what was synced: the strictest crash.
				clone := fs.CrashClone(vfs.CrashCloneCfg{})
				kv.Close()
				return openOn(t, clone)
			},
		})
	})
}

func TestOpenURL(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, url string
		wantErr   error  // nil: must open
		wantText  string // substring of the error
	}{
		{name: "scheme=mem", url: "mem:"},
		{name: "scheme=pebble", url: "pebble:" + filepath.Join(dir, "db1")},
		{name: "scheme=none", url: filepath.Join(dir, "db2")},
		{name: "scheme=unknown", url: "redis://localhost", wantErr: store.ErrUnsupported, wantText: `unknown scheme "redis"`},
		{name: "scheme=pebble/path=empty", url: "pebble:", wantErr: store.ErrInvalid, wantText: "empty pebble path"},
		{name: "scheme=mem/path=given", url: "mem:foo", wantErr: store.ErrInvalid, wantText: "mem: takes no path"},
		{name: "scheme=pebble/path=under-file", url: "pebble:" + filepath.Join(file, "db"), wantText: "store: open pebble:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv, err := store.Open(tc.url)
			if tc.wantErr == nil && tc.wantText == "" {
				if err != nil {
					t.Fatalf("Open(%q): %v", tc.url, err)
				}
				if err := kv.Close(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				kv.Close()
				t.Fatalf("Open(%q) succeeded, want error", tc.url)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("Open(%q) = %v, want %v", tc.url, err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantText) || !strings.HasPrefix(err.Error(), "store: ") {
				t.Errorf("Open(%q) error %q, want prefix \"store: \" and %q", tc.url, err, tc.wantText)
			}
		})
	}
}

func TestPebbleLocked(t *testing.T) {
	dir := t.TempDir()
	kv, err := store.Open("pebble:" + dir)
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	if kv2, err := store.Open("pebble:" + dir); err == nil {
		kv2.Close()
		t.Fatal("second Open of a locked store succeeded")
	} else if !strings.HasPrefix(err.Error(), "store: open pebble:") {
		t.Errorf("error %q lacks the store prefix", err)
	}
}
