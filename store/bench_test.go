package store_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/difctl/difctl/store"
	"github.com/difctl/difctl/store/pebble"
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
			dir := b.TempDir()
			open := func() store.KV {
				kv, err := pebble.Open(dir, store.OpenOptions{Create: true})
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
	m := store.NewManifest(format, block, tuple, int64(n)*int64(block), "bench")
	tp, err := store.CreateTuples(kv, "bench", m)
	if err != nil {
		b.Fatal(err)
	}
	// Tuples as a Type 1 device has them: a random guard (2 or 8 bytes), a
	// constant app tag and the LBA as ref tag; sector sums are random. The
	// mix matters for compressed tables: the guards and sums are not
	// compressible, the tags are.
	rng := rand.New(rand.NewPCG(1, uint64(tuple)))
	tuples := make([]byte, n*tuple)
	for i := range n {
		tp := tuples[i*tuple : (i+1)*tuple]
		g := rng.Uint64()
		if tuple == 8 {
			binary.BigEndian.PutUint16(tp, uint16(g))
			binary.BigEndian.PutUint16(tp[2:], 0x0001)
			binary.BigEndian.PutUint32(tp[4:], uint32(i))
		} else {
			binary.BigEndian.PutUint64(tp, g)
			binary.BigEndian.PutUint16(tp[8:], 0x0001)
			binary.BigEndian.PutUint16(tp[10:], 0)
			binary.BigEndian.PutUint32(tp[12:], uint32(i))
		}
	}
	var sums []uint32
	if m.SectorSums {
		sums = make([]uint32, n)
		for i := range sums {
			sums[i] = rng.Uint32()
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

// BenchmarkTuplesLoad bulk-loads the committed tuples of a large sequential
// range (Tuples.NewLoader, Write in calls of 1 Mi blocks, Finish(true)), the
// path of volume creation and protect. Bytes are protected data.
func BenchmarkTuplesLoad(b *testing.B) {
	for _, be := range benchBackends() {
		for _, f := range benchFormats {
			b.Run(fmt.Sprintf("backend=%s/block=%d/tuple=%d", be.name, f.block, f.tuple), func(b *testing.B) {
				kv, _ := be.open(b)
				defer kv.Close()
				n := benchBlocks()
				tp, tuples, sums := benchVolume(b, kv, f.block, f.tuple, f.format, n)
				b.SetBytes(int64(n) * int64(f.block))
				const chunk = 1 << 20
				for b.Loop() {
					l, err := tp.NewLoader(0)
					if err != nil {
						b.Fatal(err)
					}
					for lba := 0; lba < n; lba += chunk {
						c := min(chunk, n-lba)
						var s []uint32
						if sums != nil {
							s = sums[lba : lba+c]
						}
						if err := l.Write(tuples[lba*f.tuple:(lba+c)*f.tuple], s); err != nil {
							b.Fatal(err)
						}
					}
					if err := l.Finish(true); err != nil {
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
						c, err := tp.ReadRange(int64(lba), dst, dsums, written)
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
