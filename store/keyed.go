package store

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/difctl/difctl/kernels/crc32c"
)

// Keyed volumes (Manifest.KeyCheck set, schema version 4 on) keep, beside the
// tuple and sector checksum of every block, a keyed tag: a 16-byte
// Poly1305-AES tag computed by blockdev over the volume's identity, the
// block's address and its data, under the nonce (write generation, LBA).
// The store keeps the tag and its generation opaque, like a tuple, in three
// record types of their own:
//
//	'K' tag page    | page number (8, big-endian)
//	'J' tag intent  | first LBA (8) | sequence (8), beside the 'I' intent
//	'G' generation  (the highest write generation reserved)
//
// Tag page value, version 3 (big-endian), PageTuples records per page:
//
//	0  'K' magic
//	1  version (3)
//	2  flags: 1 = empty (no records follow: every block has no tag)
//	3  0
//	4  tuples per page P (uint32)
//	8  P records of 24 bytes, unless empty: generation (8) | tag (16);
//	   generation 0 means the block has no tag (never written, or
//	   discarded)
//	   page MAC (32): HMAC-SHA256 under the page key of
//	   "difctl.store.tagpage.v3" | volume uid (16) | page number (8) |
//	   bytes 0 .. the MAC | length of the tuple page record of the same
//	   page number (8) | that record's value as stored
//	   CRC-32C of everything before it (4)
//
// Every tag page of a keyed volume is recorded from creation on:
// CreateKeyedTuples records every page in one empty run (runs.go), sealed
// with a MAC under the page key, in the batch of the manifest; a commit
// that writes into a page of a run gives it its tag page (and tuple page)
// in the batch that splits the run, and no operation deletes a tag page
// (a discard of a whole page seals it empty again, 44 bytes bound to the
// empty tuple page record). So a tag page that is neither stored nor in a
// run was deleted: ReadTags reports it as a *PageMACError listing it in
// Missing, and the volume fails every block of it (reason
// "page-missing"), with or without the key; so do the pages of a run that
// was deleted (whose tuple pages are then missing too: a *CorruptError).
// Without that rule an attacker could zero a page of blocks on the
// device, put the empty record in place of its tuple page and delete the
// tag page, and the blocks would read as unwritten zeros. Keyed volumes
// of schema versions 4 to 6 have a tag page for every page, sealed empty
// at creation, and no run.
//
// So the MAC of a tag page also seals its tuple page, byte for byte: any
// edit of a tuple page in the store (a guard, app tag, ref tag, sector sum
// or written bit, even one made consistent with altered data) fails the
// MAC of its tag page when read with the key, as a *PageMACError. Every
// commit of a keyed volume that writes a tuple page (Txn.Commit with the
// page key) seals its tag page again in the same KV batch, whatever else
// the transaction holds. Keyed stores of schema version 3 (development
// builds, never released: tag pages version 1 or 2, missing where no block
// had been written) are refused at open with ErrUnsupported: protect such
// a volume again with --reprotect.
//
// The CRC tells accidental damage (a *CorruptError) from a page that is
// intact but not the one the key sealed (a *PageMACError): a tag or
// generation forged, a page copied from another page number or another
// volume.
//
// Tag pages are records of their own rather than a section of the tuple
// page so that a reader without the key (difctl verify without --key-file)
// reads tuple pages exactly as for an unkeyed volume, and a reader with it
// pays for one more page read per PageTuples blocks. Both kinds of page
// are written in the same KV batch by a Txn, so a commit changes both or
// neither.
//
// Tag intent value, version 1: 'J', version (1), 0, 0, block count n
// (uint32), n records of 24 bytes as above, CRC-32C (4). One per intent
// record, under the same LBA and sequence number; DropIntent deletes both.
//
// Generation value, version 1: 'G', version (1), 0, 0, generation (8),
// HMAC-SHA256 under the page key of "difctl.store.gen.v1" | volume uid |
// generation (32), CRC-32C (4). The volume reserves generations in this
// record ahead of use, with a synced commit made before it hands any of
// them out, so that no tag is computed under a generation not yet
// reserved.
const (
	recTagPage   = 'K'
	recTagIntent = 'J'
	recGen       = 'G'

	tagPageMagic   = 'K'
	tagPageVersion = 3
	tagFlagEmpty   = 1
	tagIntMagic    = 'J'
	tagIntVersion  = 1
	genMagic       = 'G'
	genVersion     = 1

	// TagRecordSize is the stored size of one block's KeyedTag.
	TagRecordSize = 24
	// PageMACKeySize is the size of the key SetPageMACKey takes.
	PageMACKeySize = 32

	tagHeader  = 8
	pageMACLen = sha256.Size
)

