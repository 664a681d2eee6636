package pebble

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/store"
)

// Lost commits. Pebble's manifest and write-ahead log are record logs, and
// a record that fails its checksum at the end of one (or, for large
// records, anywhere in it) reads as a write torn by a crash: Pebble drops it
// and what follows, and opens the earlier state without a word. Committed
// tuples would vanish silently.
//
// The store counts its commits: every batch it commits also sets a hidden
// key, genKey, to the next value of a counter (ingested bulk loads commit
// one after them). At a clean Close, once everything is flushed, it writes
// the value it reads back to the file stateFile beside Pebble's, marked
// clean; a read-write open marks it open again before anything is
// committed. An open that finds the file clean and another value under
// genKey has lost commits since that Close, and fails with a
// *store.CorruptFileError. A store killed while open (the file is not
// clean) is not checked this way: losses in the log it was writing cannot
// be told from a torn write (see the package documentation).
const (
	stateFile = "difctl-state"
	stateTemp = "difctl-state.tmp"
)

// genKey is the hidden commit counter's key. Keys from reservedPrefix on
// are the store's own: iterators stop before them, and Set, Delete and Get
// refuse or miss them.
var (
	reservedPrefix = []byte("\xff\xff\xffdifctl/")
	genKey         = []byte("\xff\xff\xffdifctl/commit-generation")
	loadKey        = []byte("\xff\xff\xffdifctl/last-load")
)

func reserved(key []byte) bool { return bytes.HasPrefix(key, reservedPrefix) }

// clampHi returns the upper bound of a user iteration: hi, kept below the
// reserved keys.
func clampHi(hi []byte) []byte {
	if hi == nil || bytes.Compare(hi, reservedPrefix) > 0 {
		return reservedPrefix
	}
	return hi
}

// storeState is the content of stateFile.
type storeState struct {
	clean bool
	gen   uint64 // clean: the counter at Close; open: the least it may be
	load  uint64 // the number of the last bulk load, the least under loadKey
}

func encodeState(s storeState) []byte {
	b := fmt.Appendf(nil, "difctl store state 1 clean=%t gen=%d load=%d\n", s.clean, s.gen, s.load)
	return binary.BigEndian.AppendUint32(b, crc32c.Checksum(b))
}

func decodeState(b []byte) (storeState, error) {
	if len(b) < 5 || crc32c.Checksum(b[:len(b)-4]) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return storeState{}, errors.New("bad checksum")
	}
	var s storeState
	_, err := fmt.Sscanf(string(b[:len(b)-4]), "difctl store state 1 clean=%t gen=%d load=%d\n", &s.clean, &s.gen, &s.load)
	return s, err
}

// readState reads dir's state file; ok is false when there is none (a store
// made before it existed, or one never closed).
func readState(dir string) (s storeState, ok bool, err error) {
	f, err := os.OpenFile(filepath.Join(dir, stateFile), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return s, false, nil
	}
	if err != nil {
		return s, false, err
	}
	defer f.Close()
	b := make([]byte, 256)
	n, _ := f.Read(b)
	s, err = decodeState(b[:n])
	if err != nil {
		return s, false, &store.CorruptFileError{Path: filepath.Join(dir, stateFile), Reason: err.Error()}
	}
	return s, true, nil
}

// writeState replaces dir's state file durably: a new temporary file
// (O_EXCL, never through a symbolic link), synced, renamed over it, the
// directory synced.
func writeState(dir string, s storeState) error {
	tmp := filepath.Join(dir, stateTemp)
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(encodeState(s))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, stateFile))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// readGen returns the commit counter stored in db (0 if none).
func readGen(db *pebble.DB) (uint64, error) { return readCounter(db, genKey) }

func readCounter(db *pebble.DB, key []byte) (uint64, error) {
	v, closer, err := db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	return strconv.ParseUint(strings.TrimSpace(string(v)), 10, 64)
}

// checkState compares the commit counter of a store just opened with the
// one its last clean Close recorded.
func (p *kv) checkState() error {
	if !p.osFS {
		return nil
	}
	g, err := readGen(p.db)
	if err != nil {
		return p.translate("read commit counter", err)
	}
	p.gen.Store(g)
	l, err := readCounter(p.db, loadKey)
	if err != nil {
		return p.translate("read load counter", err)
	}
	p.loads.Store(l)
	s, ok, err := readState(p.path)
	if err != nil {
		return err
	}
	if ok && l < s.load {
		return &store.CorruptFileError{Path: p.path, Reason: fmt.Sprintf("bulk loads lost: the store had ingested load %d and holds load %d (a damaged manifest record was dropped as if torn)", s.load, l)}
	}
	if ok && s.clean && s.gen != g {
		return &store.CorruptFileError{Path: p.path, Reason: fmt.Sprintf("commits lost since the store was last closed: it closed after commit %d and holds commit %d (a damaged manifest or log record was dropped as if torn)", s.gen, g)}
	}
	if ok && !s.clean && g < s.gen {
		path, what := p.logEvidence()
		return &store.CorruptFileError{Path: path, Reason: fmt.Sprintf("synced commits lost after an unclean stop: the store had durably reached commit %d and holds commit %d (%s)", s.gen, g, what)}
	}
	if p.readOnly {
		return nil
	}
	if err := writeState(p.path, storeState{clean: false, gen: g, load: l}); err != nil {
		return err
	}
	p.state = newStateWriter(p, g)
	return nil
}

