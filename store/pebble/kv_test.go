package pebble_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/difctl/difctl/store"
	"github.com/difctl/difctl/store/pebble"
	"github.com/difctl/difctl/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Run("fs=os", func(t *testing.T) {
		storetest.RunConformance(t, storetest.Backend{
			Open: func(t *testing.T) store.KV {
				kv, err := pebble.Open(t.TempDir(), store.OpenOptions{Create: true})
				if err != nil {
					t.Fatal(err)
				}
				return kv
			},
		})
	})
	t.Run("fs=crashable", func(t *testing.T) {
		var mu sync.Mutex
		fss := map[store.KV]*vfs.MemFS{}
		openOn := func(t *testing.T, fs *vfs.MemFS) store.KV {
			kv, err := pebble.OpenOnFS("db", fs)
			if err != nil {
				t.Fatal(err)
			}
			pebble.SetBulkFileBytes(kv, 1<<20) // bulk loads of several tables
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

func TestLocked(t *testing.T) {
	dir := t.TempDir()
	kv, err := pebble.Open(dir, store.OpenOptions{Create: true})
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