var (
	// ErrKeyed matches the errors of keyed-volume operations given to a
	// volume that is not keyed, or asked of a keyed volume without the
	// page key: writing tags needs it.
	ErrKeyed = errors.New("store: keyed volume")
	// ErrPageMAC is matched by every *PageMACError.
	ErrPageMAC = errors.New("store: keyed page authentication failed")
)

// PageMACError reports a keyed record that is intact (its CRC-32C matches)
// but whose MAC does not: it was not written under this volume's key at
// this place, so a tag or generation in it was forged, or the record was
// copied from another page or volume (an empty run's failure lists its
// pages in Pages). It also reports tag pages that are missing (Missing):
// every tag page of a keyed volume is recorded from its creation on, so a
// missing one was deleted. It matches ErrPageMAC.
type PageMACError struct {
	Volume string
	Record string  // "tag page 3", "generation"
	Page   int64   // the (first) tag page, for tag pages
	Pages  []int64 // every tag page of the read that failed, missing ones included, ReadTags only
	// Missing lists the tag pages of Pages that have no record (sorted).
	Missing []int64
}

func (e *PageMACError) Error() string {
	if _, missing := slices.BinarySearch(e.Missing, e.Page); missing && e.Record != "generation" {
		return fmt.Sprintf("store: volume %q: %s: missing (deleted: every tag page of a keyed volume is recorded from its creation on)", e.Volume, e.Record)
	}
	return fmt.Sprintf("store: volume %q: %s: MAC does not match (forged, or copied from elsewhere)", e.Volume, e.Record)
}

// IsMissing reports whether tag page page is one of e.Missing.
func (e *PageMACError) IsMissing(page int64) bool {
	_, ok := slices.BinarySearch(e.Missing, page)
	return ok
}

// Unwrap makes errors.Is(err, ErrPageMAC) true.
func (e *PageMACError) Unwrap() error { return ErrPageMAC }

// KeyedTag is one block's keyed tag and the write generation of its nonce.
// Gen 0 means the block has no tag.
type KeyedTag struct {
	Gen uint64
	Tag [16]byte
}

// keyed is the keyed state of a Tuples: the volume uid and, once
// SetPageMACKey gave it, the page key.
type keyed struct {
	uid    [16]byte
	mu     sync.RWMutex
	macKey []byte // nil: records are read with their CRC checked only
	wseq   atomic.Uint64

	leafKey []byte // the seal's leaf key, from macKey (seal.go)
	seal    seal   // guarded by Tuples.mu
}

// TagWriteSeq is a sequence lock over the volume's tag page writes: odd
// while a commit that writes tag pages runs, and changed by every such
// commit. A reader that caches tags it read keeps them only while the
// value it saw before reading (even) is still current.
func (t *Tuples) TagWriteSeq() uint64 {
	if t.k == nil {
		return 0
	}
	return t.k.wseq.Load()
}

// initKeyed sets up t.k for a keyed manifest.
func (t *Tuples) initKeyed() error {
	if !t.m.Keyed() {
		return nil
	}
	uid, err := hex.DecodeString(t.m.VolumeUID)
	if err != nil || len(uid) != 16 {
		return &CorruptError{Volume: t.volume, Record: "manifest", Reason: "bad volume uid"}
	}
	t.k = &keyed{}
	copy(t.k.uid[:], uid)
	return nil
}

// Keyed reports whether the volume is keyed.
func (t *Tuples) Keyed() bool { return t.k != nil }

