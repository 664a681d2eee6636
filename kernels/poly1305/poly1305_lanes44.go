package poly1305

import "math/bits"

// The lane form of the AVX-512 IFMA kernel, in pure Go, as
// poly1305_lanes.go is for the AVX2 one: eight blocks, one per 64-bit lane
// of a ZMM register, in radix 2^44 with 52-bit multiplies
// (VPMADD52LUQ/VPMADD52HUQ), written out one lane at a time with the same
// limbs, products and carry order as the assembly.
//
// Radix 2^44: x = x0 + x1·2^44 + x2·2^88 with x0, x1 < 2^44 and x2 < 2^42
// after a carry chain. A chunk lo + hi·2^64 (plus the pad bit 2^128) is
//
//	m0 = lo & M44, m1 = (lo>>44 | hi<<20) & M44, m2 = hi>>24 | 1<<40
//
// Product h·r: h_i·r_j has weight 2^(44(i+j)); for i+j >= 3 that is
// 2^132·2^(44(i+j-3)) ≡ 20·2^(44(i+j-3)) (2^130 ≡ 5), so with s_j = 20·r_j
// (< 2^49) the three output limbs are
//
//	d0 = h0·r0 + h1·s2 + h2·s1
//	d1 = h0·r1 + h1·r0 + h2·s2
//	d2 = h0·r2 + h1·r1 + h2·r0
//
// Each product of a limb (< 2^52) and a key word (< 2^52) is 104 bits;
// VPMADD52LUQ adds its bits 0..51 to one accumulator (lo_k), VPMADD52HUQ its
// bits 52..103 to another (hi_k). hi_k has weight 2^(44k+52) = 2^8·2^(44(k+1)),
// so it joins limb k+1 shifted left by 8; hi_2 has weight 2^140 ≡ 5·2^10 =
// 5120 and joins limb 0 times 5120 (hi·2^12 + hi·2^10):
//
//	d0 = lo0 + 5120·hi2, d1 = lo1 + hi0<<8, d2 = lo2 + hi1<<8
//
// Four chunks per step as in the AVX2 kernel, h' = (h + m1)·r^4 + m2·r^3 +
// m3·r^2 + m4·r, then two, (h + m1)·r^2 + m2·r, and one, (h + m)·r, for
// the chunks left: every lo_k sums at most twelve terms below 2^52 (<
// 2^56), every hi_k twelve below 2^46 (a limb below 2^45 times a key word
// below 2^49, shifted down by 52), so d0 = lo0 + 5120·hi2 < 2^60 and
// nothing overflows a 64-bit lane. Carry chain: d0→d1, d1→d2, d2→d0 (bits
// from 42 up, times 5: weight 2^130; under 2^18 after the first two), d0→d1;
// afterwards d0, d2 below 2^44 and 2^42 and d1 at most 2^44 (below 2^44 +
// 2^4 in the bound the pack relies on), so the next step's h + m has limbs
// below 2^45, inside the multiplier's 52 bits.

// lanes44 is the number of blocks of the IFMA kernel.
const lanes44 = 8

// ifmaKey is r..r^4 in radix 2^44 for the IFMA kernel: for r^(j+1) at
// [5j:], j = 0..3, the words r0, r1, r2, s1 = 20·r1, s2 = 20·r2 (the kernel
// broadcasts those of r and r^2 to the eight lanes of ten registers);
// then, from key44Vec, those of r^3 and r^4 again as eight-lane vectors,
// word w of r^(j+1) at key44Vec + 40(j-2) + 8w (the kernel's memory
// operands). The stream kernels' words follow (lanesIFMAS): from key44B,
// word w of r^(4(P+1)), P = 0..3, at key44B + 5P + w (their broadcast
// operands); from key44F, the last step's per-lane factor F, word w at
// key44F + 8w in eight lanes, lane 2s+b holding that of r^(4-s) (lane
// 2s+b holds chunk stream s of block b of a pair); from key44K, the pad
// bits' part of a stream kernel's step, which it adds to its accumulators
// in place of a pad bit in every chunk: the radix-2^44 limbs of c =
// 2^128·Σ r^e mod 2^130-5 over the powers e of the step's chunk-vectors,
// limb k in eight lanes at key44K + 24V + 8k, V = 0 for an ordinary step
// (e = 4, 8, 12, 16), V = R = 1..4 for the bracket of a last step of R
// rows (e = 0, 4, ..., 4(R-1)).
type ifmaKey [key44Words]uint64

