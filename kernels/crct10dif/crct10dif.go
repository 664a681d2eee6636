// Package crct10dif implements CRC-16/T10-DIF, the 16-bit guard of T10
// protection information.
//
// Parameters (Rocksoft/Williams model): width 16, polynomial 0x8BB7, init 0,
// not reflected, xorout 0; the check value, the CRC of "123456789", is
// 0xD0DB. On media the guard is stored big-endian.
//
// The package computes it with carry-less-multiply folding where the CPU has
// it (PCLMULQDQ with SSE or VEX encodings and VPCLMULQDQ on amd64, PMULL on arm64, and on arm64 cores
// without the Crypto Extensions a NEON 8x8 PMULL version) and with
// slicing-by-16 tables elsewhere. Blocks computes one guard per block over
// many blocks in one pass, which is what protection information needs.
package crct10dif

import (
	"errors"
	"hash"

	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/layout"
)

//go:generate go run ../internal/crcgen -crc t10dif -pkg crct10dif -o zfold_consts.go

// Size is the size of a CRC-16/T10-DIF checksum in bytes.
const Size = 2

// Params are the CRC parameters, for tests and documentation.
var Params = crcmath.T10DIF

// ErrLayout is returned by Blocks when the buffer does not hold the blocks
// described.
var ErrLayout = errors.New("crct10dif: buffer too short for the block layout")

// ErrOverlap is returned by the copying batch calls (BlocksCopy) when the
// blocks' span of the destination overlaps that of the source.
var ErrOverlap = errors.New("crct10dif: copy destination overlaps the source")

// The dispatch variables, set by the registry to the active implementation.
// blocksSums is the fused kernel of that implementation where there is one
// (crct10dif_fused_amd64.go), else blocksSumsPortable; blocksCopy and
// blocksSumsCopy are the copying kernels where there are some, else
// blocksCopyPortable and blocksSumsCopyPortable (a copy, then the active
// Blocks or BlocksCRC32C over the copy).
var (
	update         func(crc uint16, p []byte) uint16                                    = updateGeneric
	blocks         func(dst []uint16, p []byte, blockLen, stride int)                   = blocksGeneric
	blocksSums     func(dst []uint16, sums []uint32, p []byte, blockLen, stride int)    = blocksSumsPortable
	blocksCopy     func(dst []uint16, q, p []byte, blockLen, stride int)                = blocksCopyPortable
	blocksSumsCopy func(dst []uint16, sums []uint32, q, p []byte, blockLen, stride int) = blocksSumsCopyPortable
)

const pkgName = "crct10dif"

func init() {
	registerArch()
	impl.Register(pkgName, "generic", true, func() {
		update, blocks, blocksSums = updateGeneric, blocksGeneric, blocksSumsPortable
		blocksCopy, blocksSumsCopy = blocksCopyPortable, blocksSumsCopyPortable
	})
}

// Update returns the result of adding the bytes in p to crc.
func Update(crc uint16, p []byte) uint16 { return update(crc, p) }

// Checksum returns the CRC-16/T10-DIF of p.
func Checksum(p []byte) uint16 { return update(0, p) }

// Blocks computes the guard of len(dst) blocks of blockLen bytes each, the
// i-th starting at p[i*stride]: dst[i] = Checksum(p[i*stride:][:blockLen]).
// A stride larger than blockLen skips the bytes between blocks (the PI of an
// extended-LBA layout such as 512+8). It returns ErrLayout, and writes
// nothing, unless blockLen >= 0, stride >= blockLen (when there is more than
// one block) and len(p) >= (len(dst)-1)*stride + blockLen.
//
// Blocks interleaves several blocks in each pass of the fold kernels, so it
// is much faster than a loop of Checksum calls on small blocks.
func Blocks(dst []uint16, p []byte, blockLen, stride int) error {
	if !layout.Valid(len(dst), len(p), blockLen, stride) {
		return ErrLayout
	}
	if len(dst) == 0 {
		return nil
	}
	blocks(dst, p, blockLen, stride)
	return nil
}

