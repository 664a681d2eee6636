// The merge constants of the amd64 CRC-32C kernels that run CRC32 streams
// beside folding (crc32c_hybrid_amd64.go; zhybrid_consts_amd64.go). The math. The hybrid kernels cut a chunk into six segments of s bytes and
// run each from zero, independently: CRC32 instruction streams give a 32-bit
// register r_k, carry-less folding gives a 32-byte accumulator A_k whose
// polynomial is congruent to the segment's (the fold multiplies by
// x^256 mod P). Appending n zero bytes multiplies a register by x^(8n), and
// the CRC register is linear in the message, so the register of the chunk,
// given the register r_in before it, is the sum of every part shifted to
// the end of the chunk. The kernels build one 128-bit value V with
// V·x^32 ≡ that register (mod P) and reduce it with two CRC32Q, which
// compute exactly V·x^32 mod P for a 16-byte message V.
//
// Every shift is one carry-less multiplication by C(k) = Reflect(x^(k-1) mod P, 64),
// the form of crcmath.FoldTable: for a 64-bit bit-reflected value q, the
// 128-bit product of q and C(k), read bit-reflected, is q·x^k.
//
//   - A register r that ends D = 8·i·s bits before the end of the chunk
//     contributes r·x^D. Held in the low 32 bits of a 64-bit lane it reads as
//     r·x^32, so its V-part is the product with C(D-64): (r·x^32)·x^(D-64)·x^32
//     = r·x^D. Entries [0..5] of a row are C(8·i·s - 64) for i = 6..1: the
//     incoming register (i = 6) and the CRC segments, in pairs that one
//     PCLMULQDQ pair multiplies.
//   - An accumulator q_0..q_3 (q_0 first) ending D bits before the end is
//     Σ q_j·x^(64(3-j)), so its V-part is Σ q_j·C(64(3-j) + D). Entries
//     [6..9] hold C(64(3-j) + 8s), entries [10..13] C(64(3-j) + 16s), in the
//     order VPCLMULQDQ pairs them with q_0..q_3.
//   - The last segment (D = 0) needs no row: its first 16 bytes fold by
//     foldTable.Fold[1] and its last 16 are V-parts as they are.

package main

import (
	"bytes"
	"fmt"

	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
	"github.com/difctl/difctl/kernels/internal/crcmath"
)

const (
	segUnit = 32   // the segment length is a multiple of the lockstep step
	maxSeg  = 2048 // the longest segment of the table hybridK
	bigSeg  = 8192 // the segment of the whole chunks of long inputs

	// The three-stream kernel of inputs under hybridMin = 2048 bytes
	// (crc32c_hybrid_amd64.go): segments of s = 8·k bytes,
	// 16 <= s <= 8·floor(2047/24) = 680.
	shortUnit   = 8
	shortMaxSeg = 680

	// The AVX-512 chunk of 16 segments (crc32hybrid, zmm.go): segments of
	// s = 64·k bytes (the lockstep step), up to 4096.
	zUnit   = 64
	zMaxSeg = 4096

	// The AVX-512 blocks kernels with two chains a CRC32 block
	// (crc32hybrid, zmm.go: hybridBlocksZ*S*): blocks of up to
	// 64·subMaxSteps+63 bytes.
	subMaxSteps = 128
)

