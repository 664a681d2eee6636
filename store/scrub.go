package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"slices"
	"time"
)

// ScrubCursor records how far a named pass over the blocks [Start, End)
// has got, so that it can resume: a scrub (package blockdev/scrub, which
// keeps it here or in a file) or a protect (Start and End zero). LBAs are
// int64 across the library, as blockdev counts them.
type ScrubCursor struct {
	// Start and End are the blocks of the pass; zero (omitted) when the
	// pass covers the whole volume and its name says so.
	Start int64 `json:"start,omitempty"`
	End   int64 `json:"end,omitempty"`
	// Next is the first block not yet checked in the current pass: every
	// block before it was checked and its findings recorded.
	Next int64 `json:"next"`
	// Pass counts completed passes.
	Pass uint64 `json:"pass"`
	// Started is when the current pass began; Updated when Next last moved.
	Started time.Time `json:"started"`
	Updated time.Time `json:"updated"`
}

const (
	maxNameLen     = 1024
	maxRecordBytes = 1 << 20
)

func checkName(what, name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("%w: %s must be 1..%d bytes, got %d", ErrInvalid, what, maxNameLen, len(name))
	}
	return nil
}

// ScrubCursor returns the cursor of the named scrub, or an error matching
// ErrNotFound if it never saved one.
func (t *Tuples) ScrubCursor(name string) (ScrubCursor, error) {
	if err := checkName("scrub name", name); err != nil {
		return ScrubCursor{}, err
	}
	v, err := t.kv.Get(append(recKey(t.prefix, recCursor), name...))
	if errors.Is(err, ErrNotFound) {
		return ScrubCursor{}, fmt.Errorf("%w: volume %q: scrub cursor %q", ErrNotFound, t.volume, name)
	} else if err != nil {
		return ScrubCursor{}, err
	}
	var c ScrubCursor
	if err := decodeJSON(v, &c); err != nil {
		return ScrubCursor{}, &CorruptError{Volume: t.volume, Record: fmt.Sprintf("scrub cursor %q", name), Reason: err.Error()}
	}
	return c, nil
}

// SetScrubCursor saves the cursor of the named scrub.
func (t *Tuples) SetScrubCursor(name string, c ScrubCursor, sync bool) error {
	if err := checkName("scrub name", name); err != nil {
		return err
	}
	if c.Next < 0 || c.Start < 0 || c.End < 0 || c.Next > t.blocks || c.End > t.blocks {
		return fmt.Errorf("%w: scrub cursor at block %d beyond %d blocks", ErrOutOfRange, c.Next, t.blocks)
	}
	v, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("store: %v", err)
	}
	b := t.kv.NewBatch()
	defer b.Close()
	if err := b.Set(append(recKey(t.prefix, recCursor), name...), v); err != nil {
		return err
	}
	return b.Commit(sync)
}

// FindingState is the life cycle of a finding.
type FindingState uint8

const (
	// FindingOpen: the failure was seen and not since resolved.
	FindingOpen FindingState = 1 + iota
	// FindingRecheckedOK: a later check of the blocks passed.
	FindingRecheckedOK
	// FindingClosed: resolved (accepted, or rewritten by a write).
	FindingClosed
	// FindingRepaired: a copy of the blocks that verified against their
	// tuples (Finding.Source) was written over them and synced
	// (Finding.Repaired says when).
	FindingRepaired
	// FindingUnrepairable: the failure was seen, and no copy that verifies
	// was found in the repair sources tried (Finding.Source names them).
	// Like FindingOpen, the blocks are bad.
	FindingUnrepairable
)

// String returns "open", "rechecked-ok", "closed", "repaired" or
// "unrepairable".
func (s FindingState) String() string {
	switch s {
	case FindingOpen:
		return "open"
	case FindingRecheckedOK:
		return "rechecked-ok"
	case FindingClosed:
		return "closed"
	case FindingRepaired:
		return "repaired"
	case FindingUnrepairable:
		return "unrepairable"
	}
	return fmt.Sprintf("FindingState(%d)", uint8(s))
}

