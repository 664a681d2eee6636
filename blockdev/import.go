package blockdev

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/store"
)

// The errors of OpenImportTarget.
var (
	// ErrImportTargetExists reports a new import whose output image
	// exists as a regular file: an import creates its image.
	ErrImportTargetExists = errors.New("blockdev: import: the output image exists")
	// ErrImportTargetGone reports an import in progress whose output image
	// is gone, so that it cannot be resumed.
	ErrImportTargetGone = errors.New("blockdev: import: the output image of the import in progress is gone")
	// ErrVolumeExists reports an import into a store that holds the volume
	// already, complete or being protected or remapped: not an import to
	// resume.
	ErrVolumeExists = errors.New("blockdev: import: the store holds the volume already")
)

// An ImportTargetError is a failure of OpenImportTarget to read the store
// (Op "store"), open the existing output ("open") or create the image
// ("create") at Path. Err is the cause.
type ImportTargetError struct {
	Op   string
	Path string
	Err  error
}

func (e *ImportTargetError) Error() string {
	return fmt.Sprintf("blockdev: import: %s %s: %v", e.Op, e.Path, e.Err)
}

func (e *ImportTargetError) Unwrap() error { return e.Err }

// ImportTargetOptions configure OpenImportTarget. The zero value of each
// field is its default.
type ImportTargetOptions struct {
	// Name is the volume's name in the store. Default DefaultVolumeName.
	Name string
	// OpenDevice opens an output that exists (the image of an import being
	// resumed, or a block device). Default: OpenFile read-write.
	OpenDevice func(path string) (*device.File, error)
}

// An ImportTarget is where an import writes: the output device and the
// store, and whether the import starts or resumes. It owns the policy of
// `difctl convert --to store`: an import creates its output and resumes
// after an interruption, and a new import that fails before it kept
// anything removes the image it created (see Import).
type ImportTarget struct {
	// Dev is the output device, open until Close.
	Dev *device.File
	// Resume: the store holds this import in progress, which Import
	// continues; otherwise the import is new.
	Resume bool

	path      string
	created   bool // Dev is an image that OpenImportTarget created
	discarded bool
}

// OpenImportTarget decides where an import of size bytes of data into the
// image at path, with its tuples in kv, writes:
//   - kv holds this import in progress (store.OpImport): it resumes, into
//     the image at path, which must exist (ErrImportTargetGone);
//   - kv holds the volume otherwise: ErrVolumeExists;
//   - otherwise the import is new. A regular file at path is refused
//     (ErrImportTargetExists); another kind of file (a block device) is
//     written in place; when there is none, a sparse image of size bytes
//     is created.
//
// Its other failures are *ImportTargetError.
func OpenImportTarget(kv store.KV, path string, size int64, opts ImportTargetOptions) (*ImportTarget, error) {
	if opts.Name == "" {
		opts.Name = DefaultVolumeName
	}
	if opts.OpenDevice == nil {
		opts.OpenDevice = func(p string) (*device.File, error) { return device.OpenFile(p, device.FileOptions{}) }
	}
	t := &ImportTarget{path: path}
	switch _, j, err := store.OpenJournaled(kv, opts.Name, nil); {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, &ImportTargetError{Op: "store", Path: path, Err: err}
	case j != nil && j.Op == store.OpImport:
		t.Resume = true
	default:
		return nil, ErrVolumeExists
	}
	fi, err := os.Stat(path)
	switch {
	case t.Resume && err != nil:
		return nil, fmt.Errorf("%w: %w", ErrImportTargetGone, err)
	case t.Resume || err == nil && !fi.Mode().IsRegular() && !fi.IsDir():
		if t.Dev, err = opts.OpenDevice(path); err != nil {
			return nil, &ImportTargetError{Op: "open", Path: path, Err: err}
		}
	case err == nil:
		return nil, ErrImportTargetExists
	case errors.Is(err, fs.ErrNotExist):
		if t.Dev, err = device.CreateImage(path, size, device.FileOptions{}); err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return nil, &ImportTargetError{Op: "create", Path: path, Err: err}
		}
		t.created = true
	default:
		return nil, &ImportTargetError{Op: "stat", Path: path, Err: err}
	}
	return t, nil
}

// Import runs ImportImage from src into the target. When a new import
// fails before its first checkpoint (interrupted, refused for blocks that
// fail verification, or any other error), nothing is worth resuming: the
// device is closed, the image OpenImportTarget created is removed, and
// Discarded reports it, so that the caller can remove a store it created
// for the import too. Otherwise what was written stays for a resume.
func (t *ImportTarget) Import(ctx context.Context, src ImportSource, kv store.KV, opts ImportOptions) (*Volume, *ConvertReport, error) {
	vol, rep, err := ImportImage(ctx, src, t.Dev, kv, opts)
	if err != nil && !t.Resume && (rep == nil || rep.Next == 0) {
		t.discard()
	}
	return vol, rep, err
}

// Discarded reports whether Import removed what the target created.
func (t *ImportTarget) Discarded() bool { return t.discarded }

func (t *ImportTarget) discard() {
	t.Dev.Close()
	if t.created {
		os.Remove(t.path)
	}
	t.discarded = true
}

// Close closes the device, unless Import discarded it.
func (t *ImportTarget) Close() error {
	if t.discarded {
		return nil
	}
	return t.Dev.Close()
}
