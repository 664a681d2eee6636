package blockdev

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/store"
)

// Stage 6 of a verified read (verifyRun): repair. A block still failing
// after the re-reads of stage 4 and the keyed check of stage 5 is looked
// for in the volume's other copies: its own device read again, then each
// repair source (Options.RepairSources, CheckOptions.Sources) in turn.
// The first copy that verifies against the block's stored tuple (guard,
// app and ref tags, the sector checksum and, on a keyed volume, the keyed
// tag: everything a read checks) is the block's data:
//
//   - a read (ReadAt, NBD) returns it, so the caller sees no error;
//   - on a volume that can write, the copy is written over the bad block,
//     the device synced and the block read back and verified, under a
//     finding recorded open and synced before the write (the intent), and
//     set to repaired after it;
//   - a check that does not repair (CheckOptions.Repair false) only
//     reports that the block is repairable, and from where.
//
// No copy that did not verify is ever written or returned, and the tuple
// never changes: a repair restores the data the tuple already describes.
// So a crash at any instant of a repair leaves the block as it was (bad),
// repaired, or torn by the write, which fails as it did before; the
// finding stays open until a later check or repair settles it. A source
// taken before later writes (a stale backup) verifies only for the blocks
// it still holds unchanged; the others stay failing and are reported
// unrepairable.
//
// Repairs are rare and serialized (Volume.repairMu): the stage reads the
// block again under that lock, so that two reads of one bad block repair
// it once.

// RepairSource is a copy of a volume's data that the repair stage may take
// blocks from: a backup or snapshot of the image, an NBD export, another
// device. It has no tuples of its own. ReadAt reads the bytes at the
// volume's offsets; a source that ends early (or fails) has no copy of the
// blocks it cannot read.
type RepairSource interface {
	io.ReaderAt
	// String names the source in problems and findings: a path, or a URL
	// without credentials.
	String() string
}

// NewRepairSource returns r as a RepairSource named name.
func NewRepairSource(r io.ReaderAt, name string) RepairSource { return namedSource{r, name} }

type namedSource struct {
	io.ReaderAt
	name string
}

func (s namedSource) String() string { return s.name }

// RepairOutcome is what the repair stage did with a failing block.
type RepairOutcome uint8

const (
	// RepairNone: no repair was tried (no sources, or repair is off).
	RepairNone RepairOutcome = iota
	// RepairRepaired: a copy from Problem.Source that verifies was written
	// over the block, synced and read back verified. The block passes.
	RepairRepaired
	// RepairServed: a read returned a copy from Problem.Source that
	// verifies; the medium was not changed (a read-only volume, or the
	// write failed: Problem.RepairErr).
	RepairServed
	// RepairAvailable: a check that does not repair found a copy that
	// verifies in Problem.Source. The block is still bad.
	RepairAvailable
	// RepairUnavailable: no source holds a copy that verifies
	// (Problem.Source lists those tried). The block is still bad.
	RepairUnavailable
)

var repairOutcomes = [...]string{"", "repaired", "served", "repairable", "unrepairable"}

// String returns "repaired", "served", "repairable", "unrepairable", or ""
// for RepairNone.
func (o RepairOutcome) String() string {
	if int(o) < len(repairOutcomes) {
		return repairOutcomes[o]
	}
	return "RepairOutcome(" + strconv.Itoa(int(o)) + ")"
}

// Passes reports whether the problem's block now passes: it was transient,
// or a verified copy replaced it (repaired, or served to a read).
func (p Problem) Passes() bool {
	return p.Transient || p.Repair == RepairRepaired || p.Repair == RepairServed
}

// RepairError reports that the repair stage could not write a verified
// copy over a bad block: the write, the sync or the read-back failed. The
// block keeps failing (its finding stays open); a read still returns the
// verified copy.
type RepairError struct {
	LBA    int64
	Leg    int
	Source string
	Err    error
}

func (e *RepairError) Error() string {
	return fmt.Sprintf("blockdev: repair of block %d from %s: %v", e.LBA, e.Source, e.Err)
}

func (e *RepairError) Unwrap() error { return e.Err }

// ErrNoCopies reports a repair asked of a volume with no copies to repair
// from: no mirror leg, no repair source.
var ErrNoCopies = errors.New("blockdev: repair: no repair source and no mirror leg")

// errReadBack is a repaired block that did not verify when read back.
var errReadBack = errors.New("the copy written did not verify when read back")

// repairMode is how a request repairs (readReq.repair).
type repairMode uint8