// SetPageMACKey gives a keyed volume the key of its page MACs
// (PageMACKeySize bytes, derived by the caller from the volume's key):
// from then on tag pages and the generation record are checked against
// their MAC when read, and WriteTags and ReserveGeneration may be used.
// Without it they are read with their CRC-32C checked only. The key is
// kept in memory only.
func (t *Tuples) SetPageMACKey(key []byte) error {
	if t.k == nil {
		return fmt.Errorf("%w: volume %q is not keyed", ErrKeyed, t.volume)
	}
	if len(key) != PageMACKeySize {
		return fmt.Errorf("%w: page key of %d bytes, want %d", ErrInvalid, len(key), PageMACKeySize)
	}
	t.mu.Lock()
	t.k.mu.Lock()
	t.k.macKey = append([]byte(nil), key...)
	t.k.leafKey = leafKey(key)
	t.k.mu.Unlock()
	t.k.seal = seal{} // read again, with its MAC checked
	t.mu.Unlock()
	return nil
}

// HasPageMACKey reports whether SetPageMACKey gave the volume its key.
func (t *Tuples) HasPageMACKey() bool {
	if t.k == nil {
		return false
	}
	t.k.mu.RLock()
	defer t.k.mu.RUnlock()
	return t.k.macKey != nil
}

func (t *Tuples) macKey() []byte {
	t.k.mu.RLock()
	defer t.k.mu.RUnlock()
	return t.k.macKey
}

func (t *Tuples) needKeyed(write bool) error {
	switch {
	case t.k == nil:
		return fmt.Errorf("%w: volume %q is not keyed", ErrKeyed, t.volume)
	case write && t.macKey() == nil:
		return fmt.Errorf("%w: volume %q: writing keyed tags needs the volume's key", ErrKeyed, t.volume)
	}
	return nil
}

func (t *Tuples) tagPageKey(page int64) []byte { return u64Key(t.prefix, recTagPage, page) }

func (t *Tuples) tagIntentKey(lba int64, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(u64Key(t.prefix, recTagIntent, lba), seq)
}

func (t *Tuples) tagPageSize() int { return tagHeader + t.l.p*TagRecordSize + pageMACLen + 4 }

// emptyTagPageSize is the size of a tag page sealed empty (flag 1).
const emptyTagPageSize = tagHeader + pageMACLen + 4

// isEmptyTagPage reports whether v has the form of a tag page sealed
// empty (its MAC not checked).
func isEmptyTagPage(v []byte) bool {
	return len(v) == emptyTagPageSize && v[0] == tagPageMagic && v[1] == tagPageVersion && v[2] == tagFlagEmpty
}

// CreateKeyedTuples creates the keyed volume of manifest m (KeyCheck and
// VolumeUID set) like CreateTuples, with pageKey (PageMACKeySize bytes, as
// SetPageMACKey takes) set: its one empty run, which records every tag
// page, is sealed with the page key and committed with the manifest and
// the seal, so that from then on a missing tag page is one that was
// deleted.
func CreateKeyedTuples(kv KV, volume string, m Manifest, pageKey []byte) (*Tuples, error) {
	if !m.Keyed() && m.VolumeUID == "" { // one without the other: ErrInvalid (validate)
		return nil, fmt.Errorf("%w: create volume %q: the manifest has no key check value", ErrKeyed, volume)
	}
	if len(pageKey) != PageMACKeySize {
		return nil, fmt.Errorf("%w: page key of %d bytes, want %d", ErrInvalid, len(pageKey), PageMACKeySize)
	}
	return createTuples(kv, volume, m, pageKey)
}

// pageMAC computes the MAC of a tag page's bytes before the MAC, bound to
// tup, the stored value of the tuple page of the same number (nil: none).
func (t *Tuples) pageMAC(key []byte, page int64, body, tup []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("difctl.store.tagpage.v3"))
	h.Write(t.k.uid[:])
	var pb [8]byte
	binary.BigEndian.PutUint64(pb[:], uint64(page)) // page >= 0: checked by the caller
	h.Write(pb[:])
	h.Write(body)
	binary.BigEndian.PutUint64(pb[:], uint64(len(tup)))
	h.Write(pb[:])
	h.Write(tup)
	return h.Sum(nil)
}

// rawTuplePage returns the stored value of tuple page page, nil if there
// is none.
func (t *Tuples) rawTuplePage(page int64) ([]byte, error) {
	v, err := t.kv.Get(t.pageKey(page))
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	return v, err
}

