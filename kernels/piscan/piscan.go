// Package piscan scans protection information tuples packed one after the
// other against the tuples expected of a run of blocks, and says whether
// any may fail: the hot loop of dif's verification of the separate layout
// with metadata of the tuple's size (512+8, 4096+8, 512+16:crc64, ...).
// Fields are big-endian, as on media.
//
// Scan16 takes 8-byte tuples of the 16-bit guard format (guard, app tag,
// 32 bits of storage and ref tag). Tuple j is read as the word w_j; the
// expected word of block j is g[j]<<48 | (e + j·step) (app tag in bits
// 32-47, e + j·step modulo 2^64). Scan16 returns
//
//	OR_j (w_j XOR (g[j]<<48 | (e + j·step))) AND mask
//	  | (OR_j ((w_j + 2^32) XOR w_j)) AND 2^48
//
// whose second term, the escape term, is non-zero iff some app tag is
// 0xFFFF (adding 2^32 carries out of the app tag into bit 48 only then).
//
// Scan64 takes 16-byte tuples of the 64-bit guard format (CRC-64/NVME:
// guard, app tag, 48 bits of storage and ref tag), read as the words w0_j
// (the guard) and w1_j; it returns
//
//	OR_j (w0_j XOR g[j]) AND gm | (w1_j XOR (e + j·step)) AND mask
//	  | OR_j ((w1_j>>48) + 1) >> 16
//
// whose last term, the escape term, is 1 iff some app tag is 0xFFFF.
//
// The NoEscape forms return the words without the escape term. Zero means
// every block's checks under the masks pass and none is escaped; a caller
// that gets non-zero classifies the blocks one by one. Every
// implementation returns the same word.
//
// Implementations, in the registry (kernels/internal/impl, package name
// "piscan"), best first:
//
//   - avx512 (amd64 with AVX-512 F and BW): Scan16 eight tuples a ZMM
//     register, two chains of eight an iteration; Scan64 eight tuples an
//     iteration from two ZMM loads (kernels/_asm/piscan);
//   - avx2 (amd64 with AVX2): Scan16 with four tuples a YMM register,
//     Scan64 generic;
//   - generic: Go, four tuples an iteration (Scan16) or one (Scan64).
//
// The vector kernels take whole vectors of tuples; the last few tuples of
// a call go through the generic code.
package piscan

import "github.com/difctl/difctl/kernels/internal/impl"

const pkgName = "piscan"

// The active implementation: scans of at least one tuple whose slices have
// the same length.
var (
	scan16, scan16NoEscape = scan16Generic, scan16NoEscapeGeneric
	scan64, scan64NoEscape = scan64Generic, scan64NoEscapeGeneric
)

func init() {
	registerArch()
	impl.Register(pkgName, "generic", true, func() {
		scan16, scan16NoEscape = scan16Generic, scan16NoEscapeGeneric
		scan64, scan64NoEscape = scan64Generic, scan64NoEscapeGeneric
	})
}

// Scan16 returns the OR of the masked differences and of the escape term
// (see the package doc) over the first n = min(len(t), len(g)) 8-byte
// tuples of t with guards g.
func Scan16(t [][8]byte, g []uint16, e, step, mask uint64) uint64 {
	n := min(len(t), len(g))
	if n == 0 {
		return 0
	}
	return scan16(t[:n], g[:n], e, step, mask)
}

// Scan16NoEscape is Scan16 without the escape term, for a caller whose app
// tag check already flags a stored 0xFFFF, or who does not tell escaped
// blocks apart.
func Scan16NoEscape(t [][8]byte, g []uint16, e, step, mask uint64) uint64 {
	n := min(len(t), len(g))
	if n == 0 {
		return 0
	}
	return scan16NoEscape(t[:n], g[:n], e, step, mask)
}

// Scan64 returns the OR of the masked differences and of the escape term
// (see the package doc) over the first n = min(len(t), len(g)) 16-byte
// tuples of t with guards g.
func Scan64(t [][16]byte, g []uint64, e, step, gm, mask uint64) uint64 {
	n := min(len(t), len(g))
	if n == 0 {
		return 0
	}
	return scan64(t[:n], g[:n], e, step, gm, mask)
}

// Scan64NoEscape is Scan64 without the escape term.
func Scan64NoEscape(t [][16]byte, g []uint64, e, step, gm, mask uint64) uint64 {
	n := min(len(t), len(g))
	if n == 0 {
		return 0
	}
	return scan64NoEscape(t[:n], g[:n], e, step, gm, mask)
}
