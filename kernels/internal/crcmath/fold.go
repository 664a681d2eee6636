package crcmath

import "encoding/binary"

// FoldTable holds the constants of the carry-less-multiply kernels for one
// CRC. Every fold kernel, in assembly on amd64 and arm64 and in the pure-Go
// model below, reads it through a pointer, so its layout is fixed:
//
//	offset    field
//	0         Fold[0..64]  (16 bytes each)
//	1040      Final
//	1056      Mu
//	1064      Poly
//
// A 16-byte lane of the message is a polynomial of degree < 128 split into
// the 64 coefficients of higher degree, Hi, and the 64 of lower degree, Lo.
// For the unreflected T10-DIF CRC the lane is loaded big-endian (byte
// reversed), so Hi is the high quadword; for the reflected CRC-32C and
// CRC-64/NVME it is loaded as is, the first bit is the least significant, and
// Hi is the low quadword.
//
// The constant C(k) standing for x^k mod P is stored as
//
//	unreflected: x^k mod P, normal form (bit i = coefficient of x^i);
//	reflected:   Reflect(x^(k-1) mod P, 64), bit i = coefficient of x^(63-i).
//
// The reflected form has one power less because the carry-less product of
// two bit-reflected 64-bit values, read as a reflected 128-bit value, is the
// product times x (its coefficients sit one place lower). With these forms a
// single PCLMULQDQ/PMULL of a lane half by a constant yields the exact
// product in the lane's own representation, for every width w <= 64.
type FoldTable struct {
	// Fold[i] folds a lane forward by i lanes (i·128 bits) for i in 1..64:
	// Hi·x^(64+128i) + Lo·x^(128i) ≡ Hi·C(128i+64) ⊕ Lo·C(128i), so
	// Fold[i] = {C(128i+64), C(128i)}: [0] multiplies Hi, [1] multiplies Lo.
	// With N accumulators one lane apart, the main loop uses Fold[N] and the
	// accumulators collapse into one with Fold[N-1] .. Fold[1]. Fold[0] is
	// zero.
	Fold [65][2]uint64
	// Final turns the last lane V into V·x^w, the CRC register before
	// reduction: V·x^w = Hi·x^(64+w) + Lo·x^w ≡ Hi·C(64+w) ⊕ Lo·x^w.
	// Final[0] = C(64+w); Final[1] is zero (Lo·x^w is a shift).
	Final [2]uint64
	// Mu is the Barrett constant: the low 64 bits of
	// mu = floor(x^(64+w) / P) (deg mu = 64, the x^64 term is implicit),
	// normal form unreflected, Reflect(mu_low, 64) reflected.
	Mu uint64
	// Poly is p(x) = P(x) - x^w, normal form unreflected,
	// Reflect(p, 64) reflected.
	Poly uint64
}

// C returns the stored form of x^k mod P (see FoldTable). k must be >= 1.
func C(p Params, k uint64) uint64 {
	if p.Reflected {
		return Reflect(XPowMod(p, k-1), 64)
	}
	return XPowMod(p, k)
}

// NewFoldTable derives the table of p.
func NewFoldTable(p Params) *FoldTable {
	t := new(FoldTable)
	for i := uint64(1); i <= 64; i++ {
		t.Fold[i] = [2]uint64{C(p, 128*i+64), C(p, 128*i)}
	}
	t.Final[0] = C(p, 64+uint64(p.Width))
	t.Mu = BarrettMu(p)
	t.Poly = p.Poly
	if p.Reflected {
		t.Mu = Reflect(t.Mu, 64)
		t.Poly = Reflect(t.Poly, 64)
	}
	return t
}

// RevFoldTable is a FoldTable followed by its Fold constants in reverse
// order, Rev[i] = Fold[64-i], at offset 1072. The amd64 kernels fold every
// vector of a short message straight into the last lane, lane l of an m-lane
// vector whose last lane is j lanes before the message's last lane by
// Fold[j+m-1-l]: one plain vector load from &Rev[65-j-m], where the Fold
// order would need a lane-reversing shuffle on the multiplier's port.
type RevFoldTable struct {
	FoldTable
	Rev [65][2]uint64
}

// NewRevFoldTable returns t with its reversed Fold constants.
func NewRevFoldTable(t *FoldTable) *RevFoldTable {
	r := &RevFoldTable{FoldTable: *t}
	for i := range r.Rev {
		r.Rev[i] = t.Fold[64-i]
	}
	return r
}

// Lane is a 128-bit value as a register holds it: Q0 the low quadword
// (bytes 0..7 of a little-endian load), Q1 the high one.
type Lane struct{ Q0, Q1 uint64 }

func (a Lane) xor(b Lane) Lane { return Lane{a.Q0 ^ b.Q0, a.Q1 ^ b.Q1} }

func clmulLane(a, b uint64) Lane { hi, lo := Clmul(a, b); return Lane{lo, hi} }

// Load reads a lane of p from b[0:16] the way the kernels do.
func Load(p Params, b []byte) Lane {
	if p.Reflected {
		return Lane{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])}
	}
	// Byte-reversed: Q1 (high quadword) holds the first 8 bytes, Hi.
	return Lane{binary.BigEndian.Uint64(b[8:]), binary.BigEndian.Uint64(b)}
}

