package blockdev

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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
// witness yet) updates the witness. The witness is written only with the
// key (the seal's MAC is checked), and read without it too.

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
}

func (e *RollbackError) Error() string {
	if e.SameGen {
		return fmt.Sprintf("blockdev: volume %q: rolled back: the store's seal of generation %d is not the one the witness recorded", e.Volume, e.StoreGen)
	}
	return fmt.Sprintf("blockdev: volume %q: rolled back to generation %d (witness has %d)", e.Volume, e.StoreGen, e.WitnessGen)
}

func (e *RollbackError) Unwrap() error { return ErrRolledBack }

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

// WitnessRecord is what a Witness keeps: the volume and its seal.
type WitnessRecord struct {
	VolumeUID string // 32 hex digits (store.Manifest.VolumeUID)
	Gen       uint64
	MAC       []byte // 32 bytes
}

// Witness keeps a keyed volume's latest seal (Options.Witness) where an
// attacker of the device and the store cannot put back an older one.
type Witness interface {
	// Load returns the record, and ok false if none was stored yet.
	Load() (rec WitnessRecord, ok bool, err error)
	// Store replaces the record durably.
	Store(rec WitnessRecord) error
}

// FileWitness is a Witness in a file (keep it on another machine, or
// another medium the attacker cannot write). Its content is one line:
//
//	difctl-witness v1 uid=<32 hex> gen=<decimal> mac=<64 hex> crc=<8 hex>
//
// where crc is the CRC-32C (hex) of the line up to " crc=". Store
// replaces it atomically: a temporary file in the same directory, synced,
// renamed over it, and the directory synced.
type FileWitness struct {
	Path string
}

const witnessHeader = "difctl-witness v1"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Load implements Witness.
func (w *FileWitness) Load() (WitnessRecord, bool, error) {
	b, err := os.ReadFile(w.Path)
	if errors.Is(err, os.ErrNotExist) {
		return WitnessRecord{}, false, nil
	} else if err != nil {
		return WitnessRecord{}, false, fmt.Errorf("blockdev: witness: %w", err)
	}
	bad := func(reason string) error {
		return fmt.Errorf("blockdev: witness %s: %w", w.Path, &store.CorruptError{Record: "witness", Reason: reason})
	}
	line := strings.TrimSuffix(string(b), "\n")
	body, crcText, ok := strings.Cut(line, " crc=")
	if !ok {
		return WitnessRecord{}, false, bad("no crc")
	}
	if crc, err := strconv.ParseUint(crcText, 16, 32); err != nil || uint32(crc) != crc32.Checksum([]byte(body), castagnoli) {
		return WitnessRecord{}, false, bad("checksum does not match")
	}
	f := strings.Fields(body)
	if len(f) != 5 || f[0]+" "+f[1] != witnessHeader {
		return WitnessRecord{}, false, bad("not a version 1 witness")
	}
	var rec WitnessRecord
	for _, kv := range f[2:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "uid":
			rec.VolumeUID = v
		case "gen":
			if rec.Gen, err = strconv.ParseUint(v, 10, 64); err != nil {
				return WitnessRecord{}, false, bad("bad generation")
			}
		case "mac":
			if rec.MAC, err = hex.DecodeString(v); err != nil || len(rec.MAC) != 32 {
				return WitnessRecord{}, false, bad("bad MAC")
			}
		}
	}
	if len(rec.VolumeUID) != 32 || rec.MAC == nil {
		return WitnessRecord{}, false, bad("incomplete")
	}
	return rec, true, nil
}

// Store implements Witness.
func (w *FileWitness) Store(rec WitnessRecord) error {
	body := fmt.Sprintf("%s uid=%s gen=%d mac=%x", witnessHeader, rec.VolumeUID, rec.Gen, rec.MAC)
	content := fmt.Sprintf("%s crc=%08x\n", body, crc32.Checksum([]byte(body), castagnoli))
	dir := filepath.Dir(w.Path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(w.Path)+".tmp*")
	if err != nil {
		return fmt.Errorf("blockdev: witness: %w", err)
	}
	tmp := f.Name()
	_, err = f.WriteString(content)
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
	rec, ok, err := w.Load()
	if err != nil || !ok {
		return err
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
		return fmt.Errorf("blockdev: volume %q: %w", v.opts.Name, err)
	}
	v.witnessed = gen
	return nil
}