// key44Words is the length of ifmaKey, key44Vec where its vectors start,
// key44B, key44F and key44K where the stream kernels' start.
const (
	key44Words = key44K + 5*3*lanes44
	key44Vec   = 4 * 5
	key44B     = key44Vec + 2*5*lanes44
	key44F     = key44B + 4*5
	key44K     = key44F + 5*lanes44
)

// laneState44 is the accumulators of eight blocks: limb k of lane l at
// [8k+l].
type laneState44 [24]uint64

const (
	mask44 = 1<<44 - 1
	mask42 = 1<<42 - 1
)

func limbs44(x0, x1, x2 uint64) [3]uint64 {
	return [3]uint64{x0 & mask44, (x0>>44 | x1<<20) & mask44, x1>>24 | x2<<40}
}

func makeIFMAKey(r0, r1 uint64) ifmaKey {
	var k ifmaKey
	// words[n-1] is the key words of r^n, n = 1..16.
	var words [16][5]uint64
	q0, q1, q2 := r0, r1, uint64(0)
	for n := range words {
		if n > 0 {
			q0, q1, q2 = mulReduce(q0, q1, q2, r0, r1)
			q0, q1, q2 = reduceFull(q0, q1, q2)
		}
		l := limbs44(q0, q1, q2)
		words[n] = [5]uint64{l[0], l[1], l[2], 20 * l[1], 20 * l[2]}
	}
	for j := range 4 {
		copy(k[5*j:], words[j][:])
	}
	// pads[n-1] is 2^128·r^n, n = 1..16, fully reduced.
	var pads [16][3]uint64
	t0, t1, t2 := uint64(0), uint64(0), uint64(1)
	for n := range pads {
		t0, t1, t2 = mulReduce(t0, t1, t2, r0, r1)
		t0, t1, t2 = reduceFull(t0, t1, t2)
		pads[n] = [3]uint64{t0, t1, t2}
	}
	for v := range 5 {
		var c [3]uint64
		for j := 1; j <= 4; j++ {
			switch {
			case v == 0:
				c = addReduce(c, pads[4*j-1])
			case j == 1 && v > 0:
				c = addReduce(c, [3]uint64{0, 0, 1}) // 2^128·r^0
			case j <= v:
				c = addReduce(c, pads[4*(j-1)-1])
			}
		}
		for i, l := range limbs44(c[0], c[1], c[2]) {
			for ln := range lanes44 {
				k[key44K+24*v+8*i+ln] = l
			}
		}
	}
	for w := range 5 {
		for pw := range 4 {
			k[key44B+5*pw+w] = words[4*(pw+1)-1][w]
		}
		for ln := range lanes44 {
			for j := 2; j < 4; j++ {
				k[key44Vec+40*(j-2)+8*w+ln] = words[j][w]
			}
			// F, lane 2s+b: r^(4-s).
			k[key44F+8*w+ln] = words[4-ln/2-1][w]
		}
	}
	return k
}

// addReduce is a + b mod 2^130-5, fully reduced, for a and b below 2^130.
func addReduce(a, b [3]uint64) [3]uint64 {
	s0, c := bits.Add64(a[0], b[0], 0)
	s1, c := bits.Add64(a[1], b[1], c)
	s2 := a[2] + b[2] + c
	// Bits 130 up times 5 (2^130 ≡ 5); s2 below 8, so one fold.
	s0, c = bits.Add64(s0, 5*(s2>>2), 0)
	s1, c = bits.Add64(s1, 0, c)
	s2 = s2&3 + c
	h0, h1, h2 := reduceFull(s0, s1, s2)
	return [3]uint64{h0, h1, h2}
}

// madd52 is VPMADD52LUQ and VPMADD52HUQ on one lane: the low and high 52
// bits of the product of the low 52 bits of a and b.
func madd52(a, b uint64) (lo, hi uint64) {
	const m52 = 1<<52 - 1
	h, l := bits.Mul64(a&m52, b&m52)
	return l & m52, (h<<12 | l>>52) & m52
}

func chunkLimbs44(c []byte) [3]uint64 {
	l := limbs44(le64(c[0:8]), le64(c[8:16]), 0)
	l[2] |= 1 << 40
	return l
}

