package store

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"
)

type opKind uint8

const (
	opWrite opKind = iota
	opDiscard
	opSet
	opDelete
	opTags // keyed tags (keyed.go)
)

type txnOp struct {
	kind       opKind
	lba, n     int64
	tuples     []byte
	sums       []uint32
	key, value []byte
	tags       []KeyedTag
}

// Txn stages changes to one volume and commits them atomically in one KV
// batch: committed tuples (WriteRange, Discard), intents (RecordIntent,
// DropIntent, FoldIntent). Staged data is copied, so callers may reuse their
// buffers at once. Pages touched only in part are read and merged at Commit,
// under the volume's commit lock, so concurrent transactions never lose each
// other's blocks.
//
// A Txn is not safe for concurrent use. Its size is bounded only by the
// backend's batch limit (Limits.MaxBatchBytes, checked at Commit); Len
// reports what is staged so callers can commit in sized steps.
type Txn struct {
	t    *Tuples
	ops  []txnOp
	size int
	// lastPage is the tuple page WriteRange counted last in size, so that
	// runs of one page count it once (-1: none).
	lastPage int64
	done     bool
}

// NewTxn starts a transaction on the volume.
func (t *Tuples) NewTxn() *Txn { return &Txn{t: t, lastPage: -1} }

// Len returns the approximate bytes the transaction will write: a tuple
// page for each page its writes touch (counted once per run of writes to
// one page, so writes in ascending order count each page once, others at
// most once per write), the records it sets, the tags, and for each record
// it deletes what the deletion holds until Commit.
func (x *Txn) Len() int { return x.size }

func (x *Txn) usable() error {
	if x.done {
		return fmt.Errorf("%w: transaction already committed or aborted", ErrClosed)
	}
	return nil
}

// WriteRange stages tuples (and sums, required iff the volume keeps sector
// checksums) as the committed tuples of [lba, lba+len(tuples)/TupleSize).
func (x *Txn) WriteRange(lba int64, tuples []byte, sums []uint32) error {
	if err := x.usable(); err != nil {
		return err
	}
	n, err := x.t.checkBufs(lba, tuples, sums, true)
	if err != nil || n == 0 {
		return err
	}
	op := txnOp{kind: opWrite, lba: lba, n: int64(n), tuples: append([]byte(nil), tuples...)}
	if sums != nil {
		op.sums = append([]uint32(nil), sums[:n]...)
	}
	x.add(op)
	P := int64(x.t.l.p)
	first, last := lba/P, (lba+int64(n)-1)/P
	if first == x.lastPage {
		first++
	}
	x.size += int(max(0, last-first+1)) * x.t.pageRecordBytes()
	x.lastPage = last
	return nil
}

// pageRecordBytes is what a tuple page takes in a KV batch, at most: its
// key and value and the batch's overhead.
func (t *Tuples) pageRecordBytes() int { return t.l.size + len(t.prefix) + 32 }

// Discard stages marking [lba, lba+n) unwritten.
func (x *Txn) Discard(lba, n int64) error {
	if err := x.usable(); err != nil {
		return err
	}
	if err := x.t.checkRange(lba, n); err != nil || n == 0 {
		return err
	}
	x.add(txnOp{kind: opDiscard, lba: lba, n: n})
	x.size += 64
	return nil
}

// add stages op. The ops grow by doubling: a fold stages tens of
// thousands, and append's smaller steps beyond 256 elements would
// allocate about five times their final size on the way.
func (x *Txn) add(op txnOp) {
	if n := len(x.ops); n == cap(x.ops) && n >= 256 {
		x.ops = slices.Grow(x.ops, n)
	}
	x.ops = append(x.ops, op)
}

// addDelete stages deleting the record key. It counts in Len what the
// staged deletion holds until Commit, not only the few bytes it adds to the
// batch: a fold drops an intent per write, and transactions sized by what
// they write would hold tens of thousands of them.
func (x *Txn) addDelete(key []byte) {
	x.add(txnOp{kind: opDelete, key: key})
	x.size += len(key) + int(unsafe.Sizeof(txnOp{}))
}

