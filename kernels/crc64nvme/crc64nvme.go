// Package crc64nvme implements CRC-64/NVME, the 64-bit guard of NVMe
// protection information.
//
// Parameters (Rocksoft/Williams model): width 64, polynomial
// 0xAD93D23594C93659, init all ones, reflected, xorout all ones; the check
// value, the CRC of "123456789", is 0xAE8B14860A799888. It equals hash/crc64
// with the table of the reflected polynomial 0x9A6C9329AC4BC9B5. On media the
// guard is stored big-endian.
//
// Where the CPU allows, the package runs carry-less-multiply folding
// (PCLMULQDQ with SSE or VEX encodings and VPCLMULQDQ on amd64, PMULL on
// arm64), and slicing-by-8 tables elsewhere. Blocks computes one guard per
// block over many blocks in one pass.
package crc64nvme

import (
	"errors"
	"hash"

	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/layout"
)

//go:generate go run ../internal/crcgen -crc crc64nvme -pkg crc64nvme -o zfold_consts.go

// Size is the size of a CRC-64/NVME checksum in bytes.
const Size = 8

// Params are the CRC parameters, for tests and documentation.
var Params = crcmath.CRC64NVME

// ErrLayout is returned by Blocks when the buffer does not hold the blocks
// described.
var ErrLayout = errors.New("crc64nvme: buffer too short for the block layout")

// ErrOverlap is returned by the copying batch calls (BlocksCopy) when the
// blocks' span of the destination overlaps that of the source.
var ErrOverlap = errors.New("crc64nvme: copy destination overlaps the source")

// The dispatch variables, set by the registry to the active implementation.
// blocksCopy is the copying kernel of that implementation where there is
// one, else blocksCopyPortable (a copy, then the active Blocks over it).
var (
	update     func(crc uint64, p []byte) uint64                     = updateGeneric
	blocks     func(dst []uint64, p []byte, blockLen, stride int)    = blocksGeneric
	blocksCopy func(dst []uint64, q, p []byte, blockLen, stride int) = blocksCopyPortable
)

const pkgName = "crc64nvme"

func init() {
	registerArch()
	impl.Register(pkgName, "generic", true, func() {
		update, blocks, blocksCopy = updateGeneric, blocksGeneric, blocksCopyPortable
	})
}

// Update returns the result of adding the bytes in p to crc.
func Update(crc uint64, p []byte) uint64 { return update(crc, p) }

// Checksum returns the CRC-64/NVME of p.
func Checksum(p []byte) uint64 { return update(0, p) }

// Blocks computes the guard of len(dst) blocks of blockLen bytes each, the
// i-th starting at p[i*stride]: dst[i] = Checksum(p[i*stride:][:blockLen]).
// A stride larger than blockLen skips the bytes between blocks (the PI of an
// extended-LBA layout such as 512+8). It returns ErrLayout, and writes
// nothing, unless blockLen >= 0, stride >= blockLen (when there is more than
// one block) and len(p) >= (len(dst)-1)*stride + blockLen.
//
// Blocks interleaves several blocks in each pass of the fold kernels, so it
// is much faster than a loop of Checksum calls on small blocks.
func Blocks(dst []uint64, p []byte, blockLen, stride int) error {
	if !layout.Valid(len(dst), len(p), blockLen, stride) {
		return ErrLayout
	}
	if len(dst) == 0 {
		return nil
	}
	blocks(dst, p, blockLen, stride)
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
func BlocksCopy(dst []uint64, q, p []byte, blockLen, stride int) error {
	if err := layout.CheckCopy(len(dst), q, p, blockLen, stride, ErrLayout, ErrOverlap); err != nil || len(dst) == 0 {
		return err
	}
	blocksCopy(dst, q, p, blockLen, stride)
	return nil
}

// Combine returns the CRC of A||B given crcA = CRC(A), crcB = CRC(B) and
// lenB = len(B).
func Combine(crcA, crcB uint64, lenB int) uint64 {
	return uint64(crcmath.Combine(Params, uint64(crcA), uint64(crcB), int64(lenB)))
}

// New returns a hash.Hash64 computing CRC-64/NVME. Its Sum appends the CRC
// big-endian, as the guard is stored in protection information.
func New() hash.Hash64 { return new(digest) }

type digest struct{ crc uint64 }

func (d *digest) Size() int      { return Size }
func (d *digest) BlockSize() int { return 1 }
func (d *digest) Reset()         { d.crc = 0 }
func (d *digest) Write(p []byte) (int, error) {
	d.crc = update(d.crc, p)
	return len(p), nil
}
func (d *digest) Sum(in []byte) []byte {
	for s := 56; s >= 0; s -= 8 {
		in = append(in, byte(d.crc>>s))
	}
	return in
}

// Sum64 returns the current CRC.
func (d *digest) Sum64() uint64 { return d.crc }
