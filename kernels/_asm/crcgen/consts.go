// The fold constants (zfold_consts.go). The math (see crcmath.FoldTable for the layout): folding a 16-byte lane
// whose halves are Hi (the 64 coefficients of higher degree) and Lo forward
// by D bits multiplies it by x^D; modulo P,
//
//	(Hi·x^64 + Lo)·x^D ≡ Hi·(x^(D+64) mod P) + Lo·(x^D mod P),
//
// so two carry-less multiplications by constants replace the shift, and the
// products (degree < 64+w <= 128) fit a 128-bit register. x^k mod P is
// computed by square-and-multiply over GF(2) (crcmath.XPowMod). For a
// reflected CRC every value is bit-reversed and the constant is x^(k-1) mod P
// because the product of two reflected 64-bit values is the reflected
// product times x. The Barrett constant is mu = floor(x^(64+w) / P), found by
// long division; for a remainder T of degree < 64+w, with Q = T div x^w,
// q = floor(Q·mu / x^64) is T div P and T mod P = (T ⊕ q·P) mod x^w.

package main

import (
	"bytes"
	"fmt"

	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
	"github.com/difctl/difctl/kernels/internal/crcmath"
)

// foldConsts is zfold_consts.go: the fold and Barrett constants of c, and
// for CRC-16/T10-DIF those of the reflected CRC of its polynomial too
// (foldTableRefl): the register of that CRC over bytes whose bits are
// reversed is the bit reversal of T10-DIF's, since reversing every bit of
// the message and of the register mirrors the whole division, and the
// AVX-512 kernels fold so, with no byte reversal (kernels/_asm/fold).
func foldConsts(c scaffold.CRC, warning string) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\n\n", warning)
	fmt.Fprintf(&b, "package %s\n\nimport \"github.com/difctl/difctl/kernels/internal/crcmath\"\n\n", c.Pkg)
	writeFoldTable(&b, "foldTable", c.Params)
	if c.Params.Width == 16 && !c.Params.Reflected {
		r := c.Params
		r.Name += ", reflected"
		r.Reflected = true
		fmt.Fprintf(&b, "\n// foldTableRefl is for the kernels that fold %s as the reflected CRC of\n", c.Params.Name)
		fmt.Fprintf(&b, "// its polynomial over bit-reversed bytes.\n")
		writeFoldTable(&b, "foldTableRefl", r)
	}
	return scaffold.Go(b.Bytes())
}

// writeFoldTable writes the crcmath.FoldTable of p as the variable name.
func writeFoldTable(b *bytes.Buffer, name string, p crcmath.Params) {
	t := crcmath.NewFoldTable(p)
	w := p.Width
	form := "x^k mod P, normal form"
	if p.Reflected {
		form = "Reflect(x^(k-1) mod P, 64)"
	}
	fmt.Fprintf(b, "// %s holds the fold and Barrett constants of %s\n", name, p.Name)
	fmt.Fprintf(b, "// (P = x^%d + %#x, reflected %v). C(k) is stored as %s.\n", w, p.Poly, p.Reflected, form)
	fmt.Fprintf(b, "// The layout is crcmath.FoldTable's; the assembly reads it through a pointer.\n")
	fmt.Fprintf(b, "var %s = crcmath.FoldTable{\n\tFold: [65][2]uint64{\n\t\t{0, 0},\n", name)
	for i := 1; i <= 64; i++ {
		fmt.Fprintf(b, "\t\t{%#016x, %#016x}, // %d B: C(%d), C(%d)\n", t.Fold[i][0], t.Fold[i][1], 16*i, 128*i+64, 128*i)
	}
	fmt.Fprintf(b, "\t},\n")
	fmt.Fprintf(b, "\tFinal: [2]uint64{%#016x, 0}, // C(%d)\n", t.Final[0], 64+w)
	fmt.Fprintf(b, "\tMu:    %#016x, // floor(x^%d / P), low 64 bits\n", t.Mu, 64+w)
	fmt.Fprintf(b, "\tPoly:  %#016x, // P - x^%d\n", t.Poly, w)
	fmt.Fprintf(b, "}\n")
}
