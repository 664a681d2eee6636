package etcd

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
	"github.com/difctl/difctl/store/pebble"
)

var (
	benchImage   = flag.Int64("etcd.image", 1<<30, "bytes of the image of BenchmarkVolumeWriteSeq and BenchmarkProtect (64 MiB under -short)")
	benchMembers = flag.Int("etcd.members", 3, "members of the benchmarks' cluster")
)

func imageBytes() int64 {
	if testing.Short() {
		return min(*benchImage, 64<<20)
	}
	return *benchImage
}

// benchEngines opens a fresh store of each engine: Pebble in a temporary
// directory, etcd under a new prefix of c.
func benchStore(b *testing.B, engine string, c *cluster) store.KV {
	b.Helper()
	var kv store.KV
	var err error
	if engine == "pebble" {
		kv, err = pebble.Open(b.TempDir(), store.OpenOptions{Create: true})
	} else {
		// The default lease TTL (10 s): a loaded machine can delay
		// keep-alives past a test's short one.
		o := testOptions()
		o.LeaseTTL = 0
		kv, err = Open(c.URL(newPrefix(b)), o)
	}
	if err != nil {
		b.Fatal(err)
	}
	return kv
}

func benchCluster(b *testing.B) *cluster {
	return startCluster(b, *benchMembers, 8<<30)
}

// benchTuples makes n realistic tuples (random guards, constant app tag,
// LBA ref tags) and sums.
func benchTuples(n, tuple int) ([]byte, []uint32) {
	rng := rand.New(rand.NewPCG(1, uint64(tuple)))
	tuples := make([]byte, n*tuple)
	for i := range n {
		tp := tuples[i*tuple:]
		binary.BigEndian.PutUint16(tp, uint16(rng.Uint32()))
		binary.BigEndian.PutUint16(tp[2:], 1)
		binary.BigEndian.PutUint32(tp[4:], uint32(i))
	}
	sums := make([]uint32, n)
	for i := range sums {
		sums[i] = rng.Uint32()
	}
	return tuples, sums
}

// BenchmarkTuples writes (WriteRange, committed batches, the last synced)
// and reads (ReadRange in calls of 64 Ki blocks) the tuples of a
// sequential range of 1 Mi blocks (128 Ki under -short) on each engine.
// Bytes are protected data.
func BenchmarkTuples(b *testing.B) {
	c := benchCluster(b)
	n := 1 << 20
	if testing.Short() {
		n = 128 << 10
	}
	for _, block := range []int{4096, 512} {
		tuples, sums := benchTuples(n, 8)
		format := fmt.Sprintf("%d+8", block)
		for _, op := range []string{"write", "read"} {
			for _, engine := range []string{"pebble", "etcd"} {
				b.Run(fmt.Sprintf("op=%s/block=%d/engine=%s", op, block, engine), func(b *testing.B) {
					kv := benchStore(b, engine, c)
					defer kv.Close()
					m := store.NewManifest(format, block, 8, int64(n)*int64(block), "bench")
					tp, err := store.CreateTuples(kv, "bench", m)
					if err != nil {
						b.Fatal(err)
					}
					if op == "read" {
						if err := tp.WriteRange(0, tuples, sums, true); err != nil {
							b.Fatal(err)
						}
					}
					const chunk = 64 << 10
					dst := make([]byte, chunk*8)
					dsums := make([]uint32, chunk)
					written := store.NewBitmap(chunk)
					b.SetBytes(int64(n) * int64(block))
					total := 0
					for b.Loop() {
						if op == "write" {
							if err := tp.WriteRange(0, tuples, sums, true); err != nil {
								b.Fatal(err)
							}
							continue
						}
						for lba := 0; lba < n; lba += chunk {
							k, err := tp.ReadRange(int64(lba), dst, dsums, written)
							if err != nil {
								b.Fatal(err)
							}
							total += k
						}
					}
					if op == "read" && total%n != 0 {
						b.Fatalf("read %d written blocks, want a multiple of %d", total, n)
					}
				})
			}
		}
	}
}

// benchImageFile returns a new image of size bytes; filled with data
// (protect reads it) or sparse.
func benchImageFile(b *testing.B, size int64, fill bool) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "disk.img")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		b.Fatal(err)
	}
	if fill {
		buf := make([]byte, 4<<20)
		r := rand.New(rand.NewPCG(5, 6))
		for off := int64(0); off < size; off += int64(len(buf)) {
			for i := 0; i < len(buf); i += 8 {
				binary.LittleEndian.PutUint64(buf[i:], r.Uint64())
			}
			if _, err := f.WriteAt(buf[:min(int64(len(buf)), size-off)], off); err != nil {
				b.Fatal(err)
			}
		}
	}
	return path
}

