package store

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Tuples is one volume's tuple store on a KV: its manifest, tuple pages,
// intents, scrub cursors and findings. Many volumes may share one KV; each
// keeps its records under its own key prefix.
//
// A Tuples is safe for concurrent use. Reads see consistent snapshots;
// commits (Txn.Commit, WriteRange, Discard, findings updates) are serialized
// so read-modify-write of a shared page never loses an update.
type Tuples struct {
	kv     KV
	volume string
	prefix []byte
	m      Manifest
	l      layout
	blocks int64
	pages  int64  // pages of the volume
	dense  bool   // every page has a record or lies in an empty run (schema 2 on)
	k      *keyed // keyed volumes only (keyed.go)

	mu  sync.Mutex // serializes commits
	seq atomic.Uint64

	bufPool sync.Pool // *pageBuf
	encPool sync.Pool // *[]byte page encode buffers

	cmu     sync.Mutex // serializes SetPageCache
	cache   atomic.Pointer[pageCache]
	writers atomic.Int32 // page writes running (see beginWrite)
	// tupleReads counts ReadRangeCached's reads of the KV (TupleReads).
	tupleReads atomic.Uint64
}

// CreateTuples creates volume on kv with manifest m and returns it, of
// schema version SchemaVersion. It fails with ErrExists if the volume
// already has a manifest. The manifest is written with one empty run that
// holds every page (runs.go), in one synced commit: creation writes the
// same few records whatever the volume's size.
//
// A keyed manifest (KeyCheck set) is refused with ErrKeyed: a keyed volume
// is created with CreateKeyedTuples, which seals its run.
func CreateTuples(kv KV, volume string, m Manifest) (*Tuples, error) {
	if m.Keyed() {
		return nil, fmt.Errorf("%w: create volume %q: a keyed volume is created with its page key (CreateKeyedTuples)", ErrKeyed, volume)
	}
	return createTuples(kv, volume, m, nil)
}

func createTuples(kv KV, volume string, m Manifest, pageKey []byte) (*Tuples, error) {
	return create(kv, volume, m, pageKey, nil)
}

// create creates volume with manifest m (and, if j is not nil, the journal
// j, checked by the caller) in one synced commit.
func create(kv KV, volume string, m Manifest, pageKey []byte, j *Journal) (*Tuples, error) {
	prefix, err := volumePrefix(volume)
	if err != nil {
		return nil, err
	}
	m.normalize()
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("store: create volume %q: %w", volume, err)
	}
	if j != nil {
		if err := checkJournal(&m, j); err != nil {
			return nil, err
		}
	}
	m.Schema, m.Features = SchemaVersion, nil
	if m.Created.IsZero() {
		m.Created = time.Now().UTC()
	}
	key := recKey(prefix, recManifest)
	if _, err := kv.Get(key); err == nil {
		return nil, fmt.Errorf("%w: volume %q", ErrExists, volume)
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	v, err := encodeManifest(m)
	if err != nil {
		return nil, fmt.Errorf("store: create volume %q: %v", volume, err)
	}
	t, err := newTuples(kv, volume, prefix, m)
	if err != nil {
		return nil, err
	}
	if t.k != nil {
		if pageKey == nil {
			return nil, fmt.Errorf("%w: volume %q: creating a keyed volume needs its page key", ErrKeyed, volume)
		}
		if err := t.SetPageMACKey(pageKey); err != nil {
			return nil, err
		}
	}
	if err := t.clearPages(); err != nil {
		return nil, fmt.Errorf("store: create volume %q: %w", volume, err)
	}
	// One empty run holds every page (runs.go), written with the manifest
	// that says the volume exists: a volume with a manifest has a record
	// of every page, whatever its size.
	b := kv.NewBatch()
	defer b.Close()
	var mk []byte
	if t.k != nil {
		mk = t.macKey()
	}
	run := t.encodeRun(0, t.pages, mk)
	if err := b.Set(t.runKey(t.pages-1), run); err != nil {
		return nil, err
	}
	if err := b.Set(key, v); err != nil {
		return nil, err
	}
	if j != nil {
		jv, err := encodeJournal(*j)
		if err != nil {
			return nil, fmt.Errorf("store: create volume %q: %v", volume, err)
		}
		if err := b.Set(journalKey(prefix), jv); err != nil {
			return nil, err
		}
	}
	if t.k != nil {
		// The seal (generation 1) commits to the run, beside the manifest.
		t.mu.Lock()
		t.k.seal = seal{loaded: true, present: true}
		s, err := t.stageSeal(b, []sealChange{{id: runLeafID(t.pages - 1), new: run}})
		t.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("store: create volume %q: %w", volume, err)
		}
		s.durable = true
		t.k.seal = s
	}
	if err := b.Commit(true); err != nil {
		return nil, err
	}
	return t, nil
}

