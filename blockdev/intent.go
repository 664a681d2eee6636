package blockdev

import (
	"math/bits"
	"slices"

	"github.com/difctl/difctl/store"
)

// Write path and crash consistency (ARCHITECTURE.md, "The crash contract").
//
// A block's data and tuple are in different places, so each write goes
// through three states:
//
//  1. staged: WriteAt copies the data, its new tuples and sums into the
//     active batch (memory, bounded by Options.StagingBytes) and returns.
//     Readers are served from the batch.
//  2. flushed: when the batch is full (or at Sync) it is written out. Its
//     new tuples are recorded as intents with ONE synced store commit for
//     the whole batch, and only then is the data written to the device (a
//     buffered write may reach the medium at any moment after pwrite, so the
//     intent must already be durable). The new tuples move to the overlay,
//     which readers consult before the committed pages.
//  3. committed: Sync flushes the active batch, syncs the device, then folds
//     the overlay into the committed pages and drops the intents.
//
// The fold commit is not synced: if it is lost in a crash, the intents are
// still there and the data they cover is durable, so recovery folds them
// again; and the next synced commit (the next batch's intents) makes it
// durable with everything before it.
//
// Lock order: closeMu, range locks, flushMu, stMu, ovMu. Readers take stMu
// shared and never wait for a range lock while holding it.
//
// Readers must see each block's data and tuple from the same state. For a
// block not in a batch, the data on the device is stable while its range is
// locked (a write to it would be staged first); only its tuple may move
// from the overlay to the committed pages, and since a fold commits the
// pages before it clears the overlay, a reader that looks at the overlay
// first and the store second sees the new tuple in one or the other. A
// flush writes the device and fills the overlay before it removes the
// batch, so a block found in neither batch is on the device with its tuple
// in the overlay or the store. A reader whose range overlaps a batch holds
// stMu shared while it reads the device and copies the staged blocks, so
// the batch cannot be recycled under it.

// batch is a staging buffer: data, tuples and sums of staged blocks in
// slots, and the entries that place runs of slots at LBAs, in the order they
// were staged (later entries win where they overlap).
type batch struct {
	data   []byte
	tuples []byte
	sums   []uint32
	tags   []store.KeyedTag // keyed volumes
	used   int              // slots used
	cap    int              // slots
	ents   []stEnt
	lo, hi int64 // LBA bounds of the entries
}

type stEnt struct {
	lba  int64
	n    int
	slot int
}

func (v *Volume) newBatch() *batch {
	c := v.opts.StagingBytes / 2 / v.bs
	b := &batch{cap: c, data: make([]byte, c*v.bs), tuples: make([]byte, c*v.ts)}
	if v.sums {
		b.sums = make([]uint32, c)
	}
	if v.kd != nil {
		b.tags = make([]store.KeyedTag, c)
	}
	return b
}

func (b *batch) reset() {
	b.used = 0
	b.ents = b.ents[:0]
	b.lo, b.hi = 0, 0
}

func (b *batch) overlaps(lba, end int64) bool {
	return b != nil && b.used > 0 && b.lo < end && lba < b.hi
}

// batchBlocks is the most blocks one staging step takes.
func (v *Volume) batchBlocks() int { return v.opts.StagingBytes / 2 / v.bs }

// stage copies n blocks (data, tuples, sums) into the active batch. When
// the batch is full it becomes the flushing batch, written out by a
// background goroutine while writers fill the next one; a writer waits only
// when both are full. n is at most batchBlocks.
func (v *Volume) stage(lba int64, n int, data, tuples []byte, sums []uint32, tags []store.KeyedTag) error {
	v.stMu.Lock()
	defer v.stMu.Unlock()
	for {
		if err := v.failed(); err != nil {
			return err
		}
		if v.active == nil {
			if v.spare != nil {
				v.active, v.spare = v.spare, nil
			} else {
				v.active = v.newBatch()
			}
		}
		b := v.active
		if b.cap-b.used >= n {
			s := b.used
			copy(b.data[s*v.bs:], data[:n*v.bs])
			copy(b.tuples[s*v.ts:], tuples[:n*v.ts])
			if v.sums {
				copy(b.sums[s:], sums[:n])
			}
			if v.kd != nil {
				copy(b.tags[s:], tags[:n])
			}
			b.used += n
			if k := len(b.ents) - 1; k >= 0 && b.ents[k].lba+int64(b.ents[k].n) == lba && b.ents[k].slot+b.ents[k].n == s {
				b.ents[k].n += n
			} else {
				b.ents = append(b.ents, stEnt{lba: lba, n: n, slot: s})
			}
			if len(b.ents) == 1 && b.ents[0].n == n {
				b.lo, b.hi = lba, lba+int64(n)
			} else {
				b.lo, b.hi = min(b.lo, lba), max(b.hi, lba+int64(n))
			}
			return nil
		}
		if v.flushing == nil {
			v.flushing, v.active = b, v.spare
			v.spare = nil
			go v.backgroundFlush()
			continue
		}
		v.stCond.Wait() // for the flushing batch to be written
	}
}

