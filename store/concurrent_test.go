package store_test

import (
	"bytes"
	"sync"
	"testing"

	"github.com/difctl/difctl/store"
)

// TestTuplesConcurrent has writers fill interleaved blocks of the same pages
// (every commit is a read-modify-write of shared pages) while readers scan;
// no block may be lost and the race detector must stay quiet.
func TestTuplesConcurrent(t *testing.T) {
	for _, be := range kvBackends() {
		t.Run("backend="+be.name, func(t *testing.T) {
			kv := be.open(t)
			const writers, blocks = 4, 2048
			man := store.NewManifest("f", 512, 8, blocks*512, "d")
			man.PageTuples = 256
			tp, err := store.CreateTuples(kv, "v", man)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			done := make(chan struct{})
			errc := make(chan error, writers+2)
			for w := range writers {
				wg.Go(func() {
					for b := w; b < blocks; b += writers {
						tu := bytes.Repeat([]byte{byte(w + 1)}, 8)
						if err := tp.WriteRange(int64(b), tu, []uint32{uint32(b)}, false); err != nil {
							errc <- err
							return
						}
					}
				})
			}
			var rg sync.WaitGroup
			for range 2 {
				rg.Go(func() {
					buf := make([]byte, 8*blocks)
					for {
						select {
						case <-done:
							return
						default:
						}
						if _, err := tp.ReadRange(0, buf, make([]uint32, blocks), store.NewBitmap(blocks)); err != nil {
							errc <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(done)
			rg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			buf, sums := make([]byte, 8*blocks), make([]uint32, blocks)
			n, err := tp.ReadRange(0, buf, sums, nil)
			if err != nil || n != blocks {
				t.Fatalf("ReadRange = %d, %v; want %d written", n, err, blocks)
			}
			for b := range blocks {
				if want := byte(b%writers + 1); buf[8*b] != want || sums[b] != uint32(b) {
					t.Fatalf("block %d: tuple %x sum %d, want %x.. and %d (lost update)", b, buf[8*b:8*b+8], sums[b], want, b)
				}
			}
		})
	}
}
