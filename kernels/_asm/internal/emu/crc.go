package emu

import (
	"encoding/binary"
	"math/bits"
)

// Reference math for the tests, as in kernels/internal/crcmath (which this
// module cannot import).

// A Spec is a CRC: width, bit order, init = xorout = all ones or both
// zero, and the polynomial without its top bit.
type Spec struct {
	Width     int
	Reflected bool
	OnesXor   bool
	Poly      uint64
}

// The CRCs of the kernels.
var (
	T10DIF    = Spec{Width: 16, Poly: 0x8BB7}
	CRC32C    = Spec{Width: 32, Reflected: true, OnesXor: true, Poly: 0x1EDC6F41}
	CRC64NVME = Spec{Width: 64, Reflected: true, OnesXor: true, Poly: 0xAD93D23594C93659}
)

// Mask is the low w bits.
func Mask(w int) uint64 {
	if w == 64 {
		return ^uint64(0)
	}
	return 1<<w - 1
}

func reflect(v uint64, n int) uint64 { return bits.Reverse64(v) >> (64 - n) }

// Bitwise is the reference CRC (finalised in, finalised out).
func Bitwise(s Spec, crc uint64, data []byte) uint64 {
	w, poly := s.Width, s.Poly
	var xo uint64
	if s.OnesXor {
		xo = Mask(w)
	}
	reg := (crc ^ xo) & Mask(w)
	if s.Reflected {
		reg = reflect(reg, w)
	}
	top := uint64(1) << (w - 1)
	for _, b := range data {
		for i := 0; i < 8; i++ {
			bit := uint64(b>>(7-i)) & 1
			if s.Reflected {
				bit = uint64(b>>i) & 1
			}
			fb := (reg&top != 0) != (bit != 0)
			reg = (reg << 1) & Mask(w)
			if fb {
				reg ^= poly
			}
		}
	}
	if s.Reflected {
		reg = reflect(reg, w)
	}
	return (reg ^ xo) & Mask(w)
}

func modP(w int, poly, hi, lo uint64) uint64 {
	for d := 127; d >= w; d-- {
		var set bool
		if d >= 64 {
			set = hi>>(d-64)&1 != 0
		} else {
			set = lo>>d&1 != 0
		}
		if !set {
			continue
		}
		sh := uint(d - w)
		if d >= 64 {
			hi ^= 1 << (d - 64)
		} else {
			lo ^= 1 << d
		}
		if sh < 64 {
			lo ^= poly << sh
			if sh > 0 {
				hi ^= poly >> (64 - sh)
			}
		} else {
			hi ^= poly << (sh - 64)
		}
	}
	return lo & Mask(w)
}

// XPow is x^n mod P.
func XPow(w int, poly, n uint64) uint64 {
	r, base := uint64(1), modP(w, poly, 0, 2)
	for ; n > 0; n >>= 1 {
		if n&1 != 0 {
			lo, hi := Clmul(r, base)
			r = modP(w, poly, hi, lo)
		}
		lo, hi := Clmul(base, base)
		base = modP(w, poly, hi, lo)
	}
	return r
}

// FoldTable returns the crcmath.RevFoldTable of s as bytes: Fold[0..maxFold]
// ({C(128i+64), C(128i)}), Final, Mu, Poly, then Rev[i] = Fold[maxFold-i].
func FoldTable(s Spec, maxFold int) []byte {
	w, poly := s.Width, s.Poly
	c := func(k uint64) uint64 {
		if s.Reflected {
			return reflect(XPow(w, poly, k-1), 64)
		}
		return XPow(w, poly, k)
	}
	var q []uint64
	q = append(q, 0, 0)
	for i := uint64(1); i <= uint64(maxFold); i++ {
		q = append(q, c(128*i+64), c(128*i))
	}
	q = append(q, c(64+uint64(w)), 0)
	// mu = floor(x^(64+w) / P), low 64 bits.
	var mu uint64
	r := poly & Mask(w)
	top := uint64(1) << (w - 1)
	for i := 63; i >= 0; i-- {
		if r&top != 0 {
			mu |= 1 << i
			r = ((r << 1) ^ poly) & Mask(w)
		} else {
			r = (r << 1) & Mask(w)
		}
	}
	p := poly
	if s.Reflected {
		mu, p = reflect(mu, 64), reflect(p, 64)
	}
	q = append(q, mu, p)
	for i := maxFold; i >= 0; i-- {
		q = append(q, q[2*i], q[2*i+1])
	}
	b := make([]byte, 8*len(q))
	for i, v := range q {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	return b
}
