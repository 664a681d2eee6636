package scrub

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/pisource"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// scrubBig sets the size of the sparse images of TestScrubMemoryBounded:
// the target is 64 GiB (go test ./blockdev -run MemoryBounded
// -scrubbig=64); the default keeps the package's test run short.
var scrubBig = flag.Int64("scrubbig", 0, "GiB of the sparse images of TestScrubMemoryBounded (0: 2, or 1 with -short)")

// onesReader reads as all-ones bytes: the metadata of unwritten blocks.
type onesReader struct{}

func (onesReader) ReadAt(p []byte, off int64) (int, error) {
	for i := range p {
		p[i] = 0xFF
	}
	return len(p), nil
}

// memPeak samples the heap and stacks in use until stop is called, and
// returns the peak.
func memPeak() (stop func() uint64) {
	var peak atomic.Uint64
	sample := func() {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		if v := m.HeapInuse + m.StackInuse; v > peak.Load() {
			peak.Store(v)
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				sample()
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		sample()
		return peak.Load()
	}
}

func TestScrubMemoryBounded(t *testing.T) {
	gib := *scrubBig
	if gib == 0 {
		gib = 2
		if testing.Short() {
			gib = 1
		}
	}
	size := gib << 30
	const limit = 64 << 20
	for _, src := range []string{"dix", "volume"} {
		t.Run(fmt.Sprintf("source=%s/size=%dGiB", src, gib), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "sparse.img")
			var s blockdev.CheckSource
			switch src {
			case "dix":
				// Zeros (holes) with all-ones metadata: every block is
				// unwritten, yet every byte is read and checked.
				f, err := os.Create(path)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if err := f.Truncate(size); err != nil {
					t.Fatal(err)
				}
				pair, err := pisource.NewDIXPair(f, size, onesReader{}, size/4096*8, 4096, 8)
				if err != nil {
					t.Fatal(err)
				}
				if s, err = pisource.NewDIXSource(pair, dif.MustFormat("4096+8"), dif.Params{}); err != nil {
					t.Fatal(err)
				}
			case "volume":
				dev, err := device.CreateImage(path, size, device.FileOptions{BlockSize: 4096})
				if err != nil {
					t.Fatal(err)
				}
				kv, err := store.Open("pebble:" + filepath.Join(dir, "db"))
				if err != nil {
					t.Fatal(err)
				}
				defer kv.Close()
				v, err := blockdev.Create(context.Background(), dev, kv, blockdev.CreateOptions{Format: dif.MustFormat("4096+8")})
				if err != nil {
					t.Fatal(err)
				}
				defer v.Close()
				s = v
			}
			runtime.GC()
			stop := memPeak()
			rep, err := Run(context.Background(), s, Options{})
			peak := stop()
			if err != nil {
				t.Fatal(err)
			}
			if rep.Blocks != size/4096 || rep.Unwritten != rep.Blocks {
				t.Errorf("report %+v", rep)
			}
			t.Logf("%d GiB in %v (%.0f MB/s), peak heap+stacks %.1f MiB", gib, rep.Elapsed.Round(time.Millisecond), float64(rep.Bytes)/rep.Active.Seconds()/1e6, float64(peak)/(1<<20))
			if peak > limit {
				t.Errorf("peak heap+stacks %d bytes, over %d", peak, limit)
			}
		})
	}
}
