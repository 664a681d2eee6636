package emu

import (
	"encoding/binary"

	"github.com/difctl/difctl/kernels/internal/crcmath"
)

// Reference math for the tests: kernels/internal/crcmath's.

// A Spec is a CRC.
type Spec = crcmath.Params

// The CRCs of the kernels.
var (
	T10DIF    = crcmath.T10DIF
	CRC32C    = crcmath.CRC32C
	CRC64NVME = crcmath.CRC64NVME
)

// Mask is the low w bits.
func Mask(w int) uint64 {
	if w == 64 {
		return ^uint64(0)
	}
	return 1<<w - 1
}

// Bitwise is the reference CRC (finalised in, finalised out).
func Bitwise(s Spec, crc uint64, data []byte) uint64 { return crcmath.Bitwise(s, crc, data) }

// FoldTable returns the crcmath.RevFoldTable of s as the bytes the kernels
// read: Fold[0..maxFold], Final, Mu, Poly, then Rev[i] = Fold[maxFold-i],
// all little-endian.
func FoldTable(s Spec, maxFold int) []byte {
	t := crcmath.NewRevFoldTable(crcmath.NewFoldTable(s))
	var q []uint64
	for _, f := range t.Fold[:maxFold+1] {
		q = append(q, f[0], f[1])
	}
	q = append(q, t.Final[0], t.Final[1], t.Mu, t.Poly)
	for _, f := range t.Rev[:maxFold+1] {
		q = append(q, f[0], f[1])
	}
	b := make([]byte, 8*len(q))
	for i, v := range q {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	return b
}
