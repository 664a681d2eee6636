package blockdev

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/difctl/difctl/blockdev/internal/keyed"
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
// came from ("bytes" for ParseKey; a program that reads keys from files or
// the environment, as difctl does, names those). It matches ErrKey.
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
// is a *KeyError whose Source is "bytes".
func ParseKey(b []byte) (*Key, error) {
	const src = "bytes"
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

// checkKey derives the keys of the keyed manifest m from k and refuses a
// key whose check value is not m's.
func checkKey(name string, m *store.Manifest, k *Key) (*keyed.Keys, error) {
	uid, err := hex.DecodeString(m.VolumeUID)
	if err != nil || len(uid) != 16 {
		return nil, fmt.Errorf("blockdev: volume %q: manifest volume uid %q", name, m.VolumeUID)
	}
	keys, err := keyed.Derive(k.b[:], uid)
	if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare([]byte(keys.Check()), []byte(m.KeyCheck)) != 1 {
		return nil, fmt.Errorf("%w: volume %q: the key does not match the manifest's key check value %s", ErrWrongKey, name, m.KeyCheck)
	}
	return keys, nil
}

// keyManifest makes m the manifest of a new keyed volume under k: a fresh
// volume uid and the key check value. It returns the volume's page key,
// with which store.CreateKeyedTuples seals the empty run that records
// every tag page.
func (k *Key) keyManifest(m *store.Manifest) ([]byte, error) {
	uid, err := newVolumeUID()
	if err != nil {
		return nil, err
	}
	b, _ := hex.DecodeString(uid)
	keys, err := keyed.Derive(k.b[:], b)
	if err != nil {
		return nil, err
	}
	m.KeyCheck, m.VolumeUID = keys.Check(), uid
	return keys.PageKey(), nil
}

// newVolumeUID returns a fresh random volume identity, in hex.
func newVolumeUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("blockdev: volume uid: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// VolumeKey is a Key checked against one keyed volume: the keys it gives
// that volume. Tools that read the store directly (difctl inspect) use it
// to check tags and page MACs without opening a Volume.
type VolumeKey struct {
	k *keyed.Keys
}

// ForVolume checks k against the keyed manifest m of volume name and
// returns the volume's keys. It fails with ErrNotKeyed for an unkeyed
// manifest and ErrWrongKey for another volume's key.
func (k *Key) ForVolume(name string, m *store.Manifest) (*VolumeKey, error) {
	if !m.Keyed() {
		return nil, fmt.Errorf("%w: volume %q was created without a key", ErrNotKeyed, name)
	}
	keys, err := checkKey(name, m, k)
	if err != nil {
		return nil, err
	}
	return &VolumeKey{k: keys}, nil
}

// PageKey returns the key of the volume's page MACs, for
// store.Tuples.SetPageMACKey.
func (vk *VolumeKey) PageKey() []byte { return append([]byte(nil), vk.k.PageKey()...) }

// Tag returns the keyed tag of data (one block) as block lba written under
// generation gen.
func (vk *VolumeKey) Tag(lba int64, gen uint64, data []byte) ([16]byte, error) {
	var t [1]store.KeyedTag
	if err := vk.k.Tags(t[:], lba, gen, data, len(data)); err != nil {
		return [16]byte{}, err
	}
	return t[0].Tag, nil
}
