package store

import (
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"

	"github.com/difctl/difctl/kernels/crc32c"
)

// Empty runs (schema version 7). A volume records the pages that hold no
// written block, and never held one since the volume was created, as
// ranges rather than page by page, so that creating a volume costs one
// record whatever its size:
//
//	'R' empty run | last page of the run (8, big-endian)
//
// Run value, version 1 (big-endian):
//
//	0  'R' magic
//	1  version (1)
//	2  flags: 1 = keyed (a MAC follows)
//	3  0
//	4  first page (8)
//	12 end page (8): the run holds pages [first, end); end is the key's
//	   page + 1. first == end is a null run, which holds no page (what a
//	   bulk load leaves where a run it consumed had its key).
//	20 keyed volumes only: MAC (32), HMAC-SHA256 under the page key of
//	   "difctl.store.run.v1" | volume uid (16) | bytes 0-19
//	   CRC-32C of everything before it (4)
//
// The page records and the runs of a volume partition its pages: every
// page has a tuple page record (a page value or an empty-page record, see
// page.go) or lies in exactly one run, never both; a keyed volume's tag
// pages (keyed.go) follow the same partition, with the same runs, which
// stand for the tuple page and the tag page of each of their pages. So a
// page with neither a record nor a run was deleted: ReadRange and
// Coverage report it as a *CorruptError, ReadTags as a missing tag page
// (PageMACError.Missing), as when every page had a record. A run that
// overlaps a page record or another run is a *CorruptError too.
//
// CreateTuples writes one run, of every page, in the batch of the
// manifest. Runs only shrink: a commit (Txn.Commit) that writes a block
// of a page in a run gives the page its records and replaces the run by
// the runs of its other pages, in the same KV batch as the page, so a
// crash leaves the one or the other, never a page in neither or both. A
// page in a run that a commit leaves without a written block (a discard,
// or a write and a discard of the same blocks) stays in the run, and no
// record is written. A bulk load (Loader) replaces the runs of its pages
// in the load itself, writing a null run where a run it consumed had its
// key, since a bulk load only sets keys. A page that held written blocks
// and was discarded keeps an empty-page record.
//
// Keyed volumes. A run's MAC proves that the key wrote it for those pages
// of this volume: reading tags with the key (ReadTags) checks it, and a
// run whose MAC fails fails every page of it in the read (page-mac), as a
// tag page whose MAC fails. Every run is a leaf of the seal (seal.go), so
// that putting back an older run (one that still held pages written
// since, with those pages' records deleted) is found by CheckSeal, as the
// older version of a tag page is. Splitting a run of a keyed volume needs
// the page key, and a run whose MAC fails is not split (its parts would
// carry the key's MAC): the commit fails with the *PageMACError.
//
// Runs are records of a type of their own, keyed by their last page so
// that the run holding a page is the first at or after it in a forward
// scan, rather than among the page records: a commit into pages that have
// records reads no run, and one that writes whole pages reads the runs
// of their range, not the pages.
//
// Reads take the page records of a range from one KV snapshot and, where
// those leave a gap, the runs from a second one, taken after the first.
// Runs only shrink and page records of a dense volume are never deleted,
// so a commit between the two snapshots can only make a page that the
// first saw in a run look missing (its run split, its new record not in
// the first snapshot); a walk that finds a gap or an overlap therefore
// reads again, and only one made under the commit lock, which no commit
// through this Tuples can interleave, reports it.

const (
	recRun = 'R'

	runMagic     = 'R'
	runVersion   = 1
	runFlagKeyed = 1
	runBody      = 20
	runSize      = runBody + 4
	keyedRunSize = runBody + pageMACLen + 4
)

// emptyRun is a decoded run record: the pages [first, end). v is the
// record as stored (its own copy).
type emptyRun struct {
	first, end int64
	v          []byte
}

func (r *emptyRun) null() bool { return r.first == r.end }

func (t *Tuples) runKey(last int64) []byte { return u64Key(t.prefix, recRun, last) }

// runLeafID is what identifies a run among the seal's leaves: 'R' and
// the page of its key (a tag page's is its page number alone).
func runLeafID(last int64) []byte {
	return binary.BigEndian.AppendUint64([]byte{recRun}, uint64(last))
}

