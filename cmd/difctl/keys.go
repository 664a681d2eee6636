package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/difctl/difctl/blockdev"
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
	// Witness is --witness: the file that keeps the keyed volume's seal
	// (blockdev.FileWitness), checked at open and written at each sync.
	Witness string
}

// addKeyFlags registers the key flags on cmd, into k.
func addKeyFlags(cmd *cobra.Command, k *keyFlags, use string) {
	f := cmd.Flags()
	f.StringVar(&k.File, "key-file", "", "`FILE` holding the key of a keyed volume (32 bytes, or 64 hex digits; mode 0600 or 0400): "+use)
	f.StringVar(&k.Env, "key-env", "", "name of the environment `VARIABLE` holding the key of a keyed volume (64 hex digits), instead of --key-file")
	f.StringVar(&k.Witness, "witness", "", "`FILE` keeping a keyed volume's seal (keep it where whoever can write the image and store cannot): a store older than it is a rollback (exit 4); written at each sync, with the key")
}

// witness returns the witness --witness names, or nil.
func (k keyFlags) witness() blockdev.Witness {
	if k.Witness == "" {
		return nil
	}
	return &blockdev.FileWitness{Path: k.Witness}
}

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
