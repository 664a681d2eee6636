package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// Store-backed images: a plain image (or block device) whose tuples live in
// a store, by default the Pebble database IMAGE.difdb beside it. The
// volume of a protected image is blockdev.DefaultVolumeName; the store of
// an image with its own PI (scrub --interleaved, --dix) keeps only scrub
// state, as a tuple-less volume named piStateVolume.
const (
	storeSuffix   = ".difdb"
	piStateVolume = "pi-image"
	scrubName     = "difctl"
	toolName      = "difctl"
)

// storeURL returns the store URL of image: given, or the default
// pebble:IMAGE.difdb.
func storeURL(image, given string) string {
	if given != "" {
		return given
	}
	return "pebble:" + image + storeSuffix
}

// storePath returns the directory of a Pebble store URL, or "" for other
// schemes.
func storePath(url string) string {
	scheme, rest, ok := strings.Cut(url, ":")
	switch {
	case !ok || strings.ContainsAny(scheme, `/\.`) || len(scheme) < 2:
		return url
	case scheme == "pebble":
		return rest
	}
	return ""
}

// errNotProtected reports an image without a store.
type notProtectedError struct {
	image, url string
	dir        bool // the image is a directory
}

// notProtected returns the error of an image without a store (or of a
// directory named as an image).
func notProtected(image, url string) error {
	fi, err := os.Stat(image)
	return &notProtectedError{image: image, url: url, dir: err == nil && fi.IsDir()}
}

func (e *notProtectedError) Error() string {
	if e.dir {
		return fmt.Sprintf("%s is a directory, not an image or a block device", e.image)
	}
	return fmt.Sprintf("%s is not protected: no store at %s (run difctl protect %s first, or name the store with --store)", e.image, e.url, e.image)
}

// storeMode is how a command opens its store.
type storeMode int

const (
	// storeRead opens an existing store read-only: verify, inspect and
	// convert's export read the store and never change it, and may run
	// together and as a user who may only read the store.
	storeRead storeMode = iota
	// storeWrite opens an existing store read-write (scrub, write, discard,
	// remap, inject, and a read whose volume needs crash recovery).
	storeWrite
	// storeCreate opens a store read-write, creating it if there is none:
	// only protect, convert's import and scrub of an image with its own PI.
	storeCreate
)

// openStore opens the store at url. Only storeCreate may create one: an
// existing store is never reinitialised, and a directory that is not a
// store is refused untouched.
func openStore(image, url string, mode storeMode) (store.KV, error) {
	return openStoreSized(image, url, mode, store.OpenOptions{})
}

// openStoreSized is openStore with the engine's memory sizes of sizes
// (CacheBytes, MemTableBytes; difctl serve).
func openStoreSized(image, url string, mode storeMode, sizes store.OpenOptions) (store.KV, error) {
	var kv store.KV
	var err error
	if storePath(url) != "" {
		sizes.Create, sizes.ReadOnly = mode == storeCreate, mode == storeRead
		if sizes.MemTableBytes == 0 && mode != storeRead {
			sizes.MemTableBytes = memTableFor(image)
		}
		kv, err = store.OpenWith(url, sizes)
	} else {
		kv, err = store.OpenWith(url, store.OpenOptions{Create: true, OnCommit: sizes.OnCommit}) // other backends: as registered
	}
	if err != nil {
		return nil, storeOpenError(image, url, err)
	}
	return kv, nil
}

// memTableFor sizes the Pebble memtable of a store opened to write the
// tuples of image: the engine preallocates each write-ahead log at 110% of
// the memtable, on disk, so its 64 MiB default made even the store of a
// 1 MiB image take 71 MiB. The tuples of an image of n bytes are at most
// 12n/512 bytes (512-byte blocks, 8-byte tuples and 4-byte sums), a 43rd
// of the image; the memtable gets an eighth of that (a write fills it with
// the pages it rewrites, and a flush of a few MiB is cheap), rounded up to
// a power of two, from 1 MiB (the least the store takes) to 64 MiB, so the
// log's preallocation stays within a fifth of the volume's full tuples.
// 0 (the backend's default) where the size is unknown (a block device:
// stat reports 0).
func memTableFor(image string) int64 {
	fi, err := os.Stat(image)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() <= 0 {
		return 0
	}
	want := fi.Size() / 512 * 12 / 8
	m := int64(1 << 20)
	for m < want && m < 64<<20 {
		m <<= 1
	}
	return m
}

