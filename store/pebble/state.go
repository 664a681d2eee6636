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
	"syscall"

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
		return &store.CorruptFileError{Path: p.path, Reason: fmt.Sprintf("commits lost: the store had reached commit %d (a bulk load) and holds commit %d (a damaged manifest or log record was dropped as if torn)", s.gen, g)}
	}
	if p.readOnly {
		return nil
	}
	return writeState(p.path, storeState{clean: false, gen: g, load: l})
}

// ingested records, after a bulk load, the counter the store has reached:
// a manifest that later loses the load's record is then detected even
// after a crash. The caller holds commitMu.
func (p *kv) ingested(g, load uint64) error {
	if !p.osFS {
		return nil
	}
	return writeState(p.path, storeState{clean: false, gen: g, load: load})
}

// closeState records a clean close after everything is flushed.
func (p *kv) closeState() error {
	if !p.osFS || p.readOnly {
		return nil
	}
	g, err := readGen(p.db)
	if err != nil {
		return p.translate("read commit counter", err)
	}
	return writeState(p.path, storeState{clean: true, gen: g, load: p.loads.Load()})
}

// genValue is the next commit counter value, as stored. The caller holds
// commitMu, so the stored counter only grows.
func (p *kv) genValue() []byte { return strconv.AppendUint(nil, p.gen.Add(1), 10) }
