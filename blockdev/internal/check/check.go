// Package check holds what every verifier of blocks shares: package
// blockdev's Volume (its verified reads and checks, the edge blocks of a
// write, export, import and remap) and package blockdev/pisource's images.
// Both classify whole runs with dif, then hand each failing block to the
// same three things:
//
//   - [Block], the one block classifier: whether one block passes
//     ([Block.OK]), and if not, its failed checks ([Block.Failures]);
//   - [Reread], the one re-read loop;
//   - [Fatal], the one predicate for a device error that ends the run
//     instead of marking blocks unreadable.
//
// [ImageParams] is the rule by which an image that carries its own PI is
// verified, shared by pisource and blockdev's import of such an image.
//
// The Problems that the verifiers report are package blockdev's, which this
// package cannot import: the verifiers make them of a failed PI field
// (blockdev.ProblemOf) and of a Failure.
package check

import (
	"bytes"
	"context"
	"errors"
	"os"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
)

// Block classifies one block: the format of its PI and whether the blocks
// have CRC-32C sector sums (a volume's manifest says; an image's PI alone
// has none).
type Block struct {
	Format dif.Format
	Sums   bool
}

// OK reports whether one block passes: its data against md (the tuple, or
// the metadata of a separate layout; nil for an interleaved block that
// holds its own) with params p and, for a written block with sector sums,
// its data against sum. A block recorded unwritten (written false) passes
// only if it is zeros.
func (c Block) OK(data, md []byte, p dif.Params, written bool, sum uint32) bool {
	if !written {
		return IsZero(data)
	}
	if c.Format.Verify(data, md, p) != nil {
		return false
	}
	return !c.Sums || dif.SectorSum(data) == sum
}

// What says which check of a block failed, other than its PI fields.
type What uint8

const (
	None          What = iota // no other check failed
	Sum                       // the sector sum (Failure.Sum)
	UnwrittenData             // an unwritten block holds data (Failure.Offset)
)

// A Failure is the failed check of one block other than its PI fields.
type Failure struct {
	What   What
	Sum    uint32 // Sum: the data's sector sum (the stored one is the caller's)
	Offset int    // UnwrittenData: the first non-zero byte
}

// Failures reports the failed checks of one block, with OK's arguments.
// Each failed PI field goes to field, in order, as from
// dif.Format.VerifyFunc (whose callback it is, so that a failing block
// costs no more than VerifyFunc does; field's error is ignored). The one
// other failure a block can have is returned: its sector sum, after its
// fields; or, for an unwritten block holding data, its data, and then
// nothing goes to field.
func (c Block) Failures(data, md []byte, p dif.Params, written bool, sum uint32, field func(*dif.CheckError) error) Failure {
	if !written {
		if !IsZero(data) {
			return Failure{What: UnwrittenData, Offset: firstNonZero(data)}
		}
		return Failure{}
	}
	c.Format.VerifyFunc(data, md, p, field)
	if c.Sums {
		if s := dif.SectorSum(data); s != sum {
			return Failure{What: Sum, Sum: s}
		}
	}
	return Failure{}
}

// Fatal reports whether a read error fails a run as a whole rather than
// the blocks it was reading. It is the one such predicate, used by every
// verifier (and by the Volume's hole check):
//
//   - the device or image is closed (device.ErrClosed, os.ErrClosed);
//   - it crashed (device.ErrCrashed, the fault device's simulated crash): a
//     crashed device reads nothing any more, so reporting each block as
//     unreadable would turn one event into a finding per block;
//   - the read fell outside it (device.ErrOutOfRange: the device shrank, or
//     the caller is wrong);
//   - the caller gave up (context.Canceled, context.DeadlineExceeded, from
//     a device that honours a context): not the block's fault either.
//
// Every other error is the block's own: it is read again (Reread), then
// reported as unreadable (blockdev.KindIO).
func Fatal(err error) bool {
	for _, f := range fatal {
		if errors.Is(err, f) {
			return true
		}
	}
	return false
}

// fatal are the errors that Fatal accepts, with whatever wraps them.
var fatal = [...]error{device.ErrClosed, os.ErrClosed, device.ErrCrashed, device.ErrOutOfRange, context.Canceled, context.DeadlineExceeded}

// FatalErrors returns the errors that Fatal accepts (each, and whatever
// wraps one), for the tests of every verifier.
func FatalErrors() []error { return fatal[:] }

// Reread is the one re-read loop for a block that failed: up to n times it
// reads the block again around the page cache (read) and checks the new
// copy (ok), stopping at the first that passes: the failure was transient.
// A read error that Fatal accepts, or ctx ending, stops it with that error;
// another read error counts as a failed attempt.
func Reread(ctx context.Context, n int, read func() error, ok func() bool) (passed bool, err error) {
	for range n {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		err := read()
		if err != nil {
			if Fatal(err) {
				return false, err
			}
			continue
		}
		if ok() {
			return true, nil
		}
	}
	return false, nil
}

// Zeros is a block of zeros as large as blocks get (64 KiB): IsZero
// compares against it, and the Volume generates the tuples of discarded
// blocks from it. Nothing writes it.
var Zeros [1 << 16]byte

// IsZero reports whether p is all zeros, with the runtime's vectorised
// comparison (not a byte loop).
func IsZero(p []byte) bool {
	for len(p) > 0 {
		n := min(len(p), len(Zeros))
		if !bytes.Equal(p[:n], Zeros[:n]) {
			return false
		}
		p = p[n:]
	}
	return true
}

// firstNonZero returns the index of the first non-zero byte of p, or -1.
func firstNonZero(p []byte) int {
	for i, c := range p {
		if c != 0 {
			return i
		}
	}
	return -1
}

// ImageParams are the dif params of the blocks of an image that carries
// its own PI: block lba is checked with P, except that P.LBA is lba and,
// for Types 1 and 2, the expected ref tag is the low RefTagBits of
// P.RefTag + lba (P.RefTag is the ref tag of block 0).
type ImageParams struct {
	P       dif.Params
	refMask uint64 // 0 when ref tags do not advance with the LBA
}

// NewImageParams returns the params of the blocks of an image of format f
// whose block 0 has params p.
func NewImageParams(f dif.Format, p dif.Params) ImageParams {
	ip := ImageParams{P: p}
	if t := f.Type(); t == dif.Type1 || t == dif.Type2 {
		if b := f.RefTagBits(); b >= 64 {
			ip.refMask = ^uint64(0)
		} else {
			ip.refMask = 1<<b - 1
		}
	}
	return ip
}

// At returns the params of a run starting at block lba.
func (ip ImageParams) At(lba int64) dif.Params {
	p := ip.P
	p.LBA = lba
	if ip.refMask != 0 {
		p.RefTag = (p.RefTag + uint64(lba)) & ip.refMask
	}
	return p
}