const (
	repairOff   repairMode = iota
	repairProbe            // report the copies found; write nothing, serve nothing
	repairServe            // a read: return a verified copy, write nothing
	repairWrite            // write a verified copy over the bad block
)

// repairLeg is a copy of the volume's data that a repair reads, and
// writes to when its copy fails: the volume's device, or each online leg
// of a mirrored volume (ml).
type repairLeg struct {
	dev  device.Device
	leg  int
	name string
	ml   *mleg
}

// repairScratch is the repair stage's working memory: a candidate copy
// and the verified one, the legs read and those whose copy failed.
type repairScratch struct {
	cand, good []byte
	legs, bad  []repairLeg
	tried      strings.Builder
}

// maxSourceNames bounds Problem.Source when it lists the sources tried.
const maxSourceNames = 512

// readRepairMode is how ReadAt repairs: not at all without sources (or
// with Options.NoRepair, or on a keyed volume opened without its key,
// whose copies cannot be verified), by serving the copy on a read-only
// volume, by writing it otherwise.
func (v *Volume) readRepairMode() repairMode {
	switch {
	case v.opts.NoRepair || !v.hasCopies(nil) || v.keyedNoKey:
		return repairOff
	case v.opts.ReadOnly:
		return repairServe
	}
	return repairWrite
}

// checkRepairMode is how CheckRun repairs with opt: it writes only when
// asked to, and then refuses a volume that cannot write.
func (v *Volume) checkRepairMode(opt CheckOptions) (repairMode, error) {
	if opt.Repair {
		switch {
		case v.opts.ReadOnly:
			return 0, fmt.Errorf("blockdev: repair: %w (the volume is open read-only)", device.ErrReadOnly)
		case v.keyedNoKey:
			return 0, fmt.Errorf("blockdev: repair: %w", ErrKeyRequired)
		case !v.hasCopies(opt.Sources):
			return 0, ErrNoCopies
		}
		return repairWrite, nil
	}
	if !v.hasCopies(opt.Sources) || v.keyedNoKey {
		return repairOff, nil
	}
	return repairProbe, nil
}

// hasCopies reports whether the volume has copies of its data to repair
// from: mirror legs, repair sources (its own, and extra), or parity.
func (v *Volume) hasCopies(extra []RepairSource) bool {
	return v.mirror != nil || len(v.opts.RepairSources)+len(extra) > 0 || v.par != nil
}

// checkSources refuses repair sources whose size (if they tell it) is not
// the volume's.
func (v *Volume) checkSources(srcs []RepairSource) error {
	for _, s := range srcs {
		if s == nil {
			return errors.New("blockdev: nil repair source")
		}
		var r any = s
		if ns, ok := s.(namedSource); ok {
			r = ns.ReaderAt
		}
		if sz, ok := r.(interface{ Size() int64 }); ok && sz.Size() != v.Size() {
			return &MismatchError{Volume: v.opts.Name, Field: "size of repair source " + s.String(),
				Stored: strconv.FormatInt(v.Size(), 10), Given: strconv.FormatInt(sz.Size(), 10)}
		}
	}
	return nil
}

// repairRun is stage 6 for the verified run of n blocks at lba: each block
// with a problem that is not transient goes through repairBlock, which
// marks its problems with the outcome and, where the block now passes,
// puts the verified copy in data and moves it from st.Failed to st.OK.
func (v *Volume) repairRun(lba int64, n int, data []byte, sc *scratch, st *RunStats) error {
	probs := sc.probs
	for k := 0; k < len(probs); {
		b := probs[k].LBA
		j, failing := k, false
		for ; j < len(probs) && probs[j].LBA == b; j++ {
			failing = failing || !probs[j].Transient
		}
		if i := b - lba; failing && i >= 0 && i < int64(n) {
			if err := v.repairBlock(int(i), b, data[i*int64(v.bs):(i+1)*int64(v.bs)], sc, probs[k:j], st); err != nil {
				return err
			}
		}
		k = j
	}
	return nil
}

// verifies reports whether data passes every check of block i of the run
// in sc: its tuple and sector sum, and on a keyed volume opened with its
// key its keyed tag (through the run checkTags checked).
func (v *Volume) verifies(data []byte, i int, lba int64, sc *scratch) bool {
	var sum uint32
	if v.sums {
		sum = sc.sums[i]
	}
	written := sc.written.Has(i)
	if !v.ok(data, sc.tuples[i*v.ts:(i+1)*v.ts], v.paramsFrom(sc.req.ref, lba), written, sum) {
		return false
	}
	return v.tags == nil || sc.tags.Verify(&sc.krun, i, data)
}

