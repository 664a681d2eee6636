package store

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"github.com/difctl/difctl/kernels/crc32c"
)

// The seal of a keyed volume: a commitment to the current version of every
// tag page, so that putting back an older version of one (with the tuple
// page it seals, and the old data of its blocks) is found. A page MAC
// proves that a tag page was written by the key for this page number; it
// cannot prove that it is the newest such page.
//
//	'S' seal (one record per volume)
//
// Seal value, version 1 (big-endian), 80 bytes:
//
//	0  'S' magic
//	1  version (1)
//	2  0, 0
//	4  generation G (8): 1 at creation, +1 by every commit that writes
//	   tag pages
//	12 commitment C (32): the sum, modulo 2^256, over every tag page p
//	   of leaf(p) = HMAC-SHA256 under the leaf key of page number (8) |
//	   the page MAC stored in p (32), and over every empty run r (runs.go)
//	   of leaf(r) = HMAC-SHA256 under the leaf key of 'R' | the page of
//	   its key (8) | the MAC stored in r (32). The leaf key is
//	   HMAC-SHA256 under the page key of "difctl.store.seal.leaf.v1".
//	44 MAC (32): HMAC-SHA256 under the page key of "difctl.store.seal.v1"
//	   | volume uid (16) | G (8) | C (32)
//	76 CRC-32C of everything before it (4)
//
// Every commit that writes tag pages or runs (Txn.Commit with the page
// key) adds leaf(new) - leaf(old) of each to C, from the value it had in
// the store (a record deleted: leaf(new) = 0), and writes the seal with
// G+1 in the same batch. So C - (the sum over the pages and runs as
// stored) is unchanged by every commit: a page or run replaced by an
// older version, or deleted, while the volume was closed keeps C from
// matching the records from then on, whatever is written later.
// CheckSeal recomputes the sum over every tag page and compares. The
// leaves are keyed: the sum of an unkeyed hash of values an attacker
// knows could be matched by another set of pages found with a
// generalized-birthday (Wagner) search.
//
// The seal does not find a rollback of the seal record with every page
// written since: that is the rollback of the whole volume, which only a
// copy of (G, MAC) kept where the attacker cannot write finds (blockdev's
// Witness).
//
// Keyed stores written before the seal existed (schema version 4) have no
// seal record: the first commit with the page key that writes tag pages,
// or InitSeal, creates it from the pages as they are, and moves the
// manifest to SealedSchemaVersion in the same batch. Programs that do not
// know the seal refuse a volume of that version (their writes would not
// update it, and the next CheckSeal would report a replay); new keyed
// volumes are created with it.
const (
	recSeal     = 'S'
	sealMagic   = 'S'
	sealVersion = 1
	sealSize    = 4 + 8 + 32 + pageMACLen + 4
)

var (
	// ErrSealMismatch is matched by every *SealError.
	ErrSealMismatch = errors.New("store: keyed tag pages do not match their seal")
)

// SealError reports that the tag pages of a keyed volume are not those its
// seal commits to: a page was replaced by an older version, or written by
// a program that does not keep the seal. It matches ErrSealMismatch.
type SealError struct {
	Volume string
	Gen    uint64 // the seal's generation
	// Missing: the volume was sealed (its manifest says so) and the seal
	// record is gone: deleted, so that the pages could be put back under
	// a new seal.
	Missing bool
}

func (e *SealError) Error() string {
	if e.Missing {
		return fmt.Sprintf("store: volume %q: the seal of the keyed tag pages is missing (deleted): the pages cannot be trusted", e.Volume)
	}
	return fmt.Sprintf("store: volume %q: keyed tag pages do not match their seal (generation %d): a page was replaced by an older version", e.Volume, e.Gen)
}

// Unwrap makes errors.Is(err, ErrSealMismatch) true.
func (e *SealError) Unwrap() error { return ErrSealMismatch }

// seal is the in-memory copy of the seal record. Guarded by Tuples.mu.
type seal struct {
	loaded  bool // read from the store (or written) by this Tuples
	present bool // the store has a seal record
	gen     uint64
	c       [32]byte
	mac     []byte
	durable bool // the commit that wrote it was synced
}

