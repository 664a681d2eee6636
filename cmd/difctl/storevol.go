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
type notProtectedError struct{ image, url string }

func (e *notProtectedError) Error() string {
	return fmt.Sprintf("%s is not protected: no store at %s (run difctl protect %s first, or name the store with --store)", e.image, e.url, e.image)
}

// openStore opens the store at url. Unless create is set, a Pebble store
// must exist already (opening would create an empty one).
func openStore(image, url string, create bool) (store.KV, error) {
	if p := storePath(url); p != "" && !create {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			return nil, &notProtectedError{image: image, url: url}
		}
	}
	kv, err := store.Open(url)
	if err != nil {
		cause := strings.TrimPrefix(storeCause(err), fmt.Sprintf("open %s: ", url))
		cause = strings.TrimPrefix(cause, fmt.Sprintf("open %q: ", url))
		return nil, fmt.Errorf("cannot open store %s: %s", store.RedactURL(url), cause)
	}
	return kv, nil
}

// storeCause shortens a store error for a one-line message.
func storeCause(err error) string {
	s := oneLine(err.Error())
	for _, p := range []string{"store: ", "blockdev: "} {
		s = strings.TrimPrefix(s, p)
	}
	return s
}

// volume is a store-backed image opened for a command.
type volume struct {
	image, url string
	dev        *blockdev.File
	kv         store.KV
	vol        *blockdev.Volume
}

// openVolume opens the protected image and its store.
func openVolume(ctx context.Context, image, url string, readOnly bool) (*volume, error) {
	if _, err := os.Stat(image); err != nil {
		return nil, asOpenError(err)
	}
	kv, err := openStore(image, url, false)
	if err != nil {
		return nil, err
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
	v.vol, err = blockdev.Open(ctx, v.dev, kv, blockdev.Options{ReadOnly: readOnly})
	if err != nil {
		return nil, volumeError(image, url, err)
	}
	ok = true
	return v, nil
}

// checkProtected explains a store that holds no protected volume.
func checkProtected(kv store.KV, image, url string) error {
	vols, err := store.Volumes(kv)
	if err != nil {
		return fmt.Errorf("store %s: %s", url, storeCause(err))
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
	return &notProtectedError{image: image, url: url}
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
		return nil, fmt.Errorf("%s: %s", image, storeCause(err))
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
	var mm *blockdev.MismatchError
	switch {
	case errors.As(err, &mm) && mm.Field == "device size":
		return fmt.Errorf("%s does not match its store %s: the store protects %s bytes, the image has %s (truncated or grown since protect?)",
			image, url, mm.Stored, mm.Given)
	case errors.As(err, &mm):
		return fmt.Errorf("%s does not match its store %s: %s is %s in the store, %s here", image, url, mm.Field, unquote(mm.Stored), unquote(mm.Given))
	case errors.Is(err, blockdev.ErrIncomplete):
		return fmt.Errorf("%s: protection incomplete (%s): run difctl protect %s to resume", image, strings.TrimPrefix(storeCause(err), "volume protection incomplete: "), image)
	case errors.Is(err, store.ErrCorrupt):
		return fmt.Errorf("store %s is corrupt: %s", url, storeCause(err))
	}
	return fmt.Errorf("%s: %s", image, storeCause(err))
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
	m := store.NewManifest(f.String(), f.BlockSize(), f.TupleSize(), uint64(blocks)*uint64(f.BlockSize()), abs)
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
		return nil, fmt.Errorf("store %s: %s", url, storeCause(err))
	}
	return t, nil
}
