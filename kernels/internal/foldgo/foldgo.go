// Package foldgo is the Go side of the fold kernels that is the same for
// every CRC: the grouping and tails of Blocks and BlocksCopy around the
// assembly of each kernel package, and the sub-block path of BlocksCopy.
package foldgo

import "github.com/difctl/difctl/kernels/internal/crcmath"

// Word is a guard type.
type Word interface{ ~uint16 | ~uint32 | ~uint64 }

// Blocks runs a blocks kernel over groups of blocks: the kernel computes the
// CRC of each block's whole 16-byte lanes, tail adds the rest of each block,
// and blocks that do not fill a group of group blocks, or blocks shorter
// than a vector (vec) or minBlockLen, go through update one at a time. tab
// is the kernel's constants (a *crcmath.RevFoldTable on amd64, a
// *crcmath.FoldTable on arm64). The layout must have been checked.
func Blocks[T Word, Tab any](dst []T, p []byte, blockLen, stride, vec, group, minBlockLen int, tab Tab,
	kernel func([]T, []byte, int, int, Tab), tail, update func(T, []byte) T) {
	g := len(dst) - len(dst)%group
	if blockLen < max(vec, minBlockLen) {
		g = 0
	}
	if g > 0 {
		n := blockLen &^ 15
		kernel(dst[:g], p, n, stride, tab)
		if n < blockLen {
			for i := range dst[:g] {
				off := i * stride
				dst[i] = tail(dst[i], p[off+n:off+blockLen])
			}
		}
	}
	for i := g; i < len(dst); i++ {
		off := i * stride
		dst[i] = update(0, p[off:off+blockLen])
	}
}

// BlocksCopy is Blocks for the copying kernels: kernel also copies each
// block's whole 16-byte lanes from p to q, and the Go code copies the rest
// of each block before it computes the CRC of it from q. So every CRC is
// of the bytes in q. The layout must have been checked, and the blocks of
// q must not overlap those of p.
func BlocksCopy[T Word](dst []T, q, p []byte, blockLen, stride, vec, group, minBlockLen int, tab *crcmath.RevFoldTable,
	kernel func([]T, []byte, []byte, int, int, *crcmath.RevFoldTable), tail, update func(T, []byte) T) {
	g := len(dst) - len(dst)%group
	if blockLen < max(vec, minBlockLen) {
		g = 0
	}
	if g > 0 {
		n := blockLen &^ 15
		kernel(dst[:g], q, p, n, stride, tab)
		if n < blockLen {
			for i := range dst[:g] {
				off := i * stride
				t := q[off+n : off+blockLen]
				copy(t, p[off+n:off+blockLen])
				dst[i] = tail(dst[i], t)
			}
		}
	}
	for i := g; i < len(dst); i++ {
		off := i * stride
		b := q[off : off+blockLen]
		copy(b, p[off:off+blockLen])
		dst[i] = update(0, b)
	}
}