// backgroundFlush writes out the flushing batch, then syncs if the
// unsynced data exceeds Options.MaxUnsynced.
func (v *Volume) backgroundFlush() {
	v.flushMu.Lock()
	defer v.flushMu.Unlock()
	if v.writeFlushing() != nil {
		return
	}
	if v.ovBlocks*int64(v.bs) >= v.opts.MaxUnsynced && v.failed() == nil {
		v.st.autoSyncs.Add(1)
		v.syncLocked()
	}
}

// writeFlushing writes out the flushing batch, if any: intents (one synced
// store commit), then data, then the overlay. On failure the batch stays in
// place (readers keep seeing the staged data) and the volume fails. Caller
// holds flushMu.
func (v *Volume) writeFlushing() error {
	if err := v.failed(); err != nil {
		return err
	}
	v.stMu.RLock()
	b := v.flushing
	v.stMu.RUnlock()
	if b == nil {
		return nil
	}
	if err := v.writeBatch(b); err != nil {
		err = v.fail(err)
		v.stMu.Lock()
		v.stCond.Broadcast()
		v.stMu.Unlock()
		return err
	}
	v.stMu.Lock()
	v.flushing = nil
	b.reset()
	v.spare = b
	v.stCond.Broadcast()
	v.stMu.Unlock()
	v.st.flushes.Add(1)
	return nil
}

// flushLocked writes out the flushing batch, then the active one. Caller
// holds flushMu.
func (v *Volume) flushLocked() error {
	if err := v.writeFlushing(); err != nil {
		return err
	}
	v.stMu.Lock()
	if b := v.active; b != nil && b.used > 0 {
		v.flushing, v.active = b, v.spare
		v.spare = nil
	}
	v.stMu.Unlock()
	return v.writeFlushing()
}

// writeBatch makes b's intents durable, writes its data and moves its
// tuples to the overlay. Caller holds flushMu.
func (v *Volume) writeBatch(b *batch) error {
	x := v.tup.NewTxn()
	first := len(v.pending)
	for _, e := range b.ents {
		var sums []uint32
		if v.sums {
			sums = b.sums[e.slot : e.slot+e.n]
		}
		id, err := x.RecordIntent(uint64(e.lba), b.tuples[e.slot*v.ts:(e.slot+e.n)*v.ts], sums)
		if err != nil {
			x.Abort()
			return err
		}
		v.pending = append(v.pending, id)
	}
	if v.kd != nil {
		if err := v.keyedIntents(x, b, v.pending[first:]); err != nil {
			x.Abort()
			return err
		}
	}
	if err := x.Commit(true); err != nil {
		return err
	}
	for _, e := range b.ents {
		if _, err := v.dev.WriteAt(b.data[e.slot*v.bs:(e.slot+e.n)*v.bs], e.lba*int64(v.bs)); err != nil {
			return err
		}
	}
	v.ovMu.Lock()
	for _, e := range b.ents {
		var sums []uint32
		if v.sums {
			sums = b.sums[e.slot : e.slot+e.n]
		}
		v.ovInsert(e.lba, e.n, b.tuples[e.slot*v.ts:], sums)
		v.ovBlocks += int64(e.n)
	}
	v.ovMu.Unlock()
	if v.kd != nil {
		v.keyedInsert(b)
	}
	return nil
}

// syncLocked flushes the active batch, syncs the device and folds the
// overlay into the committed pages. Caller holds flushMu.
func (v *Volume) syncLocked() error {
	if err := v.flushLocked(); err != nil {
		return err
	}
	if err := v.dev.Sync(); err != nil {
		return v.fail(err)
	}
	if err := v.foldLocked(); err != nil {
		return v.fail(err)
	}
	v.st.syncs.Add(1)
	return nil
}

// foldTxnBytes is the size at which a fold commits a transaction and
// starts the next.
const foldTxnBytes = 4 << 20

