//go:build !purego

package piscan

import (
	"github.com/difctl/difctl/kernels/internal/impl"
	"golang.org/x/sys/cpu"
)

//go:generate go run -C ../_asm ./piscan -out ../piscan/zscan_amd64.s -stubs ../piscan/zscan_amd64.go

// hasZ: the features of the ZMM kernels (VPSHUFB on ZMM is AVX-512 BW).
var hasZ = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW

func registerArch() {
	impl.Register(pkgName, "avx512", hasZ, func() {
		scan16, scan16NoEscape = scan16AVX512, scan16NoEscapeAVX512
		scan64, scan64NoEscape = scan64AVX512, scan64NoEscapeAVX512
	})
	impl.Register(pkgName, "avx2", cpu.X86.HasAVX2, func() {
		scan16, scan16NoEscape = scan16AVX2, scan16NoEscapeAVX2
		scan64, scan64NoEscape = scan64Generic, scan64NoEscapeGeneric
	})
}

// The wrappers give a kernel the whole vectors of tuples and the generic
// scan the rest, from block n on: expected word e + n·step. The two words
// OR together into the word of one scan, as every term is an OR over the
// blocks.

func scan16AVX512(t [][8]byte, g []uint16, e, step, mask uint64) uint64 {
	n := len(g) &^ 7
	var r uint64
	if n > 0 {
		r = scanZ(t[:n], g[:n], e, step, mask)
	}
	if n < len(g) {
		r |= scan16Generic(t[n:], g[n:], e+uint64(n)*step, step, mask)
	}
	return r
}

func scan16NoEscapeAVX512(t [][8]byte, g []uint16, e, step, mask uint64) uint64 {
	n := len(g) &^ 7
	var r uint64
	if n > 0 {
		r = scanNZ(t[:n], g[:n], e, step, mask)
	}
	if n < len(g) {
		r |= scan16NoEscapeGeneric(t[n:], g[n:], e+uint64(n)*step, step, mask)
	}
	return r
}

func scan16AVX2(t [][8]byte, g []uint16, e, step, mask uint64) uint64 {
	n := len(g) &^ 3
	var r uint64
	if n > 0 {
		r = scanY(t[:n], g[:n], e, step, mask)
	}
	if n < len(g) {
		r |= scan16Generic(t[n:], g[n:], e+uint64(n)*step, step, mask)
	}
	return r
}

func scan16NoEscapeAVX2(t [][8]byte, g []uint16, e, step, mask uint64) uint64 {
	n := len(g) &^ 3
	var r uint64
	if n > 0 {
		r = scanNY(t[:n], g[:n], e, step, mask)
	}
	if n < len(g) {
		r |= scan16NoEscapeGeneric(t[n:], g[n:], e+uint64(n)*step, step, mask)
	}
	return r
}

func scan64AVX512(t [][16]byte, g []uint64, e, step, gm, mask uint64) uint64 {
	n := len(g) &^ 7
	var r uint64
	if n > 0 {
		r = scan64Z(t[:n], g[:n], e, step, gm, mask)
	}
	if n < len(g) {
		r |= scan64Generic(t[n:], g[n:], e+uint64(n)*step, step, gm, mask)
	}
	return r
}

func scan64NoEscapeAVX512(t [][16]byte, g []uint64, e, step, gm, mask uint64) uint64 {
	n := len(g) &^ 7
	var r uint64
	if n > 0 {
		r = scan64NZ(t[:n], g[:n], e, step, gm, mask)
	}
	if n < len(g) {
		r |= scan64NoEscapeGeneric(t[n:], g[n:], e+uint64(n)*step, step, gm, mask)
	}
	return r
}