// logEvidence names what an open after an unclean stop found of the
// write-ahead log the lost commits were in (the logs as they were before
// Pebble opened the store): the file to name and what is wrong with it.
func (p *kv) logEvidence() (path, what string) {
	if len(p.logsAtOpen) == 0 {
		return p.path, "its write-ahead log is missing: the store holds no *.log file"
	}
	l := p.logsAtOpen[len(p.logsAtOpen)-1]
	return filepath.Join(p.path, l.name), fmt.Sprintf("the newest write-ahead log, %s, holds %d bytes and ends before those commits: truncated, or damaged where nothing later vouches for it", l.name, l.size)
}

// ingested records, after a bulk load, the counter the store has reached:
// a manifest that later loses the load's record is then detected even
// after a crash. The caller holds commitMu.
func (p *kv) ingested(g, load uint64) error {
	if p.state == nil {
		return nil
	}
	return p.state.write(g, load)
}

// closeState records a clean close after everything is flushed.
func (p *kv) closeState() error {
	if p.state == nil {
		return nil
	}
	if err := p.state.stop(); err != nil {
		return err
	}
	g, err := readGen(p.db)
	if err != nil {
		return p.translate("read commit counter", err)
	}
	return writeState(p.path, storeState{clean: true, gen: g, load: p.loads.Load()})
}

// The synced watermark. Between a clean open and a clean close the state
// file also records, as its gen, a commit counter value that is known to
// be durable: after a synced commit returns, stateWriter records its value
// in the background, at most every stateInterval (the first after a quiet
// spell at once), so that commits are never slowed by it. The file's gen
// is therefore always at or below the durable counter, and an open after
// an unclean stop that finds the counter below it has lost synced,
// acknowledged commits (its write-ahead log deleted, truncated, or damaged
// where nothing later vouches for it): a *CorruptFileError naming the log,
// never a store that quietly forgets what it said was durable. Commits
// acknowledged in the last stateInterval (plus one state write) before an
// unclean stop are not covered: their loss cannot be told from a crash.
const stateInterval = 200 * time.Millisecond

// stateWriter records the synced watermark (see above).
type stateWriter struct {
	p       *kv
	mu      sync.Mutex // guards synced, written, stopped; the state file's writes
	cond    sync.Cond  // on mu: synced advanced, or stop
	synced  uint64     // the highest counter value of a synced commit
	written uint64     // the gen the state file holds (open state)
	last    time.Time  // when it was written
	stopped bool
	err     error // the first failure to write it (the next Close reports it)
	done    chan struct{}
}

func newStateWriter(p *kv, g uint64) *stateWriter {
	w := &stateWriter{p: p, synced: g, written: g, done: make(chan struct{})}
	w.cond.L = &w.mu
	go w.run()
	return w
}

// note records that the commit of counter value g was synced.
func (w *stateWriter) note(g uint64) {
	w.mu.Lock()
	if g > w.synced {
		w.synced = g
		w.cond.Signal()
	}
	w.mu.Unlock()
}

func (w *stateWriter) run() {
	defer close(w.done)
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for !w.stopped && w.synced <= w.written {
			w.cond.Wait()
		}
		if w.stopped {
			return
		}
		if d := stateInterval - time.Since(w.last); d > 0 {
			w.mu.Unlock()
			time.Sleep(d)
			w.mu.Lock()
			if w.stopped {
				return
			}
		}
		g := w.synced
		err := writeState(w.p.path, storeState{clean: false, gen: g, load: w.p.loads.Load()})
		w.last = time.Now()
		if err != nil {
			if w.err == nil {
				w.err = err
			}
			continue
		}
		w.written = g
	}
}

// write records an open state of counter g at once (a bulk load's), under
// the writer's lock so that it and the background writes do not interleave.
func (w *stateWriter) write(g, load uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	g = max(g, w.written)
	if err := writeState(w.p.path, storeState{clean: false, gen: g, load: load}); err != nil {
		return err
	}
	w.written, w.last = g, time.Now()
	return nil
}

// stop ends the background writes and returns the first that failed.
func (w *stateWriter) stop() error {
	w.mu.Lock()
	w.stopped = true
	w.cond.Signal()
	w.mu.Unlock()
	<-w.done
	return w.err
}

// genValue is the next commit counter value, as stored. The caller holds
// commitMu, so the stored counter only grows.
func (p *kv) genValue() []byte { return strconv.AppendUint(nil, p.gen.Add(1), 10) }
