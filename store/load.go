package store

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Loader writes the committed tuples of one sequential block range in bulk:
// the path for creating or protecting a volume, which writes every tuple of
// an image once. It encodes the same pages as WriteRange and streams them to
// the backend's BulkWriter as they fill (on Pebble: sstables ingested at
// Finish, skipping the write-ahead log and the memtable flush), so memory
// stays at one page plus the backend's table buffers whatever the range.
//
// Write appends blocks at Next; Finish makes the whole range visible at
// once. A crash or Abort before Finish leaves the volume as it was; after
// Finish(true) the range is durable. Blocks of the range replace whatever
// was committed; the first and last pages, when the range starts or ends
// inside them, are merged with the blocks stored outside the range.
//
// The pages of the range leave the empty runs that held them (runs.go) in
// the load itself: its last keys are the runs that replace them.
//
// A bulk load is for creation and protect, not for a live volume: nothing
// else may write the range while it runs. A keyed volume has none: its
// tag pages seal its tuple pages, which it commits with them (ErrKeyed). Finish refuses, with ErrConflict
// and without writing anything, if an open intent overlaps the range or if
// a page the range shares with outside blocks was committed to after the
// Loader read it. Other commits inside the range during the load are lost
// (the load is newer). Finish holds the volume's commit lock while it
// ingests.
//
// A Loader is not safe for concurrent use.
type Loader struct {
	t     *Tuples
	bw    BulkWriter
	start int64 // first block of the range
	next  int64 // next block Write fills

	pb     *pageBuf // page being filled
	page   int64    // its page number
	lo, hi int      // its loaded slots [lo, hi); lo == hi when none
	enc    *[]byte

	// The first page, when the range starts inside it and it was written
	// before Finish: its key and the stored value it was merged with (nil
	// if there was none), checked again at Finish.
	headKey, headVal []byte

	err  error // sticky failure
	done bool
}

// NewLoader starts a bulk load of the committed tuples of blocks from lba
// on. Call Write to add blocks, then Finish or Abort.
func (t *Tuples) NewLoader(lba int64) (*Loader, error) {
	if t.k != nil {
		return nil, fmt.Errorf("%w: volume %q: a keyed volume commits its tuples with their tags, not by bulk load", ErrKeyed, t.volume)
	}
	if err := t.checkRange(lba, 0); err != nil {
		return nil, err
	}
	bw, err := NewBulkWriter(t.kv)
	if err != nil {
		return nil, err
	}
	t.beginWrite() // ended by release
	return &Loader{t: t, bw: bw, start: lba, next: lba, pb: t.bufPool.Get().(*pageBuf), enc: t.encPool.Get().(*[]byte)}, nil
}

// LoadRange bulk-loads tuples (and sums, required iff the volume keeps
// sector checksums) as the committed tuples of blocks
// [lba, lba+len(tuples)/TupleSize), all or nothing: NewLoader, Write and
// Finish in one call, with the rules of Loader.
func (t *Tuples) LoadRange(lba int64, tuples []byte, sums []uint32, sync bool) error {
	l, err := t.NewLoader(lba)
	if err != nil {
		return err
	}
	if err := l.Write(tuples, sums); err != nil {
		l.Abort()
		return err
	}
	return l.Finish(sync)
}

// Next returns the block the next Write starts at.
func (l *Loader) Next() int64 { return l.next }

func (l *Loader) usable() error {
	if l.done {
		return fmt.Errorf("%w: loader already finished or aborted", ErrClosed)
	}
	return l.err
}

// Write appends tuples (and sums, required iff the volume keeps sector
// checksums) for blocks [Next, Next+len(tuples)/TupleSize). It copies what
// it keeps. Any length is accepted; whole pages go to the backend as they
// fill. A failure other than a bad argument leaves the Loader failed.
func (l *Loader) Write(tuples []byte, sums []uint32) error {
	if err := l.usable(); err != nil {
		return err
	}
	t := l.t
	n, err := t.checkBufs(l.next, tuples, sums, true)
	if err != nil {
		return err
	}
	P := int64(t.l.p)
	ts := t.l.ts
	for i := 0; i < n; {
		page, ps := l.next/P, int(l.next%P)
		if l.lo == l.hi {
			l.pb.reset()
			l.page, l.lo, l.hi = page, ps, ps
		}
		c := min(t.l.p-ps, n-i)
		copy(l.pb.tuples[ps*ts:(ps+c)*ts], tuples[i*ts:(i+c)*ts])
		if t.l.sums {
			copy(l.pb.sums[ps:ps+c], sums[i:i+c])
		}
		fillBits(l.pb.bits, ps, c, true)
		l.hi += c
		l.next += int64(c)
		i += c
		if l.hi == t.l.p {
			if err := l.flushPage(false); err != nil {
				l.err = err
				return err
			}
		}
	}
	return nil
}

