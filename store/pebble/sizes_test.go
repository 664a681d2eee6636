package pebble

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/difctl/difctl/store"
)

// TestOpenSizes: OpenOptions.CacheBytes and MemTableBytes reach Pebble's
// options through store.OpenWith (the defaults otherwise), and a memtable
// size out of range is refused before anything is created.
func TestOpenSizes(t *testing.T) {
	for _, tc := range []struct {
		name            string
		o               store.OpenOptions
		cache, memtable int64
	}{
		{"default", store.OpenOptions{}, 64 << 20, 64 << 20},
		{"small", store.OpenOptions{CacheBytes: 8 << 20, MemTableBytes: 4 << 20}, 8 << 20, 4 << 20},
	} {
		t.Run("sizes="+tc.name, func(t *testing.T) {
			tc.o.Create = true
			s, err := store.OpenWith("pebble:"+filepath.Join(t.TempDir(), "db"), tc.o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			p := s.(*kv)
			if got := p.opts.CacheSize; got != tc.cache {
				t.Errorf("block cache %d, want %d", got, tc.cache)
			}
			if got := int64(p.opts.MemTableSize); got != tc.memtable {
				t.Errorf("memtable %d, want %d", got, tc.memtable)
			}
			if got := p.db.Metrics().BlockCache.Size; got > tc.cache {
				t.Errorf("the open cache holds %d bytes, above %d", got, tc.cache)
			}
		})
	}
	for _, bad := range []int64{1<<20 - 1, 4 << 30} {
		dir := filepath.Join(t.TempDir(), "db")
		_, err := Open(dir, store.OpenOptions{Create: true, MemTableBytes: bad})
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("memtable of %d bytes: %v, want ErrInvalid", bad, err)
		}
		if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
			t.Errorf("memtable of %d bytes refused, yet %s exists (%v)", bad, dir, serr)
		}
	}
}