// storeDamageError reports a damaged store: main prints it and, with
// --json, names the damaged file in the error record.
type storeDamageError struct {
	op     string // what was being done, "" when opening
	url    string
	err    error
	noOpen bool // the store itself does not open
}

func (e *storeDamageError) Error() string {
	hint := "restore the store from a backup, or start over with protect --reprotect on data known to be good"
	var fileErr *store.CorruptFileError
	if e.noOpen || errors.As(e.err, &fileErr) {
		// The engine's own files are damaged: nothing can be deleted
		// through it either.
		hint = "restore the store from a backup, or move it away and protect again on data known to be good"
	}
	// The store's own error says what is damaged, whatever wrapped it.
	var cause error = e.err
	var cf *store.CorruptFileError
	var ce *store.CorruptError
	switch {
	case errors.As(e.err, &cf):
		cause = cf
	case errors.As(e.err, &ce):
		cause = ce
	}
	op := ""
	if e.op != "" {
		op = e.op + ": "
	}
	return fmt.Sprintf("%sstore %s is damaged: %s (difctl never rebuilds tuples from the data: %s)", op, e.url, cause, hint)
}

// storeFailure is the error of a command that failed while working
// through its store: a damaged store is reported as such (exit 8, the file
// named), anything else as op: cause.
func storeFailure(op, url string, err error) error {
	if errors.Is(err, store.ErrCorrupt) {
		return &storeDamageError{op: op, url: url, err: err}
	}
	return fmt.Errorf("%s: %w", op, err)
}

func (e *storeDamageError) Unwrap() error { return e.err }

// file returns the damaged file of the store, if the store named one.
func (e *storeDamageError) file() string {
	var cf *store.CorruptFileError
	if errors.As(e.err, &cf) {
		return cf.Path
	}
	return ""
}

// storeErr is the error of a store operation on url: a damaged store is
// reported as such (exit 8, the file named), anything else as the cause.
func storeErr(url string, err error) error {
	if errors.Is(err, store.ErrCorrupt) {
		return &storeDamageError{url: url, err: err}
	}
	return fmt.Errorf("store %s: %w", url, err)
}

// storeOpenError explains a store that does not open.
func storeOpenError(image, url string, err error) error {
	url = store.RedactURL(url) // never print credentials
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notProtected(image, url)
	case errors.Is(err, store.ErrCorrupt):
		return &storeDamageError{url: url, err: err, noOpen: true}
	case errors.Is(err, store.ErrBusy):
		return &restatedError{msg: fmt.Sprintf("store %s is busy: %s; wait for it to finish", url, strings.TrimPrefix(shortMessage(err), "open "+url+": ")), err: err}
	case errors.Is(err, store.ErrNotStore):
		return fmt.Errorf("cannot open store %s: %w (difctl leaves it untouched)", url, err)
	}
	cause := strings.TrimPrefix(shortMessage(err), fmt.Sprintf("open %s: ", url))
	cause = strings.TrimPrefix(cause, fmt.Sprintf("open %q: ", url))
	re := &restatedError{msg: fmt.Sprintf("cannot open store %s: %s", url, cause), err: err}
	if errors.Is(err, store.ErrInvalid) {
		// The --store URL or the backend's settings are wrong (credentials
		// in the URL, no key prefix, a bad DIFCTL_ETCD_* value): the
		// user's argument, not the store, so a usage error.
		return &usageError{err: re}
	}
	return re
}

// storeCause is err's message as difctl prints it (see shortMessage), for
// lines printed as they happen rather than returned.
func storeCause(err error) string { return shortMessage(err) }

// A restatedError is an error whose message says its cause again in
// shorter words (the store's "open URL: " dropped where the message names
// the store already); the cause stays in the chain for errors.Is and As.
type restatedError struct {
	msg string
	err error
}

func (e *restatedError) Error() string { return e.msg }
func (e *restatedError) Unwrap() error { return e.err }

