package poly1305

import (
	"encoding/binary"
	"fmt"

	"github.com/difctl/difctl/kernels/internal/layout"
)

// Partial tags: the polynomial of a block's data computed apart from its
// associated data and mask, so that a kernel which reads the block for
// another reason (kernels/keyedcopy: the copy and the CRCs of a verified
// read) can evaluate it in the same pass, before the associated data is
// known. Poly1305 is linear in the chunks: with the message ad || m, ad a
// whole number of chunks and m of D chunks (the last possibly partial),
//
//	Poly_r(ad || m) = Poly_r(ad)·r^D + Poly_r(m)   (mod 2^130-5)
//
// since each chunk of ad is multiplied by r D more times than it would be
// alone. TagsFromPartials adds Poly_r(ad)·r^D and the AES mask, so its tags
// are bit for bit those of BlocksAD.

// Partial is Poly_r(block) mod 2^130-5 of one block's data alone, before
// any associated data and the mask: five radix-2^26 limbs (value Σ
// p[k]·2^(26k)), each below 2^27, congruent to the polynomial. It is the
// form of the lane kernels' accumulators (poly1305_lanes.go), so a lane
// kernel of another package can leave it as it is.
type Partial [5]uint64

// LaneKeyWords is the size of LaneKey's table.
const LaneKeyWords = len(laneKey{})

// LaneKey returns the powers r, r^2, r^3, r^4 of k's r in the layout of the
// AVX2 lane kernels (laneKey in poly1305_lanes.go: R(j,l), limb l of
// r^(j+1) in radix 2^26, at word 4(5j+l), each repeated in four lanes;
// S(j,l) = 5·R(j,l) at 80+4(5j+l); r itself as two words at 160), for
// kernels of other packages that evaluate the same lanes (kernels/keyedcopy).
// It is key material: it must be kept as secret as k, and never modified.
func (k *Key) LaneKey() *[LaneKeyWords]uint64 { return (*[LaneKeyWords]uint64)(&k.poly.lanes) }

// partialGroups, if not nil, is the active implementation's lane kernel
// for Partials: it sets the partials of a prefix of the blocks and returns
// how many it set.
var partialGroups func(k *polyKey, parts []Partial, p []byte, blockLen, stride int) int

// Partials sets parts[i] to the Partial of the block p[i*stride:][:blockLen]
// for every i < len(parts): under avx512ifma the groups of eight blocks of
// whole 64-byte rows through its lane kernel, the rest with the generic
// code. The layout rules are those of Blocks; it returns ErrLayout, and
// writes nothing, otherwise.
func (k *Key) Partials(parts []Partial, p []byte, blockLen, stride int) error {
	if !layout.Valid(len(parts), len(p), blockLen, stride) {
		return ErrLayout
	}
	first := 0
	if partialGroups != nil {
		first = partialGroups(&k.poly, parts, p, blockLen, stride)
	}
	full := blockLen &^ 15
	for i := first; i < len(parts); i++ {
		s := state{r0: k.poly.r0, r1: k.poly.r1}
		b := p[i*stride : i*stride+blockLen]
		s.chunks(b[:full])
		if full < blockLen {
			s.last(b[full:])
		}
		parts[i] = limbs26(s.h0, s.h1, s.h2)
	}
	return nil
}

// TagsFromPartials sets dst[i] to the Poly1305-AES tag of ad[i*adLen:][:adLen]
// || block_i under nonce.Add(i), where parts[i] is the Partial of block_i, a
// block of blockLen bytes: dst[i] is what BlocksAD gives for the same
// blocks. adLen must be a multiple of 16, len(ad) >= len(dst)*adLen,
// len(parts) >= len(dst) and every limb of parts below 2^27, blockLen >= 0;
// it returns ErrLayout, and writes nothing, otherwise.
func (k *Key) TagsFromPartials(dst []Tag, nonce *Nonce, ad []byte, adLen int, parts []Partial, blockLen int) error {
	return k.tagsFromPartials(nil, dst, nonce, ad, adLen, parts, blockLen)
}