// mulAdd44 adds x·r^(j+1) to the lo and hi accumulators of one lane.
func mulAdd44(lo, hi *[3]uint64, x [3]uint64, key *ifmaKey, j int) {
	kr := key[5*j:]
	// The key words that multiply x_i into limb k (r_(k-i), or s_(k-i+3)
	// for i > k, s1 at kr[3] and s2 at kr[4]).
	words := [3][3]uint64{
		{kr[0], kr[4], kr[3]}, // d0: x0·r0, x1·s2, x2·s1
		{kr[1], kr[0], kr[4]}, // d1: x0·r1, x1·r0, x2·s2
		{kr[2], kr[1], kr[0]}, // d2: x0·r2, x1·r1, x2·r0
	}
	for k := range 3 {
		for i := range 3 {
			l, h := madd52(x[i], words[k][i])
			lo[k] += l
			hi[k] += h
		}
	}
}

func combine44(lo, hi [3]uint64) [3]uint64 {
	d := [3]uint64{lo[0] + hi[2]<<12 + hi[2]<<10, lo[1] + hi[0]<<8, lo[2] + hi[1]<<8}
	c := d[0] >> 44
	d[0] &= mask44
	d[1] += c
	c = d[1] >> 44
	d[1] &= mask44
	d[2] += c
	c = d[2] >> 42
	d[2] &= mask42
	d[0] += c + c<<2
	c = d[0] >> 44
	d[0] &= mask44
	d[1] += c
	return d
}

// laneModel44 is the IFMA kernel's contract, lane by lane.
func laneModel44(h *laneState44, p []byte, stride, chunks int, key *ifmaKey) {
	for lane := range lanes44 {
		x := [3]uint64{h[lane], h[8+lane], h[16+lane]}
		b := p[lane*stride:]
		c := 0
		// step is the kernel's step44 over the next k chunks m1..mk:
		// h = (h + m1)·r^k + m2·r^(k-1) + ... + mk·r.
		step := func(k int) {
			var lo, hi [3]uint64
			for m := k - 1; m >= 1; m-- {
				mulAdd44(&lo, &hi, chunkLimbs44(b[16*(c+m):]), key, k-1-m)
			}
			m1 := chunkLimbs44(b[16*c:])
			for i := range 3 {
				x[i] += m1[i]
			}
			mulAdd44(&lo, &hi, x, key, k-1)
			x = combine44(lo, hi)
			c += k
		}
		for c+4 <= chunks {
			step(4)
		}
		if c+2 <= chunks {
			step(2)
		}
		if c < chunks {
			step(1)
		}
		h[lane], h[8+lane], h[16+lane] = x[0], x[1], x[2]
	}
}

// laneToState44 returns lane l of h in the generic form. combine44's chain
// ends with d0→d1, which can leave limb 1 at exactly 2^44; the OR below
// would drop that bit (of weight 2^88) wherever limb 2 is odd, so limb 1 is
// carried into limb 2 once more first. Within the kernel's bounds (limb 2
// below 2^42) the fold never coincides with an odd limb 2, but the
// conversion is exact for any limbs combine44 accepts.
func laneToState44(h *laneState44, l int, r0, r1 uint64) state {
	x := combine44([3]uint64{h[l], h[8+l], h[16+l]}, [3]uint64{})
	x[2] += x[1] >> 44
	x[1] &= mask44
	return state{
		h0: x[0] | x[1]<<44,
		h1: x[1]>>20 | x[2]<<24,
		h2: x[2] >> 40,
		r0: r0, r1: r1,
	}
}

// pack44 is the pack of the IFMA kernel's lanes.
func pack44(h *laneBuf, l int) (h0, h1, h2 uint64) {
	s := laneToState44(laneState44Of(h), l, 0, 0)
	return s.h0, s.h1, s.h2
}

func laneState44Of(h *laneBuf) *laneState44 { return (*laneState44)(h[:24]) }

// modelKernel44 is the IFMA lane model as a laneKernel, for the tests.
var modelKernel44 = laneKernel{
	lanes: lanes44,
	absorb: func(h *laneBuf, p []byte, stride, chunks int, k *polyKey) {
		laneModel44(laneState44Of(h), p, stride, chunks, &k.ifma)
	},
	pack: pack44,
}
