package blockdev

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/difctl/difctl/store"
)

// The seal of a keyed volume (store/seal.go) commits to the current
// version of every tag page under a generation G that every commit of tag
// pages moves on, so that verify and scrub find a tag page put back with
// its tuple page. Putting back the whole store (and the device) with an
// older seal is found only by comparing with a copy of (G, seal MAC) kept
// where the attacker cannot write: a Witness.
//
// Protocol. The volume writes the witness only once the seal it records is
// durable in the store (Tuples.SyncSeal; with a witness the last commit of
// Sync is synced), at Create, at Open (after recovery) and at every Sync
// that moved the seal on. So after a crash the witness is at most one
// generation behind the store, never ahead. At Open, before recovery,
// the store's seal (G_s) is compared with the witness (G_w): G_w > G_s,
// or G_w == G_s with another MAC, is a *RollbackError; G_w < G_s (or no
// witness yet) updates the witness. A witness that refuses a Store because
// it holds a newer seal (a copy of the volume written meanwhile, see
// store.WitnessAheadError) is a *RollbackError too. The witness is written
// only with the key (the seal's MAC is checked), and read without it too.

var (
	// ErrRolledBack matches every *RollbackError. It also matches
	// dif.ErrIntegrity.
	ErrRolledBack error = &integritySentinel{"blockdev: volume rolled back"}
	// ErrSealMismatch matches every *SealError. It also matches
	// dif.ErrIntegrity.
	ErrSealMismatch error = &integritySentinel{"blockdev: keyed tag pages do not match their seal"}
	// ErrWitnessMismatch reports a witness that records another volume.
	ErrWitnessMismatch = errors.New("blockdev: witness of another volume")
)

// RollbackError reports a keyed volume whose store holds an older seal than
// its witness: the store (and the device) were put back to an earlier
// state. It matches ErrRolledBack and dif.ErrIntegrity.
type RollbackError struct {
	Volume     string
	StoreGen   uint64 // the store's seal generation (0: none)
	WitnessGen uint64
	// SameGen: the generations are equal but the MACs differ (a seal of
	// another history).
	SameGen bool
	// Err is the witness's refusal (a *store.WitnessAheadError) when the
	// rollback was found by a Store rather than at Open; nil otherwise.
	Err error
}

func (e *RollbackError) Error() string {
	if e.SameGen {
		return fmt.Sprintf("blockdev: volume %q: rolled back: the store's seal of generation %d is not the one the witness recorded", e.Volume, e.StoreGen)
	}
	return fmt.Sprintf("blockdev: volume %q: rolled back to generation %d (witness has %d)", e.Volume, e.StoreGen, e.WitnessGen)
}

func (e *RollbackError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrRolledBack, e.Err}
	}
	return []error{ErrRolledBack}
}

// SealError reports that a keyed volume's tag pages are not those its seal
// commits to: a tag page was put back in an older version (or written by a
// program that does not keep the seal). It matches ErrSealMismatch and
// dif.ErrIntegrity, and the store's *store.SealError.
type SealError struct {
	Volume string
	Gen    uint64
	Err    error // the store's error
}

func (e *SealError) Error() string {
	return fmt.Sprintf("blockdev: volume %q: keyed tag pages do not match their seal (generation %d): a page was replaced by an older version", e.Volume, e.Gen)
}

func (e *SealError) Unwrap() []error { return []error{ErrSealMismatch, e.Err} }

// WitnessRecord is what a Witness keeps: the volume and its seal. Its
// text form (store.MarshalWitness) is shared by every witness.
type WitnessRecord = store.WitnessRecord

// Witness keeps a keyed volume's latest seal (Options.Witness) where an
// attacker of the device and the store cannot put back an older one.
// FileWitness keeps it in a file; store/etcd's Witness in an etcd cluster
// with its own credentials.
type Witness interface {
	// Load returns the record of the volume volumeUID, and ok false if
	// none was stored yet. (A witness that keeps one volume's record, a
	// file, may return another volume's: the volume refuses it.)
	Load(volumeUID string) (rec WitnessRecord, ok bool, err error)
	// Store replaces the record durably. A witness that can compare and
	// swap refuses to move backwards (a lower generation, or the same
	// with another MAC) with a *store.WitnessAheadError, which the
	// volume reports as a *RollbackError.
	Store(rec WitnessRecord) error
}

// WitnessError reports a witness that could not be read or written: not
// reachable, refused, or holding a record that does not decode (which
// also matches store.ErrCorrupt). A volume never goes on without its
// witness: Open fails, or the Sync that would have recorded the seal.
type WitnessError struct {
	Volume string
	Op     string // "read" or "update"
	Err    error
}

func (e *WitnessError) Error() string {
	return fmt.Sprintf("blockdev: volume %q: cannot %s its witness: %v", e.Volume, e.Op, e.Err)
}

func (e *WitnessError) Unwrap() error { return e.Err }

// FileWitness is a Witness in a file (keep it on another machine, or
// another medium the attacker cannot write). Its content is the record's
// line (store.MarshalWitness):
//
//	difctl-witness v1 uid=<32 hex> gen=<decimal> mac=<64 hex> crc=<8 hex>
//
// Store replaces it atomically: a temporary file in the same directory,
// synced, renamed over it, and the directory synced. It does not compare
// with the record it replaces (the volume does, at Open).
type FileWitness struct {
	Path string
}

