package poly1305

import (
	"encoding/binary"
	"math/bits"
)

// The fast generic implementation: the accumulator h in three 64-bit words
// (h0 + h1·2^64 + h2·2^128, h2 a few bits), r in two (r0 + r1·2^64, 124
// bits after clamping), one 16-byte chunk per step with bits.Mul64.
//
// Bounds, which the code relies on: r0, r1 < 2^60 (the clamp clears the top
// four bits of each 64-bit half), and h2 <= 7 before a multiply (it is at
// most 4 after a reduction, plus a carry and the 2^128 pad bit), so h2·r0 and
// h2·r1 fit in 64 bits and the four product words below do not overflow.

// state is the generic accumulator; r is the clamped key.
type state struct {
	h0, h1, h2 uint64
	r0, r1     uint64
}

const (
	rMask0 = 0x0ffffffc0fffffff // clamp of r's low 64 bits (RFC 8439 2.5)
	rMask1 = 0x0ffffffc0ffffffc // and of its high 64 bits
)

func clampR(r []byte) (r0, r1 uint64) {
	return binary.LittleEndian.Uint64(r[0:8]) & rMask0, binary.LittleEndian.Uint64(r[8:16]) & rMask1
}

// chunks absorbs len(p)/16 full chunks, each with the 2^128 pad bit. The
// loop body is mulReduce written out: the compiler does not inline
// mulReduce (cost 186, budget 80), and without the call per chunk the loop
// is one straight block, which kernels/_mca models on arm64 beside the NEON
// kernel (on amd64 the difference is within the noise of a shared machine,
// docs/perf/poly1305-generator.md).
func (s *state) chunks(p []byte) {
	h0, h1, h2, r0, r1 := s.h0, s.h1, s.h2, s.r0, s.r1
	for len(p) >= 16 {
		var c uint64
		h0, c = bits.Add64(h0, binary.LittleEndian.Uint64(p[0:8]), 0)
		h1, c = bits.Add64(h1, binary.LittleEndian.Uint64(p[8:16]), c)
		h2 += c + 1

		// mulReduce(h0, h1, h2, r0, r1), step for step.
		hi00, lo00 := bits.Mul64(h0, r0)
		hi01, lo01 := bits.Mul64(h0, r1)
		hi10, lo10 := bits.Mul64(h1, r0)
		hi11, lo11 := bits.Mul64(h1, r1)
		t0 := lo00
		t1, c := bits.Add64(hi00, lo01, 0)
		t2, c2 := bits.Add64(hi01, lo11, c)
		t3 := hi11 + c2
		t1, c = bits.Add64(t1, lo10, 0)
		t2, c = bits.Add64(t2, hi10, c)
		t3 += c
		t2, c = bits.Add64(t2, h2*r0, 0)
		t3 += c + h2*r1
		g0, g1 := t2&^3, t3
		h0, c = bits.Add64(t0, g0, 0)
		h1, c = bits.Add64(t1, g1, c)
		h2 = t2&3 + c
		g0, g1 = g0>>2|g1<<62, g1>>2
		h0, c = bits.Add64(h0, g0, 0)
		h1, c = bits.Add64(h1, g1, c)
		h2 += c

		p = p[16:]
	}
	s.h0, s.h1, s.h2 = h0, h1, h2
}

// last absorbs a final partial chunk of 1..15 bytes: the bytes, then a 1
// byte, then zeros, without the 2^128 bit (RFC 8439 2.5).
func (s *state) last(p []byte) {
	var buf [16]byte
	copy(buf[:], p)
	buf[len(p)] = 1
	var c uint64
	s.h0, c = bits.Add64(s.h0, binary.LittleEndian.Uint64(buf[0:8]), 0)
	s.h1, c = bits.Add64(s.h1, binary.LittleEndian.Uint64(buf[8:16]), c)
	s.h2 += c
	s.h0, s.h1, s.h2 = mulReduce(s.h0, s.h1, s.h2, s.r0, s.r1)
}

