package blockdev

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// BenchmarkVolumeFold times the Sync that folds 256 MiB of random 4 KiB
// writes (65,536, the unsynced writes difctl serve allows) into the store's
// pages, over a 1 GiB volume in memory on a Pebble store sized as serve
// sizes it (8 MiB block cache and memtable). The writes are outside the
// timer.
//
//	go test ./blockdev -run '^$' -bench VolumeFold -benchtime 5x
func BenchmarkVolumeFold(b *testing.B) {
	for _, format := range []string{"512+8", "4096+8"} {
		b.Run("format="+format, func(b *testing.B) {
			f := dif.MustFormat(format)
			size := int64(1 << 30)
			dev, err := device.NewMem(size, f.BlockSize())
			if err != nil {
				b.Fatal(err)
			}
			kv, err := store.OpenWith("pebble:"+filepath.Join(b.TempDir(), "store"), store.OpenOptions{Create: true, CacheBytes: 8 << 20, MemTableBytes: 8 << 20})
			if err != nil {
				b.Fatal(err)
			}
			defer kv.Close()
			v, err := Create(context.Background(), dev, kv, CreateOptions{Format: f, Options: Options{NoMap: true, MaxUnsynced: 256 << 20}})
			if err != nil {
				b.Fatal(err)
			}
			defer v.Close()
			r := rand.New(rand.NewPCG(1, 2))
			buf := blocktest.Pattern(4096, 3)
			b.SetBytes(65536 * 4096)
			for b.Loop() {
				b.StopTimer()
				for range 65536 - 4096 { // the last batch is flushed by Sync
					if _, err := v.WriteAt(buf, r.Int64N(size/4096)*4096); err != nil {
						b.Fatal(err)
					}
				}
				v.waitFlushed()
				b.StartTimer()
				if err := v.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
