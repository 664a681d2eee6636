// Package crcmath holds the GF(2) polynomial arithmetic shared by the CRC
// kernels: the bitwise reference (the oracle every implementation is tested
// against), x^n mod P, Combine, and the fold-constant table that the
// carry-less-multiply kernels read.
//
// Notation. A CRC of width w has generator P(x) = x^w + p(x), deg p < w. In
// "normal" form a polynomial of degree < 64 is a uint64 whose bit i is the
// coefficient of x^i. The CRC of a message M (with init and xorout zero) is
// M(x)·x^w mod P(x), where the first bit of the message is the highest power:
// for an unreflected CRC the first bit is the most significant bit of the
// first byte, for a reflected CRC its least significant bit.
package crcmath

import "math/bits"

// Params describes a CRC in the Rocksoft/Williams model.
type Params struct {
	Name      string
	Width     uint   // w: 16, 32 or 64
	Poly      uint64 // p(x) in normal form, without the x^w term
	Init      uint64
	Reflected bool // RefIn and RefOut (all three CRCs here have both equal)
	XorOut    uint64
	Check     uint64 // CRC of the ASCII string "123456789"
}

var (
	// T10DIF is CRC-16/T10-DIF, the 16-bit PI guard.
	T10DIF = Params{Name: "CRC-16/T10-DIF", Width: 16, Poly: 0x8BB7, Check: 0xD0DB}
	// CRC32C is CRC-32C (Castagnoli), the NVMe 32-bit guard.
	CRC32C = Params{Name: "CRC-32C", Width: 32, Poly: 0x1EDC6F41, Init: 0xFFFFFFFF,
		Reflected: true, XorOut: 0xFFFFFFFF, Check: 0xE3069283}
	// CRC64NVME is CRC-64/NVME, the NVMe 64-bit guard.
	CRC64NVME = Params{Name: "CRC-64/NVME", Width: 64, Poly: 0xAD93D23594C93659,
		Init: ^uint64(0), Reflected: true, XorOut: ^uint64(0), Check: 0xAE8B14860A799888}
)

// Mask returns the w low bits set.
func (p Params) Mask() uint64 {
	if p.Width == 64 {
		return ^uint64(0)
	}
	return 1<<p.Width - 1
}

// Bitwise is the reference CRC: one message bit at a time, straight from the
// definition. crc is a previous result of Bitwise (or p.Init^p.XorOut... that
// is, the finalised CRC of the empty message for a fresh start, which is
// Bitwise(p, Start(p), nil)); the result is finalised (xorout applied).
func Bitwise(p Params, crc uint64, data []byte) uint64 {
	mask := p.Mask()
	// Undo the final xor and the output reflection to get the register.
	reg := (crc ^ p.XorOut) & mask
	if p.Reflected {
		reg = Reflect(reg, p.Width)
	}
	top := uint64(1) << (p.Width - 1)
	for _, b := range data {
		for i := 0; i < 8; i++ {
			var bit uint64
			if p.Reflected {
				bit = uint64(b>>i) & 1
			} else {
				bit = uint64(b>>(7-i)) & 1
			}
			fb := (reg&top != 0) != (bit != 0)
			reg = (reg << 1) & mask
			if fb {
				reg ^= p.Poly
			}
		}
	}
	if p.Reflected {
		reg = Reflect(reg, p.Width)
	}
	return (reg ^ p.XorOut) & mask
}

// Start returns the finalised CRC of the empty message, the value to pass as
// crc to Bitwise (and to every Update in the kernel packages) for a new
// message.
func Start(p Params) uint64 { return (p.Init ^ p.XorOut) & p.Mask() }

// Reflect reverses the low n bits of v.
func Reflect(v uint64, n uint) uint64 { return bits.Reverse64(v) >> (64 - n) }