func (k *Key) tagsFromPartials(ms *MaskStream, dst []Tag, nonce *Nonce, ad []byte, adLen int, parts []Partial, blockLen int) error {
	n := len(dst)
	if blockLen < 0 || len(parts) < n {
		return fmt.Errorf("%w: %d partials for %d blocks of %d bytes", ErrLayout, len(parts), n, blockLen)
	}
	if adLen < 0 || adLen%16 != 0 || adLen > 0 && n > len(ad)/adLen {
		return fmt.Errorf("%w: %d bytes of associated data for %d blocks of %d", ErrLayout, len(ad), n, adLen)
	}
	var or uint64
	for _, p := range parts[:n] {
		or |= p[0] | p[1] | p[2] | p[3] | p[4]
	}
	if or >= 1<<27 {
		return fmt.Errorf("%w: a partial has a limb not below 2^27", ErrLayout)
	}
	if n == 0 {
		return nil
	}
	// r^D, D the chunks of a block, and 5·r^D, in limbs below 2^26 + 2^12;
	// for short associated data also the powers of each of its chunks.
	var rD, rD5 [5]uint64
	var ac *adChunks
	var acs adChunks
	if adLen > 0 {
		rD = powLimbs(limbs26(k.poly.r0, k.poly.r1, 0), (blockLen+15)/16)
		for l := range rD {
			rD5[l] = 5 * rD[l]
		}
		if adLen/16 <= maxADChunks {
			ac = &acs
			ac.init(adLen/16, rD, limbs26(k.poly.r0, k.poly.r1, 0))
		}
	}
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	ctr := k.masks(ms, nonce, n, sc)
	mask := &sc.mask
	for i := 0; i < n; i += run {
		m := min(run, n-i)
		ctr.XORKeyStream(mask[:16*m], zeros[:16*m])
		for j := range m {
			x := &parts[i+j]
			var h0, h1, h2 uint64
			switch {
			case ac != nil:
				h0, h1, h2 = ac.combine(ad[(i+j)*adLen:(i+j+1)*adLen], x)
			case adLen > 0:
				st := state{r0: k.poly.r0, r1: k.poly.r1}
				st.chunks(ad[(i+j)*adLen : (i+j+1)*adLen])
				h0, h1, h2 = combine(st.h0, st.h1, st.h2, &rD, &rD5, x)
			default:
				h0, h1, h2 = pack(x[0], x[1], x[2], x[3], x[4])
			}
			h0, h1 = reduce(h0, h1, h2)
			addMask(dst[i+j][:], h0, h1, binary.LittleEndian.Uint64(mask[16*j:]), binary.LittleEndian.Uint64(mask[16*j+8:]))
		}
	}
	return nil
}

// mulLimbs returns x·y mod 2^130-5, carried (every limb below 2^26 + 2^12):
// d_k = Σ_{i<=k} x_i·y_{k-i} + Σ_{i>k} x_i·5y_{k-i+5}, laneMulAdd written
// out. x's limbs are below 2^27, y's below 2^26 + 2^12 and y5 = 5·y below
// 2^29, so every operand fits in 32 bits, every product in 2^56 and each
// sum of five in 2^59.
func mulLimbs(x [5]uint64, y, y5 *[5]uint64) [5]uint64 {
	d := [5]uint64{
		x[0]*y[0] + x[1]*y5[4] + x[2]*y5[3] + x[3]*y5[2] + x[4]*y5[1],
		x[0]*y[1] + x[1]*y[0] + x[2]*y5[4] + x[3]*y5[3] + x[4]*y5[2],
		x[0]*y[2] + x[1]*y[1] + x[2]*y[0] + x[3]*y5[4] + x[4]*y5[3],
		x[0]*y[3] + x[1]*y[2] + x[2]*y[1] + x[3]*y[0] + x[4]*y5[4],
		x[0]*y[4] + x[1]*y[3] + x[2]*y[2] + x[3]*y[1] + x[4]*y[0],
	}
	carryChain(&d)
	return d
}