// BlocksCRC32C is Blocks that also computes the CRC-32C of every block:
// dst[i] = Checksum(b) and sums[i] = crc32c.Checksum(b) for the block
// b = p[i*stride:][:blockLen]. sums must have the same length as dst; the
// layout rules and ErrLayout are those of Blocks, and nothing is written if
// it returns an error.
//
// This is what a protected block with a sector checksum needs. Where the
// active implementation is avx2 or avx512 and the CPU has SSE4.2, or avx or
// pclmul and the CPU has AVX and SSE4.2, both CRCs are computed in one pass
// over the data, at about the cost of Blocks alone: the guard by
// (V)PCLMULQDQ folding, the CRC-32C by CRC32 instructions, which run on
// another execution unit. Elsewhere (the generic implementation, arm64,
// purego builds) it is Blocks followed by crc32c.Blocks.
func BlocksCRC32C(dst []uint16, sums []uint32, p []byte, blockLen, stride int) error {
	if len(sums) != len(dst) {
		return ErrLayout
	}
	if !layout.Valid(len(dst), len(p), blockLen, stride) {
		return ErrLayout
	}
	if len(dst) == 0 {
		return nil
	}
	blocksSums(dst, sums, p, blockLen, stride)
	return nil
}

// BlocksCopy is Blocks that also copies the blocks: block i, the bytes
// p[i*stride:][:blockLen], is copied to q at the same offset, and dst[i] is
// the CRC of the bytes written to q. The bytes of q between blocks (stride >
// blockLen) are not written.
//
// It is meant for a source that may change underneath, such as a read-only
// mapping of a file's page cache: the caller hands q to its user, and dst
// describes exactly what q holds, from one pass over p. The active
// implementation copies in the fold kernel itself where it has a copying
// kernel, else it copies the blocks and runs Blocks over q.
//
// q must be long enough for the layout, by the rule Blocks applies to p, and
// the span of the blocks in q, q[:(len(dst)-1)*stride+blockLen], must not
// overlap that of p. It returns ErrLayout or ErrOverlap, and writes nothing,
// otherwise.
func BlocksCopy(dst []uint16, q, p []byte, blockLen, stride int) error {
	if err := layout.CheckCopy(len(dst), q, p, blockLen, stride, ErrLayout, ErrOverlap); err != nil || len(dst) == 0 {
		return err
	}
	blocksCopy(dst, q, p, blockLen, stride)
	return nil
}

// BlocksCRC32CCopy is BlocksCRC32C that also copies the blocks to q, as
// BlocksCopy does: dst[i] and sums[i] are the T10-DIF guard and the CRC-32C
// of the bytes written to q for block i, so both describe the same bytes
// even if p changes during the call. The rules for q, ErrLayout and
// ErrOverlap are those of BlocksCopy, the rule for sums that of
// BlocksCRC32C; nothing is written if it returns an error.
func BlocksCRC32CCopy(dst []uint16, sums []uint32, q, p []byte, blockLen, stride int) error {
	if len(sums) != len(dst) {
		return ErrLayout
	}
	if err := layout.CheckCopy(len(dst), q, p, blockLen, stride, ErrLayout, ErrOverlap); err != nil || len(dst) == 0 {
		return err
	}
	blocksSumsCopy(dst, sums, q, p, blockLen, stride)
	return nil
}

// Combine returns the CRC of A||B given crcA = CRC(A), crcB = CRC(B) and
// lenB = len(B).
func Combine(crcA, crcB uint16, lenB int) uint16 {
	return uint16(crcmath.Combine(Params, uint64(crcA), uint64(crcB), int64(lenB)))
}

// New returns a hash.Hash computing CRC-16/T10-DIF. Its Sum appends the
// guard big-endian, as it is stored in protection information.
func New() hash.Hash { return new(digest) }

type digest struct{ crc uint16 }

func (d *digest) Size() int      { return Size }
func (d *digest) BlockSize() int { return 1 }
func (d *digest) Reset()         { d.crc = 0 }
func (d *digest) Write(p []byte) (int, error) {
	d.crc = update(d.crc, p)
	return len(p), nil
}
func (d *digest) Sum(in []byte) []byte { return append(in, byte(d.crc>>8), byte(d.crc)) }

// Sum16 returns the current CRC.
func (d *digest) Sum16() uint16 { return d.crc }
