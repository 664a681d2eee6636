package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Offline operations: a remap of the ref tags, an import of an image.
//
// Some operations rewrite a whole volume in many commits and must never be
// seen half done: a remap moves every tuple's ref tag (docs/formats.md),
// an import loads a volume's data and tuples from an image with its own PI.
// Such an operation first records a journal, durably, under the volume's
// metadata key "X"|"journal"; each step it takes and the advance of the
// journal's Next are committed in one batch; the last commit deletes the
// journal. While a journal exists OpenTuples refuses the volume with an
// *InProgressError, so every opener (a Volume, Create, a scrub) sees it, and
// the operation, run again, opens the volume with OpenJournaled and resumes
// at Next.

// Journal operations.
const (
	OpRemap  = "remap"  // ref tags move from From to To (Tuples.RemapRange, FinishRemap)
	OpImport = "import" // the volume is loaded from an image (AdvanceJournal, EndJournal)
)

const (
	journalKind     = "difctl.store.journal"
	journalName     = "journal"
	maxJournalBytes = 4 << 10
)

// ErrInProgress is matched by every *InProgressError.
var ErrInProgress = errors.New("store: offline operation in progress")

// Journal is the durable record of an offline operation in progress on a
// volume.
type Journal struct {
	// Op is OpRemap or OpImport.
	Op string `json:"op"`
	// From and To are, for a remap, the initial ref tags before and after.
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
	// Next is the first block the operation has not yet done: every block
	// before it is done and durable with the journal.
	Next int64 `json:"next"`
	// Started is when the operation began.
	Started time.Time `json:"started"`
}

// InProgressError reports a volume that an offline operation (Journal.Op)
// has begun and not finished: it cannot be opened until the operation is
// run again to the end. It matches ErrInProgress.
type InProgressError struct {
	Volume  string
	Journal Journal
}

func (e *InProgressError) Error() string {
	j := e.Journal
	switch j.Op {
	case OpRemap:
		return fmt.Sprintf("store: volume %q: remap in progress: run difctl remap again to finish (ref tags from %#x to %#x, done up to block %d)",
			e.Volume, j.From, j.To, j.Next)
	case OpImport:
		return fmt.Sprintf("store: volume %q: import in progress: run difctl convert again to finish (done up to block %d)", e.Volume, j.Next)
	}
	return fmt.Sprintf("store: volume %q: %s in progress (done up to block %d)", e.Volume, j.Op, j.Next)
}

// Unwrap makes errors.Is(err, ErrInProgress) true.
func (e *InProgressError) Unwrap() error { return ErrInProgress }

func journalKey(prefix []byte) []byte { return append(recKey(prefix, recMeta), journalName...) }

type journalJSON struct {
	Kind   string `json:"kind"`
	Schema int    `json:"schema"`
	Journal
}

func encodeJournal(j Journal) ([]byte, error) {
	return json.Marshal(journalJSON{Kind: journalKind, Schema: SchemaVersion, Journal: j})
}

func decodeJournal(volume string, b []byte) (Journal, error) {
	corrupt := func(reason string) error {
		return &CorruptError{Volume: volume, Record: "journal", Reason: reason}
	}
	if len(b) > maxJournalBytes {
		return Journal{}, corrupt(fmt.Sprintf("%d bytes, limit %d", len(b), maxJournalBytes))
	}
	var j journalJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return Journal{}, corrupt(err.Error())
	}
	switch {
	case j.Kind != journalKind:
		return Journal{}, corrupt(fmt.Sprintf("kind %q, want %q", j.Kind, journalKind))
	case j.Schema > SchemaVersion:
		return Journal{}, fmt.Errorf("%w: volume %q: journal schema version %d is newer than %d", ErrUnsupported, volume, j.Schema, SchemaVersion)
	case j.Op != OpRemap && j.Op != OpImport:
		return Journal{}, fmt.Errorf("%w: volume %q: journal of unknown operation %q", ErrUnsupported, volume, j.Op)
	case j.Next < 0:
		return Journal{}, corrupt(fmt.Sprintf("next block %d", j.Next))
	}
	return j.Journal, nil
}

// readJournal returns the volume's journal, or nil.
func readJournal(kv KV, prefix []byte, volume string) (*Journal, error) {
	v, err := kv.Get(journalKey(prefix))
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	j, err := decodeJournal(volume, v)
	if err != nil {
		return nil, err
	}
	return &j, nil
}

// refuseJournaled is OpenTuples' check: a volume with a journal is refused
// with an *InProgressError.
func refuseJournaled(kv KV, prefix []byte, volume string) error {
	j, err := readJournal(kv, prefix, volume)
	if err != nil {
		return err
	}
	if j != nil {
		return &InProgressError{Volume: volume, Journal: *j}
	}
	return nil
}

