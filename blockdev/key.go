package blockdev

import (
	"bytes"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/difctl/difctl/kernels/poly1305"
	"github.com/difctl/difctl/store"
)

// KeySize is the size of a keyed volume's key.
const KeySize = 32

var (
	// ErrKey is matched by every *KeyError: a key that could not be read
	// or is not a valid key.
	ErrKey = errors.New("blockdev: bad key")
	// ErrWrongKey reports a key that is not the keyed volume's: its key
	// check value does not match the manifest's.
	ErrWrongKey = errors.New("blockdev: wrong key for the volume")
	// ErrKeyRequired reports an operation on a keyed volume that cannot be
	// done without its key: a write, a discard, a remap, or crash recovery
	// (which must commit keyed tags). Reads and checks without the key
	// verify the tuples and sector checksums and skip the keyed check.
	ErrKeyRequired = errors.New("blockdev: keyed volume: operation needs the key")
	// ErrNotKeyed reports a key given for a volume that is not keyed.
	ErrNotKeyed = errors.New("blockdev: volume is not keyed")
)

// KeyError reports a key that could not be used: Source names where it
// came from ("file /etc/difctl/key", "environment variable DIFCTL_KEY").
// It matches ErrKey.
type KeyError struct {
	Source string
	Reason string
	Err    error // the underlying error, if any
}

func (e *KeyError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("blockdev: key from %s: %s: %v", e.Source, e.Reason, e.Err)
	}
	return fmt.Sprintf("blockdev: key from %s: %s", e.Source, e.Reason)
}

// Unwrap returns ErrKey and the underlying error.
func (e *KeyError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrKey, e.Err}
	}
	return []error{ErrKey}
}

// Key is the secret of a keyed volume: KeySize uniformly random bytes.
// Every volume derives its own keys from it with HKDF-SHA256 (RFC 5869),
// salted with the volume's random identity, so volumes may share one Key
// without sharing a Poly1305-AES key or a nonce space. The Key is never
// stored; the manifest keeps only a key check value.
type Key struct{ b [KeySize]byte }

// ParseKey returns the key in b: KeySize raw bytes, or 2*KeySize hex
// digits (either case), optionally followed by one newline. Anything else
// is a *KeyError.
func ParseKey(b []byte) (*Key, error) { return parseKey("bytes", b) }

func parseKey(src string, b []byte) (*Key, error) {
	var k Key
	if len(b) == KeySize {
		copy(k.b[:], b)
		return &k, nil
	}
	t := bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
	if len(t) == 2*KeySize {
		if _, err := hex.Decode(k.b[:], t); err == nil {
			return &k, nil
		}
	}
	return nil, &KeyError{Source: src, Reason: fmt.Sprintf("%d bytes: want %d raw bytes or %d hex digits", len(b), KeySize, 2*KeySize)}
}

// maxKeyFile bounds what ReadKeyFile reads.
const maxKeyFile = 4096

// ReadKeyFile reads a key (see ParseKey) from the file at path. The file
// must be a regular file that neither its group nor others may read or
// write (mode 0600 or 0400, as ssh requires of private keys): any other
// mode is refused with a *KeyError saying so, before the key is read.
func ReadKeyFile(path string) (*Key, error) {
	src := "file " + path
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, &KeyError{Source: src, Reason: "cannot open", Err: err}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, &KeyError{Source: src, Reason: "cannot stat", Err: err}
	}
	if !fi.Mode().IsRegular() {
		return nil, &KeyError{Source: src, Reason: fmt.Sprintf("not a regular file (%s)", fi.Mode().Type())}
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, &KeyError{Source: src, Reason: fmt.Sprintf("mode %04o lets group or others at it; make it 0600 (chmod 600 %s)", perm, path)}
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, &KeyError{Source: src, Reason: "cannot read", Err: err}
	}
	if len(b) > maxKeyFile {
		return nil, &KeyError{Source: src, Reason: fmt.Sprintf("larger than %d bytes", maxKeyFile)}
	}
	return parseKey(src, b)
}