// encodeTagPage appends the sealed value of a tag page to dst, bound to
// tup (see pageMAC). A page whose records are all zero (no tags: nil
// recs) is sealed in the empty form.
func (t *Tuples) encodeTagPage(dst []byte, key []byte, page int64, recs []KeyedTag, tup []byte) []byte {
	start := len(dst)
	empty := !slices.ContainsFunc(recs, func(r KeyedTag) bool { return r != KeyedTag{} })
	var flags byte
	if empty {
		flags = tagFlagEmpty
	}
	dst = append(dst, tagPageMagic, tagPageVersion, flags, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(t.l.p))
	if !empty {
		dst = appendTagRecords(dst, recs)
		// A page shorter than P records (the volume's last) is padded.
		for range t.l.p - len(recs) {
			dst = appendTagRecords(dst, []KeyedTag{{}})
		}
	}
	dst = append(dst, t.pageMAC(key, page, dst[start:], tup)...)
	return binary.BigEndian.AppendUint32(dst, crc32c.Checksum(dst[start:]))
}

func appendTagRecords(dst []byte, recs []KeyedTag) []byte {
	for i := range recs {
		dst = binary.BigEndian.AppendUint64(dst, recs[i].Gen)
		dst = append(dst, recs[i].Tag[:]...)
	}
	return dst
}

func decodeTagRecords(dst []KeyedTag, src []byte) {
	for i := range dst {
		r := src[i*TagRecordSize:]
		dst[i].Gen = binary.BigEndian.Uint64(r)
		copy(dst[i].Tag[:], r[8:TagRecordSize])
	}
}

// checkTagPage validates a stored tag page: length, header, CRC and, with
// the page key, its MAC, bound to tup (the stored tuple page). It reports
// whether the page is sealed empty (it holds no records).
func (t *Tuples) checkTagPage(page int64, v []byte, key, tup []byte) (empty bool, err error) {
	rec := fmt.Sprintf("tag page %d", page)
	corrupt := func(format string, args ...any) error {
		return &CorruptError{Volume: t.volume, Record: rec, Reason: fmt.Sprintf(format, args...)}
	}
	if len(v) < tagHeader || v[0] != tagPageMagic || v[1] != tagPageVersion || v[2]&^tagFlagEmpty != 0 || v[3] != 0 ||
		binary.BigEndian.Uint32(v[4:]) != uint32(t.l.p) {
		return false, corrupt("header %x does not match the manifest", v[:min(len(v), tagHeader)])
	}
	empty = v[2] == tagFlagEmpty
	size := t.tagPageSize()
	if empty {
		size = emptyTagPageSize
	}
	if len(v) != size {
		return false, corrupt("length %d, want %d", len(v), size)
	}
	crcOff := size - 4
	if got, want := crc32c.Checksum(v[:crcOff]), binary.BigEndian.Uint32(v[crcOff:]); got != want {
		return false, corrupt("checksum %08x, stored %08x", got, want)
	}
	if key != nil {
		macOff := crcOff - pageMACLen
		if !hmac.Equal(t.pageMAC(key, page, v[:macOff], tup), v[macOff:crcOff]) {
			return empty, &PageMACError{Volume: t.volume, Record: rec, Page: page}
		}
	}
	return empty, nil
}

// ReadTags reads the committed keyed tags of blocks [lba, lba+len(dst)).
// With the page key (SetPageMACKey) every tag page read is checked against
// its MAC: if any fails, ReadTags still fills dst (the pages' CRC-32Cs
// match) and returns a *PageMACError listing the pages that failed, so that
// the caller can check each block's tag and tell which it cannot trust.
// Without the key only the CRC-32C is checked. A block without a tag reads
// as Gen 0, so do the blocks of the pages of an empty run (runs.go), whose
// MAC is checked with the key like a page's. A tag page that is missing
// (deleted: every tag page is recorded from the volume's creation on) is
// reported, with or without the key, in the *PageMACError's Missing and
// Pages; its blocks read as Gen 0.
func (t *Tuples) ReadTags(lba int64, dst []KeyedTag) error { return t.readTags(lba, dst, false) }