// mark sets the outcome of a block's problems.
func mark(probs []Problem, o RepairOutcome, source string, leg int, err error) {
	for k := range probs {
		probs[k].Repair, probs[k].Source, probs[k].Leg, probs[k].RepairErr = o, source, leg, err
	}
}

// repairBlock repairs block i (lba) of the run in sc, whose problems are
// probs (see the top of the file). dst is the block's slot in the run's
// data. The error is a failure of the store (recording the findings) or
// of the request's context.
func (v *Volume) repairBlock(i int, lba int64, dst []byte, sc *scratch, probs []Problem, st *RunStats) error {
	if sc.repair == nil {
		sc.repair = &repairScratch{cand: device.AlignedBuffer(v.bs), good: device.AlignedBuffer(v.bs)}
	}
	rs := sc.repair
	off := lba * int64(v.bs)
	v.repairMu.Lock()
	defer v.repairMu.Unlock()
	if err := sc.req.ctx.Err(); err != nil {
		return err
	}
	good, source, bad, err := v.findCopy(i, lba, sc)
	if err != nil {
		return err
	}
	if len(bad) == 0 {
		// Repaired by another request since this one read it.
		copy(dst, good)
		for k := range probs {
			probs[k].Transient = true
		}
		st.Failed--
		st.OK++
		st.Transient++
		return nil
	}
	if good == nil {
		v.st.unrepairable.Add(1)
		mark(probs, RepairUnavailable, source, bad[0].leg, nil)
		if sc.req.record {
			return v.recordRepairs(probs, store.FindingUnrepairable, false)
		}
		return nil
	}
	switch sc.req.repair {
	case repairProbe:
		mark(probs, RepairAvailable, source, bad[0].leg, nil)
		return nil
	case repairServe:
		v.serve(dst, good, probs, source, bad[0].leg, nil, st)
		return nil
	}
	if sc.rbatch != nil {
		return v.repairBatched(lba, dst, good, source, bad, probs, st, sc.rbatch)
	}
	// Write: the intent (the findings, open, synced), the copy over each
	// bad leg, synced and read back, then the findings repaired.
	if err := v.recordRepairs(probs, store.FindingOpen, true); err != nil {
		return err
	}
	for _, l := range bad {
		if err := v.writeRepair(l, good, off, rs.cand, i, lba, sc); err != nil {
			v.legFailed(l, lba, err)
			v.serve(dst, good, probs, source, l.leg, &RepairError{LBA: lba, Leg: l.leg, Source: source, Err: err}, st)
			return nil
		}
	}
	copy(dst, good)
	mark(probs, RepairRepaired, source, bad[0].leg, nil)
	st.Failed--
	st.OK++
	st.Repaired++
	v.st.repaired.Add(1)
	if err := v.recordRepairs(probs, store.FindingRepaired, true); err != nil {
		return err
	}
	if v.opts.OnRepair != nil {
		v.opts.OnRepair(probs[0])
	}
	return nil
}

// findCopy reads block i (lba) of the run in sc from every leg, then, if
// no leg's copy verifies, from the repair sources in turn, then rebuilds
// it from the parity (parity_repair.go), and returns the first copy that
// verifies (nil if none does) with the name of its source (with none, the
// names of the sources tried), and the legs whose copy failed (in
// sc.repair, valid until the next repair). A read reads the legs around
// the cache; a check reads through it (the copy it takes is verified all
// the same, and a check has many blocks to repair). The error is a
// failure of the store or of the parity's device.
func (v *Volume) findCopy(i int, lba int64, sc *scratch) (good []byte, source string, bad []repairLeg, err error) {
	rs := sc.repair
	off := lba * int64(v.bs)
	uncached := sc.rbatch == nil && sc.req.repair != repairProbe
	rs.legs = v.repairLegs(rs.legs[:0])
	rs.bad = rs.bad[:0]
	for _, l := range rs.legs {
		if readDevice(l.dev, rs.cand, off, uncached) == nil && v.verifies(rs.cand, i, lba, sc) {
			if good == nil {
				good, source = rs.good, l.name
				copy(good, rs.cand)
			}
			continue
		}
		rs.bad = append(rs.bad, l)
	}
	if good != nil || len(rs.bad) == 0 {
		return good, source, rs.bad, nil
	}
	rs.tried.Reset()
	for _, srcs := range [2][]RepairSource{v.opts.RepairSources, sc.req.sources} {
		for _, s := range srcs {
			if readSource(s, rs.cand, off) == nil && v.verifies(rs.cand, i, lba, sc) {
				copy(rs.good, rs.cand)
				return rs.good, s.String(), rs.bad, nil
			}
			if rs.tried.Len() > 0 {
				rs.tried.WriteString(", ")
			}
			if rs.tried.Len() < maxSourceNames {
				rs.tried.WriteString(s.String())
			}
		}
	}
	if v.par != nil {
		ok, err := v.parityRepairCopy(i, lba, sc, rs, &rs.tried)
		if err != nil {
			return nil, "", rs.bad, err
		}
		if ok {
			copy(rs.good, rs.cand)
			return rs.good, ParitySource, rs.bad, nil
		}
	}
	names := rs.tried.String()
	if len(names) > maxSourceNames {
		names = names[:maxSourceNames] + "..."
	}
	return nil, names, rs.bad, nil
}