// Load implements Witness; the file holds one volume's record, whatever
// volumeUID asks for.
func (w *FileWitness) Load(volumeUID string) (WitnessRecord, bool, error) {
	b, err := os.ReadFile(w.Path)
	if errors.Is(err, os.ErrNotExist) {
		return WitnessRecord{}, false, nil
	} else if err != nil {
		return WitnessRecord{}, false, fmt.Errorf("blockdev: witness: %w", err)
	}
	rec, err := store.ParseWitness(b)
	if err != nil {
		return WitnessRecord{}, false, fmt.Errorf("blockdev: witness %s: %w", w.Path, err)
	}
	return rec, true, nil
}

// Store implements Witness.
func (w *FileWitness) Store(rec WitnessRecord) error {
	dir := filepath.Dir(w.Path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(w.Path)+".tmp*")
	if err != nil {
		return fmt.Errorf("blockdev: witness: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(store.MarshalWitness(rec))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, w.Path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("blockdev: witness: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return fmt.Errorf("blockdev: witness: sync %s: %w", dir, err)
		}
	}
	return nil
}

// Seal returns the generation and MAC of a keyed volume's seal as of its
// last commit (after Sync: durable). ok is false for a volume that is not
// keyed, or has no seal yet (a store from before seals, opened without
// the key or read-only).
func (v *Volume) Seal() (gen uint64, mac []byte, ok bool, err error) {
	if !v.man.Keyed() {
		return 0, nil, false, nil
	}
	return v.tup.Seal()
}

// CheckSeal recomputes the commitment of the seal over every tag page of a
// keyed volume opened with its key, and returns the seal's generation: a
// mismatch is a *SealError. ok is false when there is nothing to check
// (not keyed, opened without the key, or no seal yet).
func (v *Volume) CheckSeal() (gen uint64, ok bool, err error) {
	if v.tags == nil {
		return 0, false, nil
	}
	gen, ok, err = v.tup.CheckSeal()
	if errors.Is(err, store.ErrSealMismatch) {
		return gen, ok, &SealError{Volume: v.opts.Name, Gen: gen, Err: err}
	}
	return gen, ok, err
}

// checkWitness compares the store's seal with the witness (see above),
// before recovery. A keyed volume opened with its key and writable that
// has no seal (a store from before seals) gets one first.
func (v *Volume) checkWitness() error {
	w := v.opts.Witness
	if w == nil || !v.man.Keyed() {
		return nil
	}
	if v.tags != nil && !v.opts.ReadOnly {
		if err := v.tup.InitSeal(); err != nil {
			return fmt.Errorf("blockdev: volume %q: seal: %w", v.opts.Name, err)
		}
	}
	rec, ok, err := w.Load(v.man.VolumeUID)
	if err != nil {
		return &WitnessError{Volume: v.opts.Name, Op: "read", Err: err}
	} else if !ok {
		return nil
	}
	if rec.VolumeUID != v.man.VolumeUID {
		return fmt.Errorf("%w: volume %q has uid %s, the witness records %s", ErrWitnessMismatch, v.opts.Name, v.man.VolumeUID, rec.VolumeUID)
	}
	gen, mac, _, err := v.tup.Seal()
	if err != nil {
		return fmt.Errorf("blockdev: volume %q: seal: %w", v.opts.Name, err)
	}
	switch {
	case rec.Gen > gen:
		return &RollbackError{Volume: v.opts.Name, StoreGen: gen, WitnessGen: rec.Gen}
	case rec.Gen == gen && !bytes.Equal(rec.MAC, mac):
		return &RollbackError{Volume: v.opts.Name, StoreGen: gen, WitnessGen: rec.Gen, SameGen: true}
	}
	v.witnessed = rec.Gen
	return nil
}

// testHookWitness, if set, runs before every witness write; an error
// stops it (a crash).
var testHookWitness func() error

// publishSeal writes the store's seal to the witness once it is durable,
// if it moved on since the last write. Only with the key: a seal whose
// MAC was not checked is never recorded. Callers serialize it (flushMu,
// or Open and Create before the volume is shared).
func (v *Volume) publishSeal() error {
	w := v.opts.Witness
	if w == nil || v.tags == nil {
		return nil
	}
	gen, mac, ok, err := v.tup.SyncSeal()
	if err != nil || !ok || gen == v.witnessed {
		return err
	}
	if h := testHookWitness; h != nil {
		if err := h(); err != nil {
			return err
		}
	}
	if err := w.Store(WitnessRecord{VolumeUID: v.man.VolumeUID, Gen: gen, MAC: mac}); err != nil {
		var ahead *store.WitnessAheadError
		if errors.As(err, &ahead) {
			// Another writer recorded a newer seal of this volume (a
			// copy of it, or its store put back since Open).
			return &RollbackError{Volume: v.opts.Name, StoreGen: gen, WitnessGen: ahead.StoredGen, SameGen: ahead.StoredGen == gen, Err: err}
		}
		return &WitnessError{Volume: v.opts.Name, Op: "update", Err: err}
	}
	v.witnessed = gen
	return nil
}
