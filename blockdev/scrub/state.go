package scrub

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/store"
)

// Cursor records how far a scrub of the blocks [Start, End) has got: the
// store's record, the one cursor type of the library, whichever State
// keeps it.
type Cursor = store.ScrubCursor

// State persists a scrub's cursor and findings so that a scrub can
// resume after a kill and an errors-only scrub can recheck what earlier ones
// found. Scrub calls it from one goroutine. Implementations:
// [NewStoreState] (a volume's store) and [OpenFileState] (a file
// beside a self-contained image).
//
// The contract that gives exactly-once findings across a resume: findings
// recorded since the last SaveCursor or Sync are durable only once one of
// those returns; a state reopened after a crash may have lost them, or may
// still hold them, in which case RecordFinding of the same pass must not
// count them twice.
type State interface {
	// LoadCursor returns the saved cursor of a scrub of [start, end), and
	// false if there is none.
	LoadCursor(start, end int64) (Cursor, bool, error)
	// SaveCursor saves c durably, together with every finding recorded and
	// every state set before it.
	SaveCursor(c Cursor) error
	// RecordFinding adds f to the findings log or updates the finding with
	// the same (LBA, Kind) (counting one more sighting and taking f.State),
	// unless the pass described by pass (its Started time) already recorded
	// it. A zero pass.Started records unconditionally.
	RecordFinding(pass Cursor, f Finding) error
	// OpenFindings yields the findings whose blocks are bad (state
	// FindingOpen or FindingUnrepairable) that overlap blocks [start, end),
	// ordered by LBA then Kind.
	OpenFindings(start, end int64) iter.Seq2[Finding, error]
	// SetFindingState changes the state of the finding (lba, kind).
	SetFindingState(lba int64, kind blockdev.Kind, s FindingState) error
	// Sync makes the findings recorded and states set so far durable.
	Sync() error
}

// StoreState keeps the cursor and findings of a scrub in a volume's
// store: the store's scrub cursor named after the scrub, and its findings
// log, where a finding's Field is its Kind and Expected and Actual are
// 8-byte big-endian values. Transient findings are recorded in state
// rechecked-ok.
type StoreState struct {
	t    *store.Tuples
	name string
	// last is the last finding written, rewritten with a sync by Sync.
	last struct {
		lba   int64
		kind  blockdev.Kind
		state FindingState
		set   bool
	}
}

// NewStoreState returns the state of the scrub called name (for
// example "default") over the volume t. A scrub of the whole volume uses the
// cursor name; a scrub of a range [start, end) uses "name@start-end", so
// that resuming a range scrub continues that range.
func NewStoreState(t *store.Tuples, name string) (*StoreState, error) {
	if t == nil {
		return nil, errors.New("scrub: nil store")
	}
	if name == "" || strings.ContainsRune(name, '@') {
		return nil, fmt.Errorf("scrub: scrub name %q must be non-empty and without '@'", name)
	}
	return &StoreState{t: t, name: name}, nil
}

func (s *StoreState) cursorName(start, end int64) string {
	if start == 0 && end == s.t.Blocks() {
		return s.name
	}
	return fmt.Sprintf("%s@%d-%d", s.name, start, end)
}

// LoadCursor implements [State].
func (s *StoreState) LoadCursor(start, end int64) (Cursor, bool, error) {
	c, err := s.t.ScrubCursor(s.cursorName(start, end))
	if errors.Is(err, store.ErrNotFound) {
		return Cursor{}, false, nil
	} else if err != nil {
		return Cursor{}, false, fmt.Errorf("scrub: cursor: %w", err)
	}
	if c.Next > end {
		return Cursor{}, false, fmt.Errorf("scrub: cursor at %d is beyond the range [%d, %d)", c.Next, start, end)
	}
	c.Start, c.End = start, end
	return c, true, nil
}

// SaveCursor implements [State] with a synced store commit.
func (s *StoreState) SaveCursor(c Cursor) error {
	if c.Next < 0 {
		return fmt.Errorf("scrub: cursor at %d", c.Next)
	}
	if err := s.t.SetScrubCursor(s.cursorName(c.Start, c.End), c, true); err != nil {
		return fmt.Errorf("scrub: save scrub cursor: %w", err)
	}
	return nil
}

