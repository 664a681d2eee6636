package blockdev

import (
	"iter"
	"math/bits"
	"slices"
	"sync"
	"unsafe"

	"github.com/difctl/difctl/blockdev/device"
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

// staging is the Volume's write-behind state: the two staging batches
// (the active one that writers fill, the flushing one being written out,
// and a spare), the overlay of flushed tuples not yet folded into the
// committed pages, and the intents to drop at the next fold. It owns the
// flush, sync and fold of the write path and serves reads the staged data
// and the overlay's tuples (load). Its locks come after the Volume's range
// locks (see the lock order above).
type staging struct {
	dev         device.Device
	pi          device.PIWriter // dev, when it takes the tuples as PI (writeData)
	tup         *store.Tuples
	bs, ts      int
	sums        bool
	batchCap    int   // blocks per batch
	maxUnsynced int64 // bytes of flushed, unfolded data that trigger a sync
	maxOvPages  int   // overlay pieces that trigger a sync (Options.OverlayBytes)
	fails       *failure
	st          *volStats

	flushMu  sync.Mutex   // serializes flushes, syncs and folds
	stMu     sync.RWMutex // guards active, flushing, spare
	stCond   sync.Cond    // on stMu: the flushing batch was written (or failed)
	active   *batch
	flushing *batch
	spare    *batch

	ovMu     sync.RWMutex // guards overlay
	overlay  map[int64]*ovPage
	ovFree   []*ovPage
	ovBlocks int64            // blocks inserted since the last fold; under flushMu
	pending  []store.IntentID // intents to drop at the next fold; under flushMu

	// tagged: the batches and the overlay keep each block's keyed tag
	// too, a column like the sums (a keyed volume opened with its key; set
	// by setupKeyed). Their tags are computed before they are staged.
	tagged bool
	// syncFold makes the last commit of a fold synced (a witness: the
	// seal must be durable before the witness records it).
	syncFold bool
	// par is the volume's parity in use (parity_write.go), nil without.
	par *parityVol
}

func newStaging(dev device.Device, tup *store.Tuples, c *blockCheck, opts *Options, fails *failure, st *volStats) *staging {
	s := &staging{
		dev: dev, tup: tup, bs: c.bs, ts: c.ts, sums: c.sums,
		batchCap: opts.StagingBytes / 2 / c.bs, maxUnsynced: opts.MaxUnsynced,
		fails: fails, st: st, overlay: make(map[int64]*ovPage),
		syncFold: opts.Witness != nil,
	}
	s.pi, _ = dev.(device.PIWriter)
	s.maxOvPages = max(1, opts.OverlayBytes/s.ovPageBytes(opts.Key != nil))
	s.stCond.L = &s.stMu
	return s
}

// load puts into data and sc what staging holds for blocks [lba, lba+n)
// of a read: the staged data and tuples of blocks in a batch (read from
// the device first, under stMu, so that the rest of the run is consistent
// with them; see above), and the overlay tuples of flushed blocks, in
// sc.ovTuples, sc.ovSums and (tagged) sc.ovTags, marked in sc.ovMask. loaded reports that data
// was read (with devErr the device's error, for the unstaged blocks of
// sc.staged); over that some tuple came from staging.
func (s *staging) load(lba int64, n int, data []byte, sc *scratch, uncached bool) (loaded, over bool, devErr error) {
	end := lba + int64(n)
	w := (n + 63) / 64
	mask := sc.ovMask[:w]
	clear(mask)
	s.stMu.RLock()
	if s.flushing.overlaps(lba, end) || s.active.overlaps(lba, end) {
		devErr = readDevice(sc.req.dev, data[:n*s.bs], lba*int64(s.bs), uncached)
		loaded, over = true, true
		s.copyStaged(s.flushing, lba, n, data, sc)
		s.copyStaged(s.active, lba, n, data, sc)
	}
	s.stMu.RUnlock()
	copy(sc.staged[:w], mask)

	s.ovMu.RLock()
	if len(s.overlay) > 0 {
		for p := lba >> ovShift; p <= (end-1)>>ovShift; p++ {
			pg := s.overlay[p]
			if pg == nil {
				continue
			}
			a, t := max(p<<ovShift, lba), min((p+1)<<ovShift, end)
			for b := a; b < t; b++ {
				o, i := int(b&(ovP-1)), int(b-lba)
				if !hasBit(pg.mask[:], o) || hasBit(mask, i) {
					continue
				}
				copy(sc.ovTuples[i*s.ts:(i+1)*s.ts], pg.tuples[o*s.ts:])
				if s.sums {
					sc.ovSums[i] = pg.sums[o]
				}
				if s.tagged {
					sc.ovTags[i] = pg.tags[o]
				}
				setBit(mask, i)
				over = true
			}
		}
	}
	s.ovMu.RUnlock()
	return loaded, over, devErr
}

// copyStaged copies the blocks of b inside [lba, lba+n) into data and the
// override buffers. Caller holds stMu.
func (s *staging) copyStaged(b *batch, lba int64, n int, data []byte, sc *scratch) {
	if !b.overlaps(lba, lba+int64(n)) {
		return
	}
	end := lba + int64(n)
	bs, ts := s.bs, s.ts
	for _, e := range b.ents {
		a, t := max(e.lba, lba), min(e.lba+int64(e.n), end)
		if a >= t {
			continue
		}
		i, j := int(a-lba), int(t-lba)
		slot := e.slot + int(a-e.lba)
		copy(data[i*bs:j*bs], b.data[slot*bs:])
		copy(sc.ovTuples[i*ts:j*ts], b.tuples[slot*ts:])
		if s.sums {
			copy(sc.ovSums[i:j], b.sums[slot:])
		}
		if s.tagged {
			copy(sc.ovTags[i:j], b.tags[slot:])
		}
		setBits(sc.ovMask, i, j-i)
	}
}

// batch is a staging buffer: data, tuples and sums of staged blocks in
// slots, and the entries that place runs of slots at LBAs, in the order they
// were staged (later entries win where they overlap).
type batch struct {
	data   []byte
	tuples []byte
	sums   []uint32
	tags   []store.KeyedTag // tagged
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

func (s *staging) newBatch() *batch {
	c := s.batchCap
	b := &batch{cap: c, data: make([]byte, c*s.bs), tuples: make([]byte, c*s.ts)}
	if s.sums {
		b.sums = make([]uint32, c)
	}
	if s.tagged {
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

// stage copies n blocks (data, tuples, sums, tags) into the active batch. When
// the batch is full it becomes the flushing batch, written out by a
// background goroutine while writers fill the next one; a writer waits only
// when both are full. n is at most batchCap.
func (s *staging) stage(lba int64, n int, data, tuples []byte, sums []uint32, tags []store.KeyedTag) error {
	s.stMu.Lock()
	defer s.stMu.Unlock()
	for {
		if err := s.fails.err(); err != nil {
			return err
		}
		if s.active == nil {
			if s.spare != nil {
				s.active, s.spare = s.spare, nil
			} else {
				s.active = s.newBatch()
			}
		}
		b := s.active
		if b.cap-b.used >= n {
			at := b.used
			copy(b.data[at*s.bs:], data[:n*s.bs])
			copy(b.tuples[at*s.ts:], tuples[:n*s.ts])
			if s.sums {
				copy(b.sums[at:], sums[:n])
			}
			if s.tagged {
				copy(b.tags[at:], tags[:n])
			}
			b.used += n
			if k := len(b.ents) - 1; k >= 0 && b.ents[k].lba+int64(b.ents[k].n) == lba && b.ents[k].slot+b.ents[k].n == at {
				b.ents[k].n += n
			} else {
				b.ents = append(b.ents, stEnt{lba: lba, n: n, slot: at})
			}
			if len(b.ents) == 1 && b.ents[0].n == n {
				b.lo, b.hi = lba, lba+int64(n)
			} else {
				b.lo, b.hi = min(b.lo, lba), max(b.hi, lba+int64(n))
			}
			return nil
		}
		if s.flushing == nil {
			s.flushing, s.active = b, s.spare
			s.spare = nil
			go s.backgroundFlush()
			continue
		}
		s.stCond.Wait() // for the flushing batch to be written
	}
}

// backgroundFlush writes out the flushing batch, then syncs if the
// unsynced data exceeds Options.MaxUnsynced.
func (s *staging) backgroundFlush() {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if s.writeFlushing() != nil {
		return
	}
	if (s.ovBlocks*int64(s.bs) >= s.maxUnsynced || len(s.overlay) >= s.maxOvPages) && s.fails.err() == nil {
		s.st.autoSyncs.Add(1)
		s.syncLocked()
	}
}

// writeFlushing writes out the flushing batch, if any: intents (one synced
// store commit), then data, then the overlay. On failure the batch stays in
// place (readers keep seeing the staged data) and the volume fails. Caller
// holds flushMu.
func (s *staging) writeFlushing() error {
	if err := s.fails.err(); err != nil {
		return err
	}
	s.stMu.RLock()
	b := s.flushing
	s.stMu.RUnlock()
	if b == nil {
		return nil
	}
	if err := s.writeBatch(b); err != nil {
		err = s.fails.set(err)
		s.stMu.Lock()
		s.stCond.Broadcast()
		s.stMu.Unlock()
		return err
	}
	s.stMu.Lock()
	s.flushing = nil
	b.reset()
	s.spare = b
	s.stCond.Broadcast()
	s.stMu.Unlock()
	s.st.flushes.Add(1)
	return nil
}

// testHookFlushGap, if set, runs in flushLocked between writing out the
// flushing batch and taking the active one (where a writer may hand over
// a full batch).
var testHookFlushGap func()

// flushLocked writes out the flushing batch, then the active one. Caller
// holds flushMu.
func (s *staging) flushLocked() error {
	if err := s.writeFlushing(); err != nil {
		return err
	}
	if testHookFlushGap != nil {
		testHookFlushGap()
	}
	s.stMu.Lock()
	// A writer may have made the active batch, full, the flushing one since
	// writeFlushing returned (stage): it holds every write staged before, and
	// is written next. Only otherwise does the active batch move; taking it
	// over a flushing batch would drop that batch, writes and all.
	if b := s.active; s.flushing == nil && b != nil && b.used > 0 {
		s.flushing, s.active = b, s.spare
		s.spare = nil
	}
	s.stMu.Unlock()
	return s.writeFlushing()
}

// writeBatch makes b's intents durable, writes its data and moves its
// tuples to the overlay. Caller holds flushMu.
func (s *staging) writeBatch(b *batch) error {
	x := s.tup.NewTxn()
	first := len(s.pending)
	for _, e := range b.ents {
		var sums []uint32
		if s.sums {
			sums = b.sums[e.slot : e.slot+e.n]
		}
		id, err := x.RecordIntent(e.lba, b.tuples[e.slot*s.ts:(e.slot+e.n)*s.ts], sums)
		if err != nil {
			x.Abort()
			return err
		}
		s.pending = append(s.pending, id)
	}
	if s.tagged {
		// The tag intents, in the same commit. Their generations were
		// reserved before they were handed out (keyed.Engine.Stage).
		for i, e := range b.ents {
			if err := x.RecordTagIntent(s.pending[first+i], b.tags[e.slot:e.slot+e.n]); err != nil {
				x.Abort()
				return err
			}
		}
	}
	var pu *parityUpdate
	if s.par != nil {
		// The parity intents of the stripes the batch touches, in the same
		// commit (parity_write.go).
		changes := make([]pchange, len(b.ents))
		for i, e := range b.ents {
			changes[i] = pchange{lba: e.lba, n: e.n, data: b.data[e.slot*s.bs : (e.slot+e.n)*s.bs]}
		}
		var err error
		if pu, err = s.par.begin(x, changes); err != nil {
			x.Abort()
			return err
		}
	}
	if err := x.Commit(true); err != nil {
		return err
	}
	return s.par.around(pu, func() error {
		for _, e := range b.ents {
			if err := s.writeData(b.data[e.slot*s.bs:(e.slot+e.n)*s.bs], b.tuples[e.slot*s.ts:(e.slot+e.n)*s.ts], e.lba); err != nil {
				return err
			}
		}
		s.ovMu.Lock()
		for _, e := range b.ents {
			var sums []uint32
			if s.sums {
				sums = b.sums[e.slot : e.slot+e.n]
			}
			var tags []store.KeyedTag
			if s.tagged {
				tags = b.tags[e.slot : e.slot+e.n]
			}
			s.ovInsert(e.lba, e.n, b.tuples[e.slot*s.ts:], sums, tags)
			s.ovBlocks += int64(e.n)
		}
		s.ovMu.Unlock()
		return nil
	})
}

// writeData writes the staged blocks data at lba. A device that stores
// and checks PI (device.PIWriter: an NVMe namespace of the volume's
// format) gets their tuples, those of the intents just made durable, as
// the blocks' PI: it checks them end to end, and one it refuses (an error
// matching dif.ErrIntegrity) fails the batch, and so the volume, as any
// failed write does (writeFlushing); recovery resolves the intents.
func (s *staging) writeData(data, tuples []byte, lba int64) error {
	if s.pi != nil {
		return s.pi.WriteWithPI(data, tuples, lba*int64(s.bs))
	}
	_, err := s.dev.WriteAt(data, lba*int64(s.bs))
	return err
}

// syncLocked flushes the active batch, syncs the device and folds the
// overlay into the committed pages. Caller holds flushMu.
func (s *staging) syncLocked() error {
	if err := s.flushLocked(); err != nil {
		return err
	}
	if err := s.dev.Sync(); err != nil {
		return s.fails.set(err)
	}
	if s.par != nil {
		if err := s.par.sync(); err != nil {
			return s.fails.set(err)
		}
	}
	if err := s.foldLocked(); err != nil {
		return s.fails.set(err)
	}
	s.st.syncs.Add(1)
	return nil
}

// foldTxnBytes is the size at which a fold commits a transaction and
// starts the next. It stays well below half of a small store memtable
// (difctl serve's 8 MiB): Pebble takes a batch of half its memtable or more
// as a table of its own, and the compactions that merge such tables cost
// more than batches that go through the memtable.
const foldTxnBytes = 1 << 20

// foldLocked commits the overlay's tuples and drops the intents they came
// from. The data is durable. Caller holds flushMu.
func (s *staging) foldLocked() error {
	if len(s.pending) == 0 && len(s.overlay) == 0 && (s.par == nil || !s.par.hasPending()) {
		return nil
	}
	// The overlay changes only under flushMu, which we hold: read it
	// without ovMu.
	pages := make([]int64, 0, len(s.overlay))
	for p := range s.overlay {
		pages = append(pages, p)
	}
	slices.Sort(pages)
	x := s.tup.NewTxn()
	commit := func(force bool) error {
		if !force && x.Len() < foldTxnBytes {
			return nil
		}
		err := x.Commit(false)
		x = s.tup.NewTxn()
		return err
	}
	// The overlay's runs are staged merged across its pages, up to the end
	// of a store page (a power of two of at least ovP blocks), so that a
	// store page written whole is staged whole: the store then does not
	// read it first, and writing every block of a page that fails its
	// checks replaces it, as writing the blocks did. Transactions end
	// between store pages, so that the next one need not read back and
	// rewrite a page.
	storePage := int64(s.tup.Manifest().PageTuples)
	runs := func(yield func(lba, end int64) bool) {
		start, end := int64(-1), int64(-1)
		for _, p := range pages {
			for i, j := range s.overlay[p].runs() {
				a, b := p*ovP+int64(i), p*ovP+int64(j)
				if a == end && a%storePage != 0 {
					end = b
					continue
				}
				if start >= 0 && !yield(start, end) {
					return
				}
				start, end = a, b
			}
		}
		if start >= 0 {
			yield(start, end)
		}
	}
	tb := make([]byte, storePage*int64(s.ts))
	var sb []uint32
	if s.sums {
		sb = make([]uint32, storePage)
	}
	var gb []store.KeyedTag
	if s.tagged {
		gb = make([]store.KeyedTag, storePage)
	}
	// gather copies the overlay's columns of blocks [lba, end) into tb, sb
	// and gb.
	gather := func(lba, end int64) (tuples []byte, sums []uint32, tags []store.KeyedTag) {
		n := int(end - lba)
		tuples = tb[:n*s.ts]
		if s.sums {
			sums = sb[:n]
		}
		if s.tagged {
			tags = gb[:n]
		}
		for b := lba; b < end; {
			pg, off := s.overlay[b>>ovShift], int(b&(ovP-1))
			k, i := min(int(end-b), ovP-off), int(b-lba)
			copy(tuples[i*s.ts:], pg.tuples[off*s.ts:(off+k)*s.ts])
			if s.sums {
				copy(sums[i:], pg.sums[off:off+k])
			}
			if s.tagged {
				copy(tags[i:], pg.tags[off:off+k])
			}
			b += int64(k)
		}
		return tuples, sums, tags
	}
	last := int64(-1)
	between := func(lba int64) error {
		if sp := lba / storePage; sp != last {
			last = sp
			return commit(false)
		}
		return nil
	}
	for lba, end := range runs {
		if err := between(lba); err != nil {
			return err
		}
		tuples, sums, _ := gather(lba, end)
		if err := x.WriteRange(lba, tuples, sums); err != nil {
			x.Abort()
			return err
		}
	}
	if s.tagged {
		// The tags after all the tuples (the tag page's MAC seals the
		// tuple page as stored: each commit reseals it).
		last = -1
		for lba, end := range runs {
			if err := between(lba); err != nil {
				return err
			}
			_, _, tags := gather(lba, end)
			if err := x.WriteTags(lba, tags); err != nil {
				x.Abort()
				return err
			}
		}
	}
	// Committed tuples first, then the intents go: a crash in between
	// leaves intents whose data matches the committed tuple. The parity's
	// checksums go with the intents (the parity file is synced).
	if err := commit(true); err != nil {
		return err
	}
	if s.par != nil {
		if err := s.par.fold(x); err != nil {
			x.Abort()
			return err
		}
	}
	for _, id := range s.pending {
		if err := x.DropIntent(id); err != nil {
			x.Abort()
			return err
		}
		if err := commit(false); err != nil {
			return err
		}
	}
	// With a witness the last commit is synced: the seal is durable
	// before the witness records it (witness.go).
	if x.Len() > 0 && s.syncFold {
		err := x.Commit(true)
		x = s.tup.NewTxn()
		if err != nil {
			return err
		}
	}
	if err := commit(true); err != nil {
		return err
	}
	s.ovMu.Lock()
	for p, pg := range s.overlay {
		if len(s.ovFree) < ovFreeMax {
			clear(pg.mask[:])
			s.ovFree = append(s.ovFree, pg)
		}
		delete(s.overlay, p)
	}
	s.ovMu.Unlock()
	s.ovBlocks = 0
	s.pending = s.pending[:0]
	if s.par != nil {
		s.par.folded()
	}
	return nil
}

// The overlay holds the tuples of flushed, not yet folded blocks in pages
// of ovP blocks. The pages are small because a random write takes a page
// whatever its size: in pages of a store page's 1,024 blocks, the 64 Ki
// random 4 KiB writes of 256 MiB of unsynced data would hold 768 MiB of
// tuples and checksums at 12 bytes a block.
const (
	ovShift = 6
	ovP     = 1 << ovShift
)

// ovFreeMax is how many emptied overlay pages a fold keeps for reuse: the
// pages of 64 MiB of sequential writes at 512 bytes a block. The rest go
// to the collector, so that a burst of random writes does not keep its
// overlay (up to Options.OverlayBytes) for good.
const ovFreeMax = 2048

// ovPageBytes is what an overlay page takes in memory: its columns, its
// header and its map entry (tagged: with the keyed tags).
func (s *staging) ovPageBytes(tagged bool) int {
	n := ovP*s.ts + int(unsafe.Sizeof(ovPage{})) + 32
	if s.sums {
		n += ovP * 4
	}
	if tagged {
		n += ovP * int(unsafe.Sizeof(store.KeyedTag{}))
	}
	return n
}

type ovPage struct {
	mask   [ovP / 64]uint64
	tuples []byte
	sums   []uint32
	tags   []store.KeyedTag // tagged
}

// runs yields the runs [i, j) of the blocks set in the page, in order.
func (pg *ovPage) runs() iter.Seq2[int, int] {
	return func(yield func(int, int) bool) {
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
			if !yield(i, j) {
				return
			}
			i = j
		}
	}
}

// ovInsert sets the overlay tuples (and sums, and tags) of blocks [lba,
// lba+n). Caller holds ovMu and flushMu.
func (s *staging) ovInsert(lba int64, n int, tuples []byte, sums []uint32, tags []store.KeyedTag) {
	for i := 0; i < n; {
		b := lba + int64(i)
		p, off := b>>ovShift, int(b&(ovP-1))
		k := min(n-i, ovP-off)
		pg := s.overlay[p]
		if pg == nil {
			if l := len(s.ovFree); l > 0 {
				pg = s.ovFree[l-1]
				s.ovFree = s.ovFree[:l-1]
			} else {
				pg = &ovPage{tuples: make([]byte, ovP*s.ts)}
				if s.sums {
					pg.sums = make([]uint32, ovP)
				}
				if s.tagged {
					pg.tags = make([]store.KeyedTag, ovP)
				}
			}
			s.overlay[p] = pg
		}
		copy(pg.tuples[off*s.ts:(off+k)*s.ts], tuples[i*s.ts:])
		if s.sums {
			copy(pg.sums[off:off+k], sums[i:i+k])
		}
		if s.tagged {
			copy(pg.tags[off:off+k], tags[i:i+k])
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
