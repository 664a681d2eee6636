package blockdev

import (
	"context"
	"errors"
	"os"

	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// The pieces every verifier of the package shares: the Volume's runs
// (ReadAt, CheckRun, the edges of a write, export and remap, see
// volume_read.go) and PISource's (pisource_check.go) classify whole runs
// with dif, then hand each failing block to the same three things:
//
//   - blockCheck.ok and blockCheck.problems, the one block classifier:
//     whether one block passes, and if not, its failed checks as Problems;
//   - reread, the one re-read loop;
//   - fatalReadError, the one predicate for a device error that ends the
//     run instead of marking blocks unreadable.

// blockCheck is what classifying a block needs: the format, its geometry,
// and for a volume the manifest's parameters (the initial ref tag, the app
// tag policy) and whether it keeps sector sums. A PISource's has only the
// format; it computes its own params.
type blockCheck struct {
	f                dif.Format
	bs, ts           int
	sums             bool   // sector sums are kept (a volume's manifest)
	refBase, refMask uint64 // the ref tag of block 0; the ref tag's bits
	refConst         bool   // Type 3: every block carries refBase
	appTag, appMask  uint16
}

// manifestCheck returns the block classifier of a volume of format f
// (DIX, metadata = tuple) with manifest m.
func manifestCheck(f dif.Format, m store.Manifest) blockCheck {
	c := blockCheck{
		f: f, bs: f.BlockSize(), ts: f.TupleSize(), sums: m.SectorSums,
		refBase: m.InitialRefTag, refMask: ^uint64(0), refConst: f.Type() == dif.Type3,
		appTag: m.AppTag, appMask: m.AppTagMask,
	}
	if b := f.RefTagBits(); b < 64 {
		c.refMask = 1<<b - 1
	}
	return c
}

// params returns the dif parameters of a run starting at block lba.
func (c *blockCheck) params(lba int64) dif.Params { return c.paramsFrom(c.refBase, lba) }

// paramsFrom returns the dif parameters of a run starting at block lba of
// a volume whose block 0 carries ref tag ref (a remap verifies blocks
// against the old and the new initial ref tag).
func (c *blockCheck) paramsFrom(ref uint64, lba int64) dif.Params {
	if !c.refConst {
		ref += uint64(lba)
	}
	return dif.Params{RefTag: ref & c.refMask, AppTag: c.appTag, AppMask: c.appMask, LBA: lba}
}

// ok reports whether one block passes: its data against md (the tuple, or
// the metadata of a separate layout; nil for an interleaved block that
// holds its own) with params p and, for a written block of a volume with
// sector sums, its data against sum. A block the store records unwritten
// (written false) passes only if it is zeros (see unwritten.go).
func (c *blockCheck) ok(data, md []byte, p dif.Params, written bool, sum uint32) bool {
	if !written {
		return isZero(data)
	}
	if c.f.Verify(data, md, p) != nil {
		return false
	}
	return !c.sums || dif.SectorSum(data) == sum
}

// problems appends to dst the failed checks of one block lba, with ok's
// arguments: one Problem per failed field (its cause the *dif.CheckError),
// one for the sector sum (*SumError), or, for an unwritten block holding
// data, one of KindUnwrittenData.
func (c *blockCheck) problems(dst []Problem, lba int64, data, md []byte, p dif.Params, written bool, sum uint32) []Problem {
	if !written {
		if !isZero(data) {
			dst = append(dst, unwrittenProblem(lba, data))
		}
		return dst
	}
	c.f.VerifyFunc(data, md, p, func(ce *dif.CheckError) error {
		dst = append(dst, Problem{LBA: lba, Kind: KindOf(ce.Field), Expected: ce.Expected, Actual: ce.Actual, Err: ce})
		return nil
	})
	if c.sums {
		if s := dif.SectorSum(data); s != sum {
			dst = append(dst, Problem{LBA: lba, Kind: KindSectorSum, Expected: uint64(s), Actual: uint64(sum),
				Err: &SumError{LBA: lba, Expected: s, Actual: sum}})
		}
	}
	return dst
}

// fatalReadError reports whether a read error fails a run as a whole
// rather than the blocks it was reading. It is the package's one such
// predicate, used by every verifier (and by the hole check):
//
//   - the device or image is closed (ErrClosed, os.ErrClosed);
//   - it crashed (ErrCrashed, the fault device's simulated crash): a
//     crashed device reads nothing any more, so reporting each block as
//     unreadable would turn one event into a finding per block;
//   - the read fell outside it (ErrOutOfRange: the device shrank, or the
//     caller is wrong);
//   - the caller gave up (context.Canceled, context.DeadlineExceeded, from
//     a device that honours a context): not the block's fault either.
//
// Every other error is the block's own: it is read again (reread), then
// reported as KindIO.
func fatalReadError(err error) bool {
	return errors.Is(err, ErrClosed) || errors.Is(err, os.ErrClosed) || errors.Is(err, ErrCrashed) ||
		errors.Is(err, ErrOutOfRange) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// reread is the package's one re-read loop for a block that failed: up to
// n times it reads the block again around the page cache (read) and checks
// the new copy (ok), stopping at the first that passes: the failure was
// transient. A read error that fatalReadError accepts, or ctx ending,
// stops it with that error; another read error counts as a failed
// attempt.
func reread(ctx context.Context, n int, read func() error, ok func() bool) (passed bool, err error) {
	for range n {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		err := read()
		if err != nil {
			if fatalReadError(err) {
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
