package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/store"
)

// The errors of store-backed images, in the user's terms: a damaged store
// (exit 8, the file named), a store that protects another image, a volume
// that does not open.

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

// identityError is a store that protects another device.
type identityError struct{ err error }

func (e *identityError) Error() string { return e.err.Error() }
func (e *identityError) Unwrap() error { return e.err }

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
	var we *blockdev.WitnessError
	switch {
	case errors.As(err, &we):
		// The witness, not the store, failed (a damaged witness record
		// matches store.ErrCorrupt too): exit 8, in its own words.
		return fmt.Errorf("%s: %w", image, err)
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
