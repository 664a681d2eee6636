//go:build !purego

package piscan

import (
	"github.com/difctl/difctl/kernels/internal/impl"
	"golang.org/x/sys/cpu"
)

//go:generate go run -C ../_asm ./piscan -out ../piscan/zscan_amd64.s -stubs ../piscan/zscan_amd64.go

// hasZ: the features of scanZ and scanNZ (VPSHUFB on ZMM is AVX-512 BW).
var hasZ = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW

func registerArch() {
	impl.Register(pkgName, "avx512", hasZ, func() { scan, scanNoEscape = scanAVX512, scanNoEscapeAVX512 })
	impl.Register(pkgName, "avx2", cpu.X86.HasAVX2, func() { scan, scanNoEscape = scanAVX2, scanNoEscapeAVX2 })
}

// The wrappers give a kernel the whole vectors of tuples and the generic
// scan the rest, from block n on: expected word e + n·step. The two words
// OR together into the word of one scan, as every term is an OR over the
// blocks.

func scanAVX512(t [][8]byte, g []uint16, e, step, mask uint64) uint64 {
	n := len(g) &^ 7
	var r uint64
	if n > 0 {
		r = scanZ(t[:n], g[:n], e, step, mask)
	}
	if n < len(g) {
		r |= scanGeneric(t[n:], g[n:], e+uint64(n)*step, step, mask)
	}
	return r
}

func scanNoEscapeAVX512(t [][8]byte, g []uint16, e, step, mask uint64) uint64 {
	n := len(g) &^ 7
	var r uint64
	if n > 0 {
		r = scanNZ(t[:n], g[:n], e, step, mask)
	}
	if n < len(g) {
		r |= scanNoEscapeGeneric(t[n:], g[n:], e+uint64(n)*step, step, mask)
	}
	return r
}

func scanAVX2(t [][8]byte, g []uint16, e, step, mask uint64) uint64 {
	n := len(g) &^ 3
	var r uint64
	if n > 0 {
		r = scanY(t[:n], g[:n], e, step, mask)
	}
	if n < len(g) {
		r |= scanGeneric(t[n:], g[n:], e+uint64(n)*step, step, mask)
	}
	return r
}

func scanNoEscapeAVX2(t [][8]byte, g []uint16, e, step, mask uint64) uint64 {
	n := len(g) &^ 3
	var r uint64
	if n > 0 {
		r = scanNY(t[:n], g[:n], e, step, mask)
	}
	if n < len(g) {
		r |= scanNoEscapeGeneric(t[n:], g[n:], e+uint64(n)*step, step, mask)
	}
	return r
}