// Abort discards the transaction.
func (x *Txn) Abort() { x.done, x.ops = true, nil }

// Commit applies the transaction atomically. With sync it returns only once
// the transaction is durable. The Txn cannot be used afterwards.
func (x *Txn) Commit(sync bool) error {
	if err := x.usable(); err != nil {
		return err
	}
	x.done = true
	ops := x.ops
	x.ops = nil
	if len(ops) == 0 {
		return nil
	}
	t := x.t
	t.mu.Lock()
	defer t.mu.Unlock()

	P := int64(t.l.p)
	ts := t.l.ts
	// The pages the writes and discards touch, and whether the first of
	// them covers each whole (then it is not read). A page first touched
	// in part is read now (recs); one that has no record may lie in an
	// empty run (runs.go), as may a page written whole or one whose tags
	// are written: the runs holding any of those are read, one range of
	// them per span of pages. So a commit into written pages reads no run.
	whole := make(map[int64]bool)
	var touched []int64
	var spans [][2]int64
	for _, op := range ops {
		switch op.kind {
		case opWrite, opDiscard:
		case opTags:
			spans = append(spans, [2]int64{op.lba / P, (op.lba + op.n - 1) / P})
			continue
		default:
			continue
		}
		end := op.lba + op.n
		for page := op.lba / P; page*P < end; page++ {
			if _, ok := whole[page]; !ok {
				s, e := max(page*P, op.lba), min(page*P+P, end)
				whole[page] = s == page*P && e == page*P+P
				touched = append(touched, page)
			}
		}
	}
	recs := make(map[int64][]byte)
	for _, page := range touched {
		if whole[page] {
			spans = append(spans, [2]int64{page, page})
			continue
		}
		v, err := t.kv.Get(t.pageKey(page))
		switch {
		case errors.Is(err, ErrNotFound):
			spans = append(spans, [2]int64{page, page})
		case err != nil:
			return err
		default:
			recs[page] = v
		}
	}
	runs, err := t.runsOver(spans)
	if err != nil {
		return err
	}
	// inRun reports whether page lies in an empty run (a page read with a
	// record does not).
	inRun := func(page int64) bool {
		if _, ok := recs[page]; ok {
			return false
		}
		return runs.find(page) != nil
	}
	pages := make(map[int64]*pageBuf)
	var order []int64
	defer func() {
		for _, pb := range pages {
			t.bufPool.Put(pb)
		}
	}()
	get := func(page int64) (*pageBuf, error) {
		if pb, ok := pages[page]; ok {
			return pb, nil
		}
		pb := t.bufPool.Get().(*pageBuf)
		pages[page] = pb
		order = append(order, page)
		v, rec := recs[page]
		switch {
		case whole[page] || inRun(page):
			pb.reset()
		case rec:
			empty, err := t.l.checkAny(t.volume, page, v)
			switch {
			case err != nil:
				return nil, err
			case empty:
				pb.reset()
			default:
				t.l.decode(pb, v)
			}
		case t.dense:
			return nil, t.missingPage(page)
		default:
			pb.reset() // a volume of schema 1: no record, unwritten
		}
		return pb, nil
	}
	// The pages first, then a batch sized to them: a page is one record
	// however many writes touch it (a fold of random writes stages
	// hundreds per page).
	est := 0
	for _, op := range ops {
		switch op.kind {
		case opSet, opDelete:
			est += len(op.key) + len(op.value) + 32
			continue
		case opTags:
			continue // stageTags
		}
		end := op.lba + op.n
		for page := op.lba / P; page*P < end; page++ {
			pstart := page * P
			s, e := max(pstart, op.lba), min(pstart+P, end)
			ps, pe := int(s-pstart), int(e-pstart)
			if _, ok := pages[page]; !ok && op.kind == opDiscard && inRun(page) {
				continue // unwritten already, and left in its run
			}
			pb, err := get(page)
			if err != nil {
				return err
			}
			if op.kind == opDiscard {
				fillOnes(pb.tuples[ps*ts : pe*ts])
				if t.l.sums {
					clear(pb.sums[ps:pe])
				}
				fillBits(pb.bits, ps, pe-ps, false)
				continue
			}
			i, j := int(s-op.lba), int(e-op.lba)
			copy(pb.tuples[ps*ts:pe*ts], op.tuples[i*ts:j*ts])
			if t.l.sums {
				copy(pb.sums[ps:pe], op.sums[i:j])
			}
			fillBits(pb.bits, ps, pe-ps, true)
		}
	}
	// Keyed: the tag pages the transaction writes (keyed.go).
	var tagPages map[int64][]KeyedTag
	var tagOrder []int64
	if t.k != nil {
		if tagPages, tagOrder, err = t.stageTags(ops); err != nil {
			return err
		}
	}
	// A page in a run leaves it if it ends with a written block or a tag;
	// one left without either stays in its run and is not written. A
	// tagged page in a run that the transaction writes no tuple of gets
	// the empty-page record.
	tagged := func(page int64) bool {
		return slices.ContainsFunc(tagPages[page], func(g KeyedTag) bool { return g != KeyedTag{} })
	}
	for _, page := range tagOrder {
		if _, ok := pages[page]; !ok && inRun(page) && tagged(page) {
			pb := t.bufPool.Get().(*pageBuf)
			pb.reset()
			pages[page] = pb
			order = append(order, page)
		}
	}
	slices.Sort(order)
	out := make([]int64, 0, len(order))
	for _, page := range order {
		if r := runs.find(page); r != nil && inRun(page) {
			if pages[page].empty() && !tagged(page) {
				continue
			}
			r.out = append(r.out, page) // ascending, as order is
		}
		out = append(out, page)
	}
	order = out
	tagOrder = slices.DeleteFunc(tagOrder, func(page int64) bool {
		r := runs.find(page)
		if r == nil || !inRun(page) {
			return false
		}
		_, leaves := slices.BinarySearch(r.out, page)
		return !leaves
	})
	est += len(order) * t.pageRecordBytes()
	if t.k != nil {
		est += len(tagOrder) * (t.tagPageSize() + len(t.prefix) + 32) // commitTags reseals their tag pages
	}
	b := newBatch(t.kv, est)
	defer b.Close()
	for _, op := range ops {
		var err error
		switch op.kind {
		case opSet:
			err = b.Set(op.key, op.value)
		case opDelete:
			err = b.Delete(op.key)
		}
		if err != nil {
			return err
		}
	}
	var key []byte
	if t.k != nil {
		key = t.macKey()
	}
	runChanges, err := t.stageSplits(b, runs, key)
	if err != nil {
		return err
	}
	encp := t.encPool.Get().(*[]byte)
	defer t.encPool.Put(encp)
	var written map[int64][]byte // keyed: the new tuple pages, for their tag pages' MAC
	if t.k != nil {
		written = make(map[int64][]byte, len(order))
	}
	for _, page := range order {
		pb := pages[page]
		var err error
		var val []byte
		switch {
		case pb.empty() && t.dense:
			val = emptyPageValue
			err = b.Set(t.pageKey(page), val)
		case pb.empty():
			err = b.Delete(t.pageKey(page))
		default:
			*encp = t.l.encode((*encp)[:0], pb)
			val = *encp
			err = b.Set(t.pageKey(page), val)
		}
		if err != nil {
			return err
		}
		if written != nil {
			written[page] = slices.Clone(val)
		}
	}
	var sealed *seal // the seal this batch writes (seal.go)
	if t.k != nil {
		seq := t.k.wseq.Load()
		var err error
		if sealed, err = t.commitTags(b, tagPages, tagOrder, written, runChanges); err != nil {
			if t.k.wseq.Load() != seq {
				t.k.wseq.Add(1)
			}
			return err
		}
		if t.k.wseq.Load() != seq {
			defer t.k.wseq.Add(1) // after the batch is applied
		}
	}
	// The page cache is bypassed while a batch that writes pages is
	// applied, and drops those pages after (whether or not Commit reports
	// an error: the KV may hold the batch anyway). Batches of other records
	// (intents, cursors, findings) leave it alone.
	if len(order) > 0 {
		t.beginWrite()
		defer t.endWrite(order, false)
	}
	return t.committed(sealed, b.Commit(sync), sync)
}