// RecordFinding implements [State]: a finding whose LastSeen is not
// before pass.Started was recorded by this pass and is left alone.
func (s *StoreState) RecordFinding(pass Cursor, f Finding) error {
	if f.LBA < 0 {
		return fmt.Errorf("scrub: finding at block %d", f.LBA)
	}
	if !pass.Started.IsZero() {
		for old, err := range s.t.Findings(store.FindingQuery{LBA: f.LBA, N: 1}) {
			if err != nil {
				return fmt.Errorf("scrub: findings: %w", err)
			}
			if old.LBA == f.LBA && old.Field == string(f.Kind) && !old.LastSeen.Before(pass.Started) {
				return nil
			}
		}
	}
	if _, err := s.t.RecordFinding(storeFinding(f), false); err != nil {
		return fmt.Errorf("scrub: record finding: %w", err)
	}
	s.last.lba, s.last.kind, s.last.state, s.last.set = f.LBA, f.Kind, f.State, true
	if f.State == 0 {
		s.last.state = FindingOpen
	}
	return nil
}

// FindingsRecorder is an optional capability of a [State]: RecordFindings
// records every finding of fs as RecordFinding would, in one go. A scrub
// records each run's findings through it when its State has it.
type FindingsRecorder interface {
	RecordFindings(pass Cursor, fs []Finding) error
}

// FindingStatesSetter is an optional capability of a [State]:
// SetFindingStates sets the state of every finding of fs as
// SetFindingState would, in one go. A full pass closes the open findings
// of a run's blocks that now pass through it when its State has it.
type FindingStatesSetter interface {
	SetFindingStates(fs []Finding, st FindingState) error
}

// SetFindingStates implements [FindingStatesSetter] in one store commit.
func (s *StoreState) SetFindingStates(fs []Finding, st FindingState) error {
	if len(fs) == 0 {
		return nil
	}
	keys := make([]store.FindingKey, len(fs))
	for i, f := range fs {
		if f.LBA < 0 {
			return fmt.Errorf("scrub: finding at block %d", f.LBA)
		}
		keys[i] = store.FindingKey{LBA: f.LBA, Field: string(f.Kind)}
	}
	if err := s.t.SetFindingStates(keys, st, false); err != nil {
		return fmt.Errorf("scrub: set finding states: %w", err)
	}
	last := fs[len(fs)-1]
	s.last.lba, s.last.kind, s.last.state, s.last.set = last.LBA, last.Kind, st, true
	return nil
}

// RecordFindings implements [FindingsRecorder]: one query for the findings
// this pass already recorded over the blocks of fs, and one store commit
// (a finding each took a query, two reads and a commit).
func (s *StoreState) RecordFindings(pass Cursor, fs []Finding) error {
	if len(fs) == 0 {
		return nil
	}
	lo, hi := fs[0].LBA, fs[0].LBA+1
	for _, f := range fs {
		if f.LBA < 0 {
			return fmt.Errorf("scrub: finding at block %d", f.LBA)
		}
		lo, hi = min(lo, f.LBA), max(hi, f.LBA+1)
	}
	type key struct {
		lba  int64
		kind string
	}
	var done map[key]bool // recorded by this pass already
	if !pass.Started.IsZero() {
		for old, err := range s.t.Findings(store.FindingQuery{LBA: lo, N: hi - lo}) {
			if err != nil {
				return fmt.Errorf("scrub: findings: %w", err)
			}
			if !old.LastSeen.Before(pass.Started) {
				if done == nil {
					done = map[key]bool{}
				}
				done[key{old.LBA, old.Field}] = true
			}
		}
	}
	sfs := make([]store.Finding, 0, len(fs))
	for _, f := range fs {
		if done[key{f.LBA, string(f.Kind)}] {
			continue
		}
		sfs = append(sfs, storeFinding(f))
	}
	if len(sfs) == 0 {
		return nil
	}
	if _, err := s.t.RecordFindings(sfs, false); err != nil {
		return fmt.Errorf("scrub: record findings: %w", err)
	}
	last := sfs[len(sfs)-1]
	s.last.lba, s.last.kind, s.last.state, s.last.set = last.LBA, blockdev.Kind(last.Field), last.State, true
	if last.State == 0 {
		s.last.state = FindingOpen
	}
	return nil
}

