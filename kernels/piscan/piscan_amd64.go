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
		scan16, scan16NoEscape = vec16(scanZ, scan16Generic, 8), vec16(scanNZ, scan16NoEscapeGeneric, 8)
		scan64, scan64NoEscape = vec64(scan64Z, scan64Generic), vec64(scan64NZ, scan64NoEscapeGeneric)
	})
	impl.Register(pkgName, "avx2", cpu.X86.HasAVX2, func() {
		scan16, scan16NoEscape = vec16(scanY, scan16Generic, 4), vec16(scanNY, scan16NoEscapeGeneric, 4)
		scan64, scan64NoEscape = scan64Generic, scan64NoEscapeGeneric
	})
}

// vec16 and vec64 give a kernel the whole vectors of tuples (lanes a
// vector) and the generic scan the rest, from block n on: expected word
// e + n·step. The two words OR together into the word of one scan, as
// every term is an OR over the blocks.

func vec16(kernel, generic func(t [][8]byte, g []uint16, e, step, mask uint64) uint64, lanes int) func(t [][8]byte, g []uint16, e, step, mask uint64) uint64 {
	return func(t [][8]byte, g []uint16, e, step, mask uint64) uint64 {
		n := len(g) &^ (lanes - 1)
		var r uint64
		if n > 0 {
			r = kernel(t[:n], g[:n], e, step, mask)
		}
		if n < len(g) {
			r |= generic(t[n:], g[n:], e+uint64(n)*step, step, mask)
		}
		return r
	}
}

func vec64(kernel, generic func(t [][16]byte, g []uint64, e, step, gm, mask uint64) uint64) func(t [][16]byte, g []uint64, e, step, gm, mask uint64) uint64 {
	const lanes = 8
	return func(t [][16]byte, g []uint64, e, step, gm, mask uint64) uint64 {
		n := len(g) &^ (lanes - 1)
		var r uint64
		if n > 0 {
			r = kernel(t[:n], g[:n], e, step, gm, mask)
		}
		if n < len(g) {
			r |= generic(t[n:], g[n:], e+uint64(n)*step, step, gm, mask)
		}
		return r
	}
}