// clearPages deletes what a volume without a manifest may hold of page
// records and runs: the empty pages of a creation by an earlier version,
// which wrote them before the manifest and may have been interrupted.
// They would overlap the new volume's run. For a new name it reads three
// empty ranges.
func (t *Tuples) clearPages() error {
	for _, typ := range []byte{recTagPage, recPage, recRun} {
		for {
			it, err := t.kv.NewIter(recKey(t.prefix, typ), recKey(t.prefix, typ+1))
			if err != nil {
				return err
			}
			b := t.kv.NewBatch()
			n := 0
			for n < 4096 && it.Next() {
				if err := b.Delete(it.Key()); err != nil {
					it.Close()
					b.Close()
					return err
				}
				n++
			}
			err = it.Err()
			it.Close()
			if err == nil && n > 0 {
				err = b.Commit(false)
			}
			b.Close()
			if err != nil {
				return err
			}
			if n < 4096 {
				break
			}
		}
	}
	return nil
}

// Dense reports whether every page of the volume has a record, or lies in
// an empty run (schema version 2 on), so that a missing page is reported
// as corruption. Volumes created with schema version 1 record empty pages
// by their absence: a page they lost reads as unwritten blocks.
func (t *Tuples) Dense() bool { return t.dense }

// missingPage is the error of a page a dense volume has no record of.
func (t *Tuples) missingPage(page int64) error {
	return &CorruptError{Volume: t.volume, Record: fmt.Sprintf("page %d", page), Reason: "missing: the store has no record of it, nor an empty run holding it (lost, not unwritten)"}
}