// storeFinding is f as the store's findings log keeps it: encoded as
// blockdev.StoreFinding encodes a problem, with f's extent, state and
// repair.
func storeFinding(f Finding) store.Finding {
	sf := blockdev.StoreFinding(f.Problem(), f.LastSeen)
	sf.N, sf.State, sf.Source, sf.Leg = max(f.N, 1), f.State, f.Source, f.Leg
	return sf
}

func fromBE(b []byte) uint64 {
	var v uint64
	for _, c := range b[max(0, len(b)-8):] {
		v = v<<8 | uint64(c)
	}
	return v
}

// OpenFindings implements [State].
func (s *StoreState) OpenFindings(start, end int64) iter.Seq2[Finding, error] {
	return func(yield func(Finding, error) bool) {
		if start < 0 || end <= start {
			return
		}
		q := store.FindingQuery{LBA: start, N: end - start, Bad: true}
		for sf, err := range s.t.Findings(q) {
			if err != nil {
				yield(Finding{}, fmt.Errorf("scrub: findings: %w", err))
				return
			}
			f := Finding{
				LBA: sf.LBA, N: sf.N, Kind: blockdev.Kind(sf.Field),
				Expected: fromBE(sf.Expected), Actual: fromBE(sf.Actual),
				State: sf.State, Count: sf.Count, FirstSeen: sf.FirstSeen, LastSeen: sf.LastSeen,
				Source: sf.Source, Leg: sf.Leg,
			}
			if !yield(f, nil) {
				return
			}
		}
	}
}

// SetFindingState implements [State].
func (s *StoreState) SetFindingState(lba int64, kind blockdev.Kind, st FindingState) error {
	if lba < 0 {
		return fmt.Errorf("scrub: finding at block %d", lba)
	}
	if _, err := s.t.SetFindingState(lba, string(kind), st, false); err != nil {
		return fmt.Errorf("scrub: set finding state: %w", err)
	}
	s.last.lba, s.last.kind, s.last.state, s.last.set = lba, kind, st, true
	return nil
}

// Sync implements [State]: it rewrites the last finding changed with a
// synced commit, which makes every earlier commit durable too.
func (s *StoreState) Sync() error {
	if !s.last.set {
		return nil
	}
	if _, err := s.t.SetFindingState(s.last.lba, string(s.last.kind), s.last.state, true); err != nil {
		return fmt.Errorf("scrub: sync findings: %w", err)
	}
	return nil
}

// FileState keeps the cursor and findings of a scrub of a
// self-contained image (extended-LBA or DIX) in two files: a small JSON
// state file at path, replaced atomically (write, fsync, rename, fsync of
// the directory), and an append-only JSON Lines findings log at
// path+".findings". The state file records the length of the log that its
// cursor accounts for; opening the state truncates the log to it, dropping
// findings of runs that were checked after the last save and will be
// checked again: so each finding is recorded exactly once per pass.
//
// OpenFindings replays the whole log (memory grows with the number of
// distinct findings). One process at a time may use a state file.
type FileState struct {
	mu      sync.Mutex
	path    string
	log     *os.File
	w       *bufio.Writer
	size    int64 // bytes in the log, buffered included
	cur     *Cursor
	closed  bool
	failure error // a failed write makes the state unusable
}

// fileState is the JSON state file.
type fileState struct {
	Version int     `json:"version"`
	Cursor  *Cursor `json:"cursor,omitempty"`
	LogSize int64   `json:"log_size"`
}

const fileStateVersion = 1

// logRecord is a line of the findings log: Op "seen" records a sighting of
// the finding, Op "state" sets the state of (LBA, Kind).
type logRecord struct {
	Op string `json:"op"`
	Finding
}