// encodeRun returns the record of the run [first, end), stored under the
// key of page end-1 (first == end: a null run). A keyed volume's carries
// a MAC under key, which must be set.
func (t *Tuples) encodeRun(first, end int64, key []byte) []byte {
	v := make([]byte, 0, keyedRunSize)
	var flags byte
	if t.k != nil {
		flags = runFlagKeyed
	}
	v = append(v, runMagic, runVersion, flags, 0)
	v = binary.BigEndian.AppendUint64(v, uint64(first))
	v = binary.BigEndian.AppendUint64(v, uint64(end))
	if t.k != nil {
		v = append(v, t.runMAC(key, v)...)
	}
	return binary.BigEndian.AppendUint32(v, crc32c.Checksum(v))
}

func (t *Tuples) runMAC(key, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("difctl.store.run.v1"))
	h.Write(t.k.uid[:])
	h.Write(body)
	return h.Sum(nil)
}

// runMACOK reports whether the run record v (decoded) carries the MAC of
// key.
func (t *Tuples) runMACOK(key, v []byte) bool {
	return hmac.Equal(t.runMAC(key, v[:runBody]), v[runBody:runBody+pageMACLen])
}

// decodeRun checks the run record v stored under the key of page last
// (length, header, CRC-32C, bounds) and decodes it. A keyed volume's MAC
// is checked by runMACOK.
func (t *Tuples) decodeRun(last int64, v []byte) (emptyRun, error) {
	corrupt := func(format string, args ...any) error {
		return &CorruptError{Volume: t.volume, Record: fmt.Sprintf("empty run ending at page %d", last), Reason: fmt.Sprintf(format, args...)}
	}
	size, flags := runSize, byte(0)
	if t.k != nil {
		size, flags = keyedRunSize, runFlagKeyed
	}
	if len(v) != size || v[0] != runMagic || v[1] != runVersion || v[2] != flags || v[3] != 0 {
		return emptyRun{}, corrupt("bad record of %d bytes (%x)", len(v), v[:min(len(v), 4)])
	}
	crcOff := size - 4
	if got, want := crc32c.Checksum(v[:crcOff]), binary.BigEndian.Uint32(v[crcOff:]); got != want {
		return emptyRun{}, corrupt("checksum %08x, stored %08x", got, want)
	}
	first, end := int64(binary.BigEndian.Uint64(v[4:])), int64(binary.BigEndian.Uint64(v[12:]))
	if last < 0 || last >= t.pages || end != last+1 || first < 0 || first > end {
		return emptyRun{}, corrupt("pages [%d, %d) under the key of page %d, in a volume of %d pages", first, end, last, t.pages)
	}
	return emptyRun{first: first, end: end, v: slices.Clone(v)}, nil
}

// runIter walks the runs of a volume in page order.
type runIter struct {
	t  *Tuples
	it Iterator
}

// newRunIter returns an iterator over the runs that end at page from or
// after it. The caller closes it.
func (t *Tuples) newRunIter(from int64) (*runIter, error) {
	it, err := t.kv.NewIter(t.runKey(from), recKey(t.prefix, recRun+1))
	if err != nil {
		return nil, err
	}
	return &runIter{t: t, it: it}, nil
}

// next returns the next run that is not null (ok false at the end).
func (r *runIter) next() (run emptyRun, ok bool, err error) {
	t := r.t
	plen := len(t.prefix) + 1
	for r.it.Next() {
		k := r.it.Key()
		if len(k) != plen+8 {
			return emptyRun{}, false, &CorruptError{Volume: t.volume, Record: fmt.Sprintf("empty run key %x", k), Reason: "bad key length"}
		}
		v := r.it.Value()
		if v == nil {
			if err := r.it.Err(); err != nil {
				return emptyRun{}, false, err
			}
		}
		run, err := t.decodeRun(keyInt(k[plen:]), v)
		if err != nil {
			return emptyRun{}, false, err
		}
		if !run.null() {
			return run, true, nil
		}
	}
	return emptyRun{}, false, r.it.Err()
}

func (r *runIter) close() { r.it.Close() }

// piece is what covers the pages [first, end) of a volume in a walk
// (walkPages): a page record (v its value, valid until the walk moves
// on; end = first+1), an empty run (run), pages a volume of schema 1
// has no record of (neither: unwritten), or, in a walk's last attempt,
// pages of a dense volume with neither a record nor a run (missing).
type piece struct {
	first, end int64
	v          []byte
	run        *emptyRun
	missing    bool
}

// shapeError is walkOnce's report of a gap or an overlap in a walk that
// will be made again (see walkPages).
type shapeError struct{}

