package parity

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/reedsolomon"
)

// The benchmarks run each operation through the Codec (impl=parity) and
// through github.com/klauspost/reedsolomon directly (impl=reedsolomon),
// with the same shards and the same options (one goroutine), so that the
// ratio is the wrapper's cost. SetBytes: Encode and Rebuild count the
// stripe's data (k blocks), Update the changed block.

var benchGeometries = [][2]int{{8, 1}, {16, 2}, {32, 4}}

const benchBS = 4096

func benchNames(f func(name string, k, m int)) {
	for _, km := range benchGeometries {
		f(fmt.Sprintf("km=%d+%d/bs=%d", km[0], km[1], benchBS), km[0], km[1])
	}
}

func benchLib(b *testing.B, k, m int) reedsolomon.Encoder {
	enc, err := reedsolomon.New(k, m, reedsolomon.WithMaxGoroutines(1))
	if err != nil {
		b.Fatal(err)
	}
	return enc
}

func BenchmarkEncode(b *testing.B) {
	benchNames(func(name string, k, m int) {
		r := rand.New(rand.NewPCG(1, 1))
		sh := randBlocks(r, k+m, benchBS)
		b.Run(name+"/impl=parity", func(b *testing.B) {
			c := mustCodec(b, k, m, benchBS)
			b.SetBytes(int64(k * benchBS))
			for b.Loop() {
				if err := c.Encode(sh); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/impl=reedsolomon", func(b *testing.B) {
			enc := benchLib(b, k, m)
			b.SetBytes(int64(k * benchBS))
			for b.Loop() {
				if err := enc.Encode(sh); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkUpdate changes one data block of a stripe.
func BenchmarkUpdate(b *testing.B) {
	benchNames(func(name string, k, m int) {
		r := rand.New(rand.NewPCG(2, 2))
		sh := randBlocks(r, k+m, benchBS)
		nb := randBlocks(r, 1, benchBS)[0]
		b.Run(name+"/impl=parity", func(b *testing.B) {
			c := mustCodec(b, k, m, benchBS)
			shards := make([][]byte, k+m)
			copy(shards[k:], sh[k:])
			shards[3] = sh[3]
			new := make([][]byte, k)
			new[3] = nb
			b.SetBytes(benchBS)
			for b.Loop() {
				if err := c.Update(shards, new); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/impl=reedsolomon", func(b *testing.B) {
			enc := benchLib(b, k, m)
			shards := make([][]byte, k+m)
			copy(shards[k:], sh[k:])
			shards[3] = sh[3]
			new := make([][]byte, k)
			new[3] = nb
			b.SetBytes(benchBS)
			for b.Loop() {
				if err := enc.Update(shards, new); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkRebuild rebuilds m erased data blocks of a stripe, in place:
// the same positions each time (erasures=same: the decode matrix is
// cached, as for a burst across stripes) or a different set each time
// (erasures=varied, the Codec only: a matrix inversion each, and a fresh
// encoder every maxPatterns).
func BenchmarkRebuild(b *testing.B) {
	benchNames(func(name string, k, m int) {
		r := rand.New(rand.NewPCG(3, 3))
		c := mustCodec(b, k, m, benchBS)
		sh := stripe(b, r, c, k)
		erased := make([]bool, k+m)
		for i := range m {
			erased[i] = true
		}
		b.Run(name+"/erasures=same/impl=parity", func(b *testing.B) {
			c := mustCodec(b, k, m, benchBS)
			b.SetBytes(int64(k * benchBS))
			for b.Loop() {
				if err := c.Rebuild(sh, erased); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/erasures=same/impl=reedsolomon", func(b *testing.B) {
			enc := benchLib(b, k, m)
			shards := make([][]byte, k+m)
			b.SetBytes(int64(k * benchBS))
			for b.Loop() {
				copy(shards, sh)
				for i := range m {
					shards[i] = shards[i][:0]
				}
				if err := enc.ReconstructData(shards); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/erasures=varied/impl=parity", func(b *testing.B) {
			c := mustCodec(b, k, m, benchBS)
			var sets [][]bool
			subsets(k, m, func(set []int) {
				if len(set) == m && len(sets) < 2*c.maxPatterns {
					e := make([]bool, k+m)
					for _, i := range set {
						e[i] = true
					}
					sets = append(sets, e)
				}
			})
			b.SetBytes(int64(k * benchBS))
			i := 0
			for b.Loop() {
				if err := c.Rebuild(sh, sets[i%len(sets)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	})
}

// BenchmarkChecksum is the checksum of a parity block (File.Write and
// File.Read compute one per block).
func BenchmarkChecksum(b *testing.B) {
	p := randBlocks(rand.New(rand.NewPCG(4, 4)), 1, benchBS)[0]
	b.SetBytes(benchBS)
	var sum uint32
	for b.Loop() {
		sum += Checksum(7, 1, p)
	}
	if sum == 1 {
		b.Log(sum)
	}
}
