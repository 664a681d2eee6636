package poly1305

import (
	"crypto/cipher"
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

// Partials sets parts[i] to the Partial of the block p[i*stride:][:blockLen]
// for every i < len(parts), with the generic code. The layout rules are
// those of Blocks; it returns ErrLayout, and writes nothing, otherwise.
func (k *Key) Partials(parts []Partial, p []byte, blockLen, stride int) error {
	if !layout.Valid(len(parts), len(p), blockLen, stride) {
		return ErrLayout
	}
	full := blockLen &^ 15
	for i := range parts {
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
	n := len(dst)
	if blockLen < 0 || len(parts) < n {
		return fmt.Errorf("%w: %d partials for %d blocks of %d bytes", ErrLayout, len(parts), n, blockLen)
	}
	if adLen < 0 || adLen%16 != 0 || adLen > 0 && n > len(ad)/adLen {
		return fmt.Errorf("%w: %d bytes of associated data for %d blocks of %d", ErrLayout, len(ad), n, adLen)
	}
	for _, p := range parts[:n] {
		for _, l := range p {
			if l >= 1<<27 {
				return fmt.Errorf("%w: a partial limb %#x is not below 2^27", ErrLayout, l)
			}
		}
	}
	if n == 0 {
		return nil
	}
	// r^D, D the chunks of a block, and 5·r^D, in limbs below 2^26.
	var rD, rD5 [5]uint64
	if adLen > 0 {
		rD = powLimbs(limbs26(k.poly.r0, k.poly.r1, 0), (blockLen+15)/16)
		for l := range rD {
			rD5[l] = 5 * rD[l]
		}
	}
	ctr := cipher.NewCTR(k.block, nonce[:])
	var mask [run * 16]byte
	for i := 0; i < n; i += run {
		m := min(run, n-i)
		ctr.XORKeyStream(mask[:16*m], zeros[:16*m])
		for j := range m {
			x := parts[i+j]
			if adLen > 0 {
				s := state{r0: k.poly.r0, r1: k.poly.r1}
				s.chunks(ad[(i+j)*adLen : (i+j+1)*adLen])
				d := mulLimbs(limbs26(s.h0, s.h1, s.h2), &rD, &rD5)
				for l := range d {
					d[l] += x[l]
				}
				carryChain(&d)
				x = d
			}
			st := limbsToState(x, k.poly.r0, k.poly.r1)
			h0, h1 := reduce(st.h0, st.h1, st.h2)
			addMask(dst[i+j][:], h0, h1, binary.LittleEndian.Uint64(mask[16*j:]), binary.LittleEndian.Uint64(mask[16*j+8:]))
		}
	}
	return nil
}

// mulLimbs returns x·y mod 2^130-5, carried (every limb below 2^26 + 2^12):
// x's limbs below 2^27, y's below 2^26 + 2^12 and y5 = 5·y, so every product
// fits in 32x32 bits and each sum of five is below 2^27·5·2^27 ·5 < 2^62.
func mulLimbs(x [5]uint64, y, y5 *[5]uint64) [5]uint64 {
	var d [5]uint64
	for k := range 5 {
		for i := range 5 {
			if i <= k {
				d[k] += mul32(x[i], y[k-i])
			} else {
				d[k] += mul32(x[i], y5[k-i+5])
			}
		}
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
