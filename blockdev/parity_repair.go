package blockdev

import (
	"context"
	"fmt"
	"strings"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/check"
	"github.com/difctl/difctl/blockdev/parity"
)

// Parity as a repair source (stage 6 of a verified read, read_repair.go):
// after the mirror legs and the repair sources, a failing block is rebuilt
// from its stripe. Every block of the stripe that fails (a data block
// against its tuple, a parity block against its checksum, or one that
// cannot be read) is an erasure; with at most m the stripe is rebuilt,
// and the rebuilt block goes to the repair stage like a leg's copy: it is
// used (returned, written, synced, recorded repaired with source
// ParitySource) only if it verifies against the block's tuple, with every
// check of a read (the keyed tag on a keyed volume). A stripe with more
// than m erasures rebuilds nothing: the block is unrepairable. Parity
// blocks found damaged are rewritten with their rebuilt contents when
// those match their recorded checksums and the request writes repairs.

// ParitySource names the parity in problems and findings (Problem.Source).
const ParitySource = "parity"

// parityRepairCopy rebuilds block i (lba) of the run in sc from the
// volume's parity into rs.cand and reports whether it verifies; tried
// gets the source's name if it did not.
func (v *Volume) parityRepairCopy(i int, lba int64, sc *scratch, rs *repairScratch, tried *strings.Builder) (bool, error) {
	ok, err := v.par.rebuildBlock(lba, rs.cand, sc.req.repair == repairWrite)
	if err != nil {
		return false, err
	}
	if ok && v.verifies(rs.cand, i, lba, sc) {
		v.par.rebuilt.Add(1)
		return true, nil
	}
	if tried.Len() > 0 {
		tried.WriteString(", ")
	}
	tried.WriteString(ParitySource)
	return false, nil
}

// rebuildBlock rebuilds data block lba from its stripe into dst (its data
// as the parity describes it) and reports whether it could: the stripe is
// recorded and has at most m erasures, counting lba itself. With fix, the
// stripe's damaged parity blocks are rewritten (and the parity file
// synced) with their rebuilt contents where those match their recorded
// checksums (a write of them that fails leaves them damaged). The error
// is a failure of the store or a fatal device error.
func (pv *parityVol) rebuildBlock(lba int64, dst []byte, fix bool) (bool, error) {
	pv.mu.Lock()
	defer pv.mu.Unlock()
	l := pv.l
	k, m, bs := l.DataShards(), pv.m, pv.bs
	s, target := l.Locate(lba)
	sums, ok, err := pv.sums(s)
	if err != nil || !ok {
		return false, err
	}
	if st, err := pv.loadBlock(lba, dst); err != nil || st == blockZero {
		// The parity describes an unwritten block as zeros.
		clear(dst)
		return err == nil, err
	}
	par := device.AlignedBuffer(m * bs)
	errs := make([]error, m)
	nbad, err := pv.file.Read(s, par, sums, errs)
	if err != nil {
		return false, err
	}
	buf, _, err := pv.loadStripe(s, nil)
	if err != nil {
		return false, err
	}
	shards := make([][]byte, k+m)
	erased := make([]bool, k+m)
	n := nbad
	for pos := range k {
		if pos == target {
			continue
		}
		shards[pos] = buf[pos*bs : (pos+1)*bs]
		if pv.badPos[pos] {
			// Lost, and not wanted: only the target is rebuilt.
			shards[pos], erased[pos] = nil, true
			n++
		}
	}
	n++ // the target
	if n > m {
		return false, nil
	}
	shards[target], erased[target] = dst, true
	for j := range m {
		shards[k+j] = par[j*bs : (j+1)*bs]
		if errs[j] != nil {
			erased[k+j] = true
		}
	}
	if err := pv.codec.Rebuild(shards, erased); err != nil {
		return false, nil
	}
	if fix && nbad > 0 {
		// A parity block that cannot be rewritten stays damaged, found
		// again next time; the rebuilt block is good all the same.
		if err := pv.rewriteParity(s, par, sums, errs); err != nil && check.Fatal(err) {
			return true, err
		}
	}
	return true, nil
}

// rewriteParity writes the rebuilt parity blocks of stripe s (par; errs
// marks those that were damaged) whose contents match their recorded
// checksums, and syncs the parity file. Caller holds pv.mu.
func (pv *parityVol) rewriteParity(s int64, par []byte, sums []uint32, errs []error) error {
	bs := pv.bs
	wrote := false
	for j, e := range errs {
		if e == nil {
			continue
		}
		p := par[j*bs : (j+1)*bs]
		if parity.Checksum(s, j, p) != sums[j] {
			continue
		}
		if _, err := pv.dev.WriteAt(p, pv.l.ParityOffset(s, j)); err != nil {
			return fmt.Errorf("blockdev: rewriting parity block %d of stripe %d: %w", j, s, err)
		}
		wrote = true
		pv.parityFixed.Add(1)
	}
	if wrote {
		if err := pv.dev.Sync(); err != nil {
			return fmt.Errorf("blockdev: sync of the parity file %s: %w", pv.cfg.Path, err)
		}
	}
	return nil
}

// ParityScrubReport counts what ScrubParity found and did.
type ParityScrubReport struct {
	// Stripes checked (those with parity recorded), Unrecorded those
	// without.
	Stripes, Unrecorded int64
	// Damaged parity blocks (a checksum mismatch or a read error);
	// Rewritten those rebuilt and written back (with repair).
	Damaged, Rewritten int64
	// Unfixable parity blocks could not be rebuilt: their stripe's data
	// has a failing block as well (a repair of the data rebuilds both), or
	// the rebuilt block does not match its checksum.
	Unfixable int64
}

// ScrubParity checks every parity block of the stripes with parity
// recorded against its checksum and, with repair, rebuilds each damaged
// one from its stripe's data, which must verify, and writes it back if
// the rebuilt block matches its recorded checksum (then syncs the parity
// file). Damaged parity is never used by the repair stage either way.
func (v *Volume) ScrubParity(ctx context.Context, repair bool) (ParityScrubReport, error) {
	var rep ParityScrubReport
	done, err := v.enter()
	if err != nil {
		return rep, err
	}
	defer done()
	pv := v.par
	if pv == nil {
		return rep, fmt.Errorf("blockdev: scrub parity: the volume has no parity in use")
	}
	if repair && v.opts.ReadOnly {
		return rep, fmt.Errorf("blockdev: scrub parity: %w", device.ErrReadOnly)
	}
	m, bs := pv.m, pv.bs
	par := device.AlignedBuffer(m * bs)
	fixed := device.AlignedBuffer(m * bs)
	errs := make([]error, m)
	for s := range pv.l.Stripes() {
		if s%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
		}
		err := func() error {
			pv.mu.Lock()
			defer pv.mu.Unlock()
			sums, ok, err := pv.sums(s)
			if err != nil {
				return err
			}
			if !ok {
				rep.Unrecorded++
				return nil
			}
			rep.Stripes++
			nbad, err := pv.file.Read(s, par, sums, errs)
			if err != nil || nbad == 0 {
				return err
			}
			rep.Damaged += int64(nbad)
			if !repair {
				return nil
			}
			ok, err = pv.computeStripe(s, nil, fixed)
			if err != nil {
				return err
			}
			if !ok {
				rep.Unfixable += int64(nbad)
				return nil
			}
			before := pv.parityFixed.Load()
			if err := pv.rewriteParity(s, fixed, sums, errs); err != nil {
				return err
			}
			w := pv.parityFixed.Load() - before
			rep.Rewritten += w
			rep.Unfixable += int64(nbad) - w
			return nil
		}()
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}