// powLimbs returns r^e mod 2^130-5 in carried limbs, by squaring and
// multiplying (r's limbs below 2^26).
func powLimbs(r [5]uint64, e int) [5]uint64 {
	acc := [5]uint64{1}
	base := r
	for ; e > 0; e >>= 1 {
		var b5 [5]uint64
		for l := range base {
			b5[l] = 5 * base[l]
		}
		if e&1 == 1 {
			acc = mulLimbs(acc, &base, &b5)
		}
		base = mulLimbs(base, &base, &b5)
	}
	return acc
}

// combine returns a·y + x mod 2^130-5 in the generic form (below 2^130 +
// 2^26): a in the generic form (below 2^131), y = r^D and y5 = 5·y in limbs
// below 2^26 + 2^12, x a Partial. It is limbs26, mulLimbs, the addition,
// carryChain and limbsToState written out on scalars: the array forms keep
// their limbs in memory, and each carry then waits on a store.
func combine(a0, a1, a2 uint64, y, y5 *[5]uint64, x *Partial) (uint64, uint64, uint64) {
	const m = limbMask
	x0, x1, x2, x3, x4 := a0&m, a0>>26&m, (a0>>52|a1<<12)&m, a1>>14&m, a1>>40|a2<<24
	d0 := x0*y[0] + x1*y5[4] + x2*y5[3] + x3*y5[2] + x4*y5[1] + x[0]
	d1 := x0*y[1] + x1*y[0] + x2*y5[4] + x3*y5[3] + x4*y5[2] + x[1]
	d2 := x0*y[2] + x1*y[1] + x2*y[0] + x3*y5[4] + x4*y5[3] + x[2]
	d3 := x0*y[3] + x1*y[2] + x2*y[1] + x3*y[0] + x4*y5[4] + x[3]
	d4 := x0*y[4] + x1*y[3] + x2*y[2] + x3*y[1] + x4*y[0] + x[4]
	// carryChain.
	d1 += d0 >> 26
	d0 &= m
	d4 += d3 >> 26
	d3 &= m
	d2 += d1 >> 26
	d1 &= m
	c := d4 >> 26
	d4 &= m
	d0 += c + c<<2
	d3 += d2 >> 26
	d2 &= m
	d1 += d0 >> 26
	d0 &= m
	d4 += d3 >> 26
	d3 &= m
	return pack(d0, d1, d2, d3, d4)
}

// pack is limbsToState on scalars: a carry pass 0→1..3→4, limb 4's carry
// folded into limb 0 (times 5), a second pass, then the limbs packed into
// h0 + h1·2^64 + h2·2^128; without branches, so in constant time.
func pack(d0, d1, d2, d3, d4 uint64) (uint64, uint64, uint64) {
	const m = limbMask
	d1 += d0 >> 26
	d0 &= m
	d2 += d1 >> 26
	d1 &= m
	d3 += d2 >> 26
	d2 &= m
	d4 += d3 >> 26
	d3 &= m
	c := d4 >> 26
	d4 &= m
	d0 += c + c<<2
	d1 += d0 >> 26
	d0 &= m
	d2 += d1 >> 26
	d1 &= m
	d3 += d2 >> 26
	d2 &= m
	d4 += d3 >> 26
	d3 &= m
	return d0 | d1<<26 | d2<<52, d2>>12 | d3<<14 | d4<<40, d4 >> 24
}

// maxADChunks is the longest associated data, in chunks, that adChunks
// takes: eight terms of below 2^59 and a partial stay below 2^64 - 2^62.
const maxADChunks = 8

