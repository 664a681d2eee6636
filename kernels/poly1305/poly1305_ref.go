package poly1305

import "math/big"

// The reference: RFC 8439 section 2.5.1 read literally, with math/big. It is
// the oracle of the tests and the fuzz target, and is never on a fast path.

var refP = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 130), big.NewInt(5))

// leInt reads b as a little-endian unsigned integer.
func leInt(b []byte) *big.Int {
	be := make([]byte, len(b))
	for i := range b {
		be[len(b)-1-i] = b[i]
	}
	return new(big.Int).SetBytes(be)
}

// refPoly returns Poly1305_r(m) mod 2^130-5 (before s is added), for the
// 16 bytes r as given (clamped here).
func refPoly(r *[16]byte, m []byte) *big.Int {
	rc := *r
	// clamp(r): r &= 0x0ffffffc0ffffffc0ffffffc0fffffff
	for _, i := range []int{3, 7, 11, 15} {
		rc[i] &= 15
	}
	for _, i := range []int{4, 8, 12} {
		rc[i] &= 252
	}
	rn := leInt(rc[:])
	a := new(big.Int)
	for len(m) > 0 {
		n := min(16, len(m))
		// The chunk with one byte 0x01 appended: 2^(8n) added.
		blk := append(append([]byte(nil), m[:n]...), 1)
		a.Add(a, leInt(blk))
		a.Mul(a, rn)
		a.Mod(a, refP)
		m = m[n:]
	}
	return a
}

// refTag returns (refPoly + s) mod 2^128 as 16 little-endian bytes.
func refTag(r *[16]byte, s *[16]byte, m []byte) [16]byte {
	a := refPoly(r, m)
	a.Add(a, leInt(s[:]))
	var out [16]byte
	be := a.Bytes()
	for i := 0; i < 16 && i < len(be); i++ {
		out[i] = be[len(be)-1-i]
	}
	return out
}
