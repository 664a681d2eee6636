package piscan

import "encoding/binary"

// The generic scans take the tuples as arrays, so that their loops hold no
// bounds check (with a check per block the compiler ran out of registers
// and kept the offset in memory). Those of 8-byte tuples take four blocks
// an iteration, and their escape term is the carry out of the app tag: bit
// 48 of (w + 1<<32) ^ w is set iff bits 32-47 of w are all ones, three
// operations a block.

// scan16Generic is Scan16 of len(g) tuples, len(t) == len(g).
func scan16Generic(t [][8]byte, gs []uint16, e, step, mask uint64) uint64 {
	const one, carry = 1 << 32, 1 << 48
	var bad, esc uint64
	t = t[:len(gs)]
	j := 0
	for ; j+4 <= len(gs); j += 4 {
		g, tt := gs[j:j+4:j+4], t[j:j+4:j+4]
		w0 := binary.BigEndian.Uint64(tt[0][:])
		w1 := binary.BigEndian.Uint64(tt[1][:])
		w2 := binary.BigEndian.Uint64(tt[2][:])
		w3 := binary.BigEndian.Uint64(tt[3][:])
		e1 := e + step
		e2 := e1 + step
		e3 := e2 + step
		bad |= (w0^(uint64(g[0])<<48|e))&mask | (w1^(uint64(g[1])<<48|e1))&mask |
			(w2^(uint64(g[2])<<48|e2))&mask | (w3^(uint64(g[3])<<48|e3))&mask
		// (^ and | bind alike in Go, left to right: each term needs its
		// parentheses.)
		esc |= ((w0 + one) ^ w0) | ((w1 + one) ^ w1) | ((w2 + one) ^ w2) | ((w3 + one) ^ w3)
		e = e3 + step
	}
	for ; j < len(gs); j++ {
		w := binary.BigEndian.Uint64(t[j][:])
		bad |= (w ^ (uint64(gs[j])<<48 | e)) & mask
		esc |= (w + one) ^ w
		e += step
	}
	return bad | esc&carry
}

// scan16NoEscapeGeneric is Scan16NoEscape of len(g) tuples, len(t) ==
// len(g).
func scan16NoEscapeGeneric(t [][8]byte, gs []uint16, e, step, mask uint64) uint64 {
	var bad uint64
	t = t[:len(gs)]
	j := 0
	for ; j+4 <= len(gs); j += 4 {
		g, tt := gs[j:j+4:j+4], t[j:j+4:j+4]
		w0 := binary.BigEndian.Uint64(tt[0][:])
		w1 := binary.BigEndian.Uint64(tt[1][:])
		w2 := binary.BigEndian.Uint64(tt[2][:])
		w3 := binary.BigEndian.Uint64(tt[3][:])
		e1 := e + step
		e2 := e1 + step
		e3 := e2 + step
		bad |= (w0^(uint64(g[0])<<48|e))&mask | (w1^(uint64(g[1])<<48|e1))&mask |
			(w2^(uint64(g[2])<<48|e2))&mask | (w3^(uint64(g[3])<<48|e3))&mask
		e = e3 + step
	}
	for ; j < len(gs); j++ {
		w := binary.BigEndian.Uint64(t[j][:])
		bad |= (w ^ (uint64(gs[j])<<48 | e)) & mask
		e += step
	}
	return bad
}

// scan64Generic is Scan64 of len(g) tuples, len(t) == len(g).
func scan64Generic(t [][16]byte, gs []uint64, e1, step, gm, mask1 uint64) uint64 {
	var bad uint64
	t = t[:len(gs)]
	for j, gv := range gs {
		w0 := binary.BigEndian.Uint64(t[j][:8])
		w1 := binary.BigEndian.Uint64(t[j][8:])
		bad |= (w0^gv)&gm | (w1^e1)&mask1 | (w1>>48+1)>>16
		e1 += step
	}
	return bad
}

// scan64NoEscapeGeneric is Scan64NoEscape of len(g) tuples, len(t) ==
// len(g).
func scan64NoEscapeGeneric(t [][16]byte, gs []uint64, e1, step, gm, mask1 uint64) uint64 {
	var bad uint64
	t = t[:len(gs)]
	for j, gv := range gs {
		w0 := binary.BigEndian.Uint64(t[j][:8])
		w1 := binary.BigEndian.Uint64(t[j][8:])
		bad |= (w0^gv)&gm | (w1^e1)&mask1
		e1 += step
	}
	return bad
}
