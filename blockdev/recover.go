package blockdev

import (
	"bytes"
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
// On a mirrored volume (mirror.go) every online leg's copy of a block is a
// candidate: the block takes the newest tuple that any leg's copy matches,
// else the committed one if any copy matches it, and that copy is written
// to every leg whose copy differs, so that the legs agree again. Offline
// legs record the intents' blocks stale. The legs are synced before the
// intents are dropped.
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
	legs := v.recoveryLegs(ins)
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
	// The copies of the chunk: data, and on a mirrored volume one per
	// online leg (copies[0] is data); src is the copy each block took.
	copies := [][]byte{data}
	for range max(0, len(legs)-1) {
		copies = append(copies, device.AlignedBuffer(chunk*bs))
	}
	src := make([]int8, chunk)
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
			ncopies, err := v.readCopies(legs, copies, c0, n)
			if err != nil {
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
			d := chunkDecision{c0: c0, n: n, copies: copies[:ncopies], covered: covered, resolved: resolved,
				src: src, newT: newT, newS: newS, sc: sc, kr: kr}
			v.decideChunk(&d, cand)
			if err := v.reconcile(legs, copies[:ncopies], covered, src, c0, n); err != nil {
				return fail(err)
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
				case src[i] >= 0:
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
	if legs != nil {
		// The copies written to the legs, and the offline legs' states,
		// durable before the intents go.
		if err := v.dev.Sync(); err != nil {
			return fail(err)
		}
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

// recoveryLegs returns the online legs of a mirrored volume (nil without
// mirror legs), and records the blocks of the intents ins stale on the
// offline ones.
func (v *Volume) recoveryLegs(ins []store.Intent) []*mleg {
	md := v.mirror
	if md == nil {
		return nil
	}
	for _, in := range ins {
		md.missed(in.LBA*int64(v.bs), in.N*int64(v.bs))
	}
	return md.online()
}

// readCopies reads the n blocks at lba into copies: from the volume's
// device into copies[0], or from each online leg of a mirrored volume
// into a copy of its own (a leg that fails the read goes offline, its
// blocks stale). It returns how many copies it read; with legs, at least
// one.
func (v *Volume) readCopies(legs []*mleg, copies [][]byte, lba int64, n int) (int, error) {
	bs := v.bs
	if legs == nil {
		return 1, v.readDev(copies[0][:n*bs], lba, false)
	}
	k := 0
	var first error
	for j, l := range legs {
		if l.offline.Load() {
			continue
		}
		if err := readDevice(l.dev, copies[k][:n*bs], lba*int64(bs), false); err != nil {
			v.mirror.failed(l, lba, int64(n), err)
			first = cmp.Or(first, err)
			continue
		}
		legs[j], legs[k] = legs[k], legs[j]
		k++
	}
	if k == 0 {
		return 0, fmt.Errorf("no leg of the mirrored volume could be read: %w", first)
	}
	return k, nil
}

// reconcile writes, for every block i of the chunk at lba that is covered
// by an intent and took copy src[i], that copy to each leg whose copy
// differs (legs[k] read copies[k]); on a read-only volume it records the
// block stale on those legs instead.
func (v *Volume) reconcile(legs []*mleg, copies [][]byte, covered []uint64, src []int8, lba int64, n int) error {
	if legs == nil {
		return nil
	}
	bs := v.bs
	for i := range n {
		if !hasBit(covered, i) || src[i] < 0 {
			continue
		}
		good := copies[src[i]][i*bs : (i+1)*bs]
		for k := range copies {
			if k == int(src[i]) || bytes.Equal(copies[k][i*bs:(i+1)*bs], good) || legs[k].offline.Load() {
				continue
			}
			b := lba + int64(i)
			if v.opts.ReadOnly {
				// A read-only volume writes no device: the leg records
				// the block stale, for a resync.
				v.mirror.markStale(legs[k], b, 1)
				continue
			}
			if _, err := legs[k].dev.WriteAt(good, b*int64(bs)); err != nil {
				v.mirror.failed(legs[k], b, 1, err)
				continue
			}
			copy(copies[k][i*bs:(i+1)*bs], good)
			v.recovery.Reconciled++
		}
	}
	return nil
}

// chunkDecision is what recovery decides for the n blocks at c0 of a
// chunk: which are covered by an intent, which matched an intent's tuple
// (resolved, with the new tuples and sums), and which copy (leg) each
// block took (src; -1: none matched, torn).
type chunkDecision struct {
	c0                int64
	n                 int
	copies            [][]byte
	covered, resolved []uint64
	src               []int8
	newT              []byte
	newS              []uint32
	sc                *scratch // the chunk's committed tuples, sums and written bits
	kr                *keyed.Recovery
}

// decideChunk decides every block of d covered by the candidate intents
// cand (newest first): the first copy that matches an intent's tuple
// takes it; otherwise the first copy that matches the committed tuple
// (or, unwritten, is zeros) keeps it.
func (v *Volume) decideChunk(d *chunkDecision, cand []*store.Intent) {
	bs, ts := v.bs, v.ts
	c1 := d.c0 + int64(d.n)
	for _, in := range cand {
		for b := max(in.LBA, d.c0); b < min(in.LBA+in.N, c1); b++ {
			i := int(b - d.c0)
			setBit(d.covered, i)
			if hasBit(d.resolved, i) {
				continue
			}
			j := int(b - in.LBA)
			var sum uint32
			if v.sums {
				sum = in.Sums[j]
			}
			// An intent's tuple is a written block's.
			for k, c := range d.copies {
				blk := c[i*bs : (i+1)*bs]
				if v.ok(blk, in.Tuples[j*ts:(j+1)*ts], v.params(b), true, sum) &&
					(d.kr == nil || d.kr.Matches(in, j, i, blk, b)) {
					copy(d.newT[i*ts:(i+1)*ts], in.Tuples[j*ts:])
					if v.sums {
						d.newS[i] = sum
					}
					setBit(d.resolved, i)
					d.src[i] = int8(k)
					break
				}
			}
		}
	}
	for i := range d.n {
		if !hasBit(d.covered, i) || hasBit(d.resolved, i) {
			continue
		}
		b := d.c0 + int64(i)
		d.src[i] = -1
		for k, c := range d.copies {
			blk := c[i*bs : (i+1)*bs]
			if v.committedOK(blk, i, b, d.sc) && (d.kr == nil || d.kr.CommittedOK(i, blk, b, d.sc.written.Has(i))) {
				d.src[i] = int8(k)
				break
			}
		}
	}
}
