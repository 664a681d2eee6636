package keyed

import (
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/bits"

	"github.com/difctl/difctl/kernels/poly1305"
	"github.com/difctl/difctl/store"
)

// Keys are the keys a volume's secret gives the volume (Derive): the
// Poly1305-AES key of its tags, the key of its page MACs and its key check
// value, with the volume identity its tags' associated data starts with.
type Keys struct {
	tag   *poly1305.Key // Poly1305-AES: AES-256 key and r
	uid   [16]byte
	page  []byte // the store's page MAC key
	check string // the key check value, 32 hex digits
}

// HKDF info strings: one per derived key, so that no two are related.
const (
	infoTag   = "difctl.blockdev.keyed.v1 tag"
	infoPage  = "difctl.blockdev.keyed.v1 page"
	infoCheck = "difctl.blockdev.keyed.v1 check"
)

// Derive returns the keys of the volume whose identity is uid (16 bytes)
// under secret, with HKDF-SHA256 (RFC 5869) salted with uid.
func Derive(secret, uid []byte) (*Keys, error) {
	k := &Keys{}
	copy(k.uid[:], uid)
	tk, err := hkdf.Key(sha256.New, secret, uid, infoTag, 32+poly1305.RSize)
	if err != nil {
		return nil, fmt.Errorf("blockdev: deriving keys: %w", err)
	}
	if k.tag, err = poly1305.NewKey(tk[:32], tk[32:]); err != nil {
		return nil, fmt.Errorf("blockdev: deriving keys: %w", err)
	}
	if k.page, err = hkdf.Key(sha256.New, secret, uid, infoPage, store.PageMACKeySize); err != nil {
		return nil, fmt.Errorf("blockdev: deriving keys: %w", err)
	}
	c, err := hkdf.Key(sha256.New, secret, uid, infoCheck, 16)
	if err != nil {
		return nil, fmt.Errorf("blockdev: deriving keys: %w", err)
	}
	k.check = hex.EncodeToString(c)
	return k, nil
}

// PageKey returns the key of the volume's page MACs (not a copy), for
// store.Tuples.SetPageMACKey.
func (k *Keys) PageKey() []byte { return k.page }

// Check returns the key check value a keyed manifest keeps.
func (k *Keys) Check() string { return k.check }

// adLen is the associated data before each block: uid | LBA | generation.
const adLen = 32

// Tags computes the keyed tags of the len(dst) blocks of bs bytes of data
// at lba under generation gen into dst.
func (k *Keys) Tags(dst []store.KeyedTag, lba int64, gen uint64, data []byte, bs int) error {
	n := len(dst)
	if n == 0 {
		return nil
	}
	ad := make([]byte, n*adLen)
	tags := make([]poly1305.Tag, n)
	k.fill(ad, lba, gen, n)
	var nonce poly1305.Nonce
	binary.BigEndian.PutUint64(nonce[:8], gen)
	binary.BigEndian.PutUint64(nonce[8:], uint64(lba))
	if err := k.tag.BlocksAD(tags, &nonce, ad, adLen, data, bs, bs); err != nil {
		return fmt.Errorf("blockdev: keyed tags: %w", err)
	}
	for i := range dst {
		dst[i] = store.KeyedTag{Gen: gen, Tag: tags[i]}
	}
	return nil
}

// fillAddr is fill of a buffer whose uid parts fill set before: the LBA
// and generation of each block only. (One slice per block and the
// generation's bytes swapped once, so that the compiler drops the bounds
// checks of the stores: with them it took twice as long.)
func fillAddr(ad []byte, lba int64, gen uint64, n int) {
	ad = ad[:n*adLen]
	g := bits.ReverseBytes64(gen) // big-endian, stored little-endian
	for i := 0; i+adLen <= len(ad); i += adLen {
		a := ad[i+16 : i+32 : i+32]
		binary.BigEndian.PutUint64(a[:8], uint64(lba))
		binary.LittleEndian.PutUint64(a[8:], g)
		lba++
	}
}

func (k *Keys) fill(ad []byte, lba int64, gen uint64, n int) {
	for i := range n {
		a := ad[i*adLen:]
		copy(a, k.uid[:])
		binary.BigEndian.PutUint64(a[16:], uint64(lba)+uint64(i))
		binary.BigEndian.PutUint64(a[24:], gen)
	}
}

// tagsInto is Tags with the caller's buffers (ad: n*adLen bytes, pt: n
// tags), and the masks from ms if it is not nil.
func (k *Keys) tagsInto(dst []store.KeyedTag, lba int64, gen uint64, data []byte, bs int, ad []byte, pt []poly1305.Tag, ms *poly1305.MaskStream) error {
	return k.tagsWith(dst, lba, gen, ad, pt, func(nonce *poly1305.Nonce, ad []byte, pt []poly1305.Tag) error {
		if ms != nil {
			return ms.BlocksAD(pt, nonce, ad, adLen, data, bs, bs)
		}
		return k.tag.BlocksAD(pt, nonce, ad, adLen, data, bs, bs)
	})
}

// tagsFromParts is tagsInto from the blocks' partials (fused.go).
func (k *Keys) tagsFromParts(dst []store.KeyedTag, lba int64, gen uint64, parts []poly1305.Partial, bs int, ad []byte, pt []poly1305.Tag) error {
	return k.tagsWith(dst, lba, gen, ad, pt, func(nonce *poly1305.Nonce, ad []byte, pt []poly1305.Tag) error {
		return k.tag.TagsFromPartials(pt, nonce, ad, adLen, parts, bs)
	})
}

// tagsWith is the frame of tagsInto and tagsFromParts: the associated data
// and nonce of the len(dst) blocks at lba under gen, the Poly1305-AES tags
// that compute puts in pt, and dst set from them.
func (k *Keys) tagsWith(dst []store.KeyedTag, lba int64, gen uint64, ad []byte, pt []poly1305.Tag, compute func(*poly1305.Nonce, []byte, []poly1305.Tag) error) error {
	n := len(dst)
	ad, pt = ad[:n*adLen], pt[:n]
	k.fill(ad, lba, gen, n)
	var nonce poly1305.Nonce
	binary.BigEndian.PutUint64(nonce[:8], gen)
	binary.BigEndian.PutUint64(nonce[8:], uint64(lba))
	if err := compute(&nonce, ad, pt); err != nil {
		return fmt.Errorf("blockdev: keyed tags: %w", err)
	}
	for i := range dst {
		dst[i] = store.KeyedTag{Gen: gen, Tag: pt[i]}
	}
	return nil
}

// tagEqual compares two tags in constant time: two 64-bit XORs, without the
// per-call cost of crypto/subtle on slices (10% of a 512-byte block's check).
func tagEqual(a, b *[16]byte) bool {
	x := binary.LittleEndian.Uint64(a[:8]) ^ binary.LittleEndian.Uint64(b[:8])
	y := binary.LittleEndian.Uint64(a[8:]) ^ binary.LittleEndian.Uint64(b[8:])
	return x|y == 0
}
