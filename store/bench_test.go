package store_test

import (
	"fmt"
	"testing"

	"github.com/difctl/difctl/store"
)

// benchBlocks is the range each benchmark iteration covers: 8 Mi blocks
// (32 GiB of 4 KiB blocks, 4 GiB of 512-byte blocks), 1 Mi with -short.
func benchBlocks() int {
	if testing.Short() {
		return 1 << 20
	}
	return 8 << 20
}

type benchBackend struct {
	name string
	// open returns a new store and a function that closes and reopens it,
	// so reads come from flushed tables rather than the memtable.
	open func(b *testing.B) (store.KV, func(store.KV) store.KV)
}

func benchBackends() []benchBackend {
	return []benchBackend{
		{"pebble", func(b *testing.B) (store.KV, func(store.KV) store.KV) {
			url := "pebble:" + b.TempDir()
			open := func() store.KV {
				kv, err := store.Open(url)
				if err != nil {
					b.Fatal(err)
				}
				return kv
			}
			return open(), func(kv store.KV) store.KV {
				if err := kv.Close(); err != nil {
					b.Fatal(err)
				}
				return open()
			}
		}},
		{"mem", func(b *testing.B) (store.KV, func(store.KV) store.KV) {
			return store.NewMem(), func(kv store.KV) store.KV { return kv }
		}},
	}
}

var benchFormats = []struct {
	block, tuple int
	format       string
}{
	{4096, 8, "4096+8:crc16:type1:pi-last"},
	{512, 8, "512+8:crc16:type1:pi-last"},
	{4096, 16, "4096+16:crc64:type1:pi-last"},
}

func benchVolume(b *testing.B, kv store.KV, block, tuple int, format string, n int) (*store.Tuples, []byte, []uint32) {
	m := store.NewManifest(format, block, tuple, uint64(n)*uint64(block), "bench")
	tp, err := store.CreateTuples(kv, "bench", m)
	if err != nil {
		b.Fatal(err)
	}
	tuples := make([]byte, n*tuple)
	for i := range tuples {
		tuples[i] = byte(i*7 + i>>8)
	}
	var sums []uint32
	if m.SectorSums {
		sums = make([]uint32, n)
		for i := range sums {
			sums[i] = uint32(i) * 2654435761
		}
	}
	return tp, tuples, sums
}

// BenchmarkTuplesWrite writes the committed tuples of a large sequential
// range (batched commits, the last one synced). Bytes are protected data.
func BenchmarkTuplesWrite(b *testing.B) {
	for _, be := range benchBackends() {
		for _, f := range benchFormats {
			b.Run(fmt.Sprintf("backend=%s/block=%d/tuple=%d", be.name, f.block, f.tuple), func(b *testing.B) {
				kv, _ := be.open(b)
				defer kv.Close()
				n := benchBlocks()
				tp, tuples, sums := benchVolume(b, kv, f.block, f.tuple, f.format, n)
				b.SetBytes(int64(n) * int64(f.block))
				for b.Loop() {
					if err := tp.WriteRange(0, tuples, sums, true); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkTuplesRead reads the tuples, sums and written bitmap of a large
// sequential range, in calls of 256 Ki blocks, from a reopened store.
func BenchmarkTuplesRead(b *testing.B) {
	for _, be := range benchBackends() {
		for _, f := range benchFormats {
			b.Run(fmt.Sprintf("backend=%s/block=%d/tuple=%d", be.name, f.block, f.tuple), func(b *testing.B) {
				kv, reopen := be.open(b)
				n := benchBlocks()
				tp, tuples, sums := benchVolume(b, kv, f.block, f.tuple, f.format, n)
				if err := tp.WriteRange(0, tuples, sums, true); err != nil {
					b.Fatal(err)
				}
				kv = reopen(kv)
				defer kv.Close()
				tp, err := store.OpenTuples(kv, "bench", nil)
				if err != nil {
					b.Fatal(err)
				}
				const chunk = 256 << 10
				dst := make([]byte, chunk*f.tuple)
				var dsums []uint32
				if sums != nil {
					dsums = make([]uint32, chunk)
				}
				written := store.NewBitmap(chunk)
				b.SetBytes(int64(n) * int64(f.block))
				b.ResetTimer()
				total := 0
				for b.Loop() {
					for lba := 0; lba < n; lba += chunk {
						c, err := tp.ReadRange(uint64(lba), dst, dsums, written)
						if err != nil {
							b.Fatal(err)
						}
						total += c
					}
				}
				if total%n != 0 || total == 0 {
					b.Fatalf("read %d written blocks, want a multiple of %d", total, n)
				}
			})
		}
	}
}