// readTags is ReadTags; locked: the caller holds t.mu.
func (t *Tuples) readTags(lba int64, dst []KeyedTag, locked bool) error {
	if err := t.needKeyed(false); err != nil {
		return err
	}
	n := int64(len(dst))
	if err := t.checkRange(lba, n); err != nil || n == 0 {
		return err
	}
	key := t.macKey()
	P := int64(t.l.p)
	first, last := lba/P, (lba+n-1)/P
	var macErr *PageMACError
	macFail := func(page int64, missing bool) {
		if macErr == nil {
			macErr = &PageMACError{Volume: t.volume, Record: fmt.Sprintf("tag page %d", page), Page: page}
		}
		macErr.Pages = append(macErr.Pages, page)
		if missing {
			macErr.Missing = append(macErr.Missing, page)
		}
	}
	begin := func() {
		clear(dst)
		macErr = nil
	}
	err := t.walkPages(recTagPage, first, last, locked, begin, func(pc *piece) error {
		s, e := max(pc.first, first), min(pc.end, last+1) // its pages in the read
		switch {
		case pc.missing:
			for page := s; page < e; page++ {
				macFail(page, true)
			}
			return nil
		case pc.run != nil:
			if key != nil && !t.runMACOK(key, pc.run.v) {
				for page := s; page < e; page++ {
					macFail(page, false)
				}
			}
			return nil // no tags
		}
		page := pc.first
		var tup []byte
		if key != nil {
			var err error
			if tup, err = t.rawTuplePage(page); err != nil {
				return err
			}
		}
		empty, err := t.checkTagPage(page, pc.v, key, tup)
		if err != nil {
			if _, ok := err.(*PageMACError); !ok {
				return err
			}
			macFail(page, false)
		}
		pstart := page * P
		bs, be := max(pstart, lba), min(pstart+P, lba+n)
		if bs < be && !empty {
			decodeTagRecords(dst[bs-lba:be-lba], pc.v[tagHeader+int(bs-pstart)*TagRecordSize:])
		}
		return nil
	})
	if err != nil {
		return err
	}
	if macErr != nil {
		slices.Sort(macErr.Pages)
		slices.Sort(macErr.Missing)
		macErr.Page = macErr.Pages[0]
		macErr.Record = fmt.Sprintf("tag page %d", macErr.Page)
		return macErr
	}
	return nil
}

// WriteTags stages tags as the committed keyed tags of blocks [lba,
// lba+len(tags)). Tags with Gen 0 clear them (a discard). It needs the page
// key. The tag pages are written in the transaction's KV batch, beside its
// tuple pages.
func (x *Txn) WriteTags(lba int64, tags []KeyedTag) error {
	if err := x.usable(); err != nil {
		return err
	}
	if err := x.t.needKeyed(true); err != nil {
		return err
	}
	if err := x.t.checkRange(lba, int64(len(tags))); err != nil || len(tags) == 0 {
		return err
	}
	x.add(txnOp{kind: opTags, lba: lba, n: int64(len(tags)), tags: append([]KeyedTag(nil), tags...)})
	x.size += len(tags) * TagRecordSize
	return nil
}

// stageTags applies the transaction's tag writes to the tag pages they
// touch, each read first (checked against its MAC) unless written whole,
// and returns them (the records of every block of each page) and their
// page numbers in the order first touched. Caller holds t.mu.
func (t *Tuples) stageTags(ops []txnOp) (map[int64][]KeyedTag, []int64, error) {
	P := int64(t.l.p)
	pages := make(map[int64][]KeyedTag)
	var order []int64
	for _, op := range ops {
		if op.kind != opTags {
			continue
		}
		end := op.lba + op.n
		for page := op.lba / P; page*P < end; page++ {
			pstart := page * P
			s, e := max(pstart, op.lba), min(pstart+P, end)
			recs, ok := pages[page]
			if !ok {
				recs = make([]KeyedTag, P)
				// A page written whole is not read: a forged page can be
				// replaced by rewriting its blocks.
				if s > pstart || e < min(pstart+P, t.blocks) {
					if err := t.readTags(pstart, recs[:min(P, t.blocks-pstart)], true); err != nil {
						return nil, nil, err
					}
				}
				pages[page] = recs
				order = append(order, page)
			}
			copy(recs[s-pstart:e-pstart], op.tags[s-op.lba:e-op.lba])
		}
	}
	return pages, order, nil
}

