package blockdev

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// Remap of a volume's reference tags (docs/formats.md): the volume was
// copied to a new offset, or its initial ref tag must change, so every
// stored tuple's ref tag moves from From+i to To+i. Data, guards, app and
// storage tags do not change, and nothing is recomputed from the data.
//
// A remap is offline and journaled (store.Journal, OpRemap):
//
//  1. the volume is opened (crash recovery resolves any intent) and closed;
//  2. every block is verified with the old ref tags; any failure refuses the
//     remap, which changes nothing;
//  3. the journal {From, To, Next: 0} is recorded durably;
//  4. the tuples are rewritten chunk by chunk, each chunk and the advance of
//     Next in one atomic store commit (store.Tuples.RemapRange);
//  5. the manifest's InitialRefTag becomes To and the journal is deleted, in
//     one synced commit.
//
// While the journal exists every open of the volume fails with a
// *store.InProgressError. RemapVolume called again resumes: it verifies the
// blocks before Next with the new ref tags and the rest with the old ones,
// then carries on at Next. A crash at any point thus leaves either the old
// volume, a journal that the next run finishes, or the new volume.

// RemapOptions tune RemapVolume. The zero value of each field is its
// default.
type RemapOptions struct {
	// Options name the volume (Name) and the device (DeviceID, checked when
	// not empty). Rereads applies to the verification pass.
	Options
	// RunBytes is the data verified per step. Default DefaultConvertRun.
	RunBytes int
	// ChunkBlocks is the number of blocks whose tuples one store commit
	// rewrites. Default 64 store pages (65,536 blocks with the default page
	// size).
	ChunkBlocks int
	// Progress, if not nil, is called after every step of each phase
	// ("verify", then "remap") with the blocks done and the total.
	Progress func(phase string, done, total int64)
	// OnProblem, if not nil, receives every problem of the verification, in
	// LBA order.
	OnProblem func(Problem)
}

// Remap results that are not a rewrite.
const (
	RemapNothingType3 = "type3" // Type 3 ref tags are not checked and do not follow the LBA
	RemapNothingSame  = "same"  // the volume has the new initial ref tag already
)

// RemapReport is the outcome of RemapVolume.
type RemapReport struct {
	// From and To are the initial ref tags before and after.
	From, To uint64
	// Blocks is the number of blocks of the volume.
	Blocks int64
	// Verified counts the blocks of the verification pass by outcome.
	Verified RunStats
	// Rewritten counts the tuples whose ref tag this call rewrote (written
	// blocks that are neither escaped nor unwritten).
	Rewritten int64
	// Resumed: an interrupted remap was continued from block ResumedAt.
	Resumed   bool
	ResumedAt int64
	// Nothing says why there was nothing to rewrite (RemapNothingType3,
	// RemapNothingSame): only the verification ran. Empty after a remap.
	Nothing string
	// Done: the manifest now has To and no journal is left.
	Done bool
}

// RemapVolume moves the ref tags of the closed volume Options.Name of dev in
// kv to the initial ref tag newRefTag, as described above. Blocks failing
// verification refuse it with an *IntegrityError (each is passed to
// OnProblem) and nothing is changed. It returns a report with every error.
// A cancelled ctx stops it between steps; run it again to resume.
func RemapVolume(ctx context.Context, dev device.Device, kv store.KV, newRefTag uint64, opts RemapOptions) (*RemapReport, error) {
	if dev == nil || kv == nil {
		return nil, errors.New("blockdev: remap: nil device or store")
	}
	if opts.Name == "" {
		opts.Name = DefaultVolumeName
	}
	name := opts.Name
	wrap := func(err error) error { return fmt.Errorf("blockdev: remap of volume %q: %w", name, err) }
	tup, j, err := store.OpenJournaled(kv, name, nil)
	if err != nil {
		return nil, wrap(err)
	}
	m := tup.Manifest()
	switch {
	case j != nil && j.Op != store.OpRemap:
		return nil, wrap(&store.InProgressError{Volume: name, Journal: *j})
	case j != nil && j.To != newRefTag:
		return nil, fmt.Errorf("blockdev: remap of volume %q: a remap to initial ref tag %#x is in progress, not to %#x: run it again with %#x to finish it first",
			name, j.To, newRefTag, j.To)
	case m.Keyed() && opts.Key == nil:
		return nil, wrap(ErrKeyRequired) // keyed tags do not cover ref tags, but an unkeyed caller may not change the volume
	case opts.DeviceID != "" && opts.DeviceID != m.DeviceID:
		return nil, &MismatchError{Volume: name, Field: "device id", Stored: strconv.Quote(m.DeviceID), Given: strconv.Quote(opts.DeviceID)}
	}
	if j == nil {
		// Recovery resolves any intent of an interrupted session, and
		// Open checks the volume against the device.
		v, err := Open(ctx, dev, kv, opts.Options)
		if err != nil {
			return nil, err
		}
		if err := v.Close(); err != nil {
			return nil, err
		}
	} else {
		for in, err := range tup.AllIntents() {
			if err != nil {
				return nil, wrap(err)
			}
			return nil, wrap(fmt.Errorf("open intent over blocks [%d, %d) during a remap", in.LBA, in.LBA+in.N))
		}
	}
	// The verification reads through a Volume's verifier, on a volume
	// built over tup without recovery (there are no intents: above) and
	// never written through.
	vo := opts.Options
	vo.VerifyWorkers, vo.TupleCacheBytes, vo.Rereads = -1, -1, rereadsFor(opts.Rereads)
	if vo.Rereads == 0 {
		vo.Rereads = -1
	}
	v, err := newVolume(dev, tup, vo)
	if err != nil {
		return nil, err
	}
	f := v.f
	if b := f.RefTagBits(); b < 64 && newRefTag>>b != 0 {
		return nil, wrap(fmt.Errorf("new initial ref tag %#x does not fit %d bits", newRefTag, b))
	}
	rep := &RemapReport{From: m.InitialRefTag, To: newRefTag, Blocks: m.Blocks()}
	next := int64(0)
	switch {
	case j != nil:
		rep.Resumed, rep.ResumedAt, next = true, j.Next, j.Next
	case f.Type() == dif.Type3:
		rep.Nothing = RemapNothingType3
	case rep.From == rep.To:
		rep.Nothing = RemapNothingSame
	}

	// Verify: blocks before next carry the new ref tags already.
	probs := problemList{fn: opts.OnProblem}
	per := int64(min(runBlocksFor(opts.RunBytes, m.BlockSize), v.chunk))
	data := device.AlignedBuffer(int(per) * v.bs)
	sc := v.getScratch()
	defer v.putScratch(sc)
	for lba := int64(0); lba < rep.Blocks; {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		n, ref := min(per, rep.Blocks-lba), rep.From
		if lba < next {
			n, ref = min(n, next-lba), rep.To
		}
		req := readReq{ctx: ctx, rereads: v.opts.Rereads, zero: true, storeTuples: true, ref: ref}
		st, err := v.verifyCommitted(lba, int(n), data[:n*int64(v.bs)], sc, req)
		for _, p := range sc.probs {
			probs.add("remap", p)
		}
		if err != nil {
			return rep, wrap(err)
		}
		rep.Verified.Add(st)
		lba += n
		if opts.Progress != nil {
			opts.Progress("verify", lba, rep.Blocks)
		}
	}
	if probs.ie != nil {
		return rep, probs.ie
	}
	if rep.Nothing != "" {
		return rep, nil
	}

	if j == nil {
		if err := tup.BeginJournal(store.Journal{Op: store.OpRemap, From: rep.From, To: rep.To}); err != nil {
			return rep, wrap(err)
		}
	}
	if err := rewriteRefTags(ctx, f, tup, next, rep, &opts); err != nil {
		return rep, err
	}
	if err := tup.FinishRemap(); err != nil {
		return rep, wrap(err)
	}
	rep.Done = true
	return rep, nil
}

