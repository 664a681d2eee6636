// Package t10crc32c computes the two CRCs of a protected block in one pass:
// the CRC-16/T10-DIF guard (package crct10dif) and the CRC-32C sector
// checksum (package crc32c) of every block of a batch.
//
// Where the CPU allows, one kernel reads each block once and runs both: the
// guard by carry-less folding on the multiplier, the CRC-32C by the CRC32
// instruction on an integer ALU beside it, so the pair costs about what the
// guard alone does. Elsewhere (the generic implementation, arm64, purego
// builds) it is crct10dif.Blocks followed by crc32c.Blocks, each with its
// package's active implementation. This package imports both CRC packages;
// neither imports the other.
package t10crc32c

import (
	"errors"

	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/kernels/crct10dif"
	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/layout"
)

// ErrLayout is returned when a buffer does not hold the blocks described or
// sums is not as long as dst.
var ErrLayout = errors.New("t10crc32c: buffer too short for the block layout")

// ErrOverlap is returned by BlocksCopy when the blocks' span of the
// destination overlaps that of the source.
var ErrOverlap = errors.New("t10crc32c: copy destination overlaps the source")

// The dispatch variables, set by the registry to the active implementation.
var (
	blocks     func(dst []uint16, sums []uint32, p []byte, blockLen, stride int)    = blocksPortable
	blocksCopy func(dst []uint16, sums []uint32, q, p []byte, blockLen, stride int) = blocksCopyPortable
)

// pkgName is the package's name in the implementation registry.
const pkgName = "t10crc32c"

func init() {
	registerArch()
	impl.Register(pkgName, "generic", true, func() {
		blocks, blocksCopy = blocksPortable, blocksCopyPortable
	})
}

// Blocks computes, for each block b = p[i*stride:][:blockLen], the guard
// dst[i] = crct10dif.Checksum(b) and the sum sums[i] = crc32c.Checksum(b).
// sums must have the same length as dst; the layout rules are those of
// crct10dif.Blocks. It returns ErrLayout, and writes nothing, otherwise.
func Blocks(dst []uint16, sums []uint32, p []byte, blockLen, stride int) error {
	if len(sums) != len(dst) || !layout.Valid(len(dst), len(p), blockLen, stride) {
		return ErrLayout
	}
	if len(dst) == 0 {
		return nil
	}
	blocks(dst, sums, p, blockLen, stride)
	return nil
}

// BlocksCopy is Blocks that also copies the blocks to q, as
// crct10dif.BlocksCopy does: dst[i] and sums[i] are the guard and the
// CRC-32C of the bytes written to q for block i, so both describe the same
// bytes even if p changes during the call. The rules for q are those of
// crct10dif.BlocksCopy, the rule for sums that of Blocks; it returns
// ErrLayout or ErrOverlap, and writes nothing, otherwise.
func BlocksCopy(dst []uint16, sums []uint32, q, p []byte, blockLen, stride int) error {
	if len(sums) != len(dst) {
		return ErrLayout
	}
	if err := layout.CheckCopy(len(dst), q, p, blockLen, stride, ErrLayout, ErrOverlap); err != nil || len(dst) == 0 {
		return err
	}
	blocksCopy(dst, sums, q, p, blockLen, stride)
	return nil
}

// blocksPortable is Blocks as two passes: crct10dif.Blocks, then
// crc32c.Blocks. The layout was checked, so neither can refuse it.
func blocksPortable(dst []uint16, sums []uint32, p []byte, blockLen, stride int) {
	if crct10dif.Blocks(dst, p, blockLen, stride) != nil || crc32c.Blocks(sums, p, blockLen, stride) != nil {
		panic("t10crc32c: a CRC package refused a checked layout")
	}
}

// blocksCopyPortable is BlocksCopy as a copy of the blocks followed by the
// active Blocks over q; the layout was checked.
func blocksCopyPortable(dst []uint16, sums []uint32, q, p []byte, blockLen, stride int) {
	layout.Copy(q, p, len(dst), blockLen, stride)
	blocks(dst, sums, q, blockLen, stride)
}
