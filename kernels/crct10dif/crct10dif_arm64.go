//go:build !purego

package crct10dif

import (
	"golang.org/x/sys/cpu"

	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/impl"
)

// The arm64 kernels fold 16-byte lanes as crcmath.FoldUpdate models them:
// a lane is loaded byte-reversed (Hi = high quadword), the CRC enters the
// first message bits, accumulators one lane apart fold forward by Fold[n]
// and collapse with Fold[n-1] .. Fold[1], the last lane is reduced.
//
// Both kernels take any length >= 16: the len%16 leading bytes form a head
// lane, zero-padded in front (zeros before the message do not change a CRC
// whose register starts at zero), which is folded by one lane into the
// first full lane. So no byte goes through a table, and no load leaves
// p[0:len(p)].
//
// pmull: PMULL/PMULL2 64x64 (Crypto Extensions), eight accumulators
// (fold by 128 bytes), Barrett reduction; Blocks folds eight blocks side by
// side, one accumulator each.
//
// pmull8: base NEON only. Every fold constant of a 16-bit CRC is
// x^k mod P, of degree < 16, so a fold is two 64x16 products, 32 byte
// products: four PMULL 8x8 instructions. The accumulator is kept with its
// bytes permuted ("split": even bytes of Lo, odd bytes of Lo, even of Hi,
// odd of Hi) so that the 16-bit products of the even bytes land where they
// belong and the odd ones one byte off; two TBL instructions over the
// product pair put the sum back into split form for the next fold (see the
// assembly for the byte bookkeeping). Four accumulators; Blocks folds four
// blocks side by side. The reduction multiplies each byte v_j of the last
// lane by x^(8j+16) mod P (again 8x8 products), XORs them into a 23-bit
// value and clears its top 7 bits with P, branch-free.

const (
	// minPMULL is the shortest input the assembly accepts (one lane); the
	// crossover with the table code is below it in the llvm-mca model
	// (kernels/_mca), so shorter inputs are the only ones left to the tables.
	minPMULL = 16
	// blocksPMULLWays and blocksPMULL8Ways are the blocks per assembly pass.
	blocksPMULLWays  = 8
	blocksPMULL8Ways = 4
)

// foldUpdatePMULL returns the CRC of p continuing crc, with PMULL 64x64.
// Preconditions: len(p) >= 16, t is this package's foldTable.
//
//go:noescape
func foldUpdatePMULL(crc uint16, p []byte, t *crcmath.FoldTable) uint16

// foldBlocksPMULL sets dst[i] = Checksum(p[i*stride:][:blockLen]) for
// every i, eight blocks at a time, with PMULL 64x64. It takes the
// blockLen%16 bytes of each block's head itself.
// Preconditions: len(dst) is a positive multiple of 8; blockLen >= 16;
// stride >= blockLen; len(p) >= (len(dst)-1)*stride + blockLen; t is this
// package's foldTable.
//
//go:noescape
func foldBlocksPMULL(dst []uint16, p []byte, blockLen, stride int, t *crcmath.FoldTable)

// foldUpdatePMULL8 returns the CRC of p continuing crc, with 8x8 PMULL only.
// Preconditions: len(p) >= 16, k is p8.
//
//go:noescape
func foldUpdatePMULL8(crc uint16, p []byte, k *pmull8Consts) uint16

// foldBlocksPMULL8 is foldBlocksPMULL with 8x8 PMULL only, four blocks at a
// time. Preconditions: those of foldBlocksPMULL with a multiple of 4 for
// len(dst), and k is p8.
//
//go:noescape
func foldBlocksPMULL8(dst []uint16, p []byte, blockLen, stride int, k *pmull8Consts)

// pmull8Consts are the constants of the pmull8 kernel, derived at init from
// foldTable and crcmath; the assembly reads them through a pointer at fixed
// offsets (ke: 0, ko: 80, c0: 160, c1: 176, poly: 192).
type pmull8Consts struct {
	// ke[n] and ko[n] spread Fold[n] = {khi, klo} (n = 1..4) for the 8x8
	// products of a split lane (bytes: b0 low byte, b1 high byte, 4 copies):
	// ke = klo.b0, klo.b1, khi.b0, khi.b1; ko = klo.b1, klo.b0, khi.b1, khi.b0.
	ke, ko [5][16]byte
	// c0[u], c1[u] are the low and high byte of x^(8j+16) mod P for the
	// lane byte j held at split position u: the reduction constants.
	c0, c1 [16]byte
	// poly is P itself, x^16 + 0x8BB7.
	poly uint64
}

// splitOrder[u] is the lane byte (bit 8j = coefficient of x^(8j)) held at
// position u of a split lane.
var splitOrder = [16]int{0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15}

var p8 = newPMULL8Consts(&foldTable)

func newPMULL8Consts(t *crcmath.FoldTable) *pmull8Consts {
	k := new(pmull8Consts)
	for n := 1; n <= 4; n++ {
		hi, lo := t.Fold[n][0], t.Fold[n][1]
		for i := 0; i < 4; i++ {
			k.ke[n][i], k.ke[n][4+i], k.ke[n][8+i], k.ke[n][12+i] = byte(lo), byte(lo>>8), byte(hi), byte(hi>>8)
			k.ko[n][i], k.ko[n][4+i], k.ko[n][8+i], k.ko[n][12+i] = byte(lo>>8), byte(lo), byte(hi>>8), byte(hi)
		}
	}
	for u, j := range splitOrder {
		r := crcmath.XPowMod(Params, uint64(8*j+16))
		k.c0[u], k.c1[u] = byte(r), byte(r>>8)
	}
	k.poly = 1<<Params.Width | t.Poly
	return k
}

func registerArch() {
	impl.Register(pkgName, "pmull", cpu.ARM64.HasPMULL, func() {
		update, blocks = updatePMULL, blocksPMULL
	})
	impl.Register(pkgName, "pmull8", true, func() {
		update, blocks = updatePMULL8, blocksPMULL8
	})
}

func updatePMULL(crc uint16, p []byte) uint16 {
	if len(p) < minPMULL {
		return updateGeneric(crc, p)
	}
	return foldUpdatePMULL(crc, p, &foldTable)
}

func updatePMULL8(crc uint16, p []byte) uint16 {
	if len(p) < minPMULL {
		return updateGeneric(crc, p)
	}
	return foldUpdatePMULL8(crc, p, p8)
}

func blocksPMULL(dst []uint16, p []byte, blockLen, stride int) {
	if blockLen < minPMULL {
		blocksGeneric(dst, p, blockLen, stride)
		return
	}
	g := len(dst) - len(dst)%blocksPMULLWays
	if g > 0 {
		foldBlocksPMULL(dst[:g], p, blockLen, stride, &foldTable)
	}
	for i := g; i < len(dst); i++ {
		dst[i] = foldUpdatePMULL(0, p[i*stride:i*stride+blockLen], &foldTable)
	}
}

func blocksPMULL8(dst []uint16, p []byte, blockLen, stride int) {
	if blockLen < minPMULL {
		blocksGeneric(dst, p, blockLen, stride)
		return
	}
	g := len(dst) - len(dst)%blocksPMULL8Ways
	if g > 0 {
		foldBlocksPMULL8(dst[:g], p, blockLen, stride, p8)
	}
	for i := g; i < len(dst); i++ {
		dst[i] = foldUpdatePMULL8(0, p[i*stride:i*stride+blockLen], p8)
	}
}
