package blockdev

import (
	"github.com/difctl/difctl/blockdev/internal/check"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// The Volume's block classifier: its geometry and params over the one
// classifier, re-read loop and fatal-error predicate that every verifier
// shares, with package blockdev/pisource's images (package
// blockdev/internal/check).

// blockCheck is what classifying a block needs: the format, its geometry,
// and for a volume the manifest's parameters (the initial ref tag, the app
// tag policy) and whether it keeps sector sums. An import's has only the
// format: it checks the image's PI alone, with the image's params.
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

// cls is the shared classifier of the volume's blocks.
func (c *blockCheck) cls() check.Block { return check.Block{Format: c.f, Sums: c.sums} }

// ok reports whether one block passes ([check.Block.OK]): its data against
// md (the tuple) with params p and, for a written block of a volume with
// sector sums, its data against sum. A block the store records unwritten
// (written false) passes only if it is zeros (see unwritten.go).
func (c *blockCheck) ok(data, md []byte, p dif.Params, written bool, sum uint32) bool {
	return c.cls().OK(data, md, p, written, sum)
}

// problems appends to dst the failed checks of one block lba, with ok's
// arguments ([check.Block.Failures]): one Problem per failed field (its
// cause the *dif.CheckError), one for the sector sum (*SumError), or, for
// an unwritten block holding data, one of KindUnwrittenData.
func (c *blockCheck) problems(dst []Problem, lba int64, data, md []byte, p dif.Params, written bool, sum uint32) []Problem {
	f := c.cls().Failures(data, md, p, written, sum, func(ce *dif.CheckError) error {
		dst = append(dst, ProblemOf(ce))
		return nil
	})
	switch f.What {
	case check.Sum:
		dst = append(dst, Problem{LBA: lba, Kind: KindSectorSum, Expected: uint64(f.Sum), Actual: uint64(sum),
			Err: &SumError{LBA: lba, Expected: f.Sum, Actual: sum}})
	case check.UnwrittenData:
		dst = append(dst, Problem{LBA: lba, Kind: KindUnwrittenData, Err: &UnwrittenDataError{LBA: lba, Offset: f.Offset}})
	}
	return dst
}