// commitTags adds to b the tag pages pages (from stageTags, in order) and
// the tag page of every tuple page the batch writes (tuples: page number
// to its new stored value), read and sealed again, each bound to its
// tuple page. Without the page key the tuple pages are written alone
// (only an attacker's tools do that: the volume refuses changes without
// the key), and their tag pages fail at the next read with it. Caller
// holds t.mu.
//
// With the page key it also stages the seal that follows (seal.go), with
// the changes of the batch's empty runs (runs), and returns it, for the
// caller to make current once b is committed.
func (t *Tuples) commitTags(b Batch, pages map[int64][]KeyedTag, order []int64, tuples map[int64][]byte, runs []sealChange) (*seal, error) {
	key := t.macKey()
	P := int64(t.l.p)
	if pages == nil {
		pages = make(map[int64][]KeyedTag)
	}
	if key != nil {
		for page := range tuples {
			if _, ok := pages[page]; ok {
				continue
			}
			pstart := page * P
			recs := make([]KeyedTag, P)
			if err := t.readTags(pstart, recs[:min(P, t.blocks-pstart)], true); err != nil {
				return nil, err
			}
			pages[page] = recs
			order = append(order, page)
		}
	}
	if len(order) > 0 {
		t.k.wseq.Add(1) // odd: readers do not cache; even again after the commit (see Txn.Commit)
	}
	buf := make([]byte, 0, t.tagPageSize())
	changes := runs
	for _, page := range order {
		tup, ok := tuples[page]
		if !ok {
			var err error
			if tup, err = t.rawTuplePage(page); err != nil {
				return nil, err
			}
		}
		buf = t.encodeTagPage(buf[:0], key, page, pages[page], tup)
		if err := b.Set(t.tagPageKey(page), buf); err != nil {
			return nil, err
		}
		if key != nil {
			v, err := t.kv.Get(t.tagPageKey(page))
			switch {
			case errors.Is(err, ErrNotFound):
				v = nil
			case err != nil:
				return nil, err
			}
			changes = append(changes, sealChange{id: tagLeafID(page), old: v, new: slices.Clone(buf)})
		}
	}
	if key == nil || len(changes) == 0 {
		return nil, nil
	}
	next, err := t.stageSeal(b, changes)
	if err != nil {
		return nil, err
	}
	return &next, nil
}

// RecordTagIntent stages the keyed tags intended for the blocks of the
// intent id (from RecordIntent in the same transaction), len(tags) = id.N.
// DropIntent deletes them with the intent.
func (x *Txn) RecordTagIntent(id IntentID, tags []KeyedTag) error {
	if err := x.usable(); err != nil {
		return err
	}
	t := x.t
	if err := t.needKeyed(true); err != nil {
		return err
	}
	if int64(len(tags)) != id.N || id.N == 0 {
		return fmt.Errorf("%w: %d keyed tags for an intent of %d blocks", ErrInvalid, len(tags), id.N)
	}
	chunk := t.intentChunk()
	for off := int64(0); off < id.N; off += chunk {
		c := min(chunk, id.N-off)
		v := make([]byte, 0, tagHeader+int(c)*TagRecordSize+4)
		v = append(v, tagIntMagic, tagIntVersion, 0, 0)
		v = binary.BigEndian.AppendUint32(v, uint32(c))
		v = appendTagRecords(v, tags[off:off+c])
		v = binary.BigEndian.AppendUint32(v, crc32c.Checksum(v))
		x.add(txnOp{kind: opSet, key: t.tagIntentKey(id.LBA+off, id.Seq), value: v})
		x.size += len(v) + 32
	}
	return nil
}

// dropTagIntent stages deleting the tag intent records of id.
func (x *Txn) dropTagIntent(id IntentID) {
	chunk := x.t.intentChunk()
	for off := int64(0); off < id.N || off == 0; off += chunk {
		x.addDelete(x.t.tagIntentKey(id.LBA+off, id.Seq))
	}
}