// mulReduce returns h·r partially reduced mod 2^130-5: a value below 2^130 +
// 2^128, congruent to h·r.
func mulReduce(h0, h1, h2, r0, r1 uint64) (uint64, uint64, uint64) {
	// h·r = t0 + t1·2^64 + t2·2^128 + t3·2^192.
	hi00, lo00 := bits.Mul64(h0, r0)
	hi01, lo01 := bits.Mul64(h0, r1)
	hi10, lo10 := bits.Mul64(h1, r0)
	hi11, lo11 := bits.Mul64(h1, r1)
	t0 := lo00
	t1, c := bits.Add64(hi00, lo01, 0)
	t2, c2 := bits.Add64(hi01, lo11, c)
	t3 := hi11 + c2
	t1, c = bits.Add64(t1, lo10, 0)
	t2, c = bits.Add64(t2, hi10, c)
	t3 += c
	t2, c = bits.Add64(t2, h2*r0, 0)
	t3 += c + h2*r1

	// Split at 2^130: h·r = L + H·2^130 with L = t0 + t1·2^64 + (t2&3)·2^128.
	// 2^130 ≡ 5, so h·r ≡ L + 5H = L + 4H + H, where 4H = (t2 &^ 3) +
	// t3·2^64 and H = 4H >> 2. H < 2^126 (h < 2^131, r < 2^124), so the
	// sum is below 2^130 + 2^128.
	g0, g1 := t2&^3, t3
	h0, c = bits.Add64(t0, g0, 0)
	h1, c = bits.Add64(t1, g1, c)
	h2 = t2&3 + c
	g0, g1 = g0>>2|g1<<62, g1>>2
	h0, c = bits.Add64(h0, g0, 0)
	h1, c = bits.Add64(h1, g1, c)
	h2 += c
	return h0, h1, h2
}

// reduce returns the low 128 bits of h mod 2^130-5 for h < 2(2^130-5), in
// constant time: h - p if h + 5 reaches 2^130, else h.
func reduce(h0, h1, h2 uint64) (uint64, uint64) {
	g0, c := bits.Add64(h0, 5, 0)
	g1, c := bits.Add64(h1, 0, c)
	g2 := h2 + c
	// g2 >= 4 iff h >= p; h2 <= 5 so g2 <= 6 and bit 2 decides.
	sel := -(g2 >> 2 & 1) // all ones: take g
	return h0 ^ (h0^g0)&sel, h1 ^ (h1^g1)&sel
}

// sumGeneric returns Poly1305_r(m) mod 2^130-5, low 128 bits, before the
// mask: the polynomial part shared by Sum and Poly1305-AES.
func sumGeneric(r0, r1 uint64, m []byte) (uint64, uint64) {
	s := state{r0: r0, r1: r1}
	n := len(m) &^ 15
	s.chunks(m[:n])
	if n < len(m) {
		s.last(m[n:])
	}
	return reduce(s.h0, s.h1, s.h2)
}

// addMask returns (h + s) mod 2^128 as little-endian bytes into out.
func addMask(out []byte, h0, h1, s0, s1 uint64) {
	var c uint64
	h0, c = bits.Add64(h0, s0, 0)
	h1, _ = bits.Add64(h1, s1, c)
	binary.LittleEndian.PutUint64(out[0:8], h0)
	binary.LittleEndian.PutUint64(out[8:16], h1)
}

// blocksGeneric writes the polynomial part of every block's tag, ad_i ||
// block_i, into acc: acc[i] = Poly1305_r(ad[i*adLen:][:adLen] ||
// p[i*stride:][:blockLen]) mod 2^130-5, low 128 bits. adLen is a multiple of
// 16, so the block's chunks start on a chunk boundary of the message.
func blocksGeneric(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, p []byte, blockLen, stride int) {
	full := blockLen &^ 15
	for i := range acc {
		s := state{r0: k.r0, r1: k.r1}
		if adLen > 0 {
			s.chunks(ad[i*adLen : (i+1)*adLen])
		}
		b := p[i*stride : i*stride+blockLen]
		s.chunks(b[:full])
		if full < blockLen {
			s.last(b[full:])
		}
		acc[i][0], acc[i][1] = reduce(s.h0, s.h1, s.h2)
	}
}