// repairBatch is what the repairs of a check (CheckRun, Repair) leave to
// do at its end (flushRepairs): the legs written, to sync once, and the
// problems repaired, to record once they are. A check repairs many blocks;
// a sync of the store and of each leg per block would cost it more than
// its reads.
type repairBatch struct {
	legs []repairLeg
	done []Problem
}

// repairBatched is repairBlock's write for a check: the copy written over
// each bad leg, the leg and the problems left for flushRepairs to sync and
// record. A leg whose write fails goes offline; the block stays failing,
// repairable.
//
// A check records its repairs once they are synced, at its end, with no
// intent before the writes (one synced store commit per block would cost a
// check more than its reads). So a crash during a check that repairs may
// leave blocks repaired on the medium (with the very data their tuples
// describe) whose repair the findings log does not show; nothing else.
func (v *Volume) repairBatched(lba int64, dst, good []byte, source string, bad []repairLeg, probs []Problem, st *RunStats, b *repairBatch) error {
	off := lba * int64(v.bs)
	for _, l := range bad {
		if _, err := l.dev.WriteAt(good, off); err != nil {
			v.legFailed(l, lba, err)
			mark(probs, RepairAvailable, source, l.leg, &RepairError{LBA: lba, Leg: l.leg, Source: source, Err: err})
			return nil
		}
		if !slices.ContainsFunc(b.legs, func(x repairLeg) bool { return x.leg == l.leg }) {
			b.legs = append(b.legs, l)
		}
	}
	copy(dst, good)
	mark(probs, RepairRepaired, source, bad[0].leg, nil)
	st.Failed--
	st.OK++
	st.Repaired++
	v.st.repaired.Add(1)
	b.done = append(b.done, probs...)
	return nil
}

// flushRepairs ends the repairs of a check: it syncs the legs written and
// records the findings repaired, synced. A leg that fails to sync goes
// offline, stale as a whole, and the check fails with its error.
func (v *Volume) flushRepairs(b *repairBatch) error {
	if b == nil || len(b.done) == 0 && len(b.legs) == 0 {
		return nil
	}
	defer func() { b.legs, b.done = b.legs[:0], b.done[:0] }()
	for _, l := range b.legs {
		if err := l.dev.Sync(); err != nil {
			if l.ml != nil {
				v.mirror.failed(l.ml, 0, v.blocks, err)
			}
			return &RepairError{LBA: -1, Leg: l.leg, Source: l.name, Err: fmt.Errorf("sync after repairs: %w", err)}
		}
	}
	now := time.Now().UTC()
	fs := make([]store.Finding, len(b.done))
	for k, p := range b.done {
		fs[k] = StoreFinding(p, now)
		fs[k].State, fs[k].Source, fs[k].Leg, fs[k].Repaired = store.FindingRepaired, p.Source, p.Leg, now
	}
	if _, err := v.tup.RecordFindings(fs, true); err != nil {
		return fmt.Errorf("blockdev: recording %d repairs: %w", len(fs), err)
	}
	return nil
}

// serve gives a read the verified copy good of a block it could not
// repair on the medium: the problems are marked served (their failure
// stands in a check, which never serves).
func (v *Volume) serve(dst, good []byte, probs []Problem, source string, leg int, err error, st *RunStats) {
	copy(dst, good)
	mark(probs, RepairServed, source, leg, err)
	st.Failed--
	st.OK++
}

