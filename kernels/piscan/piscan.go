// Package piscan scans packed 8-byte protection information tuples (the
// 16-bit guard format: guard, app tag, 32-bit ref tag, big-endian) against
// the tuples expected of a run of blocks, and says whether any may fail:
// the hot loop of dif's verification of the separate layout with 8 bytes
// of metadata a block (512+8, 4096+8), which reads the tuples packed one
// after the other.
//
// Tuple j is read as the big-endian word w_j; the expected word of block j
// is g[j]<<48 | (e + j·step) (app tag in bits 32-47, storage and ref tags
// below, e + j·step modulo 2^64). Scan returns
//
//	OR_j (w_j XOR (g[j]<<48 | (e + j·step))) AND mask
//	  | (OR_j ((w_j + 2^32) XOR w_j)) AND 2^48
//
// whose second term, the escape term, is non-zero iff some app tag is
// 0xFFFF (adding 2^32 carries out of the app tag into bit 48 only then).
// ScanNoEscape returns the first term alone. Zero means every block's
// checks under mask pass and none is escaped; a caller that gets non-zero
// classifies the blocks one by one. Every implementation returns the same
// word.
//
// Implementations, in the registry (kernels/internal/impl, package name
// "piscan"), best first:
//
//   - avx512 (amd64 with AVX-512 F and BW): eight tuples a ZMM register,
//     two chains of eight an iteration (kernels/_asm/piscan);
//   - avx2 (amd64 with AVX2): the same with four tuples a YMM register;
//   - generic: Go, four tuples an iteration.
//
// The vector kernels take whole vectors of tuples; the last few tuples of
// a call go through the generic code.
package piscan

import "github.com/difctl/difctl/kernels/internal/impl"

const pkgName = "piscan"

// The active implementation: scans of at least one tuple whose slices have
// the same length.
var (
	scan         = scanGeneric
	scanNoEscape = scanNoEscapeGeneric
)

func init() {
	registerArch()
	impl.Register(pkgName, "generic", true, func() { scan, scanNoEscape = scanGeneric, scanNoEscapeGeneric })
}

// Scan returns the OR of the masked differences and of the escape term
// (see the package doc) over the first n = min(len(t), len(g)) tuples of t
// with guards g.
func Scan(t [][8]byte, g []uint16, e, step, mask uint64) uint64 {
	n := min(len(t), len(g))
	if n == 0 {
		return 0
	}
	return scan(t[:n], g[:n], e, step, mask)
}

// ScanNoEscape is Scan without the escape term, for a caller whose app tag
// check already flags a stored 0xFFFF, or who does not tell escaped blocks
// apart.
func ScanNoEscape(t [][8]byte, g []uint16, e, step, mask uint64) uint64 {
	n := min(len(t), len(g))
	if n == 0 {
		return 0
	}
	return scanNoEscape(t[:n], g[:n], e, step, mask)
}
