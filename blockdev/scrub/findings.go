package scrub

import (
	"slices"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/store"
)

// FindingState is the life cycle of a finding: store.FindingState, whose
// values a findings log records.
type FindingState = store.FindingState

// The finding states.
const (
	// FindingOpen: the failure was seen and not since resolved.
	FindingOpen = store.FindingOpen
	// FindingRecheckedOK: a later check of the blocks passed (an
	// errors-only scrub, or a re-read of a transient failure).
	FindingRecheckedOK = store.FindingRecheckedOK
	// FindingClosed: resolved (accepted, or rewritten by a write).
	FindingClosed = store.FindingClosed
	// FindingRepaired: a verified copy was written over the blocks
	// (Finding.Source, Finding.Leg).
	FindingRepaired = store.FindingRepaired
	// FindingUnrepairable: no repair source had a copy that verifies.
	FindingUnrepairable = store.FindingUnrepairable
)

// A Finding is a Problem as recorded in a findings log: blocks [LBA, LBA+N)
// failed the check Kind. It is identified by (LBA, Kind).
type Finding struct {
	LBA      int64         `json:"lba"`
	N        int64         `json:"n"` // blocks; scrubs record 1
	Kind     blockdev.Kind `json:"kind"`
	Expected uint64        `json:"expected"` // computed value (0 for blockdev.KindIO)
	Actual   uint64        `json:"actual"`   // stored value (0 for blockdev.KindIO)
	// Transient: the block failed at first and passed on a re-read; such a
	// finding is recorded with State FindingRecheckedOK.
	Transient bool         `json:"transient,omitempty"`
	State     FindingState `json:"state"`
	// Repair is what the repair stage did (blockdev.Problem.Repair); Source
	// names the copy taken or found (or the sources tried, unrepairable)
	// and Leg the mirror leg repaired.
	Repair blockdev.RepairOutcome `json:"-"`
	Source string                 `json:"source,omitempty"`
	Leg    int                    `json:"leg,omitempty"`
	// Count is the number of times the finding was seen (across passes),
	// FirstSeen and LastSeen when; all three are filled in by the log, and
	// zero when there is none.
	Count     uint64    `json:"count,omitempty"`
	FirstSeen time.Time `json:"first_seen,omitzero"`
	LastSeen  time.Time `json:"last_seen,omitzero"`
	// Err is the cause (a *dif.CheckError, an I/O error) when the finding
	// comes from this run's check; nil when loaded from a log.
	Err error `json:"-"`
}

// Bad reports whether the finding's blocks are bad: open or unrepairable,
// and not transient. These are the blocks the badblocks and mapfile
// writers list.
func (f Finding) Bad() bool { return f.State.Bad() && !f.Transient }

// End returns LBA+N.
func (f Finding) End() int64 { return f.LBA + max(f.N, 1) }

// FindingOf turns a Problem seen at time now into the Finding that records
// it: one block, open, or rechecked-ok if it was transient.
func FindingOf(p blockdev.Problem, now time.Time) Finding {
	f := Finding{
		LBA: p.LBA, N: 1, Kind: p.Kind, Expected: p.Expected, Actual: p.Actual,
		Transient: p.Transient, State: FindingOpen, LastSeen: now, Err: p.Err,
		Repair: p.Repair, Source: p.Source, Leg: p.Leg,
	}
	switch {
	case p.Transient:
		f.State = FindingRecheckedOK
	case p.Repair == blockdev.RepairRepaired:
		f.State = FindingRepaired
	case p.Repair == blockdev.RepairUnavailable:
		f.State = FindingUnrepairable
	}
	return f
}

// Problem returns the check result f records.
func (f Finding) Problem() blockdev.Problem {
	return blockdev.Problem{LBA: f.LBA, Kind: f.Kind, Expected: f.Expected, Actual: f.Actual, Transient: f.Transient, Err: f.Err,
		Repair: f.Repair, Source: f.Source, Leg: f.Leg}
}

// BadRanges collects bad blocks as sorted, merged ranges, for the badblocks
// and mapfile writers. Adding in LBA order (as a scrub delivers findings)
// costs O(1) per block and memory per range, not per block. The zero value
// is ready to use.
type BadRanges struct {
	r      []blockdev.BlockRange
	sorted bool // r may need sorting and merging
}

// AddFinding adds the blocks of f if f.Bad().
func (b *BadRanges) AddFinding(f Finding) {
	if f.Bad() {
		b.Add(f.LBA, max(f.N, 1))
	}
}

// Add adds the blocks [lba, lba+n); n <= 0 adds nothing.
func (b *BadRanges) Add(lba, n int64) {
	if n <= 0 || lba < 0 {
		return
	}
	if k := len(b.r); k > 0 {
		last := &b.r[k-1]
		if lba >= last.LBA && lba <= last.End() {
			last.N = max(last.End(), lba+n) - last.LBA
			return
		}
		if lba < last.LBA {
			b.sorted = true
		}
	}
	b.r = append(b.r, blockdev.BlockRange{LBA: lba, N: n})
}

// Ranges returns the bad ranges, sorted by LBA, non-overlapping and not
// adjacent. The slice belongs to b until the next Add.
func (b *BadRanges) Ranges() []blockdev.BlockRange {
	if b.sorted {
		slices.SortFunc(b.r, func(x, y blockdev.BlockRange) int {
			switch {
			case x.LBA < y.LBA:
				return -1
			case x.LBA > y.LBA:
				return 1
			}
			return 0
		})
		out := b.r[:0]
		for _, r := range b.r {
			if k := len(out); k > 0 && r.LBA <= out[k-1].End() {
				out[k-1].N = max(out[k-1].End(), r.End()) - out[k-1].LBA
				continue
			}
			out = append(out, r)
		}
		b.r, b.sorted = out, false
	}
	return b.r
}

// Blocks returns the number of bad blocks.
func (b *BadRanges) Blocks() int64 {
	var n int64
	for _, r := range b.Ranges() {
		n += r.N
	}
	return n
}