// Bad reports whether the state leaves the blocks bad: open or
// unrepairable.
func (s FindingState) Bad() bool { return s == FindingOpen || s == FindingUnrepairable }

func (s FindingState) valid() bool { return s >= FindingOpen && s <= FindingUnrepairable }

// MarshalText returns the String form.
func (s FindingState) MarshalText() ([]byte, error) {
	if !s.valid() {
		return nil, fmt.Errorf("store: invalid finding state %d", uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText parses the String form.
func (s *FindingState) UnmarshalText(b []byte) error {
	for v := FindingOpen; v <= FindingUnrepairable; v++ {
		if string(b) == v.String() {
			*s = v
			return nil
		}
	}
	return fmt.Errorf("store: unknown finding state %q", b)
}

// Finding is an entry of the findings log: an integrity failure of the
// blocks [LBA, LBA+N) in one field (e.g. "guard", "ref", "app", "sum",
// "torn"), with expected (computed) and actual (stored) values as bytes.
// A finding is identified by (LBA, Field); recording it again updates it.
type Finding struct {
	LBA       int64        `json:"lba"`
	N         int64        `json:"n"`
	Field     string       `json:"field"`
	Expected  []byte       `json:"expected,omitempty"`
	Actual    []byte       `json:"actual,omitempty"`
	FirstSeen time.Time    `json:"first_seen"`
	LastSeen  time.Time    `json:"last_seen"`
	State     FindingState `json:"state"`
	Count     uint64       `json:"count"` // times seen
	// Source names the copy a repair took (state repaired), or the
	// sources tried (unrepairable): a mirror leg ("leg 1 (PATH)"), a repair
	// source's path or URL. Empty for findings no repair has touched.
	Source string `json:"source,omitempty"`
	// Leg is the mirror leg whose copy failed and was repaired (0 is the
	// volume's own device).
	Leg int `json:"leg,omitempty"`
	// Repaired is when the repair was written and synced.
	Repaired time.Time `json:"repaired,omitzero"`
}

// findingKey is the key of the finding (lba, field); lba is not negative.
func (t *Tuples) findingKey(lba int64, field string) []byte {
	return append(u64Key(t.prefix, recFinding, lba), field...)
}

// checkLBAs validates the blocks [lba, lba+n) of a scrub record.
func (t *Tuples) checkLBAs(lba, n int64) error { return t.checkRange(lba, n) }

func (t *Tuples) maxFindingKey() []byte {
	return append(recKey(t.prefix, recMeta), "max-finding-blocks"...)
}

// RecordFinding adds f to the findings log, or updates the finding with the
// same LBA and Field: it keeps FirstSeen, takes the rest from f, adds one to
// Count, and reopens it (State = f.State, FindingOpen if zero). A zero
// f.LastSeen means now. It returns the stored finding.
func (t *Tuples) RecordFinding(f Finding, sync bool) (Finding, error) {
	fs, err := t.RecordFindings([]Finding{f}, sync)
	if err != nil {
		return Finding{}, err
	}
	return fs[0], nil
}

// RecordFindings records every finding of fs as RecordFinding does, in one
// commit, and returns them as stored. Two findings of fs with the same LBA
// and Field count as one sighting, the later's.
func (t *Tuples) RecordFindings(fs []Finding, sync bool) ([]Finding, error) {
	now := time.Now().UTC()
	for i := range fs {
		f := &fs[i]
		if err := checkName("finding field", f.Field); err != nil {
			return nil, err
		}
		if f.N == 0 {
			f.N = 1
		}
		if err := t.checkLBAs(f.LBA, f.N); err != nil {
			return nil, err
		}
		if f.State == 0 {
			f.State = FindingOpen
		}
		if !f.State.valid() {
			return nil, fmt.Errorf("%w: finding state %d", ErrInvalid, f.State)
		}
		if len(f.Expected)+len(f.Actual) > maxRecordBytes/4 {
			return nil, fmt.Errorf("%w: finding values of %d bytes", ErrTooLarge, len(f.Expected)+len(f.Actual))
		}
		if f.LastSeen.IsZero() {
			f.LastSeen = now
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.kv.NewBatch()
	defer b.Close()
	maxN, err := t.maxFindingBlocks()
	if err != nil {
		return nil, err
	}
	newMax := maxN
	out := make([]Finding, 0, len(fs))
	keys := make([][]byte, len(fs))
	for i, f := range fs {
		keys[i] = t.findingKey(f.LBA, f.Field)
	}
	stored, err := t.getAll(keys)
	if err != nil {
		return nil, err
	}
	for i, f := range fs {
		key := keys[i]
		var old Finding
		err := fmt.Errorf("%w: finding", ErrNotFound)
		if v, ok := stored[string(key)]; ok {
			old, err = t.decodeFinding(f.LBA, f.Field, v)
		}
		switch {
		case err == nil:
			f.FirstSeen = old.FirstSeen
			f.Count = old.Count + 1
		case errors.Is(err, ErrNotFound):
			if f.FirstSeen.IsZero() {
				f.FirstSeen = f.LastSeen
			}
			f.Count = 1
		default:
			return nil, err
		}
		v, err := json.Marshal(f)
		if err != nil {
			return nil, fmt.Errorf("store: %v", err)
		}
		if err := b.Set(key, v); err != nil {
			return nil, err
		}
		newMax = max(newMax, f.N)
		out = append(out, f)
	}
	if newMax > maxN {
		if err := b.Set(t.maxFindingKey(), binary.BigEndian.AppendUint64(nil, uint64(newMax))); err != nil {
			return nil, err
		}
	}
	return out, b.Commit(sync)
}

// getAll returns the stored values of those of keys that exist. Sorted
// keys that lie close together (the findings of one scrub run) are read
// with one iterator instead of a read each; a walk that meets more than
// getAllWalk other records per key sought stops, and the keys left are
// read one by one, so a sparse batch over a crowded range costs at most
// about twice its reads.
func (t *Tuples) getAll(keys [][]byte) (map[string][]byte, error) {
	out := make(map[string][]byte, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	sorted := slices.Clone(keys)
	slices.SortFunc(sorted, bytes.Compare)
	sorted = slices.CompactFunc(sorted, bytes.Equal)
	next := 0 // sorted[next:] not yet settled
	if len(sorted) > 1 {
		it, err := t.kv.NewIter(sorted[0], append(slices.Clip(sorted[len(sorted)-1]), 0))
		if err != nil {
			return nil, err
		}
		budget := getAllWalk*len(sorted) + 64
		for next < len(sorted) && budget > 0 && it.Next() {
			budget--
			k := it.Key()
			for next < len(sorted) && bytes.Compare(sorted[next], k) < 0 {
				next++ // not stored
			}
			if next < len(sorted) && bytes.Equal(sorted[next], k) {
				out[string(k)] = slices.Clone(it.Value())
				next++
			}
		}
		err = it.Err()
		if cerr := it.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		if budget > 0 {
			next = len(sorted) // the walk ran to the end of the range
		}
	}
	for _, k := range sorted[next:] {
		v, err := t.kv.Get(k)
		switch {
		case err == nil:
			out[string(k)] = v
		case !errors.Is(err, ErrNotFound):
			return nil, err
		}
	}
	return out, nil
}

// getAllWalk is how many records getAll's walk may pass per key sought
// before it reads the rest one by one: a Get costs about as much as that
// many steps of an iterator.
const getAllWalk = 16

// SetFindingState changes the state of the finding (lba, field).
func (t *Tuples) SetFindingState(lba int64, field string, s FindingState, sync bool) (Finding, error) {
	return t.updateFinding(lba, field, s, func(*Finding) {}, sync)
}

// FindingKey names a finding: its first block and its field.
type FindingKey struct {
	LBA   int64
	Field string
}

// SetFindingStates changes the state of every finding of keys to s, as
// SetFindingState does one's, reading them with one iterator where they
// lie close together (getAll) and writing them in one commit. A key with
// no finding fails the whole call with ErrNotFound, and nothing changes.
func (t *Tuples) SetFindingStates(keys []FindingKey, s FindingState, sync bool) error {
	if !s.valid() {
		return fmt.Errorf("%w: finding state %d", ErrInvalid, s)
	}
	if len(keys) == 0 {
		return nil
	}
	raw := make([][]byte, len(keys))
	for i, k := range keys {
		if k.LBA < 0 {
			return fmt.Errorf("%w: volume %q: finding at block %d", ErrOutOfRange, t.volume, k.LBA)
		}
		raw[i] = t.findingKey(k.LBA, k.Field)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	stored, err := t.getAll(raw)
	if err != nil {
		return err
	}
	b := t.kv.NewBatch()
	defer b.Close()
	for i, k := range keys {
		v, ok := stored[string(raw[i])]
		if !ok {
			return fmt.Errorf("%w: volume %q: finding lba=%d field=%q", ErrNotFound, t.volume, k.LBA, k.Field)
		}
		f, err := t.decodeFinding(k.LBA, k.Field, v)
		if err != nil {
			return err
		}
		f.State = s
		nv, err := json.Marshal(f)
		if err != nil {
			return fmt.Errorf("store: %v", err)
		}
		if err := b.Set(raw[i], nv); err != nil {
			return err
		}
	}
	return b.Commit(sync)
}

// SetFindingRepair records the outcome of a repair of the finding (lba,
// field): state FindingRepaired (with when, the time the copy was synced)
// or FindingUnrepairable, the source of the copy or the sources tried,
// and the mirror leg repaired.
func (t *Tuples) SetFindingRepair(lba int64, field string, s FindingState, source string, leg int, when time.Time, sync bool) (Finding, error) {
	if s != FindingRepaired && s != FindingUnrepairable {
		return Finding{}, fmt.Errorf("%w: repair outcome %v", ErrInvalid, s)
	}
	if len(source) > maxNameLen || leg < 0 {
		return Finding{}, fmt.Errorf("%w: repair source of %d bytes, leg %d", ErrInvalid, len(source), leg)
	}
	return t.updateFinding(lba, field, s, func(f *Finding) {
		f.Source, f.Leg = source, leg
		f.Repaired = time.Time{}
		if s == FindingRepaired {
			f.Repaired = when.UTC()
		}
	}, sync)
}

// updateFinding sets the state of the finding (lba, field) to s and
// applies fn to it.
func (t *Tuples) updateFinding(lba int64, field string, s FindingState, fn func(*Finding), sync bool) (Finding, error) {
	if !s.valid() {
		return Finding{}, fmt.Errorf("%w: finding state %d", ErrInvalid, s)
	}
	if lba < 0 {
		return Finding{}, fmt.Errorf("%w: volume %q: finding at block %d", ErrOutOfRange, t.volume, lba)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	key := t.findingKey(lba, field)
	f, err := t.getFinding(key, lba, field)
	if err != nil {
		return Finding{}, err
	}
	f.State = s
	fn(&f)
	v, err := json.Marshal(f)
	if err != nil {
		return Finding{}, fmt.Errorf("store: %v", err)
	}
	b := t.kv.NewBatch()
	defer b.Close()
	if err := b.Set(key, v); err != nil {
		return Finding{}, err
	}
	return f, b.Commit(sync)
}

func (t *Tuples) getFinding(key []byte, lba int64, field string) (Finding, error) {
	v, err := t.kv.Get(key)
	if errors.Is(err, ErrNotFound) {
		return Finding{}, fmt.Errorf("%w: volume %q: finding lba=%d field=%q", ErrNotFound, t.volume, lba, field)
	} else if err != nil {
		return Finding{}, err
	}
	return t.decodeFinding(lba, field, v)
}

func (t *Tuples) decodeFinding(lba int64, field string, v []byte) (Finding, error) {
	var f Finding
	err := decodeJSON(v, &f)
	if err == nil && (f.LBA != lba || f.Field != field || !f.State.valid() || f.N <= 0 || f.N > math.MaxInt64-f.LBA) {
		err = fmt.Errorf("record says lba=%d field=%q state=%d n=%d", f.LBA, f.Field, f.State, f.N)
	}
	if err != nil {
		return Finding{}, &CorruptError{Volume: t.volume, Record: fmt.Sprintf("finding lba=%d field=%q", lba, field), Reason: err.Error()}
	}
	return f, nil
}

// maxFindingBlocks returns the largest N ever recorded, which bounds how far
// before a range a finding overlapping it can start.
func (t *Tuples) maxFindingBlocks() (int64, error) {
	v, err := t.kv.Get(t.maxFindingKey())
	if errors.Is(err, ErrNotFound) {
		return 1, nil
	} else if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, &CorruptError{Volume: t.volume, Record: "max-finding-blocks", Reason: fmt.Sprintf("length %d", len(v))}
	}
	return max(1, keyInt(v)), nil
}

// FindingQuery selects findings. The zero value selects all.
type FindingQuery struct {
	// LBA and N select findings overlapping blocks [LBA, LBA+N); N == 0
	// means to the end of the volume.
	LBA, N int64
	// State, if not zero, selects findings in that state.
	State FindingState
	// Bad selects findings whose blocks are bad (FindingState.Bad: open
	// or unrepairable); it cannot be combined with State.
	Bad bool
}

// Findings yields the findings matching q, ordered by LBA then field, from
// one snapshot. Iteration stops at the first error, which is yielded.
// Selecting by state alone scans the whole log.
func (t *Tuples) Findings(q FindingQuery) iter.Seq2[Finding, error] {
	return func(yield func(Finding, error) bool) {
		if q.LBA < 0 || q.N < 0 {
			yield(Finding{}, fmt.Errorf("%w: findings of blocks [%d, +%d)", ErrInvalid, q.LBA, q.N))
			return
		}
		lo := min(q.LBA, t.blocks)
		hi := t.blocks
		if q.N != 0 && q.N < t.blocks-lo {
			hi = lo + q.N
		}
		maxN, err := t.maxFindingBlocks()
		if err != nil {
			yield(Finding{}, err)
			return
		}
		start := lo - min(lo, maxN-1)
		it, err := t.kv.NewIter(u64Key(t.prefix, recFinding, start), u64Key(t.prefix, recFinding, hi))
		if err != nil {
			yield(Finding{}, err)
			return
		}
		defer it.Close()
		plen := len(t.prefix) + 1
		for it.Next() {
			k := it.Key()
			if len(k) <= plen+8 {
				yield(Finding{}, &CorruptError{Volume: t.volume, Record: fmt.Sprintf("finding key %x", k), Reason: "bad key length"})
				return
			}
			klba := keyInt(k[plen:])
			if klba < 0 {
				yield(Finding{}, &CorruptError{Volume: t.volume, Record: fmt.Sprintf("finding key %x", k), Reason: "block number out of range"})
				return
			}
			f, err := t.decodeFinding(klba, string(k[plen+8:]), it.Value())
			if err != nil {
				yield(Finding{}, err)
				return
			}
			if f.LBA+f.N <= lo || f.LBA >= hi || (q.State != 0 && f.State != q.State) || (q.Bad && !f.State.Bad()) {
				continue
			}
			if !yield(f, nil) {
				return
			}
		}
		if err := it.Err(); err != nil {
			yield(Finding{}, err)
		}
	}
}

// decodeJSON decodes a bounded JSON record strictly.
func decodeJSON(v []byte, dst any) error {
	if len(v) > maxRecordBytes {
		return fmt.Errorf("record of %d bytes exceeds %d", len(v), maxRecordBytes)
	}
	d := json.NewDecoder(bytes.NewReader(v))
	if err := d.Decode(dst); err != nil {
		return err
	}
	if d.More() {
		return fmt.Errorf("trailing data")
	}
	return nil
}