// volume is a store-backed image opened for a command.
type volume struct {
	image, url string
	dev        *blockdev.File
	kv         store.KV
	vol        *blockdev.Volume
}

// openVolume opens the protected image and its store, read-only when
// readOnly (the store too, unless the volume has open intents, whose crash
// recovery writes it). The image must be the one the store protects
// (checkImage, identity.go).
func openVolume(ctx context.Context, image, url string, readOnly bool, key keyFlags) (*volume, error) {
	mode := storeWrite
	if readOnly {
		mode = storeRead
	}
	return openVolumeMode(ctx, image, url, readOnly, mode, key)
}

// openVolumeMode is openVolume with the store opened in mode: scrub reads
// the image but writes its cursor and findings to the store.
func openVolumeMode(ctx context.Context, image, url string, readOnly bool, mode storeMode, key keyFlags) (*volume, error) {
	k, err := key.load()
	if err != nil {
		return nil, err
	}
	return openVolumeWith(ctx, image, url, mode, blockdev.Options{ReadOnly: readOnly, Key: k}, store.OpenOptions{})
}

// openVolumeWith is openVolumeMode with the volume's options (serve's);
// opts.ReadOnly opens the image read-only; sizes are the store engine's
// memory sizes (serve's), zero for the defaults.
func openVolumeWith(ctx context.Context, image, url string, mode storeMode, opts blockdev.Options, sizes store.OpenOptions) (*volume, error) {
	readOnly := opts.ReadOnly
	if _, err := os.Stat(image); err != nil {
		return nil, asOpenError(err)
	}
	kv, err := openStoreSized(image, url, mode, sizes)
	if err != nil {
		return nil, err
	}
	if mode == storeRead {
		recovery, err := needsRecovery(kv)
		if err == nil && recovery {
			kv.Close()
			kv, err = openStoreSized(image, url, storeWrite, sizes)
			if err != nil {
				return nil, fmt.Errorf("%s: the store holds writes an interrupted session left open, which recovery must resolve in the store: %w", image, err)
			}
		}
	}
	v := &volume{image: image, url: url, kv: kv}
	ok := false
	defer func() {
		if !ok {
			v.Close()
		}
	}()
	if err := checkProtected(kv, image, url); err != nil {
		return nil, err
	}
	v.dev, err = openDevice(image, readOnly)
	if err != nil {
		return nil, err
	}
	if err := checkOpenImage(ctx, image, url, kv, v.dev); err != nil {
		return nil, err
	}
	v.vol, err = blockdev.Open(ctx, v.dev, kv, opts)
	if err != nil {
		return nil, volumeError(image, url, err)
	}
	ok = true
	return v, nil
}

// needsRecovery tells whether the protected volume of kv has open intents.
func needsRecovery(kv store.KV) (bool, error) {
	t, err := store.OpenTuples(kv, blockdev.DefaultVolumeName, nil)
	if err != nil {
		return false, err
	}
	for _, err := range t.AllIntents() {
		return err == nil, err
	}
	return false, nil
}

// identityError is a store that protects another device.
type identityError struct{ err error }

func (e *identityError) Error() string { return e.err.Error() }
func (e *identityError) Unwrap() error { return e.err }

// checkProtected explains a store that holds no protected volume.
func checkProtected(kv store.KV, image, url string) error {
	vols, err := store.Volumes(kv)
	if err != nil {
		return storeErr(url, err)
	}
	has := map[string]bool{}
	for _, v := range vols {
		has[v] = true
	}
	switch {
	case has[blockdev.DefaultVolumeName]:
		return nil
	case has[piStateVolume]:
		t, err := store.OpenTuples(kv, piStateVolume, nil)
		if err == nil {
			f := t.Manifest().Format
			return usageErrorf("%s keeps the scrub state of %s as an image with its own PI (%s), not its tuples: add --interleaved %s or --dix",
				url, image, f, strings.TrimSuffix(f, ":dix"))
		}
	}
	return notProtected(image, url)
}