// hybridConsts is zhybrid_consts_amd64.go of crc32c.
func hybridConsts(warning string) ([]byte, error) {
	p := crcmath.CRC32C
	c := func(k int) uint64 { return crcmath.C(p, uint64(k)) }

	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\n\n", warning)
	fmt.Fprintf(&b, "//go:build !purego\n\npackage crc32c\n\n")
	fmt.Fprintf(&b, "const (\n")
	fmt.Fprintf(&b, "\t// hybridSegUnit is the granule of the segment length s.\n\thybridSegUnit = %d\n", segUnit)
	fmt.Fprintf(&b, "\t// hybridMaxSeg is the longest segment of hybridK.\n\thybridMaxSeg = %d\n", maxSeg)
	fmt.Fprintf(&b, "\t// hybridBigSeg is the segment of the whole chunks of long inputs (hybridKBig).\n\thybridBigSeg = %d\n", bigSeg)
	fmt.Fprintf(&b, "\t// hybridShortUnit is the granule of hybridShort3's segment length.\n\thybridShortUnit = %d\n", shortUnit)
	fmt.Fprintf(&b, "\t// hybridShortMaxSeg is the longest segment of hybridK3.\n\thybridShortMaxSeg = %d\n", shortMaxSeg)
	fmt.Fprintf(&b, "\t// hybridZUnit is the granule of the AVX-512 chunk's segment length.\n\thybridZUnit = %d\n", zUnit)
	fmt.Fprintf(&b, "\t// hybridZMaxSeg is the longest segment of hybridKZ.\n\thybridZMaxSeg = %d\n", zMaxSeg)
	fmt.Fprintf(&b, "\t// hybridSubMaxSteps is the most 64-byte steps of a block of hybridKS.\n\thybridSubMaxSteps = %d\n", subMaxSteps)
	fmt.Fprintf(&b, ")\n\n")
	fmt.Fprintf(&b, "// hybridK[j] merges a chunk of six segments of s = %d·(j+1) bytes, with\n", segUnit)
	fmt.Fprintf(&b, "// C(k) = Reflect(x^(k-1) mod P, 64) (see kernels/_asm/crcgen):\n")
	fmt.Fprintf(&b, "// [0..5] C(8·i·s-64) for i = 6..1; [6..9] C(64·(3-j)+8s) and\n")
	fmt.Fprintf(&b, "// [10..13] C(64·(3-j)+16s) for j = 0..3.\n")
	row := func(s int) {
		fmt.Fprintf(&b, "\t{ // s = %d\n\t\t", s)
		for i := 6; i >= 1; i-- {
			fmt.Fprintf(&b, "%#016x, ", c(8*i*s-64))
		}
		fmt.Fprintf(&b, "\n\t\t")
		for _, d := range []int{8 * s, 16 * s} {
			for q := 0; q < 4; q++ {
				fmt.Fprintf(&b, "%#016x, ", c(64*(3-q)+d))
			}
		}
		fmt.Fprintf(&b, "\n\t},\n")
	}
	fmt.Fprintf(&b, "var hybridK = [%d][14]uint64{\n", maxSeg/segUnit)
	for j := 0; j < maxSeg/segUnit; j++ {
		row(segUnit * (j + 1))
	}
	fmt.Fprintf(&b, "}\n\n")
	fmt.Fprintf(&b, "// hybridKBig is the row of hybridK's form for s = hybridBigSeg.\n")
	fmt.Fprintf(&b, "var hybridKBig = [1][14]uint64{\n")
	row(bigSeg)
	fmt.Fprintf(&b, "}\n\n")
	// The three-stream kernel (crc32hybrid, short3): segments A, B, C of s
	// bytes; r_A ends D = 8·2s bits before the end, r_B D = 8s, so their V-parts are the products with C(16s-64) and C(8s-64),
	// as the registers of hybridK's rows. s >= 16 keeps 8s-64 >= 64 > 0.
	fmt.Fprintf(&b, "// hybridK3[j] merges the three segments of s = %d·(j+2) bytes of\n", shortUnit)
	fmt.Fprintf(&b, "// hybridShort3: C(16s-64) and C(8s-64), with C as for hybridK.\n")
	fmt.Fprintf(&b, "var hybridK3 = [%d][2]uint64{\n", shortMaxSeg/shortUnit-1)
	for s := 2 * shortUnit; s <= shortMaxSeg; s += shortUnit {
		fmt.Fprintf(&b, "\t{%#016x, %#016x}, // s = %d\n", c(16*s-64), c(8*s-64), s)
	}
	fmt.Fprintf(&b, "}\n\n")
	// The AVX-512 kernels (crc32hybrid, zmm.go): a chunk of 16 segments of
	// s bytes, whose registers hybridMergeZ merges. regs[0], the register
	// before the chunk, is followed by all 16 segments, regs[i] (segment
	// i-1) by 16-i of them: D_i = 8·(16-i)·s bits, and as for hybridK the
	// V-part of a register D bits before the end is its product with
	// C(D-64). The last segment's register is added as is.
	fmt.Fprintf(&b, "// hybridKZ[j] merges the 16 segments of s = %d·(j+1) bytes of an\n", zUnit)
	fmt.Fprintf(&b, "// AVX-512 chunk (hybridMergeZ): [i] = C(8·(16-i)·s-64), with C as for\n")
	fmt.Fprintf(&b, "// hybridK.\n")
	fmt.Fprintf(&b, "var hybridKZ = [%d][16]uint64{\n", zMaxSeg/zUnit)
	for j := 0; j < zMaxSeg/zUnit; j++ {
		s := zUnit * (j + 1)
		fmt.Fprintf(&b, "\t{ // s = %d\n\t\t", s)
		for i := 0; i < 16; i++ {
			fmt.Fprintf(&b, "%#016x, ", c(8*(16-i)*s-64))
			if i == 7 {
				fmt.Fprintf(&b, "\n\t\t")
			}
		}
		fmt.Fprintf(&b, "\n\t},\n")
	}
	fmt.Fprintf(&b, "}\n")
	// The two-chain blocks kernels (crc32hybrid, zmm.go): a CRC32 block of
	// S = blockLen/64 steps runs as chain A over its first D = 32·S bytes
	// and chain B over the next D; r_A, D bytes before the end of B, has
	// the V-part r_A·C(8D-64) = r_A·C(256·S-64), as the registers of
	// hybridK's rows. S >= 1 keeps 256·S-64 >= 192 > 0.
	fmt.Fprintf(&b, "\n// hybridKS[j] merges the two chains of a CRC32 block of j+1 steps (64·(j+1)\n")
	fmt.Fprintf(&b, "// to 64·(j+1)+63 bytes) of the two-chain AVX-512 blocks kernels: C(256·(j+1)-64),\n")
	fmt.Fprintf(&b, "// with C as for hybridK.\n")
	fmt.Fprintf(&b, "var hybridKS = [%d]uint64{\n", subMaxSteps)
	for j := 0; j < subMaxSteps; j++ {
		fmt.Fprintf(&b, "\t%#016x, // %d steps\n", c(256*(j+1)-64), j+1)
	}
	fmt.Fprintf(&b, "}\n")
	return scaffold.Go(b.Bytes())
}