// sum256 is a 256-bit number, big-endian words.
type sum256 [4]uint64

func sumOf(b []byte) (s sum256) {
	for i := range s {
		s[i] = binary.BigEndian.Uint64(b[i*8:])
	}
	return s
}

func (s sum256) bytes() (b [32]byte) {
	for i := range s {
		binary.BigEndian.PutUint64(b[i*8:], s[i])
	}
	return b
}

func (s *sum256) add(x sum256) {
	var c uint64
	for i := 3; i >= 0; i-- {
		s[i], c = bits.Add64(s[i], x[i], c)
	}
}

func (s *sum256) sub(x sum256) {
	var c uint64
	for i := 3; i >= 0; i-- {
		s[i], c = bits.Sub64(s[i], x[i], c)
	}
}

// leafKey derives the key of the seal's leaves from the page key.
func leafKey(pageKey []byte) []byte {
	h := hmac.New(sha256.New, pageKey)
	h.Write([]byte("difctl.store.seal.leaf.v1"))
	return h.Sum(nil)
}

// tagLeafID is what identifies tag page page among the seal's leaves: its
// page number (an empty run's is runLeafID).
func tagLeafID(page int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(page)) }

// leaf returns the seal leaf of the record id (tagLeafID or runLeafID)
// stored as v (nil: none, which adds nothing). The MAC is taken from
// where the formats put it (last before the CRC), without checking it:
// the seal commits to the records as stored.
func (t *Tuples) leaf(id, v []byte) sum256 {
	if v == nil {
		return sum256{}
	}
	var mac []byte
	if len(v) >= tagHeader+pageMACLen+4 {
		mac = v[len(v)-4-pageMACLen : len(v)-4]
	} else {
		mac = v // damaged: any value, as long as it is the same each time
	}
	h := hmac.New(sha256.New, t.k.leafKey)
	h.Write(id)
	h.Write(mac)
	var out [32]byte
	return sumOf(h.Sum(out[:0]))
}

func (t *Tuples) sealMAC(key []byte, gen uint64, c [32]byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("difctl.store.seal.v1"))
	h.Write(t.k.uid[:])
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], gen)
	h.Write(b[:])
	h.Write(c[:])
	return h.Sum(nil)
}

func (t *Tuples) sealKey() []byte { return recKey(t.prefix, recSeal) }

func (t *Tuples) encodeSeal(key []byte, gen uint64, c [32]byte) []byte {
	v := make([]byte, 0, sealSize)
	v = append(v, sealMagic, sealVersion, 0, 0)
	v = binary.BigEndian.AppendUint64(v, gen)
	v = append(v, c[:]...)
	v = append(v, t.sealMAC(key, gen, c)...)
	return binary.BigEndian.AppendUint32(v, crc32c.Checksum(v))
}

// readSeal reads the seal record: ok false if there is none. With the
// page key its MAC is checked (*PageMACError). A volume whose manifest
// says it was sealed and that has no seal record lost it: a *SealError
// (Missing), never a volume to seal again from what is stored, which
// would take back a replayed tag page.
func (t *Tuples) readSeal() (s seal, err error) {
	v, err := t.kv.Get(t.sealKey())
	if errors.Is(err, ErrNotFound) {
		if t.m.Keyed() && (t.m.Schema == SealedSchemaVersion || t.m.Schema >= RunsSchemaVersion) {
			return seal{}, &SealError{Volume: t.volume, Missing: true}
		}
		return seal{loaded: true}, nil
	} else if err != nil {
		return seal{}, err
	}
	corrupt := func(reason string) error {
		return &CorruptError{Volume: t.volume, Record: "seal", Reason: reason}
	}
	if len(v) != sealSize || v[0] != sealMagic || v[1] != sealVersion || v[2] != 0 || v[3] != 0 {
		return seal{}, corrupt(fmt.Sprintf("bad record of %d bytes", len(v)))
	}
	crcOff := len(v) - 4
	if got, want := crc32c.Checksum(v[:crcOff]), binary.BigEndian.Uint32(v[crcOff:]); got != want {
		return seal{}, corrupt(fmt.Sprintf("checksum %08x, stored %08x", got, want))
	}
	s = seal{loaded: true, present: true, gen: binary.BigEndian.Uint64(v[4:]), mac: v[44:crcOff], durable: true}
	copy(s.c[:], v[12:44])
	if key := t.macKey(); key != nil && !hmac.Equal(t.sealMAC(key, s.gen, s.c), s.mac) {
		return seal{}, &PageMACError{Volume: t.volume, Record: "seal"}
	}
	return s, nil
}

