// Package layout checks the block layouts of the kernels' batch calls and
// copies the blocks of the copying ones.
package layout

import "unsafe"

// Valid reports whether a buffer of plen bytes holds n blocks of blockLen
// bytes, the i-th at offset i*stride: blockLen >= 0, stride >= blockLen when
// there is more than one block, and (n-1)*stride + blockLen <= plen,
// computed without overflow. Zero blocks always fit.
func Valid(n, plen, blockLen, stride int) bool {
	switch {
	case n == 0:
		return true
	case n < 0 || blockLen < 0 || blockLen > plen:
		return false
	case n == 1:
		return true
	case stride < blockLen:
		return false
	case stride == 0:
		return true // n empty blocks at offset 0
	}
	return n-1 <= (plen-blockLen)/stride
}

// Span returns the bytes n > 0 blocks occupy, (n-1)*stride + blockLen; the
// layout must be Valid.
func Span(n, blockLen, stride int) int { return (n-1)*stride + blockLen }

// Overlap reports whether a and b share a byte of memory, from their
// address ranges. Empty slices overlap nothing.
func Overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa := uintptr(unsafe.Pointer(unsafe.SliceData(a)))
	pb := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// CheckCopy checks the buffers of a copying batch call of n blocks: the
// layout must be Valid for both p and q (else it returns errLayout), and
// the spans the blocks occupy in them, q[:Span] and p[:Span], must not
// overlap (else errOverlap). The errors are the calling package's.
func CheckCopy(n int, q, p []byte, blockLen, stride int, errLayout, errOverlap error) error {
	if !Valid(n, len(p), blockLen, stride) || !Valid(n, len(q), blockLen, stride) {
		return errLayout
	}
	if n > 0 {
		if s := Span(n, blockLen, stride); Overlap(q[:s], p[:s]) {
			return errOverlap
		}
	}
	return nil
}

// Copy copies n blocks of blockLen bytes, the i-th at offset i*stride, from
// p to q at the same offsets, leaving the bytes of q between blocks alone.
// The layout must be Valid for both.
func Copy(q, p []byte, n, blockLen, stride int) {
	if stride == blockLen {
		copy(q[:n*blockLen], p[:n*blockLen])
		return
	}
	for i := range n {
		off := i * stride
		copy(q[off:off+blockLen], p[off:off+blockLen])
	}
}