// OpenJournaled opens volume like OpenTuples, but does not refuse a volume
// with an offline operation in progress: it returns the journal, or nil
// when there is none. It is for the operation itself, to resume it; nothing
// else may use the volume until the journal is gone.
func OpenJournaled(kv KV, volume string, want *Manifest) (*Tuples, *Journal, error) {
	prefix, err := volumePrefix(volume)
	if err != nil {
		return nil, nil, err
	}
	v, err := kv.Get(recKey(prefix, recManifest))
	if errors.Is(err, ErrNotFound) {
		return nil, nil, fmt.Errorf("%w: volume %q", ErrNotFound, volume)
	} else if err != nil {
		return nil, nil, err
	}
	m, err := decodeManifest(volume, v)
	if err != nil {
		return nil, nil, err
	}
	if want != nil {
		w := *want
		w.normalize()
		if err := m.compare(volume, &w); err != nil {
			return nil, nil, err
		}
	}
	j, err := readJournal(kv, prefix, volume)
	if err != nil {
		return nil, nil, err
	}
	t, err := newTuples(kv, volume, prefix, m)
	if err != nil {
		return nil, nil, err
	}
	return t, j, nil
}

// CreateJournaled creates volume like CreateTuples, with the journal j
// recorded in the same synced commit: the volume is never visible without
// it until the operation ends (EndJournal). A keyed manifest is refused
// with ErrKeyed.
func CreateJournaled(kv KV, volume string, m Manifest, j Journal) (*Tuples, error) {
	if m.Keyed() {
		return nil, fmt.Errorf("%w: create volume %q: a keyed volume is created with its page key (CreateKeyedTuples)", ErrKeyed, volume)
	}
	return create(kv, volume, m, nil, &j)
}

// checkJournal validates a new journal against the manifest.
func checkJournal(m *Manifest, j *Journal) error {
	switch {
	case j.Op != OpRemap && j.Op != OpImport:
		return fmt.Errorf("%w: journal of unknown operation %q", ErrInvalid, j.Op)
	case j.Next < 0 || j.Next > m.Blocks():
		return fmt.Errorf("%w: journal at block %d beyond %d blocks", ErrOutOfRange, j.Next, m.Blocks())
	case j.Op == OpRemap && j.From != m.InitialRefTag:
		return fmt.Errorf("%w: remap from initial ref tag %#x, the manifest has %#x", ErrInvalid, j.From, m.InitialRefTag)
	}
	if j.Started.IsZero() {
		j.Started = time.Now().UTC()
	}
	return nil
}

// Journal returns the volume's journal, or nil when no offline operation
// is in progress.
func (t *Tuples) Journal() (*Journal, error) { return readJournal(t.kv, t.prefix, t.volume) }