// KeyFromEnv reads a key (2*KeySize hex digits) from the environment
// variable name. An unset or empty variable is a *KeyError.
func KeyFromEnv(name string) (*Key, error) {
	src := "environment variable " + name
	s, ok := os.LookupEnv(name)
	if !ok || s == "" {
		return nil, &KeyError{Source: src, Reason: "not set"}
	}
	return parseKey(src, []byte(s))
}

// volumeKeys are the keys a Key gives one volume.
type volumeKeys struct {
	tag   *poly1305.Key // Poly1305-AES: AES-256 key and r
	page  []byte        // the store's page MAC key
	check string        // the key check value, 32 hex digits
}

// HKDF info strings: one per derived key, so that no two are related.
const (
	infoTag   = "difctl.blockdev.keyed.v1 tag"
	infoPage  = "difctl.blockdev.keyed.v1 page"
	infoCheck = "difctl.blockdev.keyed.v1 check"
)

// derive returns the keys of the volume whose identity is uid.
func (k *Key) derive(uid []byte) (volumeKeys, error) {
	var vk volumeKeys
	tk, err := hkdf.Key(sha256.New, k.b[:], uid, infoTag, 32+poly1305.RSize)
	if err != nil {
		return vk, fmt.Errorf("blockdev: deriving keys: %w", err)
	}
	if vk.tag, err = poly1305.NewKey(tk[:32], tk[32:]); err != nil {
		return vk, fmt.Errorf("blockdev: deriving keys: %w", err)
	}
	if vk.page, err = hkdf.Key(sha256.New, k.b[:], uid, infoPage, store.PageMACKeySize); err != nil {
		return vk, fmt.Errorf("blockdev: deriving keys: %w", err)
	}
	c, err := hkdf.Key(sha256.New, k.b[:], uid, infoCheck, 16)
	if err != nil {
		return vk, fmt.Errorf("blockdev: deriving keys: %w", err)
	}
	vk.check = hex.EncodeToString(c)
	return vk, nil
}

// checkKey derives the keys of the keyed manifest m from k and refuses a
// key whose check value is not m's.
func checkKey(name string, m *store.Manifest, k *Key) (volumeKeys, []byte, error) {
	uid, err := hex.DecodeString(m.VolumeUID)
	if err != nil || len(uid) != 16 {
		return volumeKeys{}, nil, fmt.Errorf("blockdev: volume %q: manifest volume uid %q", name, m.VolumeUID)
	}
	vk, err := k.derive(uid)
	if err != nil {
		return volumeKeys{}, nil, err
	}
	if subtle.ConstantTimeCompare([]byte(vk.check), []byte(m.KeyCheck)) != 1 {
		return volumeKeys{}, nil, fmt.Errorf("%w: volume %q: the key does not match the manifest's key check value %s", ErrWrongKey, name, m.KeyCheck)
	}
	return vk, uid, nil
}

// VolumeKey is a Key checked against one keyed volume: the keys it gives
// that volume. Tools that read the store directly (difctl inspect) use it
// to check tags and page MACs without opening a Volume.
type VolumeKey struct {
	k *keyed
}

// ForVolume checks k against the keyed manifest m of volume name and
// returns the volume's keys. It fails with ErrNotKeyed for an unkeyed
// manifest and ErrWrongKey for another volume's key.
func (k *Key) ForVolume(name string, m *store.Manifest) (*VolumeKey, error) {
	if !m.Keyed() {
		return nil, fmt.Errorf("%w: volume %q was created without a key", ErrNotKeyed, name)
	}
	vk, uid, err := checkKey(name, m, k)
	if err != nil {
		return nil, err
	}
	kd := &keyed{tk: vk.tag, page: vk.page}
	copy(kd.uid[:], uid)
	return &VolumeKey{k: kd}, nil
}

// PageKey returns the key of the volume's page MACs, for
// store.Tuples.SetPageMACKey.
func (vk *VolumeKey) PageKey() []byte { return append([]byte(nil), vk.k.page...) }

// Tag returns the keyed tag of data (one block) as block lba written under
// generation gen.
func (vk *VolumeKey) Tag(lba int64, gen uint64, data []byte) ([16]byte, error) {
	var t [1]store.KeyedTag
	if err := vk.k.tags(t[:], lba, gen, data, len(data)); err != nil {
		return [16]byte{}, err
	}
	return t[0].Tag, nil
}
