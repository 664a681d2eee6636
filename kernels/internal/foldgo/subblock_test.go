package foldgo

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/difctl/difctl/kernels/internal/crcmath"
)

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func checksum[T Word](p crcmath.Params, b []byte) T {
	return T(crcmath.Bitwise(p, crcmath.Start(p), b))
}

// The CRC of A followed by pieces of n bytes, by Join from the CRCs of the
// parts, against the bitwise CRC of the whole; and L_n alone (Join with
// one zero part) against crcmath.Combine, which the tables were built from.
func testShift[T Word](t *testing.T, p crcmath.Params) {
	r := rand.New(rand.NewPCG(1, uint64(p.Width)))
	for _, n := range []int{1, 16, 100, SubBlockLen} {
		s := NewShift[T](p, n)
		for range 20 {
			a := randBytes(r, r.IntN(3*n))
			k := r.IntN(5)
			whole := append([]byte{}, a...)
			part := make([]T, k)
			for i := range part {
				b := randBytes(r, n)
				part[i] = checksum[T](p, b)
				whole = append(whole, b...)
			}
			if got, want := s.Join(checksum[T](p, a), part), checksum[T](p, whole); got != want {
				t.Fatalf("n=%d len(A)=%d pieces=%d: Join = %#x, CRC of the whole %#x", n, len(a), k, got, want)
			}
			c := T(r.Uint64())
			// One zero part: L_n(c) alone.
			if got, want := s.Join(c, []T{0}), T(crcmath.Combine(p, uint64(c), 0, int64(n))); got != want {
				t.Fatalf("n=%d: Join(%#x, {0}) = %#x, Combine %#x", n, c, got, want)
			}
		}
	}
}

func TestShift(t *testing.T) {
	t.Run("crc=t10dif", func(t *testing.T) { testShift[uint16](t, crcmath.T10DIF) })
	t.Run("crc=crc32c", func(t *testing.T) { testShift[uint32](t, crcmath.CRC32C) })
	t.Run("crc=crc64nvme", func(t *testing.T) { testShift[uint64](t, crcmath.CRC64NVME) })
}

// Joiner over blocks of m sub-blocks of 16 bytes, the partial CRCs added
// in pieces of random lengths (pieces that end inside a block, span
// several, or hold one sub-block), against the bitwise CRC of each block.
func testJoiner[T Word](t *testing.T, p crcmath.Params) {
	const sub = 16
	r := rand.New(rand.NewPCG(2, uint64(p.Width)))
	s := NewShift[T](p, sub)
	for _, m := range []int{1, 2, 3, 4, 5, 8, 12, 70} {
		for _, nb := range []int{0, 1, 2, 3, 5, 9} {
			data := randBytes(r, nb*m*sub)
			part := make([]T, nb*m)
			for i := range part {
				part[i] = checksum[T](p, data[i*sub:(i+1)*sub])
			}
			for trial := range 10 {
				dst := make([]T, nb+1)
				sentinel := T(uint64(0x5a5a5a5a5a5a5a5a) & p.Mask())
				dst[nb] = sentinel
				j := NewJoiner(dst[:nb], m, s)
				for rest := part; len(rest) > 0; {
					k := min(len(rest), 1+r.IntN(2*m+3))
					if trial == 0 {
						k = len(rest) // one piece
					}
					j.Add(rest[:k])
					rest = rest[k:]
				}
				for i := range nb {
					if want := checksum[T](p, data[i*m*sub:(i+1)*m*sub]); dst[i] != want {
						t.Fatalf("m=%d blocks=%d trial=%d: block %d = %#x, want %#x", m, nb, trial, i, dst[i], want)
					}
				}
				if dst[nb] != sentinel {
					t.Fatalf("m=%d blocks=%d: wrote past dst", m, nb)
				}
			}
		}
	}
}

func TestJoiner(t *testing.T) {
	t.Run("crc=t10dif", func(t *testing.T) { testJoiner[uint16](t, crcmath.T10DIF) })
	t.Run("crc=crc32c", func(t *testing.T) { testJoiner[uint32](t, crcmath.CRC32C) })
	t.Run("crc=crc64nvme", func(t *testing.T) { testJoiner[uint64](t, crcmath.CRC64NVME) })
}

func TestNewShiftRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"width", func() { NewShift[uint32](crcmath.T10DIF, 16) }},
		{"init", func() {
			p := crcmath.CRC32C
			p.XorOut = 0
			NewShift[uint32](p, 16)
		}},
	} {
		t.Run("case="+c.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("NewShift did not panic")
				}
			}()
			c.f()
		})
	}
}

func TestUseSubBlocks(t *testing.T) {
	for _, c := range []struct {
		blockLen, stride int
		want             bool
	}{
		{4096, 4096, true}, {8192, 8192, false}, {12288, 12288, false}, {65536, 65536, false},
		{4096, 4104, false}, {4096, 8192, false}, {2048, 2048, false}, {3072, 3072, false},
		{1024, 1024, false}, {0, 0, false}, {512, 512, false},
	} {
		if got := UseSubBlocks(c.blockLen, c.stride); got != c.want {
			t.Errorf("UseSubBlocks(%d, %d) = %v, want %v", c.blockLen, c.stride, got, c.want)
		}
	}
}

// BenchmarkJoiner: joining the partial CRCs of 1 MiB of 4 KiB blocks (1024
// sub-blocks, m = 4), the work the sub-block paths add to the kernel's.
func BenchmarkJoiner(b *testing.B) {
	b.Run("crc=t10dif", func(b *testing.B) { benchJoiner[uint16](b, crcmath.T10DIF) })
	b.Run("crc=crc32c", func(b *testing.B) { benchJoiner[uint32](b, crcmath.CRC32C) })
	b.Run("crc=crc64nvme", func(b *testing.B) { benchJoiner[uint64](b, crcmath.CRC64NVME) })
}

func benchJoiner[T Word](b *testing.B, p crcmath.Params) {
	const m = SubBlockAlias / SubBlockLen
	s := NewShift[T](p, SubBlockLen)
	part := make([]T, (1<<20)/SubBlockLen)
	for i := range part {
		part[i] = T(uint64(i) * 0x9E3779B97F4A7C15)
	}
	dst := make([]T, len(part)/m)
	b.Run(fmt.Sprintf("m=%d", m), func(b *testing.B) {
		b.SetBytes(1 << 20)
		for b.Loop() {
			j := NewJoiner(dst, m, s)
			j.Add(part)
		}
	})
	sinkJoin += uint64(dst[len(dst)-1])
}

var sinkJoin uint64