func (*shapeError) Error() string {
	return "store: page records and empty runs do not partition the pages"
}

// walkTries is how many walks walkPages makes without the commit lock
// before its last, under it.
const walkTries = 3

// walkPages calls fn, in page order, for every piece that covers pages
// [first, last] of the records of type typ (recPage: tuple pages;
// recTagPage: tag pages) and the empty runs. The first and last pieces
// may extend beyond the range.
//
// A walk that finds pages with neither a record nor a run, or a run that
// overlaps another piece, may have met a commit between its two snapshots
// (see the comment at the top of this file): it is made again, calling
// begin (if not nil) before each attempt so that fn's caller starts over,
// and the last attempt is made under the commit lock (held already when
// locked is set: then the first attempt is the last). Only the last
// reports missing pages, as missing pieces, and overlaps, as a
// *CorruptError.
func (t *Tuples) walkPages(typ byte, first, last int64, locked bool, begin func(), fn func(*piece) error) error {
	for try := 0; ; try++ {
		final := locked || try == walkTries
		if final && !locked {
			t.mu.Lock()
		}
		if begin != nil {
			begin()
		}
		err := t.walkOnce(typ, first, last, final, fn)
		if final && !locked {
			t.mu.Unlock()
		}
		if _, again := err.(*shapeError); !again || final {
			return err
		}
		if testHookWalkRetry != nil {
			testHookWalkRetry()
		}
	}
}

// testHookWalkRetry, if set, runs before a walk is made again.
var testHookWalkRetry func()

// testHookWalkGap, if set, runs when a walk opens its run iterator, after
// reading page records from its first snapshot.
var testHookWalkGap func()

// walkOnce is one attempt of walkPages.
func (t *Tuples) walkOnce(typ byte, first, last int64, final bool, fn func(*piece) error) error {
	it, err := t.kv.NewIter(u64Key(t.prefix, typ, first), u64Key(t.prefix, typ, last+1))
	if err != nil {
		return err
	}
	defer it.Close()
	what := "page"
	if typ == recTagPage {
		what = "tag page"
	}
	var runs *runIter
	defer func() {
		if runs != nil {
			runs.close()
		}
	}()
	var pending *emptyRun // a run read past a gap, not yet reached
	next := first         // the first page not yet covered
	var pc piece
	overlap := func(r *emptyRun, reason string) error {
		if !final {
			return &shapeError{}
		}
		return &CorruptError{Volume: t.volume, Record: fmt.Sprintf("empty run of pages [%d, %d)", r.first, r.end), Reason: reason}
	}
	// cover covers the pages [next, to) with runs (or, in a volume of
	// schema 1, absent pages), to being the next page record or last+1.
	cover := func(to int64) error {
		for next < to {
			if !t.dense {
				pc = piece{first: next, end: to}
				next = to
				return fn(&pc)
			}
			if runs == nil {
				if testHookWalkGap != nil {
					testHookWalkGap()
				}
				if runs, err = t.newRunIter(next); err != nil {
					return err
				}
			}
			var r emptyRun
			if pending != nil {
				r, pending = *pending, nil
			} else {
				var ok bool
				r, ok, err = runs.next()
				if err != nil {
					return err
				}
				if !ok {
					r = emptyRun{first: to, end: to} // none: the rest is missing
				}
			}
			switch {
			case r.first > next:
				if !final {
					return &shapeError{}
				}
				pc = piece{first: next, end: min(r.first, to), missing: true}
				next = pc.end
				if !r.null() {
					pending = &r
				}
				if err := fn(&pc); err != nil {
					return err
				}
				continue
			case r.first < next && next > first: // (the first piece may start before the range)
				return overlap(&r, fmt.Sprintf("overlaps the %s before page %d", what, next))
			case r.end > to && to <= last:
				return overlap(&r, fmt.Sprintf("overlaps the record of %s %d", what, to))
			}
			pc = piece{first: r.first, end: r.end, run: &r}
			next = r.end
			if err := fn(&pc); err != nil {
				return err
			}
		}
		if pending != nil && pending.first < next {
			return overlap(pending, fmt.Sprintf("overlaps the %s before page %d", what, next))
		}
		return nil
	}
	plen := len(t.prefix) + 1
	for it.Next() {
		k := it.Key()
		if len(k) != plen+8 {
			return &CorruptError{Volume: t.volume, Record: fmt.Sprintf("%s key %x", what, k), Reason: "bad key length"}
		}
		page := keyInt(k[plen:])
		if page < next {
			if !final {
				return &shapeError{}
			}
			return &CorruptError{Volume: t.volume, Record: fmt.Sprintf("%s %d", what, page), Reason: "recorded inside an empty run"}
		}
		if err := cover(page); err != nil {
			return err
		}
		v := it.Value()
		if v == nil {
			if err := it.Err(); err != nil {
				return err
			}
		}
		pc = piece{first: page, end: page + 1, v: v}
		next = page + 1
		if err := fn(&pc); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	return cover(last + 1)
}

// runSplit is a run that a commit touches, and the pages of it the commit
// gives records (out).
type runSplit struct {
	emptyRun
	out []int64
}

// runSet is the runs a commit touches, in page order.
type runSet []*runSplit

// find returns the run holding page, or nil.
func (rs runSet) find(page int64) *runSplit {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].end > page })
	if i < len(rs) && rs[i].first <= page {
		return rs[i]
	}
	return nil
}