// getPage reads page's tuple page record: v is its value (nil when it has
// none: it lies in an empty run, or a volume of schema 1 has no record of
// it), empty tells an empty page. A page value is checked. locked: the
// caller holds t.mu.
func (t *Tuples) getPage(page int64, locked bool) (v []byte, empty bool, err error) {
	err = t.walkPages(recPage, page, page, locked, nil, func(pc *piece) error {
		switch {
		case pc.missing:
			return t.missingPage(page)
		case pc.v == nil:
			v, empty = nil, true
			return nil
		}
		v = slices.Clone(pc.v)
		var err error
		empty, err = t.l.checkAny(t.volume, page, v)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return v, empty, nil
}

// OpenTuples opens an existing volume. If want is not nil, the stored
// manifest must match it (after defaults: PageTuples 0 means
// DefaultPageTuples) in every field but Schema, Created and Tool, or
// OpenTuples fails at once with a *ManifestMismatchError naming the field and
// both values. A missing volume fails with ErrNotFound, and one with an
// offline operation in progress (see Journal) with an *InProgressError.
func OpenTuples(kv KV, volume string, want *Manifest) (*Tuples, error) {
	prefix, err := volumePrefix(volume)
	if err != nil {
		return nil, err
	}
	v, err := kv.Get(recKey(prefix, recManifest))
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("%w: volume %q", ErrNotFound, volume)
	} else if err != nil {
		return nil, err
	}
	m, err := decodeManifest(volume, v)
	if err != nil {
		return nil, err
	}
	if err := refuseJournaled(kv, prefix, volume); err != nil {
		return nil, err
	}
	if want != nil {
		w := *want
		w.normalize()
		if err := m.compare(volume, &w); err != nil {
			return nil, err
		}
	}
	return newTuples(kv, volume, prefix, m)
}

func newTuples(kv KV, volume string, prefix []byte, m Manifest) (*Tuples, error) {
	t := &Tuples{kv: kv, volume: volume, prefix: prefix, m: m, l: newLayout(&m), blocks: m.Blocks(), dense: m.Schema >= DenseSchemaVersion}
	t.pages = (t.blocks + int64(t.l.p) - 1) / int64(t.l.p)
	t.bufPool.New = func() any { return t.l.newPageBuf() }
	t.encPool.New = func() any { b := make([]byte, 0, t.l.size); return &b }
	if err := t.initKeyed(); err != nil {
		return nil, err
	}
	// Resume intent sequence numbers after the highest one stored.
	var maxSeq uint64
	err := t.scanIntentKeys(0, t.blocks, func(lba int64, seq uint64, v []byte) error {
		maxSeq = max(maxSeq, seq)
		return nil
	})
	if err != nil {
		return nil, err
	}
	t.seq.Store(maxSeq)
	return t, nil
}

// Manifest returns the volume's stored manifest.
func (t *Tuples) Manifest() Manifest { return t.m }

// Volume returns the volume name.
func (t *Tuples) Volume() string { return t.volume }

// Blocks returns the number of blocks in the volume.
func (t *Tuples) Blocks() int64 { return t.blocks }

// TupleSize returns the bytes per tuple (8 or 16).
func (t *Tuples) TupleSize() int { return t.l.ts }

// checkRange refuses a negative lba or n and a range beyond the volume,
// with an ErrOutOfRange error.
func (t *Tuples) checkRange(lba, n int64) error {
	if lba < 0 || n < 0 || lba > t.blocks || n > t.blocks-lba {
		return fmt.Errorf("%w: volume %q: blocks [%d, +%d) beyond %d blocks", ErrOutOfRange, t.volume, lba, n, t.blocks)
	}
	return nil
}

// checkBufs validates tuple/sum buffers for a range and returns its length.
func (t *Tuples) checkBufs(lba int64, tuples []byte, sums []uint32, write bool) (int, error) {
	if len(tuples)%t.l.ts != 0 {
		return 0, fmt.Errorf("%w: tuple buffer of %d bytes is not a multiple of %d", ErrInvalid, len(tuples), t.l.ts)
	}
	n := len(tuples) / t.l.ts
	switch {
	case sums != nil && !t.l.sums:
		return 0, fmt.Errorf("%w: volume %q keeps no sector checksums", ErrInvalid, t.volume)
	case sums == nil && t.l.sums && write:
		return 0, fmt.Errorf("%w: volume %q keeps sector checksums; none given", ErrInvalid, t.volume)
	case sums != nil && len(sums) < n:
		return 0, fmt.Errorf("%w: %d sector checksums for %d blocks", ErrInvalid, len(sums), n)
	}
	return n, t.checkRange(lba, int64(n))
}

func (t *Tuples) pageKey(page int64) []byte { return u64Key(t.prefix, recPage, page) }

// ReadRange reads the committed tuples of the blocks [lba, lba+n), where
// n = len(tuples)/TupleSize, into tuples (n*TupleSize bytes), sums (n sector
// checksums, or nil; it must be nil if the volume keeps none) and written (a
// Bitmap of at least n bits, or nil). It returns how many blocks are written.
//
// Unwritten and discarded blocks are not errors: their bit in written is
// clear, their tuple reads as all ones (the PI escape) and their sum as 0.
// Only the bitmap tells them apart from a block whose stored tuple happens
// to be all ones.
//
// ReadRange reads one consistent snapshot and allocates nothing per block or
// page.
func (t *Tuples) ReadRange(lba int64, tuples []byte, sums []uint32, written Bitmap) (int, error) {
	n, err := t.checkRead(lba, tuples, sums, written)
	if err != nil || n == 0 {
		return 0, err
	}
	P := int64(t.l.p)
	first, last := lba/P, (lba+int64(n)-1)/P
	var bitsBuf [65536 / 64]uint64
	pbits := bitsBuf[:t.l.bitsLen]
	ts := t.l.ts
	count := 0
	next := lba // first block not yet filled
	end := lba + int64(n)
	fillGap := func(to int64) {
		if to <= next {
			return
		}
		i, j := int(next-lba), int(to-lba)
		fillOnes(tuples[i*ts : j*ts])
		if sums != nil {
			clear(sums[i:j])
		}
		if written != nil {
			fillBits(written, i, j-i, false)
		}
		next = to
	}
	begin := func() { count, next = 0, lba }
	err = t.walkPages(recPage, first, last, false, begin, func(pc *piece) error {
		if pc.missing {
			return t.missingPage(max(pc.first, first))
		}
		if pc.v == nil {
			return nil // unwritten: filled as a gap
		}
		page := pc.first
		empty, err := t.l.checkAny(t.volume, page, pc.v)
		if err != nil || empty {
			return err
		}
		v := pc.v
		pstart := page * P
		s := max(pstart, lba)
		e := min(pstart+P, end)
		fillGap(s)
		i, j := int(s-lba), int(e-lba) // destination block indexes
		ps, pe := int(s-pstart), int(e-pstart)
		copy(tuples[i*ts:j*ts], v[t.l.tupOff+ps*ts:t.l.tupOff+pe*ts])
		if sums != nil {
			decodeSums(sums[i:j], v[t.l.sumOff+4*ps:])
		}
		t.l.pageBits(pbits, v)
		if written != nil {
			count += copyBits(written, i, pbits, ps, pe-ps)
		} else {
			count += Bitmap(pbits).countRange(ps, pe-ps)
		}
		next = e
		return nil
	})
	if err != nil {
		return 0, err
	}
	fillGap(end)
	return count, nil
}

// TupleReads counts the reads of tuple pages from the KV store that
// ReadRangeCached served (into its page cache, or directly without one).
// Each is counted after its read of the store completes, so a value read
// after a ReadRangeCached call returned is at least the count of the read
// that produced its tuples, resident or not: a keyed reader that checks a
// tag page's MAC (which seals the tuple page as stored) after reading this
// counter knows the tuple pages it got were read before that check.
func (t *Tuples) TupleReads() uint64 { return t.tupleReads.Load() }

// ReadRangeCached is ReadRange served from the page cache where
// SetPageCache gave it one: a range whose pages are all resident is copied
// from their decoded form; otherwise its pages are read from the KV as
// ReadRange reads them and kept. Without a cache it is ReadRange.
//
// Cached pages are not read from the KV again, so they are not checked
// against their stored checksums again either: a scrub of the store should
// use ReadRange. The cache sees every write made through this Tuples, and
// only those (see SetPageCache).
func (t *Tuples) ReadRangeCached(lba int64, tuples []byte, sums []uint32, written Bitmap) (int, error) {
	c := t.cache.Load()
	if c == nil {
		cnt, err := t.ReadRange(lba, tuples, sums, written)
		t.tupleReads.Add(1)
		return cnt, err
	}
	n, err := t.checkRead(lba, tuples, sums, written)
	if err != nil || n == 0 {
		return 0, err
	}
	P := int64(t.l.p)
	first, last := lba/P, (lba+int64(n)-1)/P
	if count, ok := t.readResident(c, lba, n, first, last, tuples, sums, written); ok {
		c.hits.Add(int64(last - first + 1))
		return count, nil
	}
	c.misses.Add(int64(last - first + 1))
	gen := c.generation()
	pages := make([]*cachedPage, 0, last-first+1)
	spare := c.takeSpare(int(last - first + 1))
	newPage := func(page int64) *cachedPage {
		var cp *cachedPage
		if k := len(spare); k > 0 {
			cp, spare = spare[k-1], spare[:k-1]
		} else {
			cp = new(cachedPage)
		}
		cp.page, cp.empty = page, false
		return cp
	}
	begin := func() {
		spare = append(spare, pages...)
		pages = pages[:0]
	}
	err = t.walkPages(recPage, first, last, false, begin, func(pc *piece) error {
		if pc.missing {
			return t.missingPage(max(pc.first, first))
		}
		empty := pc.v == nil
		if !empty {
			var err error
			if empty, err = t.l.checkAny(t.volume, pc.first, pc.v); err != nil {
				return err
			}
		}
		for page := max(pc.first, first); page < min(pc.end, last+1); page++ {
			cp := newPage(page)
			if empty {
				cp.empty = true
			} else {
				t.l.decodeCached(cp, pc.v)
			}
			pages = append(pages, cp)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	t.tupleReads.Add(1)
	if testHookCacheMiss != nil {
		testHookCacheMiss()
	}
	count := 0
	for _, cp := range pages {
		count += t.copyPage(cp, lba, n, tuples, sums, written)
	}
	c.putSpare(c.fill(gen, &t.writers, pages, spare))
	return count, nil
}

// checkRead validates ReadRange's arguments and returns the block count.
func (t *Tuples) checkRead(lba int64, tuples []byte, sums []uint32, written Bitmap) (int, error) {
	n, err := t.checkBufs(lba, tuples, sums, false)
	if err != nil {
		return 0, err
	}
	if written != nil && len(written)*64 < n {
		return 0, fmt.Errorf("%w: bitmap of %d bits for %d blocks", ErrInvalid, len(written)*64, n)
	}
	return n, nil
}

// readResident copies the range from the cache if every page of it is
// resident.
func (t *Tuples) readResident(c *pageCache, lba int64, n int, first, last int64, tuples []byte, sums []uint32, written Bitmap) (int, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if t.writers.Load() > 0 {
		return 0, false
	}
	for p := first; p <= last; p++ {
		if c.pages[p] == nil {
			return 0, false
		}
	}
	count := 0
	for p := first; p <= last; p++ {
		cp := c.pages[p]
		cp.ref.Store(true)
		count += t.copyPage(cp, lba, n, tuples, sums, written)
	}
	return count, true
}

// copyPage copies the part of the decoded page cp within the range of n
// blocks at lba into the range's buffers and returns how many of its
// blocks are written.
func (t *Tuples) copyPage(cp *cachedPage, lba int64, n int, tuples []byte, sums []uint32, written Bitmap) int {
	P := int64(t.l.p)
	ts := t.l.ts
	pstart := cp.page * P
	s, e := max(pstart, lba), min(pstart+P, lba+int64(n))
	i, j := int(s-lba), int(e-lba)
	ps, pe := int(s-pstart), int(e-pstart)
	if cp.empty {
		fillOnes(tuples[i*ts : j*ts])
		if sums != nil {
			clear(sums[i:j])
		}
		if written != nil {
			fillBits(written, i, j-i, false)
		}
		return 0
	}
	copy(tuples[i*ts:j*ts], cp.tuples[ps*ts:pe*ts])
	if sums != nil {
		copy(sums[i:j], cp.sums[ps:pe])
	}
	if written != nil {
		return copyBits(written, i, cp.bits, ps, pe-ps)
	}
	return Bitmap(cp.bits).countRange(ps, pe-ps)
}

func (b Bitmap) countRange(off, n int) int {
	c := 0
	for k := 0; k < n; k += 64 {
		c += popcount(getBits(b, off+k, min(64, n-k)))
	}
	return c
}

// WriteRange stores tuples (and sums, required iff the volume keeps sector
// checksums) as the committed tuples of blocks [lba, lba+len(tuples)/TupleSize).
// Large ranges are committed in several batches sized to the backend's
// limits; only the last is synced when sync is set (which makes every
// earlier one durable too). A crash part-way may leave a prefix of the range
// written: callers that need all-or-nothing use a Txn or intents.
func (t *Tuples) WriteRange(lba int64, tuples []byte, sums []uint32, sync bool) error {
	n, err := t.checkBufs(lba, tuples, sums, true)
	if err != nil {
		return err
	}
	chunk := t.chunkBlocks()
	for off := 0; off < n; off += chunk {
		c := min(chunk, n-off)
		x := t.NewTxn()
		var s []uint32
		if sums != nil {
			s = sums[off : off+c]
		}
		x.add(txnOp{kind: opWrite, lba: lba + int64(off), n: int64(c), tuples: tuples[off*t.l.ts : (off+c)*t.l.ts], sums: s})
		if err := x.Commit(sync && off+c == n); err != nil {
			return err
		}
	}
	return nil
}

// Discard marks blocks [lba, lba+n) unwritten, committing in batches like
// WriteRange.
func (t *Tuples) Discard(lba, n int64, sync bool) error {
	if err := t.checkRange(lba, n); err != nil {
		return err
	}
	chunk := int64(t.chunkBlocks()) * 16 // discards of whole pages write only tombstones
	for off := int64(0); off < n; off += chunk {
		c := min(chunk, n-off)
		x := t.NewTxn()
		x.add(txnOp{kind: opDiscard, lba: lba + off, n: c})
		if err := x.Commit(sync && off+c == n); err != nil {
			return err
		}
	}
	return nil
}

// chunkBlocks is how many blocks WriteRange commits per batch: whole pages,
// up to 8 MiB of page values or a quarter of the backend's batch limit.
// (Pebble turns a batch above half its memtable size into a memtable of its
// own, forcing a flush; 8 MiB stays well below the 64 MiB memtable.)
func (t *Tuples) chunkBlocks() int {
	budget := min(8<<20, t.kv.Limits().MaxBatchBytes/4)
	pages := max(1, budget/(t.l.size+64))
	return pages * t.l.p
}

// Volumes lists the names of the volumes on kv, sorted.
func Volumes(kv KV) ([]string, error) {
	var names []string
	lo := []byte{keyNamespace}
	hi := []byte{keyNamespace + 1}
	for {
		it, err := kv.NewIter(lo, hi)
		if err != nil {
			return nil, err
		}
		ok := it.Next()
		var k []byte
		if ok {
			k = append(k, it.Key()...)
		}
		err = it.Err()
		it.Close()
		if err != nil {
			return nil, err
		}
		if !ok {
			slices.Sort(names)
			return names, nil
		}
		if len(k) < 2 || len(k) < 2+int(k[1]) || k[1] == 0 {
			return nil, &CorruptError{Record: fmt.Sprintf("key %x", k), Reason: "bad volume prefix"}
		}
		name := string(k[2 : 2+int(k[1])])
		names = append(names, name)
		p, _ := volumePrefix(name)
		lo = prefixEnd(p)
	}
}

// DeleteVolume deletes every record of volume on kv (manifest, pages,
// intents, cursors, findings), in batches, the last one synced.
func DeleteVolume(kv KV, volume string) error {
	prefix, err := volumePrefix(volume)
	if err != nil {
		return err
	}
	for {
		it, err := kv.NewIter(prefix, prefixEnd(prefix))
		if err != nil {
			return err
		}
		b := kv.NewBatch()
		more := false
		for it.Next() {
			if b.Len() > 4<<20 {
				more = true
				break
			}
			if err := b.Delete(it.Key()); err != nil {
				it.Close()
				b.Close()
				return err
			}
		}
		err = it.Err()
		it.Close()
		if err != nil {
			b.Close()
			return err
		}
		if err := b.Commit(!more); err != nil {
			return err
		}
		if !more {
			return nil
		}
	}
}

// HasRecords reports whether volume has any record on kv other than
// empty-page records (and a keyed volume's empty tag pages): a manifest,
// an empty run, a tuple page, an intent, a cursor, a finding. A volume
// whose creation by an earlier version was interrupted holds at most
// empty-page records (that version wrote them before the manifest); this
// version writes the empty run with the manifest, so a volume created by
// it that lost its manifest still has records. It stops at the first
// such record.
func HasRecords(kv KV, volume string) (bool, error) {
	prefix, err := volumePrefix(volume)
	if err != nil {
		return false, err
	}
	it, err := kv.NewIter(prefix, prefixEnd(prefix))
	if err != nil {
		return false, err
	}
	defer it.Close()
	pageRec := len(prefix) + 1 + 8
	for it.Next() {
		k := it.Key()
		if len(k) == pageRec && k[len(prefix)] == recPage && string(it.Value()) == string(emptyPageValue) {
			continue
		}
		if len(k) == pageRec && k[len(prefix)] == recTagPage && isEmptyTagPage(it.Value()) {
			continue
		}
		return true, nil
	}
	return false, it.Err()
}

// Coverage returns how many blocks of the volume are written, reading each
// stored page record and empty run once: its time is bounded by what the
// store holds, not by the manifest's device size. On a dense volume a
// missing page is a *CorruptError, as in ReadRange. stop, if not nil, is
// polled every 1,024 records; a non-nil error from it ends the scan with
// that error.
func (t *Tuples) Coverage(stop func() error) (int64, error) {
	var bitsBuf [65536 / 64]uint64
	pbits := bitsBuf[:t.l.bitsLen]
	var written int64
	n := 0
	begin := func() { written, n = 0, 0 }
	err := t.walkPages(recPage, 0, t.pages-1, false, begin, func(pc *piece) error {
		if stop != nil && n%1024 == 0 {
			if err := stop(); err != nil {
				return err
			}
		}
		n++
		switch {
		case pc.missing:
			return t.missingPage(pc.first)
		case pc.v == nil:
			return nil
		}
		empty, err := t.l.checkAny(t.volume, pc.first, pc.v)
		if err != nil || empty {
			return err
		}
		t.l.pageBits(pbits, pc.v)
		// Bits of blocks past the device's end are never set.
		written += int64(Bitmap(pbits).countRange(0, t.l.p))
		return nil
	})
	if err != nil {
		return 0, err
	}
	return written, nil
}