// refAt returns the ref tag of block lba for initial ref tag base: the low
// bits of base+lba, with the carry in bit 64 of a tag wider than 64 bits.
func refAt(f dif.Format, base uint64, lba int64) (uint64, uint16) {
	r := base + uint64(lba)
	switch b := f.RefTagBits(); {
	case b < 64:
		return r & (1<<b - 1), 0
	case b > 64 && r < base:
		return r, 1
	}
	return r, 0
}

// rewriteRefTags rewrites the ref tags of blocks [next, end) from rep.From
// to rep.To, one journaled store commit per chunk.
func rewriteRefTags(ctx context.Context, f dif.Format, tup *store.Tuples, next int64, rep *RemapReport, opts *RemapOptions) error {
	name := tup.Volume()
	ts := f.TupleSize()
	chunk := opts.ChunkBlocks
	if chunk <= 0 {
		chunk = 64 * tup.Manifest().PageTuples
	}
	chunk = min(chunk, 1<<20)
	tuples := make([]byte, chunk*ts)
	written := store.NewBitmap(chunk)
	one := make([]byte, f.BlockSize()) // ReadTuple and WriteTuple take a run of one block
	for lba := next; lba < rep.Blocks; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := int(min(int64(chunk), rep.Blocks-lba))
		tu := tuples[:n*ts]
		if _, err := tup.ReadRange(lba, tu, nil, written); err != nil {
			return fmt.Errorf("blockdev: remap of volume %q: %w", name, err)
		}
		for i := range n {
			if !written.Has(i) {
				continue
			}
			b := lba + int64(i)
			t := tu[i*ts : (i+1)*ts]
			tp, err := f.ReadTuple(one, t, 0)
			if err != nil {
				return fmt.Errorf("blockdev: remap of volume %q: block %d: %w", name, b, err)
			}
			if tp.AppTag == 0xFFFF || tp.Unwritten(f) {
				continue // escaped or unwritten: the tags stay
			}
			oldRef, _ := refAt(f, rep.From, b)
			newRef, newHigh := refAt(f, rep.To, b)
			if tp.RefTag != oldRef && tp.RefTag != newRef {
				return fmt.Errorf("blockdev: remap of volume %q: block %d: ref tag %#x is neither the old %#x nor the new %#x: the volume changed since it was verified",
					name, b, tp.RefTag, oldRef, newRef)
			}
			tp.RefTag, tp.RefTagHigh = newRef, newHigh
			if err := f.WriteTuple(one, t, 0, tp); err != nil {
				return fmt.Errorf("blockdev: remap of volume %q: block %d: %w", name, b, err)
			}
			rep.Rewritten++
		}
		if err := tup.RemapRange(lba, tu, false); err != nil {
			return fmt.Errorf("blockdev: remap of volume %q: %w", name, err)
		}
		lba += int64(n)
		if opts.Progress != nil {
			opts.Progress("remap", lba, rep.Blocks)
		}
	}
	return nil
}