// sumTagPages returns the sum of the leaves of every tag page and empty
// run as stored. A tag page or run that fails its CRC is a *CorruptError.
// Caller holds t.mu (no commit between the two ranges).
func (t *Tuples) sumTagPages() (sum256, error) {
	var c sum256
	plen := len(t.prefix) + 1
	for _, typ := range []byte{recTagPage, recRun} {
		it, err := t.kv.NewIter(u64Key(t.prefix, typ, 0), u64Key(t.prefix, typ, t.pages))
		if err != nil {
			return sum256{}, err
		}
		for it.Next() {
			k := it.Key()
			if len(k) != plen+8 {
				it.Close()
				return sum256{}, &CorruptError{Volume: t.volume, Record: fmt.Sprintf("key %x", k), Reason: "bad key length"}
			}
			page, v := keyInt(k[plen:]), it.Value()
			id := tagLeafID(page)
			if typ == recRun {
				_, err = t.decodeRun(page, v)
				id = runLeafID(page)
			} else {
				_, err = t.checkTagPage(page, v, nil, nil)
			}
			if err != nil {
				it.Close()
				return sum256{}, err
			}
			c.add(t.leaf(id, v))
		}
		err = it.Err()
		it.Close()
		if err != nil {
			return sum256{}, err
		}
	}
	return c, nil
}

// loadSeal reads the seal into t.k.seal unless it is loaded. Caller holds
// t.mu.
func (t *Tuples) loadSeal() error {
	if t.k.seal.loaded {
		return nil
	}
	s, err := t.readSeal()
	if err != nil {
		return err
	}
	t.k.seal = s
	return nil
}

// stageSeal adds to b the seal that follows the current one once the
// records of changes (tag pages and runs) are replaced, and returns it;
// the caller makes it current once b is committed. A volume without a
// seal gets one from the records as stored. Caller holds t.mu and checked
// the page key is set.
func (t *Tuples) stageSeal(b Batch, changes []sealChange) (seal, error) {
	if err := t.loadSeal(); err != nil {
		return seal{}, err
	}
	s := t.k.seal
	c := sumOf(s.c[:])
	if !s.present {
		var err error
		if c, err = t.sumTagPages(); err != nil {
			return seal{}, err
		}
	}
	for _, ch := range changes {
		c.sub(t.leaf(ch.id, ch.old))
		c.add(t.leaf(ch.id, ch.new))
	}
	if t.m.Schema < SealedSchemaVersion {
		// The first seal of a version 4 volume: from this commit on,
		// programs that do not keep the seal refuse the volume.
		m := t.m
		m.Schema = SealedSchemaVersion
		mv, err := encodeManifest(m)
		if err != nil {
			return seal{}, err
		}
		if err := b.Set(recKey(t.prefix, recManifest), mv); err != nil {
			return seal{}, err
		}
	}
	key := t.macKey()
	next := seal{loaded: true, present: true, gen: s.gen + 1, c: c.bytes()}
	v := t.encodeSeal(key, next.gen, next.c)
	next.mac = v[44 : sealSize-4]
	if err := b.Set(t.sealKey(), v); err != nil {
		return seal{}, err
	}
	return next, nil
}

