package store

import "math/bits"

func popcount(w uint64) int { return bits.OnesCount64(w) }

// Bitmap holds one bit per block of a range: bit i (word i/64, bit i%64)
// describes block lba+i. Tuples.ReadRange sets the bit of every block that
// has a tuple and clears it for unwritten or discarded blocks.
type Bitmap []uint64

// NewBitmap returns a zeroed bitmap for n blocks.
func NewBitmap(n int) Bitmap { return make(Bitmap, (n+63)/64) }

// Has reports whether bit i is set.
func (b Bitmap) Has(i int) bool { return b[i>>6]&(1<<(i&63)) != 0 }

// Set sets bit i.
func (b Bitmap) Set(i int) { b[i>>6] |= 1 << (i & 63) }

// Clear clears bit i.
func (b Bitmap) Clear(i int) { b[i>>6] &^= 1 << (i & 63) }

// Count returns the number of set bits among the first n.
func (b Bitmap) Count(n int) int {
	c := 0
	for i := 0; i < n; i += 64 {
		c += bits.OnesCount64(getBits(b, i, min(64, n-i)))
	}
	return c
}

// getBits returns n (1..64) bits of src starting at bit off, low bit first.
func getBits(src []uint64, off, n int) uint64 {
	i, s := off>>6, uint(off&63)
	w := src[i] >> s
	if s != 0 && i+1 < len(src) && int(64-s) < n {
		w |= src[i+1] << (64 - s)
	}
	if n < 64 {
		w &= 1<<uint(n) - 1
	}
	return w
}

// putBits stores the low n (1..64) bits of w into dst starting at bit off.
func putBits(dst []uint64, off, n int, w uint64) {
	mask := ^uint64(0)
	if n < 64 {
		mask = 1<<uint(n) - 1
		w &= mask
	}
	i, s := off>>6, uint(off&63)
	dst[i] = dst[i]&^(mask<<s) | w<<s
	if s != 0 && int(64-s) < n {
		dst[i+1] = dst[i+1]&^(mask>>(64-s)) | w>>(64-s)
	}
}

// copyBits copies n bits from src at sOff to dst at dOff and returns how many
// of them were set.
func copyBits(dst []uint64, dOff int, src []uint64, sOff, n int) int {
	c := 0
	for k := 0; k < n; k += 64 {
		m := min(64, n-k)
		w := getBits(src, sOff+k, m)
		c += bits.OnesCount64(w)
		putBits(dst, dOff+k, m, w)
	}
	return c
}

// fillBits sets (v) or clears n bits of dst starting at off.
func fillBits(dst []uint64, off, n int, v bool) {
	var w uint64
	if v {
		w = ^uint64(0)
	}
	for k := 0; k < n; k += 64 {
		putBits(dst, off+k, min(64, n-k), w)
	}
}
