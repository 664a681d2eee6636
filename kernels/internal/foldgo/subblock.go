package foldgo

import (
	"math/bits"

	"github.com/difctl/difctl/kernels/internal/crcmath"
)

// Sub-blocks. The blocks kernels interleave four blocks, the i-th at
// p[i*stride:]. When stride is a multiple of 4 KiB, the four source
// streams and their four copies in q sit at the same offset in their pages
// and so in the same L1 sets (32 KiB and 8 ways on the CPUs measured: one
// way is 4 KiB), and they evict each other. A copying batch call over such
// blocks can run its kernel over sub-blocks of SubBlockLen bytes instead
// (blockLen = stride = SubBlockLen over the same span: streams 1 KiB
// apart, in different sets) and join each block's partial CRCs into the
// block's CRC. For the three CRCs here init equals xorout (T10-DIF: both
// zero; CRC-32C and CRC-64/NVME: both all ones), so
//
//	CRC(A||B) = L_|B|(CRC(A)) ⊕ CRC(B)
//
// where L_n, "advance the CRC over n zero bytes", is linear
// (crcmath.Combine with crcB = 0). A block of m sub-blocks with partial
// CRCs c_0..c_{m-1} has the CRC c = c_0, c = L_S(c) ⊕ c_k for k = 1..m-1
// (Horner), which needs the single operator L_S for S = SubBlockLen.

// SubBlockLen is the sub-block length S of the copying calls' sub-block
// path.
const SubBlockLen = 1024

// SubBlockAlias is the block length of the sub-block path, 4 KiB: the
// stride at which the kernels' streams alias. Every kernel that runs the
// path interleaves a number of blocks that divides
// SubBlockAlias/SubBlockLen, so the sub-blocks of any number of blocks
// fill whole groups.
const SubBlockAlias = 4096

// UseSubBlocks reports whether a copying batch call over blocks of
// blockLen bytes, stride apart, takes the sub-block path: contiguous
// blocks of SubBlockAlias bytes. Each caller states its measurements. On
// an AMD EPYC (Zen 3) larger multiples of 4 KiB alias the same way, but
// there the kernels stream the whole blocks better from memory (a longer
// run in each page; the layout of 1 KiB sub-blocks has four streams in a
// page and prefetches one group, 4 KiB, ahead), and the sub-blocks' gain
// shrank or turned into a loss; contiguous blocks of 2 and 3 KiB, whose
// streams do not all alias, gained nothing or lost.
func UseSubBlocks(blockLen, stride int) bool {
	return stride == blockLen && blockLen == SubBlockAlias
}

// Shift is the linear map L_n of a CRC (advance the CRC over n zero bytes)
// as byte-sliced tables: L_n(c) = ⊕_k t[k][byte k of c], one table for each
// byte of T (the rest of t is unused).
type Shift[T Word] struct{ t [8][256]T }

// NewShift returns L_n for the CRC p, built from crcmath.Combine:
// t[k][b] = Combine(p, b<<8k, 0, n). It panics if T is not p's width, or if
// p.Init differs from p.XorOut, where L_n is not linear in the finalised
// CRC and the identity above does not hold.
func NewShift[T Word](p crcmath.Params, n int) *Shift[T] {
	if uint64(^T(0)) != p.Mask() {
		panic("foldgo: NewShift with a word of another width than the CRC")
	}
	if p.Init != p.XorOut {
		panic("foldgo: NewShift of a CRC whose init differs from its xorout")
	}
	s := new(Shift[T])
	for k := range int(p.Width / 8) {
		// The images of the byte's eight bits; every other entry is the
		// xor of those of its bits.
		var bit [8]T
		for i := range 8 {
			bit[i] = T(crcmath.Combine(p, uint64(1)<<(8*k+i), 0, int64(n)))
		}
		tk := &s.t[k]
		for b := 1; b < 256; b++ {
			low := bits.TrailingZeros(uint(b))
			tk[b] = tk[b&^(1<<low)] ^ bit[low]
		}
	}
	return s
}

