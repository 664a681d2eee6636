package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/store"
	"github.com/difctl/difctl/store/etcd"
	"github.com/spf13/cobra"
)

// keyFlags are --key-file and --key-env, the key of a keyed volume
// (docs/keyed.md). Every command on a store-backed image takes
// them: protect creates a keyed volume with the key; verify, scrub and
// inspect check the keyed tags with it and, without it, check the tuples
// and say the keyed check was skipped; write, discard and remap refuse a
// keyed volume without it (exit 16).
type keyFlags struct {
	File string // --key-file: a file of 32 raw bytes or 64 hex digits, mode 0600 or 0400
	Env  string // --key-env: the name of an environment variable holding 64 hex digits
	// Witness is --witness: where the keyed volume's seal is kept,
	// checked at open and written at each sync: a FILE
	// (blockdev.FileWitness) or an etcd URL (etcd.Witness).
	Witness string
}

// addKeyFlags registers the key flags on cmd, into k.
func addKeyFlags(cmd *cobra.Command, k *keyFlags, use string) {
	f := cmd.Flags()
	f.StringVar(&k.File, "key-file", "", "`FILE` holding the key of a keyed volume (32 bytes, or 64 hex digits; mode 0600 or 0400): "+use)
	f.StringVar(&k.Env, "key-env", "", "name of the environment `VARIABLE` holding the key of a keyed volume (64 hex digits), instead of --key-file")
	f.StringVar(&k.Witness, "witness", "", "`FILE` or etcd://HOST:PORT,.../PREFIX keeping a keyed volume's seal (keep it where whoever can write the image and store cannot; etcd credentials from DIFCTL_WITNESS_ETCD_*): a store older than it is a rollback (exit 4); written at each sync, with the key")
}

// openWitness returns the witness --witness names (nil when none) and the
// function that releases it, to call once the volume is closed: a FILE, or
// an etcd:// URL, connected now with the credentials and TLS files of the
// DIFCTL_WITNESS_ETCD_* variables (never the store's). A witness that
// cannot be reached or refuses the credentials is an error (exit 8), a bad
// URL or setting a usage error (exit 16): a volume never goes on without
// the witness it was given.
func (k keyFlags) openWitness() (blockdev.Witness, func(), error) {
	switch {
	case k.Witness == "":
		return nil, func() {}, nil
	case !strings.HasPrefix(k.Witness, etcdWitnessScheme):
		return &blockdev.FileWitness{Path: k.Witness}, func() {}, nil
	}
	url := store.RedactURL(k.Witness)
	o, err := etcd.WitnessOptionsFromEnv()
	var w *etcd.Witness
	if err == nil {
		w, err = etcd.OpenWitness(k.Witness, o)
	}
	if err != nil {
		re := &restatedError{msg: fmt.Sprintf("cannot open witness %s: %s", url, shortMessage(err)), err: err}
		if errors.Is(err, store.ErrInvalid) {
			return nil, nil, &usageError{err: re}
		}
		return nil, nil, re
	}
	return w, func() { w.Close() }, nil
}

// etcdWitnessScheme begins a --witness that names an etcd witness.
const etcdWitnessScheme = "etcd://"

// load returns the key the flags name, or nil when they name none.
func (k keyFlags) load() (*blockdev.Key, error) {
	switch {
	case k.File != "" && k.Env != "":
		return nil, usageErrorf("--key-file and --key-env are exclusive: give the key once")
	case k.File != "":
		return readKeyFile(k.File)
	case k.Env != "":
		return keyFromEnv(k.Env)
	}
	return nil, nil
}

// maxKeyFile bounds what readKeyFile reads.
const maxKeyFile = 4096

// readKeyFile reads a key (see blockdev.ParseKey) from the file at path.
// The file must be a regular file that neither its group nor others may
// read or write (mode 0600 or 0400, as ssh requires of private keys): any
// other mode is refused with a *blockdev.KeyError saying so, before the
// key is read.
func readKeyFile(path string) (*blockdev.Key, error) {
	src := "file " + path
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, &blockdev.KeyError{Source: src, Reason: "cannot open", Err: err}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, &blockdev.KeyError{Source: src, Reason: "cannot stat", Err: err}
	}
	if !fi.Mode().IsRegular() {
		return nil, &blockdev.KeyError{Source: src, Reason: fmt.Sprintf("not a regular file (%s)", fi.Mode().Type())}
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, &blockdev.KeyError{Source: src, Reason: fmt.Sprintf("mode %04o lets group or others at it; make it 0600 (chmod 600 %s)", perm, path)}
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, &blockdev.KeyError{Source: src, Reason: "cannot read", Err: err}
	}
	if len(b) > maxKeyFile {
		return nil, &blockdev.KeyError{Source: src, Reason: fmt.Sprintf("larger than %d bytes", maxKeyFile)}
	}
	return parseKey(src, b)
}

// keyFromEnv reads a key (2*blockdev.KeySize hex digits) from the
// environment variable name. An unset or empty variable is a
// *blockdev.KeyError.
func keyFromEnv(name string) (*blockdev.Key, error) {
	src := "environment variable " + name
	s, ok := os.LookupEnv(name)
	if !ok || s == "" {
		return nil, &blockdev.KeyError{Source: src, Reason: "not set"}
	}
	return parseKey(src, []byte(s))
}

// parseKey is blockdev.ParseKey of b, whose *blockdev.KeyError names src
// as where the key came from.
func parseKey(src string, b []byte) (*blockdev.Key, error) {
	k, err := blockdev.ParseKey(b)
	var ke *blockdev.KeyError
	if errors.As(err, &ke) {
		ke.Source = src
	}
	return k, err
}

// Values of the keyed_check field of summary and manifest records.
const (
	keyedChecked = "checked" // the keyed tags were verified with the key
	keyedSkipped = "skipped" // a keyed volume checked without its key: tuples only
)

// keyedState returns the keyed_check value of a check of v: "" for an
// unkeyed volume.
func keyedState(v *blockdev.Volume) string {
	switch {
	case !v.Keyed():
		return ""
	case v.KeyedChecked():
		return keyedChecked
	}
	return keyedSkipped
}

// keyedSkippedNote is the text line a check of a keyed volume without its
// key ends with.
const keyedSkippedNote = "keyed check skipped: no key given (--key-file or --key-env); tuples and sector checksums were verified, keyed tags were not\n"

// keyError explains the errors of keys: a bad key file or variable, a key
// that is not the volume's, a keyed volume changed without its key, keeping
// the chain for exit.go.
func keyError(image string, err error) error {
	switch {
	case errors.Is(err, blockdev.ErrKeyRequired):
		return &usageError{err: fmt.Errorf("%s is a keyed volume: give its key with --key-file or --key-env (%w)", image, err)}
	case errors.Is(err, blockdev.ErrWrongKey):
		return fmt.Errorf("%s: the key given is not this volume's (its key check value does not match): %w", image, err)
	case errors.Is(err, blockdev.ErrNotKeyed):
		return &usageError{err: fmt.Errorf("%s: a key was given but the volume is not keyed: %w", image, err)}
	case errors.Is(err, blockdev.ErrKey):
		return err
	}
	return nil
}