// Clmul returns the 128-bit carry-less product of a and b as (hi, lo): bit
// i+j of the result is the xor of a_i·b_j. This is what PCLMULQDQ and PMULL
// compute; it is the software model of both.
func Clmul(a, b uint64) (hi, lo uint64) {
	for i := uint(0); i < 64; i++ {
		if b>>i&1 != 0 {
			lo ^= a << i
			if i > 0 {
				hi ^= a >> (64 - i)
			}
		}
	}
	return hi, lo
}

// MulMod returns a·b mod P in normal form, for deg a, deg b < w.
func MulMod(p Params, a, b uint64) uint64 {
	hi, lo := Clmul(a, b)
	return modP(p, hi, lo)
}

// modP reduces the 128-bit polynomial hi·x^64 + lo modulo P, bit by bit.
func modP(p Params, hi, lo uint64) uint64 {
	w := p.Width
	// Walk from degree 127 down to w, cancelling the leading term with
	// P·x^(d-w).
	for d := 127; d >= int(w); d-- {
		var set bool
		if d >= 64 {
			set = hi>>(d-64)&1 != 0
		} else {
			set = lo>>d&1 != 0
		}
		if !set {
			continue
		}
		// P·x^(d-w) = x^d + p·x^(d-w)
		s := uint(d) - w
		if d >= 64 {
			hi ^= 1 << (d - 64)
		} else {
			lo ^= 1 << d
		}
		// p has degree < w; shifted by s it spans bits s .. s+w-1.
		if s < 64 {
			lo ^= p.Poly << s
			if s > 0 {
				hi ^= p.Poly >> (64 - s)
			}
		} else {
			hi ^= p.Poly << (s - 64)
		}
	}
	return lo & p.Mask()
}

// XPowMod returns x^n mod P in normal form, by square and multiply.
func XPowMod(p Params, n uint64) uint64 {
	result := uint64(1) // x^0
	if p.Width == 1 {
		result = 0
	}
	base := modP(p, 0, 2) // x^1
	for n > 0 {
		if n&1 != 0 {
			result = MulMod(p, result, base)
		}
		base = MulMod(p, base, base)
		n >>= 1
	}
	return result
}

// BarrettMu returns the low 64 bits of mu = floor(x^(64+w) / P(x)), a
// polynomial of degree exactly 64 (the x^64 term is implicit).
func BarrettMu(p Params) uint64 {
	// Long division of x^(64+w) by P. The leading term gives the quotient
	// bit x^64 (implicit in the result) and leaves x^64·p(x). From then on r
	// holds the top w coefficients of the partial remainder: r's bit w-1 is
	// the coefficient of x^(w+i) when quotient bit i is decided, and the
	// dividend contributes only zeros below x^(64+w).
	w := p.Width
	var q uint64
	r := p.Poly & p.Mask()
	top := uint64(1) << (w - 1)
	for i := 63; i >= 0; i-- {
		if r&top != 0 {
			q |= 1 << i
			r = ((r << 1) ^ p.Poly) & p.Mask()
		} else {
			r = (r << 1) & p.Mask()
		}
	}
	return q
}

// Combine returns the CRC of A||B given crcA = CRC(A), crcB = CRC(B) and
// lenB = len(B), for any of the CRCs here. For these CRCs init equals xorout
// (or both are zero), so the initial-value terms cancel and
// CRC(A||B) = CRC(A)·x^(8·lenB) mod P ⊕ CRC(B), computed in normal form.
func Combine(p Params, crcA, crcB uint64, lenB int64) uint64 {
	if lenB <= 0 {
		return crcA // B is empty
	}
	a := crcA ^ p.XorOut ^ p.Init // register contribution beyond the init term
	a &= p.Mask()
	if p.Reflected {
		a = Reflect(a, p.Width)
	}
	a = MulMod(p, a, XPowMod(p, 8*uint64(lenB)))
	if p.Reflected {
		a = Reflect(a, p.Width)
	}
	return (a ^ crcB) & p.Mask()
}