// adChunks evaluates the associated data of the blocks of one call chunk by
// chunk: with m chunks a_0..a_{m-1} before a block of D chunks,
//
//	Poly_r(ad || m) = Σ_c (a_c + 2^128)·r^(D+m-c) + Poly_r(m)
//
// (each chunk of ad is multiplied once per chunk after it, its own
// included). A term whose chunk is the same as the previous block's is
// taken from that block: a volume's identity, the same in every block's
// associated data, costs one multiply per call rather than per block. The
// associated data is not secret, so the comparison may branch.
type adChunks struct {
	m       int
	pw, pw5 [maxADChunks][5]uint64 // r^(D+m-c) and 5 times it
	prev    [maxADChunks][2]uint64 // the chunk of the last block, lo and hi
	term    [maxADChunks][5]uint64 // its term, limbs below 2^59
	have    [maxADChunks]bool
}

func (a *adChunks) init(m int, rD, r [5]uint64) {
	a.m = m
	var r5 [5]uint64
	for l := range r {
		r5[l] = 5 * r[l]
	}
	p := rD
	for c := m - 1; c >= 0; c-- {
		p = mulLimbs(p, &r, &r5) // r^(D+m-c)
		a.pw[c] = p
		for l := range p {
			a.pw5[c][l] = 5 * p[l]
		}
	}
}

// combine returns Poly_r(ad || block) in the generic form (below 2^130 +
// 2^26), ad being m chunks and x the block's Partial (limbs below 2^27).
func (a *adChunks) combine(ad []byte, x *Partial) (uint64, uint64, uint64) {
	d0, d1, d2, d3, d4 := x[0], x[1], x[2], x[3], x[4]
	for c := range a.m {
		lo, hi := binary.LittleEndian.Uint64(ad[16*c:]), binary.LittleEndian.Uint64(ad[16*c+8:])
		t := &a.term[c]
		if !a.have[c] || lo != a.prev[c][0] || hi != a.prev[c][1] {
			a.prev[c] = [2]uint64{lo, hi}
			a.have[c] = true
			t[0], t[1], t[2], t[3], t[4] = mulChunk(lo, hi, &a.pw[c], &a.pw5[c])
		}
		d0 += t[0]
		d1 += t[1]
		d2 += t[2]
		d3 += t[3]
		d4 += t[4]
	}
	const m = limbMask
	// carryChain: from limbs below 2^62 to below 2^26 + 2^13.
	d1 += d0 >> 26
	d0 &= m
	d4 += d3 >> 26
	d3 &= m
	d2 += d1 >> 26
	d1 &= m
	c := d4 >> 26
	d4 &= m
	d0 += c + c<<2
	d3 += d2 >> 26
	d2 &= m
	d1 += d0 >> 26
	d0 &= m
	d4 += d3 >> 26
	d3 &= m
	return pack(d0, d1, d2, d3, d4)
}

// mulChunk returns (chunk + 2^128)·y mod 2^130-5, the chunk lo + hi·2^64, without the carry chain,
// as five limbs: the chunk split as chunkLimbs splits it (limbs below 2^26,
// the top one below 2^25 with the pad bit), y's limbs below 2^26 + 2^12 and
// y5 = 5·y, each of the five sums below 2^59. Scalars throughout: the array
// form kept the limbs in memory.
func mulChunk(lo, hi uint64, y, y5 *[5]uint64) (uint64, uint64, uint64, uint64, uint64) {
	const m = limbMask
	x0, x1, x2, x3, x4 := lo&m, lo>>26&m, (lo>>52|hi<<12)&m, hi>>14&m, hi>>40|1<<24
	return x0*y[0] + x1*y5[4] + x2*y5[3] + x3*y5[2] + x4*y5[1],
		x0*y[1] + x1*y[0] + x2*y5[4] + x3*y5[3] + x4*y5[2],
		x0*y[2] + x1*y[1] + x2*y[0] + x3*y5[4] + x4*y5[3],
		x0*y[3] + x1*y[2] + x2*y[1] + x3*y[0] + x4*y5[4],
		x0*y[4] + x1*y[3] + x2*y[2] + x3*y[1] + x4*y[0]
}
