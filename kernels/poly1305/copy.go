package poly1305

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/difctl/difctl/kernels/internal/layout"
)

// ErrOverlap is returned by BlocksADCopy when the blocks' span in q shares
// memory with their span in p.
var ErrOverlap = errors.New("poly1305: copy destination overlaps the source")

// blocksCopy is the active copying batch kernel: it copies the blocks
// p[i*stride:][:blockLen] to q at the same offsets and sets acc[i] as
// blocks would for the bytes it wrote to q. The layout is valid for both,
// the spans do not overlap and adLen is a multiple of 16.
var blocksCopy func(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, q, p []byte, blockLen, stride int) = copyThenBlocks

// copyThenBlocks is the generic copying kernel: the copy, then the active
// blocks over q. Every implementation without a one-pass kernel uses it.
func copyThenBlocks(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, q, p []byte, blockLen, stride int) {
	layout.Copy(q, p, len(acc), blockLen, stride)
	blocks(k, acc, h, ad, adLen, q, blockLen, stride)
}

// BlocksADCopy copies len(dst) blocks p[i*stride:][:blockLen] to q at the
// same offsets and sets dst[i] to the tag BlocksAD(dst, nonce, ad, adLen,
// q, blockLen, stride) would give for the bytes it wrote to q for block i:
// the Poly1305-AES tag of ad[i*adLen:][:adLen] || q[i*stride:][:blockLen]
// under nonce.Add(i), bit for bit that of BlocksAD. The bytes of q between
// blocks and after the last are not written.
//
// Each tag describes exactly the bytes written to q, even if p changes
// during the call: p may be a mapping shared with a writer the caller does
// not trust, and a tag that verified bytes other than the ones the caller
// got would be a time-of-check/time-of-use hole. So the one-pass kernel
// (amd64, lanesAVX2R8Copy, under hybrid8 and avx2r8) hashes the bytes from
// q after its own stores to it, and the other implementations copy first
// and then hash q (avx512ifma a group of eight blocks at a time, each
// group's copy made before its hash starts, by the hash of the group
// before it or by a copy); none hashes a second load of p. If p changes under the
// call, q holds some mix of its old and new bytes and the tags are those of
// q.
//
// The layout rules for p are those of BlocksAD, and q must be as long as
// the blocks' span in p, (len(dst)-1)*stride + blockLen; otherwise, or for
// associated data BlocksAD would refuse, it returns ErrLayout. If the spans
// of the blocks in q and p share memory it returns ErrOverlap. On error it
// writes nothing, neither dst nor q.
func (k *Key) BlocksADCopy(dst []Tag, nonce *Nonce, ad []byte, adLen int, q, p []byte, blockLen, stride int) error {
	return k.blocksADCopy(nil, dst, nonce, ad, adLen, q, p, blockLen, stride)
}

func (k *Key) blocksADCopy(ms *MaskStream, dst []Tag, nonce *Nonce, ad []byte, adLen int, q, p []byte, blockLen, stride int) error {
	n := len(dst)
	if err := layout.CheckCopy(n, q, p, blockLen, stride, ErrLayout, ErrOverlap); err != nil {
		return fmt.Errorf("%w: %d blocks of %d bytes, stride %d, in %d bytes of p and %d of q", err, n, blockLen, stride, len(p), len(q))
	}
	if adLen < 0 || adLen%16 != 0 || adLen > 0 && n > len(ad)/adLen {
		return fmt.Errorf("%w: %d bytes of associated data for %d blocks of %d", ErrLayout, len(ad), n, adLen)
	}
	if n == 0 {
		return nil
	}
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	ctr := k.masks(ms, nonce, n, sc)
	for i := 0; i < n; i += run {
		m := min(run, n-i)
		blocksCopy(&k.poly, sc.acc[:m], &sc.h, ad[i*adLen:], adLen, q[i*stride:], p[i*stride:], blockLen, stride)
		ctr.XORKeyStream(sc.mask[:16*m], zeros[:16*m])
		for j := range m {
			addMask(dst[i+j][:], sc.acc[j][0], sc.acc[j][1],
				binary.LittleEndian.Uint64(sc.mask[16*j:]), binary.LittleEndian.Uint64(sc.mask[16*j+8:]))
		}
	}
	return nil
}

// blocksLanesCopy is blocksLanes for a lane kernel that copies
// (kern.absorbCopy): groups of kern.lanes blocks have their full chunks
// copied and absorbed by the kernel in one pass, and each block's final
// partial chunk copied here and absorbed from q; the blocks left over go to
// rest (copying too).
func blocksLanesCopy(kern *laneKernel, k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, q, p []byte, blockLen, stride int,
	rest func(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, q, p []byte, blockLen, stride int)) {
	full := blockLen &^ 15
	L := kern.lanes
	n := len(acc) - len(acc)%L
	for g := 0; g < n; g += L {
		if kern.absorbCopyAD != nil {
			kern.absorbCopyAD(h, q[g*stride:], p[g*stride:], stride, full/16, ad[g*adLen:], adLen, k)
		} else {
			*h = laneBuf{}
			if adLen > 0 {
				kern.absorb(h, ad[g*adLen:], adLen, adLen/16, k)
			}
			if full > 0 {
				kern.absorbCopy(h, q[g*stride:], p[g*stride:], stride, full/16, k)
			}
		}
		for l := range L {
			h0, h1, h2 := kern.pack(h, l)
			if full < blockLen {
				off := (g + l) * stride
				t := q[off+full : off+blockLen]
				copy(t, p[off+full:off+blockLen])
				s := state{h0: h0, h1: h1, h2: h2, r0: k.r0, r1: k.r1}
				s.last(t)
				h0, h1, h2 = s.h0, s.h1, s.h2
			}
			acc[g+l][0], acc[g+l][1] = reduce(h0, h1, h2)
		}
	}
	if n < len(acc) {
		rest(k, acc[n:], h, ad[n*adLen:], adLen, q[n*stride:], p[n*stride:], blockLen, stride)
	}
}

// copyGeneric is the generic code's copying form, for the blocks the lane
// kernels leave over: the copy, then blocksGeneric over q.
func copyGeneric(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, q, p []byte, blockLen, stride int) {
	layout.Copy(q, p, len(acc), blockLen, stride)
	blocksGeneric(k, acc, h, ad, adLen, q, blockLen, stride)
}

// modelCopy makes a laneKernel's absorbCopy from its absorb: the copy of
// the chunks, then absorb over q. The tests use it to run blocksLanesCopy
// over the pure-Go lane models.
func modelCopy(kern *laneKernel) func(h *laneBuf, q, p []byte, stride, chunks int, k *polyKey) {
	return func(h *laneBuf, q, p []byte, stride, chunks int, k *polyKey) {
		layout.Copy(q, p, kern.lanes, 16*chunks, stride)
		kern.absorb(h, q, stride, chunks, k)
	}
}
