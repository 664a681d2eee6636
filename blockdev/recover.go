package blockdev

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/keyed"
	"github.com/difctl/difctl/store"
)

// Crash recovery, run by Open before the volume is used.
//
// Every open intent covers blocks whose data may or may not have reached
// the medium before the crash. The device is synced first (after a process
// crash, unsynced data is still in the page cache: it must not be trusted
// until it is durable), then each covered block is read and checked against
// its candidate tuples, newest intent first, then the committed tuple:
//
//   - it matches an intent's tuple: that tuple becomes the committed one;
//   - it matches the committed tuple, or the block is unwritten and its
//     data is zeros (see unwritten.go): nothing changes;
//   - it matches none: the write was torn inside the block (possible only
//     on a medium that does not write a block atomically, such as 4 KiB
//     blocks over 512-byte sectors), or the block was corrupted (also an
//     unwritten block whose data is neither the new version nor zeros: an
//     acknowledged write over a discarded block, damaged after a power
//     loss that dropped the fold, must not read as zeros). It is
//     recorded as an open "torn" finding and keeps its committed tuple, so
//     it keeps failing verification until it is rewritten. Nothing is ever
//     recomputed from the data.
//
// Then every intent is dropped. Recovery is idempotent: a crash during it
// leaves intents that a second run resolves the same way.