// committed makes sealed (nil: none) the current seal once the batch that
// wrote it is committed (err nil; sync: synced), and returns err. Caller
// holds t.mu.
func (t *Tuples) committed(sealed *seal, err error, sync bool) error {
	if sealed == nil {
		if err == nil && sync && t.k != nil {
			t.k.seal.durable = true // a synced commit makes the earlier ones durable
		}
		return err
	}
	if err != nil {
		t.k.seal = seal{} // the KV may hold the batch anyway: read it again
		return err
	}
	sealed.durable = sync
	t.k.seal = *sealed
	t.m.Schema = max(t.m.Schema, SealedSchemaVersion)
	return nil
}

// Seal returns the generation and MAC of a keyed volume's seal as this
// Tuples last read or wrote it (ok false: the volume has none yet; see
// InitSeal). With SyncSeal the caller makes sure it is durable.
func (t *Tuples) Seal() (gen uint64, mac []byte, ok bool, err error) {
	if err := t.lockSeal(); err != nil {
		return 0, nil, false, err
	}
	defer t.mu.Unlock()
	s := t.k.seal
	return s.gen, append([]byte(nil), s.mac...), s.present, nil
}

// lockSeal checks that the volume is keyed, takes t.mu and loads the seal
// into t.k.seal. On success the caller holds t.mu and unlocks it.
func (t *Tuples) lockSeal() error {
	if err := t.needKeyed(false); err != nil {
		return err
	}
	t.mu.Lock()
	if err := t.loadSeal(); err != nil {
		t.mu.Unlock()
		return err
	}
	return nil
}

// InitSeal creates the seal of a keyed volume that has none (a store of
// a version that had no seal) from its tag pages as stored, with a synced
// commit. It needs the page key; a volume with a seal is left alone.
func (t *Tuples) InitSeal() error {
	if err := t.needKeyed(true); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.loadSeal(); err != nil || t.k.seal.present {
		return err
	}
	b := newBatch(t.kv, sealSize+64)
	defer b.Close()
	next, err := t.stageSeal(b, nil)
	if err != nil {
		return err
	}
	if err := b.Commit(true); err != nil {
		t.k.seal.loaded = false
		return err
	}
	next.durable = true
	t.k.seal = next
	t.m.Schema = max(t.m.Schema, SealedSchemaVersion)
	return nil
}

// SyncSeal makes the seal Seal reports durable: if the commit that wrote
// it was not synced, it writes the same record again with a synced commit
// (which makes every earlier commit durable too). It returns the seal.
func (t *Tuples) SyncSeal() (gen uint64, mac []byte, ok bool, err error) {
	if err := t.lockSeal(); err != nil {
		return 0, nil, false, err
	}
	defer t.mu.Unlock()
	s := t.k.seal
	if s.present && !s.durable {
		b := newBatch(t.kv, sealSize+64)
		defer b.Close()
		if err := b.Set(t.sealKey(), t.encodeSeal(t.macKey(), s.gen, s.c)); err != nil {
			return 0, nil, false, err
		}
		if err := b.Commit(true); err != nil {
			return 0, nil, false, err
		}
		t.k.seal.durable = true
	}
	return s.gen, append([]byte(nil), s.mac...), s.present, nil
}

// CheckSeal recomputes the seal's commitment over every tag page of a
// keyed volume as stored and compares it with the seal: a mismatch is a
// *SealError (a tag page replaced by an older version). It needs the page
// key. It reports ok false for a volume that has no seal yet (InitSeal),
// and a damaged seal or tag page as a *CorruptError, a seal whose MAC
// fails as a *PageMACError. It reads the store, not the copy this Tuples
// keeps.
func (t *Tuples) CheckSeal() (gen uint64, ok bool, err error) {
	if err := t.needKeyed(true); err != nil {
		return 0, false, err
	}
	t.mu.Lock() // no commit between the seal and the pages
	defer t.mu.Unlock()
	s, err := t.readSeal()
	if err != nil || !s.present {
		return 0, false, err
	}
	c, err := t.sumTagPages()
	if err != nil {
		return s.gen, true, err
	}
	if c.bytes() != s.c {
		return s.gen, true, &SealError{Volume: t.volume, Gen: s.gen}
	}
	return s.gen, true, nil
}