// TagIntent returns the keyed tags recorded for the intent record in (one
// record as Intents yields it). A keyed intent without them is a
// *CorruptError: RecordTagIntent writes them in the intent's own commit.
// The records are intents, not committed state; recovery checks each
// candidate tag against the data before it commits it, so they carry no
// MAC.
func (t *Tuples) TagIntent(in IntentID) ([]KeyedTag, error) {
	if err := t.needKeyed(false); err != nil {
		return nil, err
	}
	rec := fmt.Sprintf("tag intent lba=%d seq=%d", in.LBA, in.Seq)
	corrupt := func(format string, args ...any) error {
		return &CorruptError{Volume: t.volume, Record: rec, Reason: fmt.Sprintf(format, args...)}
	}
	v, err := t.kv.Get(t.tagIntentKey(in.LBA, in.Seq))
	if errors.Is(err, ErrNotFound) {
		return nil, corrupt("missing beside its intent")
	} else if err != nil {
		return nil, err
	}
	if len(v) < tagHeader+4 || v[0] != tagIntMagic || v[1] != tagIntVersion {
		return nil, corrupt("bad header")
	}
	n := int64(binary.BigEndian.Uint32(v[4:]))
	if n != in.N || len(v) != tagHeader+int(n)*TagRecordSize+4 {
		return nil, corrupt("%d blocks in %d bytes, intent has %d", n, len(v), in.N)
	}
	crcOff := len(v) - 4
	if got, want := crc32c.Checksum(v[:crcOff]), binary.BigEndian.Uint32(v[crcOff:]); got != want {
		return nil, corrupt("checksum %08x, stored %08x", got, want)
	}
	tags := make([]KeyedTag, n)
	decodeTagRecords(tags, v[tagHeader:])
	return tags, nil
}

func (t *Tuples) genMAC(key []byte, gen uint64) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("difctl.store.gen.v1"))
	h.Write(t.k.uid[:])
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], gen)
	h.Write(b[:])
	return h.Sum(nil)
}

// ReserveGeneration stages recording gen as the highest write generation
// the volume has reserved. The caller commits it (synced) before it hands
// out any generation up to gen, and after a restart
// resumes above ReservedGeneration, so that no nonce is used twice.
func (x *Txn) ReserveGeneration(gen uint64) error {
	if err := x.usable(); err != nil {
		return err
	}
	t := x.t
	if err := t.needKeyed(true); err != nil {
		return err
	}
	v := make([]byte, 0, 12+pageMACLen+4)
	v = append(v, genMagic, genVersion, 0, 0)
	v = binary.BigEndian.AppendUint64(v, gen)
	v = append(v, t.genMAC(t.macKey(), gen)...)
	v = binary.BigEndian.AppendUint32(v, crc32c.Checksum(v))
	x.add(txnOp{kind: opSet, key: recKey(t.prefix, recGen), value: v})
	x.size += len(v) + 32
	return nil
}

// ReservedGeneration returns the highest write generation reserved (0 if
// none). With the page key its MAC is checked (*PageMACError).
func (t *Tuples) ReservedGeneration() (uint64, error) {
	if err := t.needKeyed(false); err != nil {
		return 0, err
	}
	v, err := t.kv.Get(recKey(t.prefix, recGen))
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	corrupt := func(reason string) error {
		return &CorruptError{Volume: t.volume, Record: "generation", Reason: reason}
	}
	if len(v) != 12+pageMACLen+4 || v[0] != genMagic || v[1] != genVersion {
		return 0, corrupt(fmt.Sprintf("bad record of %d bytes", len(v)))
	}
	crcOff := len(v) - 4
	if got, want := crc32c.Checksum(v[:crcOff]), binary.BigEndian.Uint32(v[crcOff:]); got != want {
		return 0, corrupt(fmt.Sprintf("checksum %08x, stored %08x", got, want))
	}
	gen := binary.BigEndian.Uint64(v[4:])
	if key := t.macKey(); key != nil && !hmac.Equal(t.genMAC(key, gen), v[12:crcOff]) {
		return 0, &PageMACError{Volume: t.volume, Record: "generation"}
	}
	return gen, nil
}