// hiLo returns the (Hi, Lo) halves of a lane.
func hiLo(p Params, l Lane) (hi, lo uint64) {
	if p.Reflected {
		return l.Q0, l.Q1
	}
	return l.Q1, l.Q0
}

// Fold folds lane a forward by the distance of k = t.Fold[i]: Hi·k[0] ⊕ Lo·k[1].
func Fold(p Params, a Lane, k [2]uint64) Lane {
	hi, lo := hiLo(p, a)
	return clmulLane(hi, k[0]).xor(clmulLane(lo, k[1]))
}

// InitLane XORs a CRC (finalised, as the kernels' Update takes it) into the
// first lane: the register value enters the first w message bits.
func InitLane(p Params, l Lane, crc uint64) Lane {
	reg := (crc ^ p.XorOut) & p.Mask() // undo xorout: the register (stored form)
	if p.Reflected {
		l.Q0 ^= reg // first bits of the message are the low bits
	} else {
		l.Q1 ^= reg << (64 - p.Width) // first bits are the top bits
	}
	return l
}

// Reduce turns the last lane V (all message bits folded into it) into the
// finalised CRC: V·x^w mod P by Final and Barrett, then xorout.
func Reduce(p Params, t *FoldTable, v Lane) uint64 {
	w := p.Width
	mask := p.Mask()
	if !p.Reflected {
		// T = Hi·C(64+w) ⊕ Lo·x^w, degree < 64+w.
		T := clmulLane(v.Q1, t.Final[0])
		if w < 64 {
			T.Q1 ^= v.Q0 >> (64 - w)
			T.Q0 ^= v.Q0 << w
		} else {
			T.Q1 ^= v.Q0 // w = 64: Lo·x^64 is the high quadword
		}
		// Barrett: Q = T div x^w; q = Q ⊕ floor(Q·mu_low / x^64);
		// CRC = (T ⊕ q·P) mod x^w = T mod x^w ⊕ (q·p mod x^w).
		var q uint64
		if w == 64 {
			q = T.Q1
		} else {
			q = T.Q1<<(64-w) | T.Q0>>w
		}
		h, _ := Clmul(q, t.Mu)
		q ^= h
		_, l := Clmul(q, t.Poly)
		return ((T.Q0 ^ l) & mask) ^ p.XorOut
	}
	// Reflected: bit i of the 128-bit value (Q1:Q0) is the coefficient of
	// x^(127-i). T = Hi·C(64+w) ⊕ Lo·x^w; Lo sits in Q1 and multiplying by
	// x^w moves it w places toward bit 0.
	T := clmulLane(v.Q0, t.Final[0])
	if w < 64 {
		T.Q0 ^= v.Q1 << (64 - w)
		T.Q1 ^= v.Q1 >> w
	} else {
		T.Q0 ^= v.Q1
	}
	// T has degree < 64+w: it occupies bits 64-w .. 127. Q = T div x^w is
	// bits 64-w .. 127-w, a reflected 64-bit value.
	q := shr128(T, 64-w)
	// floor(Q·mu_low / x^64), reflected: the product read as reflected-128
	// is x·Q·mu_low, so the wanted coefficients are its low quadword moved
	// up one place.
	c := clmulLane(q, t.Mu)
	q ^= c.Q0 << 1
	// T mod x^w: the top w bits of T. q·p mod x^w: the product is x·q·p,
	// whose coefficients x^1..x^w sit at bits 126-w+1.. 126, i.e. the w bits
	// ending at bit 126.
	c2 := clmulLane(q, t.Poly)
	out := shr128(T, 128-w) ^ shr128(c2, 127-w)
	return (out & mask) ^ p.XorOut
}

// shr128 returns the low 64 bits of the 128-bit value l shifted right by s
// (0 <= s < 128).
func shr128(l Lane, s uint) uint64 {
	switch {
	case s == 0:
		return l.Q0
	case s < 64:
		return l.Q0>>s | l.Q1<<(64-s)
	default:
		return l.Q1 >> (s - 64)
	}
}

// FoldUpdate is the pure-Go model of a fold kernel with n accumulators
// (1 <= n <= 64): it updates crc with data, whose length must be a multiple
// of 16 and at least 16·n. It mirrors the assembly step for step: XOR the
// CRC into the first lane, fold n lanes at a time by n lanes (Fold[n]),
// collapse the accumulators (Fold[n-1] .. Fold[1]), fold the remaining lanes
// one at a time (Fold[1]), reduce.
func FoldUpdate(p Params, t *FoldTable, n int, crc uint64, data []byte) uint64 {
	if len(data)%16 != 0 || len(data) < 16*n || n < 1 || n > 64 {
		panic("crcmath: FoldUpdate precondition")
	}
	acc := make([]Lane, n)
	for i := range acc {
		acc[i] = Load(p, data[16*i:])
	}
	acc[0] = InitLane(p, acc[0], crc)
	data = data[16*n:]
	for len(data) >= 16*n {
		for i := range acc {
			acc[i] = Fold(p, acc[i], t.Fold[n]).xor(Load(p, data[16*i:]))
		}
		data = data[16*n:]
	}
	v := acc[n-1]
	for i := 0; i < n-1; i++ {
		v = v.xor(Fold(p, acc[i], t.Fold[n-1-i]))
	}
	for len(data) >= 16 {
		v = Fold(p, v, t.Fold[1]).xor(Load(p, data))
		data = data[16:]
	}
	return Reduce(p, t, v)
}
