package blockdev

import (
	"errors"
	"fmt"

	"github.com/difctl/difctl/store"
)

// Before Create: what a store may already hold of the volume to protect
// (an interrupted or complete protection, a volume protected before, the
// remains of a damaged one), and the rules of protecting over it. Create
// never re-checksums what a store may have protected: a volume is resumed
// as begun, and data is checksummed as it is now only when the caller
// starts over explicitly (PrepareOptions.Reprotect).

// ErrLostManifest reports a store that holds records of a volume (tuple
// pages, intents, findings, cursors) but not its manifest, as a damaged
// store may: it may have protected the volume and lost the manifest, and
// protecting now would take the data as it is now, corruption included,
// for good.
var ErrLostManifest = errors.New("blockdev: the store holds records of the volume but no manifest")

// PrepareOptions configure PrepareCreate. The zero value keeps what the
// store holds.
type PrepareOptions struct {
	// Reprotect starts over: the volume's records are deleted, so that
	// Create protects the data as it is now, with a new identity. That
	// takes an intact volume (once Check accepts it), records without a
	// manifest, and a volume whose manifest is damaged (store.ErrCorrupt)
	// or of a schema this build refuses (store.ErrUnsupported). Only for
	// data known to be good. Default false.
	Reprotect bool
	// Check, if not nil, is called with the intact volume found in the
	// store before PrepareCreate keeps it (for Create to resume) or deletes
	// it (Reprotect); its error ends PrepareCreate and is returned as it
	// is. A caller checks there that the store describes its device, or,
	// with Reprotect, that it holds the volume's key.
	Check func(t *store.Tuples) error
}

// Prior is what PrepareCreate found of the volume in the store.
type Prior struct {
	// Manifest is the manifest of the intact volume found, nil if there
	// was none (nothing, records without a manifest, or a damaged one).
	Manifest *store.Manifest
	// Deleted reports that the volume's records were deleted
	// (Reprotect): Create starts afresh, and Manifest, if not nil, is
	// what the volume was (its format, tags and key).
	Deleted bool
}

// Resume reports whether Create continues the volume found, as it was
// begun (or, complete, reports it with store.ErrExists).
func (p *Prior) Resume() bool { return p.Manifest != nil && !p.Deleted }

// Previous returns the manifest of the volume that Reprotect deleted, nil
// if it deleted none with an intact manifest.
func (p *Prior) Previous() *store.Manifest {
	if p.Deleted {
		return p.Manifest
	}
	return nil
}

// A PrepareError is a store failure of PrepareCreate. Op is the step that
// failed: "open" (the manifest does not open), "records" (looking for the
// volume's records) or "delete" (deleting them); Err is the store's error.
type PrepareError struct {
	Volume, Op string
	Err        error
}

func (e *PrepareError) Error() string {
	return fmt.Sprintf("blockdev: prepare volume %q: %s: %v", e.Volume, e.Op, e.Err)
}

func (e *PrepareError) Unwrap() error { return e.Err }

// PrepareCreate looks at what kv holds of the volume name before Create
// protects it, and applies the rules of protecting over it:
//
//   - nothing: Create starts afresh;
//   - an intact volume (its manifest opens): once opts.Check accepts it,
//     it is kept, for Create to resume it, or, with Reprotect, deleted;
//   - records without a manifest: ErrLostManifest, unless Reprotect,
//     which deletes them;
//   - a damaged manifest (store.ErrCorrupt or store.ErrUnsupported): the
//     error, unless Reprotect, which deletes the volume.
//
// Store failures are *PrepareError.
func PrepareCreate(kv store.KV, name string, opts PrepareOptions) (*Prior, error) {
	if name == "" {
		name = DefaultVolumeName
	}
	del := func(p *Prior) (*Prior, error) {
		if err := store.DeleteVolume(kv, name); err != nil {
			return nil, &PrepareError{Volume: name, Op: "delete", Err: err}
		}
		p.Deleted = true
		return p, nil
	}
	t, err := store.OpenTuples(kv, name, nil)
	switch {
	case err == nil:
		if opts.Check != nil {
			if err := opts.Check(t); err != nil {
				return nil, err
			}
		}
		m := t.Manifest()
		p := &Prior{Manifest: &m}
		if opts.Reprotect {
			return del(p)
		}
		return p, nil
	case errors.Is(err, store.ErrNotFound):
		has, err := store.HasRecords(kv, name)
		switch {
		case err != nil:
			return nil, &PrepareError{Volume: name, Op: "records", Err: err}
		case !has:
			return &Prior{}, nil
		case !opts.Reprotect:
			return nil, fmt.Errorf("%w: volume %q", ErrLostManifest, name)
		}
		return del(&Prior{})
	case opts.Reprotect && (errors.Is(err, store.ErrCorrupt) || errors.Is(err, store.ErrUnsupported)):
		return del(&Prior{})
	}
	return nil, &PrepareError{Volume: name, Op: "open", Err: err}
}

// ReprotectKey returns the key a reprotect (PrepareOptions.Reprotect) of
// the volume name, whose manifest was m, protects it with: a keyed volume
// stays keyed, with its own key, checked here so that a wrong key fails
// before anything is deleted; dropping the key (dropKey) takes the key
// itself, as proof of ownership, and returns nil. An unkeyed volume
// becomes keyed only with a key given (key, possibly nil, is returned).
//
// It fails with ErrNotKeyed for dropKey on an unkeyed volume, with
// ErrKeyRequired for a keyed volume without key, and with the error of
// Key.ForVolume for a key that is not the volume's.
func ReprotectKey(name string, m *store.Manifest, key *Key, dropKey bool) (*Key, error) {
	if !m.Keyed() {
		if dropKey {
			return nil, fmt.Errorf("%w: volume %q: no key to drop", ErrNotKeyed, name)
		}
		return key, nil
	}
	if key == nil {
		return nil, fmt.Errorf("%w: volume %q: a reprotect keeps a keyed volume keyed", ErrKeyRequired, name)
	}
	if _, err := key.ForVolume(name, m); err != nil {
		return nil, err
	}
	if dropKey {
		return nil, nil
	}
	return key, nil
}
