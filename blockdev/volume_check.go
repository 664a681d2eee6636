package blockdev

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
)

var _ CheckSource = (*Volume)(nil)

// ScratchSize implements CheckSource: CheckRun works in chunks of at most
// 1 MiB (or one block), so it needs at most that much.
func (v *Volume) ScratchSize(n int) int { return min(max(n, 0), v.chunk) * v.bs }

// CheckRun implements CheckSource with the verification core of ReadAt,
// one chunk at a time, each under a shared lock of its blocks so that
// concurrent writes through the volume never show as failures. Problems
// are reported after the chunk's lock is released. With repair sources
// (Options.RepairSources, opt.Sources) failing blocks go through the
// repair stage (read_repair.go): reported repairable, or with opt.Repair
// repaired; the caller records the findings of the problems reported,
// except those repaired, which the repair stage records itself.
func (v *Volume) CheckRun(ctx context.Context, lba int64, n int, scratch []byte, opt CheckOptions, report func(Problem)) (RunStats, error) {
	return v.checkRun(ctx, lba, n, scratch, opt, false, report)
}

// checkRun is CheckRun; record: the repair stage records every outcome
// in the findings log (Repair).
func (v *Volume) checkRun(ctx context.Context, lba int64, n int, scratch []byte, opt CheckOptions, record bool, report func(Problem)) (RunStats, error) {
	done, err := v.enter()
	if err != nil {
		return RunStats{}, err
	}
	defer done()
	if lba < 0 || n < 0 || lba > v.blocks || int64(n) > v.blocks-lba {
		return RunStats{}, fmt.Errorf("blockdev: check of blocks [%d, +%d) on a volume of %d blocks: %w", lba, n, v.blocks, device.ErrOutOfRange)
	}
	if len(scratch) < v.ScratchSize(n) {
		return RunStats{}, fmt.Errorf("blockdev: check: scratch of %d bytes, need %d", len(scratch), v.ScratchSize(n))
	}
	if opt.Rereads < 0 {
		opt.Rereads = 0
	}
	// A check returns no data: the mapping is verified in place, and the
	// tuples come from the store, page checksums checked.
	mode, err := v.checkRepairMode(opt)
	if err != nil {
		return RunStats{}, err
	}
	if err := v.checkSources(opt.Sources); err != nil {
		return RunStats{}, err
	}
	req := readReq{ctx: ctx, rereads: opt.Rereads, uncached: opt.Uncached, inPlace: true, storeTuples: true, ref: v.refBase,
		repair: mode, sources: opt.Sources, record: record}
	sc := v.getScratch()
	defer v.putScratch(sc)
	if mode == repairWrite {
		// The repairs are synced and recorded once, at the end.
		sc.rbatch = &repairBatch{}
		defer func() { sc.rbatch = nil }()
	}
	var cs checkScratch
	var total RunStats
	for i := 0; i < n; {
		if err := ctx.Err(); err != nil {
			return total, errors.Join(err, v.flushRepairs(sc.rbatch))
		}
		k := min(v.chunk, n-i)
		b := lba + int64(i)
		id := v.locks.lock(b, b+int64(k), false)
		var st RunStats
		probs := &sc.probs
		if v.mirror != nil {
			st, err = v.checkMirrored(b, k, scratch[:k*v.bs], sc, req, &cs)
			probs = &cs.probs
		} else {
			st, err = v.verifyRun(b, k, scratch[:k*v.bs], sc, req)
		}
		v.locks.unlock(id)
		if err != nil {
			return total, errors.Join(err, v.flushRepairs(sc.rbatch))
		}
		total.Add(st)
		if report != nil {
			for _, p := range *probs {
				report(p)
			}
		}
		i += k
	}
	return total, v.flushRepairs(sc.rbatch)
}

// checkScratch is the working memory of a check of a mirrored volume.
type checkScratch struct {
	probs  []Problem   // every leg's problems, in LBA order
	states []dif.State // the first leg's states
	bad    map[int64]bool
}

// checkMirrored verifies the k blocks at lba of a mirrored volume on every
// online leg (a check reads every copy, where a read takes one), each
// through the repair stage, which repairs every leg of a failing block at
// once. A leg's stale blocks are Resync's: their problems on that leg are
// left out, unless every online leg holds the block stale. The problems of
// all legs are left in cs.probs in LBA order. The stats are the first
// leg's (its stale blocks counted as passing), with the blocks that fail
// (or were repaired) only on another leg counted too.
func (v *Volume) checkMirrored(lba int64, k int, data []byte, sc *scratch, req readReq, cs *checkScratch) (RunStats, error) {
	cs.probs = cs.probs[:0]
	md := v.mirror
	legs := md.online()
	if len(legs) == 0 {
		st, err := v.verifyRun(lba, k, data, sc, req)
		cs.probs = append(cs.probs, sc.probs...)
		return st, err
	}
	// Fully fresh legs first: the first leg's stats are the run's.
	off, n := lba*int64(v.bs), int64(k*v.bs)
	slices.SortStableFunc(legs, func(a, b *mleg) int {
		return cmp.Compare(boolInt(!md.fresh(a, off, n)), boolInt(!md.fresh(b, off, n)))
	})
	skip := func(l *mleg, b int64) bool {
		if !md.staleAt(l, b) {
			return false
		}
		for _, o := range legs {
			if !md.staleAt(o, b) {
				return true
			}
		}
		return false // stale everywhere: every leg's word counts
	}
	var total RunStats
	clear(cs.bad)
	mark := func(b int64) {
		if cs.bad == nil {
			cs.bad = map[int64]bool{}
		}
		cs.bad[b] = true
	}
	for j, l := range legs {
		r := req
		r.dev, r.mapper = l.dev, nil
		if m, ok := l.dev.(device.Mapper); ok && !v.opts.NoMap {
			r.mapper = m
		}
		st, err := v.verifyRun(lba, k, data, sc, r)
		if err != nil {
			return RunStats{}, err
		}
		if j == 0 {
			total = st
			cs.states = append(cs.states[:0], sc.states[:k]...)
		}
		last := int64(-1)
		for _, p := range sc.probs {
			if skip(l, p.LBA) {
				if j == 0 && !p.Passes() && p.LBA != last {
					// Stale here, and checked on another leg.
					total.Failed--
					total.OK++
				}
				last = p.LBA
				continue
			}
			cs.probs = append(cs.probs, p)
			if p.LBA == last {
				continue
			}
			last = p.LBA
			if j == 0 {
				if !p.Passes() {
					mark(p.LBA)
				}
				continue
			}
			if cs.bad[p.LBA] {
				continue
			}
			switch {
			case !p.Passes():
				mark(p.LBA)
				switch cs.states[p.LBA-lba] {
				case dif.StateUnwritten:
					total.Unwritten--
				case dif.StateEscaped:
					total.Escaped--
				default:
					total.OK--
				}
				total.Failed++
			case p.Repair == RepairRepaired:
				total.Repaired++
			}
		}
	}
	sortProblems(cs.probs)
	return total, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
