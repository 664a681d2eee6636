package store

import "fmt"

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