// openDevice opens an image or block device for a volume.
func openDevice(image string, readOnly bool) (*blockdev.File, error) {
	dev, err := blockdev.OpenFile(image, blockdev.FileOptions{ReadOnly: readOnly})
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, asOpenError(pe)
		}
		if fi, serr := os.Stat(image); serr == nil && fi.Mode().IsRegular() && fi.Size()%512 != 0 {
			return nil, fmt.Errorf("%s: size %d is not a multiple of 512 bytes (truncated?)", image, fi.Size())
		}
		return nil, fmt.Errorf("%s: %w", image, err)
	}
	return dev, nil
}

// asOpenError presents the failed stat of a file the user named as a
// failed open, as the other commands report it.
func asOpenError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Op == "stat" {
		return &os.PathError{Op: "open", Path: pe.Path, Err: pe.Err}
	}
	return err
}

// unquote removes the quotes of a quoted value, if any.
func unquote(s string) string {
	if u, err := strconv.Unquote(s); err == nil {
		return u
	}
	return s
}

// volumeError explains the errors of opening a volume.
func volumeError(image, url string, err error) error {
	if kerr := keyError(image, err); kerr != nil {
		return kerr
	}
	var mm *blockdev.MismatchError
	switch {
	case errors.As(err, &mm) && mm.Field == "device size":
		return fmt.Errorf("%s does not match its store %s: the store protects %s bytes, the image has %s (truncated or grown since protect?)",
			image, url, mm.Stored, mm.Given)
	case errors.As(err, &mm) && mm.Field == "device id":
		return fmt.Errorf("%s does not match its store %s: the store protects %s, not %s (another image's store?)", image, url, strconv.QuoteToGraphic(unquote(mm.Stored)), strconv.QuoteToGraphic(unquote(mm.Given)))
	case errors.As(err, &mm):
		return fmt.Errorf("%s does not match its store %s: %s is %s in the store, %s here", image, url, mm.Field, unquote(mm.Stored), unquote(mm.Given))
	case errors.Is(err, blockdev.ErrIncomplete):
		return &restatedError{msg: fmt.Sprintf("%s: protection incomplete (%s): run difctl protect %s to resume", image, strings.TrimPrefix(shortMessage(err), "volume protection incomplete: "), image), err: err}
	case errors.Is(err, store.ErrCorrupt):
		return &storeDamageError{url: url, err: err}
	case errors.Is(err, store.ErrBusy), errors.Is(err, store.ErrReadOnly):
		return storeErr(url, err)
	}
	return fmt.Errorf("%s: %w", image, err)
}

// Close closes the volume, the store and the device.
func (v *volume) Close() error {
	var errs []error
	if v.vol != nil {
		errs = append(errs, v.vol.Close())
	}
	if v.kv != nil {
		errs = append(errs, v.kv.Close())
	}
	if v.dev != nil {
		errs = append(errs, v.dev.Close())
	}
	return errors.Join(errs...)
}

// format returns the volume's format in the interleaved layout, for
// messages and records.
func (v *volume) format() dif.Format { return v.vol.Format() }

// piStateTuples returns the tuple-less volume that keeps the scrub state
// of an image with its own PI in kv, creating it on first use. Its
// manifest names the format and size, so that a later scrub with another
// format is refused.
func piStateTuples(kv store.KV, url, image string, f dif.Format, blocks int64) (*store.Tuples, error) {
	abs, err := filepath.Abs(image)
	if err != nil {
		abs = image
	}
	m := store.NewManifest(f.String(), f.BlockSize(), f.TupleSize(), blocks*int64(f.BlockSize()), abs)
	m.Tool = toolName
	t, err := store.OpenTuples(kv, piStateVolume, &m)
	if errors.Is(err, store.ErrNotFound) {
		t, err = store.CreateTuples(kv, piStateVolume, m)
	}
	var mm *store.ManifestMismatchError
	switch {
	case errors.As(err, &mm) && mm.Field == "format":
		return nil, usageErrorf("%s keeps the scrub state of %s in format %s, not %s (use --store, or delete %s)", url, image, unquote(mm.Stored), unquote(mm.Given), url)
	case errors.As(err, &mm):
		return nil, fmt.Errorf("%s keeps the scrub state of another image: %s is %s there, %s here (use --store, or delete %s)", url, mm.Field, unquote(mm.Stored), unquote(mm.Given), url)
	case err != nil:
		return nil, storeErr(url, err)
	}
	return t, nil
}