// BeginJournal records j as the volume's journal with a synced commit. It
// fails with an *InProgressError if the volume has one already. A remap's
// From must be the manifest's InitialRefTag. A zero Started means now.
func (t *Tuples) BeginJournal(j Journal) error {
	if err := checkJournal(&t.m, &j); err != nil {
		return err
	}
	v, err := encodeJournal(j)
	if err != nil {
		return fmt.Errorf("store: %v", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, err := readJournal(t.kv, t.prefix, t.volume); err != nil {
		return err
	} else if cur != nil {
		return &InProgressError{Volume: t.volume, Journal: *cur}
	}
	b := t.kv.NewBatch()
	defer b.Close()
	if err := b.Set(journalKey(t.prefix), v); err != nil {
		return err
	}
	return b.Commit(true)
}

// currentJournal returns the journal, which must exist and be of op.
// Caller holds t.mu.
func (t *Tuples) currentJournal(op string) (Journal, error) {
	j, err := readJournal(t.kv, t.prefix, t.volume)
	if err != nil {
		return Journal{}, err
	}
	if j == nil {
		return Journal{}, fmt.Errorf("%w: volume %q: no %s in progress", ErrNotFound, t.volume, op)
	}
	if j.Op != op {
		return Journal{}, &InProgressError{Volume: t.volume, Journal: *j}
	}
	return *j, nil
}

// AdvanceJournal moves the journal's Next to next (not backwards) in a
// commit of its own.
func (t *Tuples) AdvanceJournal(next int64, sync bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	j, err := readJournal(t.kv, t.prefix, t.volume)
	if err != nil {
		return err
	}
	if j == nil {
		return fmt.Errorf("%w: volume %q: no journal", ErrNotFound, t.volume)
	}
	if next < 0 || next < j.Next || next > t.blocks {
		return fmt.Errorf("%w: journal from block %d to %d (%d blocks)", ErrInvalid, j.Next, next, t.blocks)
	}
	j.Next = next
	v, err := encodeJournal(*j)
	if err != nil {
		return fmt.Errorf("store: %v", err)
	}
	b := t.kv.NewBatch()
	defer b.Close()
	if err := b.Set(journalKey(t.prefix), v); err != nil {
		return err
	}
	return b.Commit(sync)
}

// EndJournal deletes the journal with a synced commit: the operation is
// complete and the volume can be opened again.
func (t *Tuples) EndJournal() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.kv.NewBatch()
	defer b.Close()
	if err := b.Delete(journalKey(t.prefix)); err != nil {
		return err
	}
	return b.Commit(true)
}

// RemapRange is one step of a remap: it stores tuples as the committed
// tuples of the written blocks of [lba, lba+len(tuples)/TupleSize) and
// moves the journal's Next to the end of the range, in one atomic commit.
// Unwritten blocks stay unwritten (their slots in tuples are ignored) and
// sector checksums are kept: a remap changes no data. lba must be the
// journal's Next and the journal a remap's.
func (t *Tuples) RemapRange(lba int64, tuples []byte, sync bool) error {
	n, err := t.checkBufs(lba, tuples, nil, false)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	j, err := t.currentJournal(OpRemap)
	if err != nil {
		return err
	}
	if lba != j.Next {
		return fmt.Errorf("%w: remap step at block %d, the journal is at block %d", ErrInvalid, lba, j.Next)
	}
	j.Next = lba + int64(n)
	jv, err := encodeJournal(j)
	if err != nil {
		return fmt.Errorf("store: %v", err)
	}
	P := int64(t.l.p)
	ts := t.l.ts
	end := lba + int64(n)
	b := newBatch(t.kv, int((int64(n)+P-1)/P+1)*(t.l.size+len(t.prefix)+32)+len(jv)+64)
	defer b.Close()
	pb := t.bufPool.Get().(*pageBuf)
	defer t.bufPool.Put(pb)
	encp := t.encPool.Get().(*[]byte)
	defer t.encPool.Put(encp)
	var written map[int64][]byte // keyed: the new tuple pages, for their tag pages' MAC
	if t.k != nil {
		written = make(map[int64][]byte)
	}
	if n > 0 {
		// Under t.mu: one walk, and fn runs once per piece.
		err = t.walkPages(recPage, lba/P, (end-1)/P, true, nil, func(pc *piece) error {
			if pc.missing {
				return t.missingPage(pc.first)
			}
			if pc.v == nil {
				return nil // no written block
			}
			page := pc.first
			empty, err := t.l.checkAny(t.volume, page, pc.v)
			if err != nil || empty {
				return err
			}
			t.l.decode(pb, pc.v)
			pstart := page * P
			s, e := max(pstart, lba), min(pstart+P, end)
			for blk := s; blk < e; blk++ {
				o, i := int(blk-pstart), int(blk-lba)
				if Bitmap(pb.bits).Has(o) {
					copy(pb.tuples[o*ts:(o+1)*ts], tuples[i*ts:(i+1)*ts])
				}
			}
			*encp = t.l.encode((*encp)[:0], pb)
			if err := b.Set(t.pageKey(page), *encp); err != nil {
				return err
			}
			if written != nil {
				written[page] = slices.Clone(*encp)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if err := b.Set(journalKey(t.prefix), jv); err != nil {
		return err
	}
	var sealed *seal // the seal this batch writes (seal.go)
	if t.k != nil {
		// The tag pages' MAC seals the tuple pages (keyed.go).
		seq := t.k.wseq.Load()
		var err error
		if sealed, err = t.commitTags(b, nil, nil, written, nil); err != nil {
			if t.k.wseq.Load() != seq {
				t.k.wseq.Add(1)
			}
			return err
		}
		if t.k.wseq.Load() != seq {
			defer t.k.wseq.Add(1) // after the batch is applied
		}
	}
	t.beginWrite()
	defer t.endWrite(nil, true)
	return t.committed(sealed, b.Commit(sync), sync)
}

// FinishRemap ends a remap whose journal has reached the last block: the
// manifest's InitialRefTag becomes the journal's To and the journal is
// deleted, in one synced commit.
func (t *Tuples) FinishRemap() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	j, err := t.currentJournal(OpRemap)
	if err != nil {
		return err
	}
	if j.Next != t.blocks {
		return fmt.Errorf("%w: remap done up to block %d of %d", ErrInvalid, j.Next, t.blocks)
	}
	m := t.m
	m.InitialRefTag = j.To
	mv, err := encodeManifest(m)
	if err != nil {
		return fmt.Errorf("store: %v", err)
	}
	b := t.kv.NewBatch()
	defer b.Close()
	if err := b.Set(recKey(t.prefix, recManifest), mv); err != nil {
		return err
	}
	if err := b.Delete(journalKey(t.prefix)); err != nil {
		return err
	}
	if err := b.Commit(true); err != nil {
		return err
	}
	t.m = m
	return nil
}
