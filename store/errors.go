package store

import (
	"fmt"
	"strconv"
)

// CorruptError reports a stored value that does not decode: a bad length,
// magic, version, checksum or field. It matches ErrCorrupt.
type CorruptError struct {
	Volume string // volume name, empty for store-wide records
	Record string // which record, e.g. "page 17", "manifest", "intent lba=8 seq=3"
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("store: volume %q: %s: corrupt: %s", e.Volume, e.Record, e.Reason)
}

// Unwrap makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// ManifestMismatchError reports that a volume's stored manifest differs from
// the one the caller opened it with. It matches ErrMismatch.
type ManifestMismatchError struct {
	Volume string
	Field  string // manifest field, e.g. "format", "device_size"
	Stored string // value in the store
	Given  string // value the caller passed
}

func (e *ManifestMismatchError) Error() string {
	return fmt.Sprintf("store: volume %q: manifest mismatch: %s is %s in the store, %s given", e.Volume, e.Field, e.Stored, e.Given)
}

// Unwrap makes errors.Is(err, ErrMismatch) true.
func (e *ManifestMismatchError) Unwrap() error { return ErrMismatch }

// CorruptFileError reports a damaged or missing file of the store itself,
// such as an sstable, log, manifest, options or marker file of a Pebble
// store (store/pebble) that fails its checksum or cannot be found. It
// matches ErrCorrupt.
type CorruptFileError struct {
	Path   string // the file, or the store directory when the engine did not say
	Reason string
}

func (e *CorruptFileError) Error() string {
	return fmt.Sprintf("store: corrupt store file %s: %s", e.Path, e.Reason)
}

// Unwrap makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptFileError) Unwrap() error { return ErrCorrupt }

// BusyError reports a Pebble store (store/pebble) held by another process
// (or by another open in this one). PID and Command name the holder where
// the system tells (PID 0 when it does not). It matches ErrBusy.
type BusyError struct {
	Path    string // the store's directory
	PID     int
	Command string // the holder's command line, "" if unknown
	Self    bool   // held by another open in this process
}

func (e *BusyError) Error() string {
	pre := "store: open pebble:" + e.Path + ": in use"
	switch {
	case e.Self:
		return pre + " by another open in this process"
	case e.PID == 0:
		return pre + " by another process"
	case e.Command == "":
		return fmt.Sprintf("%s by process %d", pre, e.PID)
	}
	return fmt.Sprintf("%s by process %d (%s)", pre, e.PID, strconv.QuoteToGraphic(e.Command))
}

// Unwrap makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Unwrap() error { return ErrBusy }