// OpenFileState opens (creating if needed) the scrub state at path and
// its findings log at path+".findings". Close it after use.
//
// Neither file is opened through a symbolic link, nor the temporary file
// path+".tmp" that replaces the state: a link there fails with
// ErrStateFile, so a scrub never truncates or overwrites a file someone
// pointed it at. New files are created with mode 0600.
func OpenFileState(path string) (*FileState, error) {
	var st fileState
	for _, p := range []string{path, path + ".findings", path + ".tmp"} {
		if err := refuseLink(p); err != nil {
			return nil, err
		}
	}
	b, err := readNoFollow(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		st.Version = fileStateVersion
	case err != nil:
		return nil, fmt.Errorf("scrub: state: %w", err)
	default:
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		if err := d.Decode(&st); err != nil {
			return nil, fmt.Errorf("scrub: state %s: %w", path, err)
		}
		if st.Version != fileStateVersion {
			return nil, fmt.Errorf("scrub: state %s: version %d, want %d", path, st.Version, fileStateVersion)
		}
		if c := st.Cursor; c != nil && (c.Start < 0 || c.Start > c.End || c.Next < c.Start || c.Next > c.End) {
			return nil, fmt.Errorf("scrub: state %s: bad cursor %+v", path, *c)
		}
		if st.LogSize < 0 {
			return nil, fmt.Errorf("scrub: state %s: log size %d", path, st.LogSize)
		}
	}
	log, err := os.OpenFile(path+".findings", os.O_RDWR|os.O_CREATE|oNoFollow, 0o600)
	if err != nil {
		return nil, fmt.Errorf("scrub: state: %w", err)
	}
	fi, err := log.Stat()
	if err != nil {
		log.Close()
		return nil, fmt.Errorf("scrub: state: %w", err)
	}
	if !fi.Mode().IsRegular() {
		log.Close()
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrStateFile, path+".findings")
	}
	if fi.Size() < st.LogSize {
		log.Close()
		return nil, fmt.Errorf("scrub: state %s: findings log has %d bytes, the state accounts for %d", path, fi.Size(), st.LogSize)
	}
	if fi.Size() > st.LogSize {
		if err := log.Truncate(st.LogSize); err != nil {
			log.Close()
			return nil, fmt.Errorf("scrub: state: %w", err)
		}
	}
	if _, err := log.Seek(st.LogSize, io.SeekStart); err != nil {
		log.Close()
		return nil, fmt.Errorf("scrub: state: %w", err)
	}
	return &FileState{path: path, log: log, w: bufio.NewWriter(log), size: st.LogSize, cur: st.Cursor}, nil
}

// Path returns the state file's path.
func (s *FileState) Path() string { return s.path }

func (s *FileState) usable() error {
	if s.closed {
		return fmt.Errorf("scrub: state %s: %w", s.path, os.ErrClosed)
	}
	return s.failure
}

// LoadCursor implements [State]. The file holds one cursor: that of
// the last range saved.
func (s *FileState) LoadCursor(start, end int64) (Cursor, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return Cursor{}, false, err
	}
	if s.cur == nil || s.cur.Start != start || s.cur.End != end {
		return Cursor{}, false, nil
	}
	return *s.cur, true, nil
}

// SaveCursor implements [State].
func (s *FileState) SaveCursor(c Cursor) error {
	if c.Start < 0 || c.Start > c.End || c.Next < c.Start || c.Next > c.End {
		return fmt.Errorf("scrub: bad scrub cursor %+v", c)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	return s.commit(&c)
}

// Sync implements [State].
func (s *FileState) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	return s.commit(s.cur)
}

// commit makes the log durable, then replaces the state file. s.mu is held.
func (s *FileState) commit(c *Cursor) error {
	if err := s.w.Flush(); err != nil {
		return s.fail(err)
	}
	if err := s.log.Sync(); err != nil {
		return s.fail(err)
	}
	b, err := json.Marshal(fileState{Version: fileStateVersion, Cursor: c, LogSize: s.size})
	if err != nil {
		return fmt.Errorf("scrub: state: %w", err)
	}
	if err := writeFileAtomic(s.path, append(b, '\n')); err != nil {
		return fmt.Errorf("scrub: state: %w", err)
	}
	s.cur = c
	return nil
}

func (s *FileState) fail(err error) error {
	s.failure = fmt.Errorf("scrub: state %s: findings log: %w", s.path, err)
	return s.failure
}

// writeFileAtomic replaces path with b: a temporary file is written and
// synced, renamed over path, and the directory synced.
//
// The temporary file is new (O_EXCL, never through a symbolic link): a
// stale one, or a link left in its place, is removed first (the link, not
// its target).
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|oNoFollow, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return err
	}
	return nil
}

func (s *FileState) append(r logRecord) error {
	if err := s.usable(); err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("scrub: state: %w", err)
	}
	b = append(b, '\n')
	if _, err := s.w.Write(b); err != nil {
		return s.fail(err)
	}
	s.size += int64(len(b))
	return nil
}

