package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/store"
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
}

// addKeyFlags registers the key flags on cmd, into k.
func addKeyFlags(cmd *cobra.Command, k *keyFlags, use string) {
	f := cmd.Flags()
	f.StringVar(&k.File, "key-file", "", "`FILE` holding the key of a keyed volume (32 bytes, or 64 hex digits; mode 0600 or 0400): "+use)
	f.StringVar(&k.Env, "key-env", "", "name of the environment `VARIABLE` holding the key of a keyed volume (64 hex digits), instead of --key-file")
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

func hexTag(t [16]byte) string { return hex.EncodeToString(t[:]) }

// needKey refuses to change a keyed volume opened without its key (write,
// discard): it could not produce valid tags.
func needKey(v *volume) error {
	if v.vol.Keyed() && !v.vol.KeyedChecked() {
		return keyError(v.image, blockdev.ErrKeyRequired)
	}
	return nil
}

// keyedValues are the expected (computed) and stored tags of a keyed-tag
// failure, in hex; empty where there is none.
func keyedValues(kt *blockdev.KeyedTagError) (expected, actual string) {
	if kt.Reason == "mismatch" {
		expected = hexTag(kt.Expected)
	}
	if kt.Gen != 0 {
		actual = hexTag(kt.Actual)
	}
	return expected, actual
}

// keyedText is the text of a keyed-tag finding after "LBA N: keyed tag".
func keyedText(p blockdev.Problem) string {
	var kt *blockdev.KeyedTagError
	if !errors.As(p.Err, &kt) {
		return " mismatch"
	}
	switch kt.Reason {
	case "mismatch":
		return fmt.Sprintf(" mismatch: expected 0x%s, stored 0x%s (generation %d): the data is not what was written here", hexTag(kt.Expected), hexTag(kt.Actual), kt.Gen)
	case "page-mac":
		return " page fails its MAC: the tag page holding this block's tags, or the tuple page it seals, was edited, forged or copied from elsewhere (an older block put back in it cannot be ruled out)"
	case "missing":
		return " missing: the block is written but has no keyed tag"
	case "page-missing":
		return " page missing: the tag page holding this block's tags was deleted from the store (every tag page of a keyed volume exists from protect on)"
	case "unwritten":
		return " on an unwritten block: the store says unwritten, the keyed tags say written"
	}
	return ": " + kt.Reason
}

// keyMatches is the keyed_check of inspect's manifest record when the key
// given is the volume's.
const keyMatches = "key-matches"

// keyedBlock is a block's keyed tag as inspect --lba shows it.
type keyedBlock struct {
	Generation uint64 `json:"generation"`                // write generation of its nonce, 0 when it has no tag
	Stored     string `json:"stored,omitempty"`          // the stored tag, hex
	Computed   string `json:"computed,omitempty"`        // computed from the data with the key
	Check      string `json:"check"`                     // ok, mismatch, missing, unwritten, page-mac, page-missing, or skipped (no key)
	PageMAC    bool   `json:"page_mac_failed,omitempty"` // the tag page holding it fails its MAC (with the key)
	PageGone   bool   `json:"page_missing,omitempty"`    // the tag page holding it is missing from the store
}

// inspectKey returns the keys of inspect's keyed volume, nil without
// --key-file/--key-env; a wrong key is refused.
func inspectKey(opts inspectOptions, t *store.Tuples) (*blockdev.VolumeKey, error) {
	key, err := opts.Key.load()
	if err != nil || key == nil {
		return nil, err
	}
	m := t.Manifest()
	vk, err := key.ForVolume(t.Volume(), &m)
	if err != nil {
		return nil, keyError(opts.Image, err)
	}
	if err := t.SetPageMACKey(vk.PageKey()); err != nil {
		return nil, err
	}
	return vk, nil
}

// inspectKeyed fills rec's keyed tag of block lba (data as read, written
// per the tuple page) and fails rec when the keyed check fails.
func inspectKeyed(rec *tupleRecord, t *store.Tuples, vk *blockdev.VolumeKey, lba int64, data []byte, written bool) error {
	var tags [1]store.KeyedTag
	kb := &keyedBlock{Check: "skipped"}
	rec.Keyed = kb
	err := t.ReadTags(lba, tags[:])
	var me *store.PageMACError
	switch {
	case errors.As(err, &me) && me.IsMissing(lba/int64(t.Manifest().PageTuples)):
		kb.PageGone = true
	case errors.Is(err, store.ErrPageMAC):
		kb.PageMAC = true
	case err != nil:
		return err
	}
	tg := tags[0]
	kb.Generation = tg.Gen
	if tg.Gen != 0 {
		kb.Stored = hexTag(tg.Tag)
	}
	if vk != nil {
		switch {
		case written && tg.Gen == 0:
			kb.Check = "missing"
		case !written && tg.Gen != 0:
			kb.Check = "unwritten"
		case !written:
			kb.Check = "ok"
		default:
			c, err := vk.Tag(lba, tg.Gen, data)
			if err != nil {
				return err
			}
			kb.Computed = hexTag(c)
			kb.Check = "ok"
			if kb.Computed != kb.Stored {
				kb.Check = "mismatch"
			}
		}
	}
	if kb.PageMAC && kb.Check == "ok" {
		// The tag matches, but the page holding it is not the one the
		// key sealed: an older block may have been put back.
		kb.Check = "page-mac"
	}
	if kb.PageGone {
		// Detected with or without the key: the page was deleted.
		kb.Check = "page-missing"
	}
	if kb.Check != "ok" && kb.Check != "skipped" {
		rec.State = "failed"
		rec.Failed = append(rec.Failed, string(blockdev.KindKeyedTag))
	}
	return nil
}

// keyedManifestText is inspect's "keyed:" line.
func keyedManifestText(rec *manifestRecord) string {
	s := "yes, Poly1305-AES tags per block, key check value " + rec.KeyCheck
	if rec.KeyedCheck == keyMatches {
		return s + "; the key given matches"
	}
	return s + "; no key given (--key-file or --key-env): keyed check skipped"
}

// keyedColumn is the keyed column of inspect --lba's text table.
func keyedColumn(kb *keyedBlock) string {
	if kb.Check == "ok" || kb.Check == "skipped" {
		return "keyed=" + kb.Check
	}
	return "keyed=" + kb.Check + " !"
}