// flushPage writes the page being filled to the bulk writer, merged with
// the stored page if the range covers only part of it. atFinish means the
// volume's commit lock is held, so no later check is needed.
func (l *Loader) flushPage(atFinish bool) error {
	t := l.t
	key := t.pageKey(l.page)
	if l.lo > 0 || l.hi < t.l.p {
		v, empty, err := t.getPage(l.page, atFinish)
		if err != nil {
			return err
		}
		if !empty {
			l.mergeStored(v)
		}
		if !atFinish {
			l.headKey, l.headVal = key, v
		}
	}
	*l.enc = t.l.encode((*l.enc)[:0], l.pb)
	l.lo, l.hi = 0, 0
	return l.bw.Set(key, *l.enc)
}

// mergeStored fills the slots of the page outside [lo, hi) from the checked
// stored page value v.
func (l *Loader) mergeStored(v []byte) {
	t := l.t
	old := t.bufPool.Get().(*pageBuf)
	defer t.bufPool.Put(old)
	t.l.decode(old, v)
	ts, lo, hi, P := t.l.ts, l.lo, l.hi, t.l.p
	copy(l.pb.tuples[:lo*ts], old.tuples[:lo*ts])
	copy(l.pb.tuples[hi*ts:], old.tuples[hi*ts:])
	if t.l.sums {
		copy(l.pb.sums[:lo], old.sums[:lo])
		copy(l.pb.sums[hi:], old.sums[hi:])
	}
	copyBits(l.pb.bits, 0, old.bits, 0, lo)
	copyBits(l.pb.bits, hi, old.bits, hi, P-hi)
}

// Finish makes the loaded range visible at once; with sync it returns only
// once it is durable. It refuses with ErrConflict (writing nothing) as the
// Loader documents. The Loader cannot be used afterwards.
func (l *Loader) Finish(sync bool) error {
	if err := l.usable(); err != nil {
		if !l.done {
			l.Abort()
		}
		return err
	}
	t := l.t
	t.mu.Lock()
	err := l.finishLocked(sync)
	t.mu.Unlock()
	if err != nil {
		l.Abort()
		return err
	}
	l.release()
	return nil
}

func (l *Loader) finishLocked(sync bool) error {
	t := l.t
	if n := l.next - l.start; n > 0 {
		if err := l.checkIntents(n); err != nil {
			return err
		}
	}
	if l.headKey != nil {
		v, err := t.kv.Get(l.headKey)
		if errors.Is(err, ErrNotFound) {
			v, err = nil, nil
		}
		if err != nil {
			return err
		}
		if !bytes.Equal(v, l.headVal) {
			return fmt.Errorf("%w: volume %q: bulk load of blocks [%d, %d): page %d was committed to during the load",
				ErrConflict, t.volume, l.start, l.next, l.start/int64(t.l.p))
		}
	}
	if l.lo != l.hi {
		if err := l.flushPage(true); err != nil {
			return err
		}
	}
	if n := l.next - l.start; n > 0 {
		P := int64(t.l.p)
		if err := l.loadRuns(l.start/P, (l.next-1)/P); err != nil {
			return err
		}
	}
	l.done = true
	return l.bw.Finish(sync)
}

// loadRuns adds to the load the runs that replace those holding any of
// its pages [a, b]: the run of the pages before a, and of those after b,
// each under the key of its last page, and a null run under the key of a
// run that no longer holds any page (a bulk load cannot delete it). The
// keys follow every page key of the load. Caller holds t.mu.
func (l *Loader) loadRuns(a, b int64) error {
	t := l.t
	rs, err := t.runsOver([][2]int64{{a, b}})
	if err != nil {
		return err
	}
	type rec struct {
		last       int64
		first, end int64
	}
	var recs []rec
	for _, r := range rs {
		if r.first < a {
			recs = append(recs, rec{a - 1, r.first, a})
		}
		if r.end-1 > b {
			recs = append(recs, rec{r.end - 1, b + 1, r.end})
		} else {
			recs = append(recs, rec{r.end - 1, r.end, r.end})
		}
	}
	slices.SortFunc(recs, func(x, y rec) int { return cmp.Compare(x.last, y.last) })
	for _, r := range recs {
		if err := l.bw.Set(t.runKey(r.last), t.encodeRun(r.first, r.end, nil)); err != nil {
			return err
		}
	}
	return nil
}

// checkIntents refuses a load over blocks under an open intent.
func (l *Loader) checkIntents(n int64) error {
	t := l.t
	return t.scanIntentKeys(l.start, n, func(lba int64, seq uint64, v []byte) error {
		in, err := t.decodeIntent(lba, seq, v)
		if err != nil {
			return err
		}
		if in.LBA+in.N <= l.start || in.LBA >= l.next {
			return nil
		}
		return fmt.Errorf("%w: volume %q: bulk load of blocks [%d, %d) overlaps open intent lba=%d n=%d seq=%d",
			ErrConflict, t.volume, l.start, l.next, in.LBA, in.N, in.Seq)
	})
}

// Abort discards the load: nothing of it becomes visible. It is a no-op
// after Finish or a previous Abort.
func (l *Loader) Abort() error {
	if l.bw == nil {
		return nil
	}
	l.done = true
	err := l.bw.Abort()
	l.release()
	return err
}

func (l *Loader) release() {
	l.done = true
	if l.pb != nil {
		l.t.bufPool.Put(l.pb)
		l.t.encPool.Put(l.enc)
		l.pb, l.enc = nil, nil
		l.t.endWrite(nil, true)
	}
	l.bw = nil
}