// Join returns c advanced by Horner's rule over the partial CRCs in part:
// c = L_n(c) ⊕ x for each x in turn. With c the CRC of A and part the CRCs
// of the n-byte pieces that follow A, it is the CRC of the whole. The
// width tests are constants of each instantiation, so each width compiles
// to its own lookups only.
func (s *Shift[T]) Join(c T, part []T) T {
	t, w := &s.t, uint64(^T(0))
	for _, x := range part {
		u := uint64(c)
		r := t[0][byte(u)] ^ t[1][byte(u>>8)]
		if w>>16 != 0 {
			r ^= t[2][byte(u>>16)] ^ t[3][byte(u>>24)]
		}
		if w>>32 != 0 {
			r ^= t[4][byte(u>>32)] ^ t[5][byte(u>>40)] ^ t[6][byte(u>>48)] ^ t[7][byte(u>>56)]
		}
		c = r ^ x
	}
	return c
}

// JoinBlocks sets dst[i] to the Join of the m partial CRCs
// part[i*m:][:m], for len(dst) blocks. It runs two blocks at once, as two
// independent chains of lookups.
func (s *Shift[T]) JoinBlocks(dst, part []T, m int) {
	t, w := &s.t, uint64(^T(0))
	for ; len(dst) >= 2; dst = dst[2:] {
		a, b := part[:m], part[m:2*m]
		part = part[2*m:]
		ca, cb := a[0], b[0]
		for k := 1; k < m; k++ {
			u, v := uint64(ca), uint64(cb)
			ra := t[0][byte(u)] ^ t[1][byte(u>>8)]
			rb := t[0][byte(v)] ^ t[1][byte(v>>8)]
			if w>>16 != 0 {
				ra ^= t[2][byte(u>>16)] ^ t[3][byte(u>>24)]
				rb ^= t[2][byte(v>>16)] ^ t[3][byte(v>>24)]
			}
			if w>>32 != 0 {
				ra ^= t[4][byte(u>>32)] ^ t[5][byte(u>>40)] ^ t[6][byte(u>>48)] ^ t[7][byte(u>>56)]
				rb ^= t[4][byte(v>>32)] ^ t[5][byte(v>>40)] ^ t[6][byte(v>>48)] ^ t[7][byte(v>>56)]
			}
			ca, cb = ra^a[k], rb^b[k]
		}
		dst[0], dst[1] = ca, cb
	}
	if len(dst) > 0 {
		dst[0] = s.Join(part[0], part[1:m])
	}
}

// Joiner joins the partial CRCs of consecutive sub-blocks, m of them to a
// block, into the blocks' CRCs, in order, with shift (L_S for the
// sub-block length S). The partial CRCs may come in pieces of any length
// (a block may span pieces); each block's CRC is written to dst as soon as
// its last sub-block has been added.
type Joiner[T Word] struct {
	dst   []T // blocks not yet written
	shift *Shift[T]
	m, r  int // sub-blocks per block, and of the current block so far
	acc   T   // CRC of the current block's first r sub-blocks
}

// NewJoiner returns a Joiner that writes the CRCs of len(dst) blocks of
// m >= 1 sub-blocks each to dst.
func NewJoiner[T Word](dst []T, m int, shift *Shift[T]) Joiner[T] {
	return Joiner[T]{dst: dst, shift: shift, m: m}
}

// Add adds the partial CRCs of the next len(part) sub-blocks, which must
// not be more than the blocks left can take.
func (j *Joiner[T]) Add(part []T) {
	sh, m, dst := j.shift, j.m, j.dst
	if j.r > 0 { // the block begun by an earlier piece
		k := min(m-j.r, len(part))
		j.acc = sh.Join(j.acc, part[:k])
		part = part[k:]
		if j.r += k; j.r < m {
			return
		}
		dst[0] = j.acc
		dst = dst[1:]
		j.r = 0
	}
	nb := len(part) / m
	sh.JoinBlocks(dst[:nb], part, m)
	dst = dst[nb:]
	i := nb * m
	if i < len(part) { // a block that the next piece finishes
		j.acc = sh.Join(part[i], part[i+1:])
		j.r = len(part) - i
	}
	j.dst = dst
}