// RecordFinding implements [State]. Exactly-once per pass comes from
// the truncation at open, so pass is not consulted.
func (s *FileState) RecordFinding(pass Cursor, f Finding) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.State == 0 {
		f.State = FindingOpen
	}
	f.N = max(f.N, 1)
	f.Count, f.FirstSeen = 0, time.Time{}
	if f.LastSeen.IsZero() {
		f.LastSeen = time.Now()
	}
	f.LastSeen = f.LastSeen.UTC()
	return s.append(logRecord{Op: "seen", Finding: f})
}

// SetFindingState implements [State]. Setting the state of a finding
// the log does not hold is an error.
func (s *FileState) SetFindingState(lba int64, kind blockdev.Kind, st FindingState) error {
	if st < FindingOpen || st > FindingUnrepairable {
		return fmt.Errorf("scrub: invalid finding state %d", uint8(st))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.append(logRecord{Op: "state", Finding: Finding{LBA: lba, Kind: kind, State: st, LastSeen: time.Now().UTC()}})
}

type findingKey struct {
	lba  int64
	kind blockdev.Kind
}

// replay reads the log and returns the current findings. s.mu is held.
func (s *FileState) replay() (map[findingKey]Finding, error) {
	if err := s.w.Flush(); err != nil {
		return nil, s.fail(err)
	}
	m := make(map[findingKey]Finding)
	sc := bufio.NewScanner(io.NewSectionReader(s.log, 0, s.size))
	sc.Buffer(nil, 1<<20)
	line := 0
	for sc.Scan() {
		line++
		var r logRecord
		d := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		d.DisallowUnknownFields()
		if err := d.Decode(&r); err != nil {
			return nil, fmt.Errorf("scrub: state %s: findings log line %d: %w", s.path, line, err)
		}
		k := findingKey{r.LBA, r.Kind}
		switch r.Op {
		case "seen":
			old, ok := m[k]
			f := r.Finding
			f.Count = 1
			f.FirstSeen = f.LastSeen
			if ok {
				f.Count = old.Count + 1
				f.FirstSeen = old.FirstSeen
			}
			m[k] = f
		case "state":
			if f, ok := m[k]; ok {
				f.State = r.State
				m[k] = f
			}
		default:
			return nil, fmt.Errorf("scrub: state %s: findings log line %d: unknown op %q", s.path, line, r.Op)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scrub: state %s: findings log: %w", s.path, err)
	}
	return m, nil
}

// Findings returns every finding of the log in its current state, ordered
// by LBA then Kind.
func (s *FileState) Findings() ([]Finding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	m, err := s.replay()
	if err != nil {
		return nil, err
	}
	out := make([]Finding, 0, len(m))
	for _, f := range m {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b Finding) int {
		if a.LBA != b.LBA {
			if a.LBA < b.LBA {
				return -1
			}
			return 1
		}
		return strings.Compare(string(a.Kind), string(b.Kind))
	})
	return out, nil
}

// OpenFindings implements [State].
func (s *FileState) OpenFindings(start, end int64) iter.Seq2[Finding, error] {
	return func(yield func(Finding, error) bool) {
		all, err := s.Findings()
		if err != nil {
			yield(Finding{}, err)
			return
		}
		for _, f := range all {
			if !f.State.Bad() || f.End() <= start || f.LBA >= end {
				continue
			}
			if !yield(f, nil) {
				return
			}
		}
	}
}

// Close closes the findings log. Findings recorded since the last
// SaveCursor or Sync are not kept.
func (s *FileState) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.log.Close(); err != nil {
		return fmt.Errorf("scrub: state: %w", err)
	}
	return nil
}

var (
	_ State = (*StoreState)(nil)
	_ State = (*FileState)(nil)
)

// ErrStateFile reports a scrub state file that is a symbolic link or not a
// regular file: OpenFileState refuses it rather than write through it.
var ErrStateFile = errors.New("scrub: state file refused")

// refuseLink fails with ErrStateFile if p exists and is a symbolic link or
// not a regular file.
func refuseLink(p string) error {
	fi, err := os.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("scrub: state: %w", err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symbolic link", ErrStateFile, p)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%w: %s is not a regular file", ErrStateFile, p)
	}
	return nil
}

// readNoFollow reads the file p, failing on a symbolic link.
func readNoFollow(p string) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|oNoFollow, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
