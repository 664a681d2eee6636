//go:build !purego

package crc32c

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/difctl/difctl/kernels/internal/crcmath"
)

func TestFourWayK(t *testing.T) {
	for j := range fourWayK {
		s := uint64(stripeUnit * (j + 1))
		for i := uint64(1); i <= 3; i++ {
			want := crcmath.Reflect(crcmath.XPowMod(Params, 8*i*s-33), 32)
			if got := fourWayK[j][i-1]; got != want {
				t.Fatalf("fourWayK[%d][%d] = %#x, want %#x", j, i-1, got, want)
			}
		}
	}
}

// crc32cxModel is CRC32CX d, r: the register r advanced over the 8 bytes of
// d (little-endian), computed by the oracle.
func crc32cxModel(r uint32, d uint64) uint32 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], d)
	return ^uint32(crcmath.Bitwise(Params, uint64(^r), b[:]))
}

// TestMergeModel checks the merge of crc4way step by step in Go: four
// streams from registers crc, 0, 0, 0, shifted by PMULL (crcmath.Clmul, low
// quadword) and reduced by one CRC32CX from zero.
func TestMergeModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range []int{64, 128, 192, 1024, maxStripe} {
		buf := make([]byte, 4*s)
		for i := range buf {
			buf[i] = byte(r.Uint32())
		}
		crc := r.Uint32()
		want := uint32(crcmath.Bitwise(Params, uint64(crc), buf))
		var c [4]uint32
		for i := range c {
			start := uint32(0) // register
			if i == 0 {
				start = ^crc
			}
			c[i] = ^uint32(crcmath.Bitwise(Params, uint64(^start), buf[i*s:(i+1)*s]))
		}
		k := &fourWayK[s/stripeUnit-1]
		_, d0 := crcmath.Clmul(uint64(c[0]), k[2])
		_, d1 := crcmath.Clmul(uint64(c[1]), k[1])
		_, d2 := crcmath.Clmul(uint64(c[2]), k[0])
		got := ^(crc32cxModel(0, d0^d1^d2) ^ c[3])
		if got != want {
			t.Fatalf("stripe=%d: merge model %#x, oracle %#x", s, got, want)
		}
		if asm := ^crc4way(^crc, buf, s, k); asm != want {
			t.Fatalf("stripe=%d: crc4way %#x, oracle %#x", s, asm, want)
		}
	}
}