// recover resolves the volume's open intents.
func (v *Volume) recover(ctx context.Context) error {
	var ins []store.Intent
	for in, err := range v.tup.AllIntents() {
		if err != nil {
			return fmt.Errorf("blockdev: recovery of volume %q: %w", v.opts.Name, err)
		}
		ins = append(ins, in)
	}
	if len(ins) == 0 {
		return nil
	}
	if v.keyedNoKey {
		return fmt.Errorf("blockdev: recovery of volume %q: %d open intents: %w", v.opts.Name, len(ins), ErrKeyRequired)
	}
	var kr *keyed.Recovery
	if v.tags != nil {
		var err error
		if kr, err = v.tags.Recover(ins); err != nil {
			return fmt.Errorf("blockdev: recovery of volume %q: %w", v.opts.Name, err)
		}
	}
	if err := v.dev.Sync(); err != nil {
		return fmt.Errorf("blockdev: recovery of volume %q: %w", v.opts.Name, err)
	}
	slices.SortStableFunc(ins, func(a, b store.Intent) int { return cmp.Compare(a.LBA, b.LBA) })
	var maxN int64
	for _, in := range ins {
		maxN = max(maxN, in.N)
	}
	rs := &v.recovery
	rs.Intents = int64(len(ins))

	bs, ts := v.bs, v.ts
	chunk := v.chunk
	data := device.AlignedBuffer(chunk * bs)
	sc := v.newScratch().(*scratch)
	newT := make([]byte, chunk*ts)
	var newS []uint32
	if v.sums {
		newS = make([]uint32, chunk)
	}
	w := (chunk + 63) / 64
	covered := make([]uint64, w)
	resolved := make([]uint64, w)
	var cand []*store.Intent
	var torn []store.Finding
	x := v.tup.NewTxn()
	commit := func(force bool, sync bool) error {
		if !force && x.Len() < foldTxnBytes {
			return nil
		}
		err := x.Commit(sync)
		x = v.tup.NewTxn()
		return err
	}
	fail := func(err error) error {
		x.Abort()
		return fmt.Errorf("blockdev: recovery of volume %q: %w", v.opts.Name, err)
	}

	// Walk the union of the intents' ranges in chunks.
	next := int64(0) // first block not yet examined
	for k := 0; k < len(ins); k++ {
		lo, hi := max(ins[k].LBA, next), ins[k].LBA+ins[k].N
		for c0 := lo; c0 < hi; {
			if err := ctx.Err(); err != nil {
				return fail(err)
			}
			c1 := min(c0+int64(chunk), hi)
			n := int(c1 - c0)
			if err := v.readDev(data[:n*bs], c0, false); err != nil {
				return fail(err)
			}
			var sums []uint32
			if v.sums {
				sums = sc.sums[:n]
			}
			if _, err := v.tup.ReadRange(c0, sc.tuples[:n*ts], sums, sc.written); err != nil {
				return fail(err)
			}
			if kr != nil {
				if err := kr.Load(c0, n); err != nil {
					return fail(err)
				}
			}
			clear(covered)
			clear(resolved)
			// Candidates: intents overlapping [c0, c1), newest first.
			cand = cand[:0]
			first := sort.Search(len(ins), func(i int) bool { return ins[i].LBA+maxN > c0 })
			for i := first; i < len(ins) && ins[i].LBA < c1; i++ {
				if ins[i].LBA+ins[i].N > c0 {
					cand = append(cand, &ins[i])
				}
			}
			slices.SortFunc(cand, func(a, b *store.Intent) int { return cmp.Compare(b.Seq, a.Seq) })
			for _, in := range cand {
				s, t := max(in.LBA, c0), min(in.LBA+in.N, c1)
				for b := s; b < t; b++ {
					i := int(b - c0)
					setBit(covered, i)
					if hasBit(resolved, i) {
						continue
					}
					j := int(b - in.LBA)
					var sum uint32
					if v.sums {
						sum = in.Sums[j]
					}
					// An intent's tuple is a written block's.
					if v.ok(data[i*bs:(i+1)*bs], in.Tuples[j*ts:(j+1)*ts], v.params(b), true, sum) &&
						(kr == nil || kr.Matches(in, j, i, data[i*bs:(i+1)*bs], b)) {
						copy(newT[i*ts:(i+1)*ts], in.Tuples[j*ts:])
						if v.sums {
							newS[i] = sum
						}
						setBit(resolved, i)
					}
				}
			}
			for i := 0; i < n; i++ {
				if !hasBit(covered, i) {
					continue
				}
				b := c0 + int64(i)
				rs.Blocks++
				switch {
				case hasBit(resolved, i):
					rs.Folded++
					// Commit runs of resolved blocks.
					j := i + 1
					for j < n && hasBit(resolved, j) {
						j++
					}
					var s []uint32
					if v.sums {
						s = newS[i:j]
					}
					if err := x.WriteRange(b, newT[i*ts:j*ts], s); err != nil {
						return fail(err)
					}
					if kr != nil {
						if err := x.WriteTags(b, kr.NewTags(i, j)); err != nil {
							return fail(err)
						}
					}
					rs.Folded += int64(j - i - 1)
					rs.Blocks += int64(j - i - 1)
					i = j - 1
				case v.committedOK(data[i*bs:(i+1)*bs], i, b, sc) &&
					(kr == nil || kr.CommittedOK(i, data[i*bs:(i+1)*bs], b, sc.written.Has(i))):
					// The committed tuple, or zeros for an unwritten block.
					rs.Kept++
				default:
					rs.Torn++
					torn = append(torn, v.tornFinding(data[i*bs:(i+1)*bs], sc.tuples[i*ts:(i+1)*ts], b))
				}
			}
			if err := commit(false, false); err != nil {
				return fail(err)
			}
			c0 = c1
		}
		next = max(next, hi)
	}
	if err := commit(true, false); err != nil {
		return fail(err)
	}
	for _, f := range torn {
		if _, err := v.tup.RecordFinding(f, false); err != nil {
			return fail(err)
		}
	}
	for _, in := range ins {
		if err := x.DropIntent(in.IntentID); err != nil {
			return fail(err)
		}
		if err := commit(false, false); err != nil {
			return fail(err)
		}
	}
	if err := x.Commit(true); err != nil {
		return fmt.Errorf("blockdev: recovery of volume %q: %w", v.opts.Name, err)
	}
	return nil
}

// committedOK reports whether block i (lba) of the chunk in sc passes
// against its committed tuple and sum (zeros for an unwritten block).
func (v *Volume) committedOK(data []byte, i int, lba int64, sc *scratch) bool {
	var sum uint32
	if v.sums {
		sum = sc.sums[i]
	}
	return v.ok(data, sc.tuples[i*v.ts:(i+1)*v.ts], v.params(lba), sc.written.Has(i), sum)
}

// tornFinding describes a torn block: expected is the guard computed from
// the data on the device, actual the committed tuple's guard.
func (v *Volume) tornFinding(data, committed []byte, lba int64) store.Finding {
	t := make([]byte, v.ts)
	gw := v.f.Guard().Bits() / 8
	f := store.Finding{LBA: lba, N: 1, Field: string(KindTorn), State: store.FindingOpen}
	if v.f.Generate(data, t, v.params(lba)) == nil {
		f.Expected = t[:gw]
	}
	f.Actual = append([]byte(nil), committed[:gw]...)
	return f
}