// writeRepair writes the verified copy good of block i (lba) over leg l,
// syncs it and reads it back into cand, which must verify.
func (v *Volume) writeRepair(l repairLeg, good []byte, off int64, cand []byte, i int, lba int64, sc *scratch) error {
	if _, err := l.dev.WriteAt(good, off); err != nil {
		return err
	}
	if err := l.dev.Sync(); err != nil {
		return err
	}
	if err := readDevice(l.dev, cand, off, true); err != nil {
		return err
	}
	if !v.verifies(cand, i, lba, sc) {
		return errReadBack
	}
	return nil
}

// readSource reads the source's copy of a block into p: all of it, or an
// error.
func readSource(s RepairSource, p []byte, off int64) error {
	n, err := s.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// recordRepairs records the outcome of a block's repair in the findings
// log, one finding per problem: state open (the intent, before the write),
// repaired, or unrepairable. The last commit is synced if sync.
func (v *Volume) recordRepairs(probs []Problem, s store.FindingState, sync bool) error {
	now := time.Now().UTC()
	for k, p := range probs {
		last := sync && k == len(probs)-1
		var err error
		if s == store.FindingOpen {
			_, err = v.tup.RecordFinding(StoreFinding(p, now), last)
		} else {
			if s == store.FindingUnrepairable {
				if _, err = v.tup.RecordFinding(StoreFinding(p, now), false); err != nil {
					return fmt.Errorf("blockdev: recording the repair of block %d: %w", p.LBA, err)
				}
			}
			_, err = v.tup.SetFindingRepair(p.LBA, string(p.Kind), s, p.Source, p.Leg, now, last)
		}
		if err != nil {
			return fmt.Errorf("blockdev: recording the repair of block %d: %w", p.LBA, err)
		}
	}
	return nil
}

// StoreFinding returns the findings-log record of a problem seen at now:
// its Field the Kind, Expected and Actual as 8-byte big-endian values (none
// for KindIO), state open, or rechecked-ok if it was transient.
func StoreFinding(p Problem, now time.Time) store.Finding {
	f := store.Finding{LBA: p.LBA, N: 1, Field: string(p.Kind), LastSeen: now.UTC(), State: store.FindingOpen}
	if p.Kind != KindIO {
		f.Expected = binary.BigEndian.AppendUint64(nil, p.Expected)
		f.Actual = binary.BigEndian.AppendUint64(nil, p.Actual)
	}
	if p.Transient {
		f.State = store.FindingRecheckedOK
	}
	return f
}

// RepairOptions tune Volume.Repair.
type RepairOptions struct {
	// Start and End select the blocks [Start, End); End 0 means the end.
	Start, End int64
	// Rereads is how many times a failing block is read again before its
	// repair. Default 0.
	Rereads int
	// OnProblem, if not nil, receives every problem found, with its
	// outcome, in LBA order.
	OnProblem func(Problem)
}

// RepairReport counts what Volume.Repair checked and did.
type RepairReport struct {
	RunStats
	// Unrepairable counts the blocks still failing.
	Unrepairable int64
}

// Repair checks blocks [opt.Start, opt.End) of the volume and writes over
// every failing block the copy from src (or from Options.RepairSources)
// that verifies against the block's tuple; see the repair stage at the
// top of read_repair.go. Blocks with no such copy are left as they are,
// reported with RepairUnavailable and recorded unrepairable. Every
// repair, and every block left failing, is recorded in the findings log.
// The error is a failure of the check as a whole (the store, the context);
// a source whose size is not the volume's is refused (*MismatchError).
func (v *Volume) Repair(ctx context.Context, src RepairSource, opt RepairOptions) (RepairReport, error) {
	var rep RepairReport
	end := opt.End
	if end == 0 {
		end = v.blocks
	}
	if opt.Start < 0 || end < opt.Start || end > v.blocks {
		return rep, fmt.Errorf("blockdev: repair of blocks [%d, %d) on a volume of %d blocks: %w", opt.Start, end, v.blocks, device.ErrOutOfRange)
	}
	co := CheckOptions{Rereads: opt.Rereads, Repair: true}
	if src != nil {
		co.Sources = []RepairSource{src}
	}
	scratch := device.AlignedBuffer(v.ScratchSize(v.chunk))
	lastBad := int64(-1)
	for lba := opt.Start; lba < end; {
		k := int(min(int64(v.chunk), end-lba))
		st, err := v.checkRun(ctx, lba, k, scratch, co, true, func(p Problem) {
			if !p.Passes() && p.LBA != lastBad {
				rep.Unrepairable++
				lastBad = p.LBA
			}
			if opt.OnProblem != nil {
				opt.OnProblem(p)
			}
		})
		rep.Add(st)
		if err != nil {
			return rep, err
		}
		lba += int64(k)
	}
	return rep, nil
}