// BenchmarkVolumeWriteSeq writes a whole image sequentially through a
// protected volume (4 KiB blocks, 1 MiB writes, a Sync every 64 MiB and at
// the end) on etcd. Each iteration also makes the same pass on a volume on
// Pebble, untimed, before or after it in turn; %pebble is etcd's throughput
// as a percentage of Pebble's, %in-commits the share of etcd's time spent
// in store commits.
func BenchmarkVolumeWriteSeq(b *testing.B) {
	c := benchCluster(b)
	size := imageBytes()
	b.Run(fmt.Sprintf("size=%dMiB/block=4096/engine=etcd", size>>20), func(b *testing.B) {
		var commits, commitNs atomic.Int64
		open := func(engine string) (*blockdev.Volume, func()) {
			kv := benchStore(b, engine, c)
			if engine == "etcd" {
				kv = &timedKV{KV: kv, n: &commits, ns: &commitNs}
			}
			dev, err := device.OpenFile(benchImageFile(b, size, false), device.FileOptions{BlockSize: 4096})
			if err != nil {
				b.Fatal(err)
			}
			v, err := blockdev.Create(context.Background(), dev, kv, blockdev.CreateOptions{Format: dif.MustFormat("4096+8")})
			if err != nil {
				b.Fatal(err)
			}
			return v, func() { v.Close(); kv.Close(); dev.Close() }
		}
		pv, pclose := open("pebble")
		defer pclose()
		ev, eclose := open("etcd")
		defer eclose()
		buf := make([]byte, 1<<20)
		r := rand.New(rand.NewPCG(7, 8))
		for i := 0; i < len(buf); i += 8 {
			binary.LittleEndian.PutUint64(buf[i:], r.Uint64())
		}
		pass := func(v *blockdev.Volume) time.Duration {
			t0 := time.Now()
			for off := int64(0); off < size; off += int64(len(buf)) {
				if _, err := v.WriteAt(buf, off); err != nil {
					b.Fatal(err)
				}
				if (off+int64(len(buf)))%(64<<20) == 0 || off+int64(len(buf)) >= size {
					if err := v.Sync(); err != nil {
						b.Fatal(err)
					}
				}
			}
			return time.Since(t0)
		}
		var pebbleTime, etcdTime time.Duration
		b.SetBytes(size)
		commits.Store(0)
		commitNs.Store(0)
		i := 0
		for b.Loop() {
			// Alternate which engine goes first, so that neither always
			// meets the other's leftover disk work.
			if i++; i%2 == 0 {
				etcdTime += pass(ev)
			}
			b.StopTimer()
			pebbleTime += pass(pv)
			b.StartTimer()
			if i%2 == 1 {
				etcdTime += pass(ev)
			}
		}
		b.ReportMetric(100*pebbleTime.Seconds()/etcdTime.Seconds(), "%pebble")
		b.ReportMetric(float64(size)*float64(b.N)/pebbleTime.Seconds()/1e6, "pebble-MB/s")
		b.ReportMetric(float64(commits.Load())/float64(b.N), "etcd-commits/op")
		b.ReportMetric(100*float64(commitNs.Load())/float64(etcdTime.Nanoseconds()), "%in-commits")
	})
}

// BenchmarkProtect protects (blockdev.Create) a whole image filled with
// data, 4 KiB blocks, on each engine: time per protect, and the peak Go
// heap in use during it (peak-heap-MiB) sampled every 10 ms.
func BenchmarkProtect(b *testing.B) {
	c := benchCluster(b)
	size := imageBytes()
	img := benchImageFile(b, size, true)
	for _, engine := range []string{"pebble", "etcd"} {
		b.Run(fmt.Sprintf("size=%dMiB/block=4096/engine=%s", size>>20, engine), func(b *testing.B) {
			dev, err := device.OpenFile(img, device.FileOptions{BlockSize: 4096})
			if err != nil {
				b.Fatal(err)
			}
			defer dev.Close()
			var peak atomic.Uint64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				var ms runtime.MemStats
				for {
					runtime.ReadMemStats(&ms)
					if ms.HeapInuse > peak.Load() {
						peak.Store(ms.HeapInuse)
					}
					select {
					case <-stop:
						return
					case <-time.After(10 * time.Millisecond):
					}
				}
			})
			b.SetBytes(size)
			for b.Loop() {
				b.StopTimer()
				kv := benchStore(b, engine, c)
				runtime.GC()
				b.StartTimer()
				v, err := blockdev.Create(context.Background(), dev, kv, blockdev.CreateOptions{Format: dif.MustFormat("4096+8")})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				v.Close()
				kv.Close()
				b.StartTimer()
			}
			close(stop)
			wg.Wait()
			b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
		})
	}
}

// timedKV counts the batch commits made through it and the time they take.
type timedKV struct {
	store.KV
	n, ns *atomic.Int64
}

type timedBatch struct {
	store.Batch
	kv *timedKV
}

func (t *timedKV) NewBatch() store.Batch { return &timedBatch{t.KV.NewBatch(), t} }

func (b *timedBatch) Commit(sync bool) error {
	t0 := time.Now()
	err := b.Batch.Commit(sync)
	b.kv.n.Add(1)
	b.kv.ns.Add(int64(time.Since(t0)))
	return err
}
