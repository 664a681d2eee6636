package blockdev

import (
	"context"

	"github.com/difctl/difctl/dif"
)

// A CheckSource is anything whose blocks can be verified in runs: a
// store-backed Volume, an extended-LBA image, a DIX pair. The scrub engine
// and `difctl verify` work on this interface only.
type CheckSource interface {
	// Blocks is the number of logical blocks; BlockSize their data size.
	Blocks() int64
	BlockSize() int
	// ScratchSize is the scratch space CheckRun needs for a run of n blocks.
	ScratchSize(n int) int
	// CheckRun reads and verifies blocks [lba, lba+n) using scratch
	// (at least ScratchSize(n) bytes, owned by the caller and reused between
	// calls; CheckRun allocates nothing per block). It calls report, in LBA
	// order, for every block that failed a check or could not be read, and
	// counts every block in the returned stats. A failing block is re-read
	// opt.Rereads times (around the page cache where the device can) before
	// it is reported; one that then passes is counted as Transient and
	// reported with Transient set. The error is non-nil only for a failure
	// of the run as a whole (context cancelled, device closed); failing
	// blocks are not errors. CheckRun is safe for concurrent use on
	// disjoint runs.
	CheckRun(ctx context.Context, lba int64, n int, scratch []byte, opt CheckOptions, report func(Problem)) (RunStats, error)
}

// CheckOptions tune a CheckRun.
type CheckOptions struct {
	// Uncached reads around the page cache (O_DIRECT or dropping the cached
	// pages first) where the device allows it. Default false.
	Uncached bool
	// Rereads is how many times a failing block is read again before it is
	// reported as failed. Default 0: report at once.
	Rereads int
	// Repair writes over every failing block a copy that verifies against
	// its tuple, from the sources (the Volume's Options.RepairSources, then
	// Sources), and reports it repaired (Problem.Repair). Without it, a
	// check with sources only reports which failing blocks are repairable.
	// Sources other than a Volume's ignore both. Default false.
	Repair bool
	// Sources are repair sources for this check, after the Volume's.
	Sources []RepairSource
}

// Kind names what failed in a Problem, as written to the findings log.
type Kind string

const (
	KindGuard      Kind = "guard"       // PI guard mismatch
	KindAppTag     Kind = "app-tag"     // application tag mismatch
	KindRefTag     Kind = "ref-tag"     // reference tag mismatch (misplaced block)
	KindStorageTag Kind = "storage-tag" // storage tag mismatch
	KindSectorSum  Kind = "sector-crc"  // the store's CRC-32C sector checksum
	KindTorn       Kind = "torn"        // matches neither tuple of an interrupted write
	KindIO         Kind = "io"          // the block could not be read
	// KindUnwrittenData: an unwritten (never written, or discarded) block
	// whose data is not zeros (see ErrUnwrittenData).
	KindUnwrittenData Kind = "unwritten-data"
)

// KindOf maps a dif field to its Kind.
func KindOf(f dif.Field) Kind {
	switch f {
	case dif.FieldGuard:
		return KindGuard
	case dif.FieldAppTag:
		return KindAppTag
	case dif.FieldRefTag:
		return KindRefTag
	case dif.FieldStorageTag:
		return KindStorageTag
	}
	return Kind(f.String())
}

// ProblemOf returns the Problem of a failed PI field, as dif reports it.
func ProblemOf(ce *dif.CheckError) Problem {
	return Problem{LBA: ce.LBA, Kind: KindOf(ce.Field), Expected: ce.Expected, Actual: ce.Actual, Err: ce}
}

// A Problem is one block that is not clean. A block failing several checks
// gives one Problem per failed check.
type Problem struct {
	LBA       int64
	Kind      Kind
	Expected  uint64 // computed value (zero for KindIO)
	Actual    uint64 // stored value (zero for KindIO)
	Transient bool   // failed at first, passed on a re-read
	Err       error  // the *dif.CheckError, I/O error or other cause
	// Repair is what the repair stage did with the block (read_repair.go):
	// nothing, repaired from Source onto Leg, served a verified copy to a
	// read, found a copy (a check that does not repair), or found none
	// (Source then lists the sources tried). RepairErr is why a verified
	// copy could not be written (RepairServed).
	Repair    RepairOutcome
	Source    string
	Leg       int
	RepairErr error
}

// RunStats count the blocks of checked runs by outcome. Blocks = OK +
// Escaped + Unwritten + Failed; Transient blocks are counted as OK too.
type RunStats struct {
	Blocks    int64
	OK        int64
	Escaped   int64 // skipped by an escape tag (app tag 0xFFFF ...)
	Unwritten int64 // never written or discarded (all-ones tags / no tuple)
	Failed    int64
	Transient int64
	// Repaired counts the blocks that failed and were repaired from a
	// verified copy; they are counted as OK too.
	Repaired int64
}

// Add accumulates o into s.
func (s *RunStats) Add(o RunStats) {
	s.Blocks += o.Blocks
	s.OK += o.OK
	s.Escaped += o.Escaped
	s.Unwritten += o.Unwritten
	s.Failed += o.Failed
	s.Transient += o.Transient
	s.Repaired += o.Repaired
}

// Count adds one block classified as state to its outcome: OK, Escaped,
// Unwritten, or Failed (dif.StateFailed). It leaves Blocks and Transient
// alone.
func (s *RunStats) Count(state dif.State) {
	switch state {
	case dif.StateOK:
		s.OK++
	case dif.StateEscaped:
		s.Escaped++
	case dif.StateUnwritten:
		s.Unwritten++
	default:
		s.Failed++
	}
}