// runsOver returns the runs holding any page of spans (page ranges
// [s, e], inclusive, in any order). Caller holds t.mu.
func (t *Tuples) runsOver(spans [][2]int64) (runSet, error) {
	if !t.dense || len(spans) == 0 {
		return nil, nil
	}
	slices.SortFunc(spans, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	var rs runSet
	for i := 0; i < len(spans); {
		s, e := spans[i][0], spans[i][1]
		for i++; i < len(spans) && spans[i][0] <= e+1; i++ {
			e = max(e, spans[i][1])
		}
		if err := t.runsIn(s, e, &rs); err != nil {
			return nil, err
		}
	}
	return rs, nil
}

// runsIn appends to rs the runs holding any page of [s, e] that it does
// not hold yet.
func (t *Tuples) runsIn(s, e int64, rs *runSet) error {
	ri, err := t.newRunIter(s)
	if err != nil {
		return err
	}
	defer ri.close()
	for {
		r, ok, err := ri.next()
		if err != nil || !ok || r.first > e {
			return err
		}
		if n := len(*rs); n == 0 || (*rs)[n-1].first != r.first {
			*rs = append(*rs, &runSplit{emptyRun: r})
		}
	}
}

// sealChange is one record of the seal's leaves that a batch replaces:
// its leaf id (see leaf), its value before (nil: none) and after (nil:
// deleted).
type sealChange struct {
	id       []byte
	old, new []byte
}

// stageSplits adds to b the runs that replace each run of rs that gives
// pages records, and returns the seal's changes for them (keyed volumes).
// Caller holds t.mu; key is the page key (nil: none, which a keyed volume
// refuses).
func (t *Tuples) stageSplits(b Batch, rs runSet, key []byte) ([]sealChange, error) {
	var changes []sealChange
	for _, r := range rs {
		if len(r.out) == 0 {
			continue
		}
		if t.k != nil && key == nil {
			return nil, fmt.Errorf("%w: volume %q: writing into pages recorded as unwritten needs the volume's key", ErrKeyed, t.volume)
		}
		if t.k != nil && !t.runMACOK(key, r.v) {
			// Its parts would carry the key's MAC: a forged run is not
			// split, as a tag page that fails its MAC is not written in
			// part.
			return nil, &PageMACError{Volume: t.volume, Record: fmt.Sprintf("empty run of pages [%d, %d)", r.first, r.end), Page: r.first}
		}
		slices.Sort(r.out)
		r.out = slices.Compact(r.out)
		lastKeyUsed := false
		set := func(first, end int64) error {
			v := t.encodeRun(first, end, key)
			if err := b.Set(t.runKey(end-1), v); err != nil {
				return err
			}
			var old []byte
			if end == r.end {
				old, lastKeyUsed = r.v, true
			}
			changes = append(changes, sealChange{id: runLeafID(end - 1), old: old, new: v})
			return nil
		}
		prev := r.first
		for _, p := range r.out {
			if p > prev {
				if err := set(prev, p); err != nil {
					return nil, err
				}
			}
			prev = p + 1
		}
		if prev < r.end {
			if err := set(prev, r.end); err != nil {
				return nil, err
			}
		}
		if !lastKeyUsed {
			if err := b.Delete(t.runKey(r.end - 1)); err != nil {
				return nil, err
			}
			changes = append(changes, sealChange{id: runLeafID(r.end - 1), old: r.v})
		}
	}
	return changes, nil
}