// foldLocked commits the overlay's tuples and drops the intents they came
// from. The data is durable. Caller holds flushMu.
func (v *Volume) foldLocked() error {
	if len(v.pending) == 0 && len(v.overlay) == 0 {
		return nil
	}
	// The overlay changes only under flushMu, which we hold: read it
	// without ovMu.
	pages := make([]int64, 0, len(v.overlay))
	for p := range v.overlay {
		pages = append(pages, p)
	}
	slices.Sort(pages)
	x := v.tup.NewTxn()
	commit := func(force bool) error {
		if !force && x.Len() < foldTxnBytes {
			return nil
		}
		err := x.Commit(false)
		x = v.tup.NewTxn()
		return err
	}
	for _, p := range pages {
		pg := v.overlay[p]
		for i := 0; i < ovP; {
			if pg.mask[i/64]>>(i%64)&1 == 0 {
				// skip clear bits a word at a time
				w := pg.mask[i/64] >> (i % 64)
				if w == 0 {
					i = (i/64 + 1) * 64
				} else {
					i += bits.TrailingZeros64(w)
				}
				continue
			}
			j := i + 1
			for j < ovP && pg.mask[j/64]>>(j%64)&1 != 0 {
				j++
			}
			var sums []uint32
			if v.sums {
				sums = pg.sums[i:j]
			}
			if err := x.WriteRange(uint64(p*ovP+int64(i)), pg.tuples[i*v.ts:j*v.ts], sums); err != nil {
				x.Abort()
				return err
			}
			if err := commit(false); err != nil {
				return err
			}
			i = j
		}
	}
	if v.kd != nil {
		if err := v.keyedFold(x, commit); err != nil {
			x.Abort()
			return err
		}
	}
	// Committed tuples first, then the intents go: a crash in between
	// leaves intents whose data matches the committed tuple.
	if err := commit(true); err != nil {
		return err
	}
	for _, id := range v.pending {
		if err := x.DropIntent(id); err != nil {
			x.Abort()
			return err
		}
		if err := commit(false); err != nil {
			return err
		}
	}
	if err := commit(true); err != nil {
		return err
	}
	v.ovMu.Lock()
	for p, pg := range v.overlay {
		clear(pg.mask[:])
		v.ovFree = append(v.ovFree, pg)
		delete(v.overlay, p)
	}
	v.ovMu.Unlock()
	if v.kd != nil {
		v.keyedClear()
	}
	v.ovBlocks = 0
	v.pending = v.pending[:0]
	return nil
}

// The overlay holds the tuples of flushed, not yet folded blocks in pages
// of ovP blocks.
const (
	ovShift = 10
	ovP     = 1 << ovShift
)

type ovPage struct {
	mask   [ovP / 64]uint64
	tuples []byte
	sums   []uint32
}

// ovInsert sets the overlay tuples (and sums) of blocks [lba, lba+n).
// Caller holds ovMu and flushMu.
func (v *Volume) ovInsert(lba int64, n int, tuples []byte, sums []uint32) {
	for i := 0; i < n; {
		b := lba + int64(i)
		p, off := b>>ovShift, int(b&(ovP-1))
		k := min(n-i, ovP-off)
		pg := v.overlay[p]
		if pg == nil {
			if l := len(v.ovFree); l > 0 {
				pg = v.ovFree[l-1]
				v.ovFree = v.ovFree[:l-1]
			} else {
				pg = &ovPage{tuples: make([]byte, ovP*v.ts)}
				if v.sums {
					pg.sums = make([]uint32, ovP)
				}
			}
			v.overlay[p] = pg
		}
		copy(pg.tuples[off*v.ts:(off+k)*v.ts], tuples[i*v.ts:])
		if v.sums {
			copy(pg.sums[off:off+k], sums[i:i+k])
		}
		setBits(pg.mask[:], off, k)
		i += k
	}
}

// setBits sets bits [off, off+n) of m.
func setBits(m []uint64, off, n int) {
	for n > 0 {
		w, b := off/64, off%64
		k := min(n, 64-b)
		var mask uint64 = ^uint64(0)
		if k < 64 {
			mask = (1<<k - 1) << b
		}
		m[w] |= mask
		off += k
		n -= k
	}
}

// Sync makes every write completed before it durable together with its
// tuples: it writes out the staged data (intents first), syncs the device,
// then commits the new tuples.
func (v *Volume) Sync() error {
	done, err := v.enter()
	if err != nil {
		return err
	}
	defer done()
	v.flushMu.Lock()
	defer v.flushMu.Unlock()
	return v.syncLocked()
}
