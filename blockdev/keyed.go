package blockdev

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"math/bits"
	"sync"

	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/kernels/poly1305"
	"github.com/difctl/difctl/store"
)

// Keyed volumes (ARCHITECTURE.md; README "Keyed volumes").
//
// A volume created with CreateOptions.Key keeps, beside every block's PI
// tuple and sector checksum, a keyed tag: Poly1305-AES (Bernstein 2005)
// under keys derived from the Key and the volume's random identity uid,
//
//	tag = Poly1305_r(uid | LBA | generation | data) + AES-256_k(generation | LBA)
//
// (uid 16 bytes, LBA and generation 8 bytes each, big-endian; the nonce is
// the 128-bit generation | LBA). The generation is a volume-wide write
// counter: every write (every staged piece of a WriteAt, every discard
// piece, every chunk of Create) takes the next one, and it is stored with
// the tag. So one nonce is never used for two messages: two writes of one
// LBA differ in generation, two blocks of one write differ in LBA, and two
// volumes under one Key differ in their derived keys. Generations are
// reserved durably ahead of use (store.Txn.ReserveGeneration, genAhead at
// a time, see takeGen): no generation is handed out, and so no tag
// computed under it, before a synced commit has recorded a reservation
// that covers it. Open resumes above the reserved value plus a random
// jump of up to 2^32 (see resumeGeneration), so a crash at any point
// leaves every generation ever handed out at or below the value Open
// reads. Blocks of one write have
// consecutive nonces, so the masks of a run come from one AES-CTR
// keystream (poly1305.Key.BlocksAD).
//
// The store keeps tags in tag pages that carry a page MAC (see
// store/keyed.go) which also seals the tuple page of the same blocks, so
// a forged tag or generation, a page copied from another page or volume,
// or any edit of a tuple page (guard, app tag, ref tag, sector sum,
// written bit) fails when it is read with the key: every block of the page
// fails (reason "page-mac"). Every tag page exists from Create on (sealed
// empty by store.CreateKeyedTuples; a discard of a whole page seals it
// empty again, never deletes it), so a tag page that is missing was
// deleted, and every block of it fails (reason "page-missing"): an
// attacker cannot zero a page of blocks, put the empty record in place of
// its tuple page, delete its tag page and have the blocks read as
// unwritten zeros.
//
// Threat model. An attacker who can write the device and the store, but
// has no key:
//
//   - cannot make altered, moved (another LBA) or fabricated data verify:
//     the tag covers the data, the LBA and the volume, and forging one is
//     as hard as forging Poly1305-AES (about 2^-106 per try for 4 KiB
//     blocks, Bernstein's bound; the CRC can be recomputed, the tag not);
//   - cannot make a forged tag or generation verify: the tag page's MAC
//     (HMAC-SHA256) covers every tag and generation in it, the volume uid
//     and the page number;
//   - can replay an older version of a whole tag page together with the
//     data of its blocks (up to PageTuples blocks at once): a page MAC
//     proves where a page belongs, not that it is the newest. That
//     includes a page's state from before its blocks were written (for a
//     hole, the empty page sealed at Create), put back with its tuple page
//     and zeroed blocks by an attacker who kept a copy of those records:
//     deleting the page, or emptying it without such a copy, is detected
//     (page-missing, page-mac), but a kept copy is a replay. And can roll
//     back the device and the whole store together to any earlier state.
//     Neither is detectable without a counter kept somewhere the attacker
//     cannot write (a TPM, a remote service). After such a rollback the
//     random jump of resumeGeneration keeps the volume's later writes from
//     reusing the rolled-back generations, except with probability about
//     2^-32 per reopening.
//   - can delete or damage anything: that is detected (missing tags and
//     tag pages are keyed-tag failures of their blocks, a missing tuple
//     page a damaged store), not prevented.
//
// dm-integrity's keyed mode (internal_hash:hmac(sha256)) documents the
// same first two points for its per-sector tags, and says that it does
// not protect against replay: an attacker can put back an older sector
// with its older tag (its journal and tags carry no version), and against
// rollback of the whole device. difctl's generation moves that boundary a
// little: a single old block (data and tag) fails against the tag page
// that holds its newer tag, so replay needs the whole tag page of
// PageTuples blocks, and rollback of everything stays out of reach as for
// dm-integrity. dm-integrity also authenticates its journal only with
// journal_mac; difctl's intents carry no MAC because recovery commits an
// intent's tag only after checking it against the data on the device
// under the key.
//
// Without the key a keyed volume opens for reads and checks: the tuples
// and sector checksums are verified and the keyed check is skipped
// (Volume.KeyedChecked reports false); writes, discards and remaps are
// refused with ErrKeyRequired, and so is the crash recovery of a volume
// that has intents to resolve.

var (
	// ErrKeyedTag matches every *KeyedTagError. It also matches
	// dif.ErrIntegrity: a keyed-tag failure is an integrity failure.
	ErrKeyedTag error = &integritySentinel{"blockdev: keyed tag mismatch"}
)

// KindKeyedTag is the Problem kind of a block that fails the keyed check.
const KindKeyedTag Kind = "keyed-tag"

// KeyedTagError is a block that failed the keyed check: its data does not
// match its keyed tag (Reason "mismatch"), it has no tag while its tuple
// says it is written ("missing"), it has one while unwritten
// ("unwritten"), its tag page failed its MAC ("page-mac"), or its tag page
// is missing from the store ("page-missing"). Every block of a tag page
// that fails its MAC or is missing fails. It matches ErrKeyedTag and
// dif.ErrIntegrity.
type KeyedTagError struct {
	LBA      int64
	Gen      uint64   // the stored generation
	Expected [16]byte // tag computed from the data
	Actual   [16]byte // stored tag
	Reason   string
}

func (e *KeyedTagError) Error() string {
	switch e.Reason {
	case "mismatch":
		return fmt.Sprintf("blockdev: block %d: keyed tag %x, stored %x (generation %d)", e.LBA, e.Expected, e.Actual, e.Gen)
	case "page-mac":
		return fmt.Sprintf("blockdev: block %d: keyed tag page fails its MAC (forged or copied tags, or an edited tuple page)", e.LBA)
	case "missing":
		return fmt.Sprintf("blockdev: block %d: written but has no keyed tag", e.LBA)
	case "page-missing":
		return fmt.Sprintf("blockdev: block %d: keyed tag page missing (deleted from the store: every tag page of a keyed volume exists from its creation on)", e.LBA)
	}
	return fmt.Sprintf("blockdev: block %d: keyed tag: %s", e.LBA, e.Reason)
}

func (e *KeyedTagError) Unwrap() error { return ErrKeyedTag }

func tagWord(t [16]byte) uint64 { return binary.BigEndian.Uint64(t[:8]) }

// keyed is the keyed state of a volume opened with its key.
type keyed struct {
	tk   *poly1305.Key
	uid  [16]byte
	page []byte

	tup      *store.Tuples // where takeGen commits its reservations
	genMu    sync.Mutex
	next     uint64 // next generation to hand out
	reserved uint64 // highest generation durably reserved; next <= reserved+1 unless exhausted

	pendMu sync.RWMutex
	pend   map[int64]*kPage // tags of flushed, unfolded blocks (like the overlay)

	cache tagCache
	chunk int // blocks per verified run: the scratch's size
}

type kPage struct {
	mask [ovP / 64]uint64
	tags [ovP]store.KeyedTag
}

// newKeyed sets up the keyed state of v from its manifest and key. A keyed
// volume without a key opens for reads only (see the package doc above);
// a key for an unkeyed volume is refused.
func (v *Volume) setupKeyed(key *Key) error {
	m := &v.man
	name := v.opts.Name
	switch {
	case !m.Keyed() && key == nil:
		return nil
	case !m.Keyed():
		return fmt.Errorf("%w: volume %q was created without a key", ErrNotKeyed, name)
	case key == nil:
		v.keyedNoKey = true
		return nil
	}
	vk, uid, err := checkKey(name, m, key)
	if err != nil {
		return err
	}
	if err := v.tup.SetPageMACKey(vk.page); err != nil {
		return fmt.Errorf("blockdev: volume %q: %w", name, err)
	}
	k := &keyed{tk: vk.tag, page: vk.page, tup: v.tup, pend: make(map[int64]*kPage)}
	k.cache.pages = make(map[int64]*tagCachePage)
	k.chunk = v.chunk
	copy(k.uid[:], uid)
	if k.next, k.reserved, err = resumeGeneration(v.tup); err != nil {
		return fmt.Errorf("blockdev: volume %q: %w", name, err)
	}
	v.kd = k
	v.stg.kd = k
	return nil
}

// resumeGeneration returns the first generation a session may use and the
// highest one reserved in the store. The first is above the second by a
// random jump in [1, 2^32]: the reservation alone keeps a session from
// reusing the generations of the sessions before it (takeGen), and the
// jump, as defence in depth, keeps a session after a rollback of the
// store (which also rolls back the reservation) from reusing the
// generations of the sessions rolled back.
func resumeGeneration(t *store.Tuples) (next, reserved uint64, err error) {
	g, err := t.ReservedGeneration()
	if err != nil {
		return 0, 0, err
	}
	j, err := genJump()
	if err != nil {
		return 0, 0, err
	}
	next = g + 1 + j
	if next <= g {
		return 0, 0, errGensExhausted
	}
	return next, g, nil
}

var errGensExhausted = errors.New("blockdev: keyed generations exhausted")

// genJump returns the random part of resumeGeneration's jump, in [0,
// 2^32). Tests set it to return 0, to show that the reservation alone
// keeps generations from repeating across crashes.
var genJump = func() (uint64, error) {
	j, err := rand.Int(rand.Reader, big.NewInt(1<<32))
	if err != nil {
		return 0, err
	}
	return j.Uint64(), nil
}

// testHookNewTags, if set, is called for every run of new tags the volume
// computes (not for the checks): volume uid, generation, first LBA, count.
var testHookNewTags func(uid [16]byte, gen uint64, lba int64, n int)

// newTags computes new tags of n blocks at lba under gen (see tags).
func (k *keyed) newTags(dst []store.KeyedTag, lba int64, gen uint64, data []byte, bs int) error {
	if testHookNewTags != nil {
		testHookNewTags(k.uid, gen, lba, len(dst))
	}
	return k.tags(dst, lba, gen, data, bs)
}

// newVolumeUID returns a fresh random volume identity, in hex.
func newVolumeUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("blockdev: volume uid: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Keyed reports whether the volume is keyed.
func (v *Volume) Keyed() bool { return v.man.Keyed() }

// KeyedChecked reports whether reads and checks verify the keyed tags: the
// volume is keyed and was opened with its key. A keyed volume opened
// without it verifies tuples and sector checksums only.
func (v *Volume) KeyedChecked() bool { return v.kd != nil }

// keyedWritable refuses changes to a keyed volume opened without its key.
func (v *Volume) keyedWritable(op string) error {
	if v.keyedNoKey {
		return fmt.Errorf("blockdev: %s on volume %q: %w", op, v.opts.Name, ErrKeyRequired)
	}
	return nil
}

// genAhead is how many generations one reservation commit covers. Each
// staged piece of a write, each discard piece and each Create chunk takes
// one, so a volume makes one extra synced commit per genAhead of them; a
// crash wastes at most genAhead generations of the 2^64, against the
// 2^32 that every Open's jump skips anyway.
const genAhead = 1 << 16

// takeGen hands out the generation of one write (or discard piece, or
// Create chunk). A generation is handed out only once it is durably
// reserved: when next passes the reservation, takeGen first commits,
// synced, a reservation of the next genAhead generations, and hands out
// none while that commit runs or after it failed. So whatever the timing
// of a crash, every generation any session handed out (and any tag
// computed under it, whether or not it reached the store or the device)
// is at or below the reservation the next Open reads. The reservation is
// committed here only, under genMu, so it never goes down.
//
// Lock order: range locks and flushMu (a discard) come before genMu,
// and genMu before the store's own lock; a writer holds genMu across the
// reservation's commit, once per genAhead generations.
func (k *keyed) takeGen() (uint64, error) {
	k.genMu.Lock()
	defer k.genMu.Unlock()
	g := k.next
	if g == 0 { // wrapped: every generation was handed out
		return 0, errGensExhausted
	}
	if g > k.reserved {
		r := g + genAhead - 1
		if r < g {
			r = ^uint64(0)
		}
		x := k.tup.NewTxn()
		if err := x.ReserveGeneration(r); err != nil {
			x.Abort()
			return 0, err
		}
		if testHookReserve != nil {
			testHookReserve(r)
		}
		if err := x.Commit(true); err != nil {
			return 0, fmt.Errorf("blockdev: reserving keyed generations: %w", err)
		}
		k.reserved = r
	}
	k.next++
	return g, nil
}

// testHookReserve, if set, is called before each reservation commit with
// the generation it reserves up to.
var testHookReserve func(upTo uint64)

// adLen is the associated data before each block: uid | LBA | generation.
const adLen = 32

// tags computes the keyed tags of n blocks of data at lba under generation
// gen into dst.
func (k *keyed) tags(dst []store.KeyedTag, lba int64, gen uint64, data []byte, bs int) error {
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
	if err := k.tk.BlocksAD(tags, &nonce, ad, adLen, data, bs, bs); err != nil {
		return fmt.Errorf("blockdev: keyed tags: %w", err)
	}
	for i := range dst {
		dst[i] = store.KeyedTag{Gen: gen, Tag: tags[i]}
	}
	return nil
}

// fillAddr is fill of a buffer whose uid parts fill set before: the LBA
// and generation of each block only. (One slice per block, the
// generation's bytes swapped once: with a bounds check per store, as at
// first, it took 2.5-3.5 ns a block, 1.1-1.2 so, on the Zen 4 build
// machine, a scratch benchmark of 240 blocks.)
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

func (k *keyed) fill(ad []byte, lba int64, gen uint64, n int) {
	for i := range n {
		a := ad[i*adLen:]
		copy(a, k.uid[:])
		binary.BigEndian.PutUint64(a[16:], uint64(lba)+uint64(i))
		binary.BigEndian.PutUint64(a[24:], gen)
	}
}

// stageTags computes the tags of a write of n blocks at lba into the
// batch's slots (see stage). Caller holds the write's range lock.
func (v *Volume) stageTags(dst []store.KeyedTag, lba int64, n int, data []byte) error {
	gen, err := v.kd.takeGen()
	if err != nil {
		return v.fail(err)
	}
	return v.kd.newTags(dst[:n], lba, gen, data, v.bs)
}

// intents stages, in the transaction of a batch's intents, the tag intents
// of its entries. Their generations were reserved before they were handed
// out (takeGen).
func (k *keyed) intents(x *store.Txn, b *batch, ids []store.IntentID) error {
	for i, e := range b.ents {
		if err := x.RecordTagIntent(ids[i], b.tags[e.slot:e.slot+e.n]); err != nil {
			return err
		}
	}
	return nil
}

// insert puts a written batch's tags where readers find them until the
// fold (like ovInsert). Caller holds flushMu.
func (k *keyed) insert(b *batch) {
	k.pendMu.Lock()
	defer k.pendMu.Unlock()
	for _, e := range b.ents {
		for i := range e.n {
			lba := e.lba + int64(i)
			p, off := lba>>ovShift, int(lba&(ovP-1))
			pg := k.pend[p]
			if pg == nil {
				pg = new(kPage)
				k.pend[p] = pg
			}
			pg.tags[off] = b.tags[e.slot+i]
			setBit(pg.mask[:], off)
		}
	}
}

// fold stages the pending tags as committed in x. Caller holds flushMu.
func (k *keyed) fold(x *store.Txn, commit func(bool) error) error {
	for p, pg := range k.pend {
		for i := 0; i < ovP; {
			if !hasBit(pg.mask[:], i) {
				i++
				continue
			}
			j := i + 1
			for j < ovP && hasBit(pg.mask[:], j) {
				j++
			}
			if err := x.WriteTags(p*ovP+int64(i), pg.tags[i:j]); err != nil {
				return err
			}
			if err := commit(false); err != nil {
				return err
			}
			i = j
		}
	}
	return nil
}

// clearPending drops the pending tags after a fold. Caller holds flushMu.
func (k *keyed) clearPending() {
	k.pendMu.Lock()
	clear(k.pend)
	k.pendMu.Unlock()
}

// keyedScratch is the keyed part of a request's scratch.
type keyedScratch struct {
	tags      []store.KeyedTag // the run's current tags
	staged    []uint64         // blocks whose tag came from staging
	calc      []store.KeyedTag // tags computed from the data
	committed []store.KeyedTag
	have      []uint64 // blocks whose tag came from memory (staging, pending)
	failed    []uint64 // blocks with a keyed problem
	transient []uint64 // blocks that passed a re-read
	runs      []kRun
	ad        []byte         // associated data of a run
	ptags     []poly1305.Tag // its tags
	ad2       []byte         // the same, for the split helper (splitWork's worker 1)
	ptags2    []poly1305.Tag
	maps      [2]*mappedTags          // the keyed read path's mapped reads, per worker
	streams   [2]*poly1305.MaskStream // the keyed read path's mask streams, per worker
}

// kRun is a run of blocks [i, j) of one generation whose tags are computed
// in one call.
type kRun struct {
	i, j int
	gen  uint64
}

func (k *keyed) scratchFor(sc *scratch) *keyedScratch {
	if sc.k == nil {
		n, w := k.chunk, (k.chunk+63)/64
		sc.k = &keyedScratch{tags: make([]store.KeyedTag, n), staged: make([]uint64, w), calc: make([]store.KeyedTag, n),
			committed: make([]store.KeyedTag, n), have: make([]uint64, w), failed: make([]uint64, w), transient: make([]uint64, w),
			ad: make([]byte, n*adLen), ptags: make([]poly1305.Tag, n), ad2: make([]byte, n*adLen), ptags2: make([]poly1305.Tag, n),
			streams: [2]*poly1305.MaskStream{k.tk.MaskStream(), k.tk.MaskStream()}}
		// The uid part of every block's associated data, once (fillAddr).
		k.fill(sc.k.ad, 0, 0, n)
		k.fill(sc.k.ad2, 0, 0, n)
		for w := range sc.k.maps {
			m := &mappedTags{ks: sc.k}
			m.fn = m.call
			sc.k.maps[w] = m
		}
	}
	return sc.k
}

// workerAD is worker w's associated data buffer (splitWork's worker: 0 the
// caller, 1 the helper).
func (ks *keyedScratch) workerAD(w int) []byte {
	if w == 0 {
		return ks.ad
	}
	return ks.ad2
}

// copyStaged records the tags of staged blocks [i, j) of a run, from batch
// slot slot on (see staging.copyStaged).
func (k *keyed) copyStaged(b *batch, i, j, slot int, sc *scratch) {
	ks := k.scratchFor(sc)
	copy(ks.tags[i:j], b.tags[slot:])
	setBits(ks.staged, i, j-i)
}

// tagsInto is tags with the caller's buffers (ad: n*adLen bytes, pt: n
// tags), and the masks from ms if it is not nil.
func (k *keyed) tagsInto(dst []store.KeyedTag, lba int64, gen uint64, data []byte, bs int, ad []byte, pt []poly1305.Tag, ms *poly1305.MaskStream) error {
	return k.tagsWith(dst, lba, gen, ad, pt, func(nonce *poly1305.Nonce, ad []byte, pt []poly1305.Tag) error {
		if ms != nil {
			return ms.BlocksAD(pt, nonce, ad, adLen, data, bs, bs)
		}
		return k.tk.BlocksAD(pt, nonce, ad, adLen, data, bs, bs)
	})
}

// tagsWith is the frame of tagsInto and tagsFromParts: the associated data
// and nonce of the len(dst) blocks at lba under gen, the Poly1305-AES tags
// that compute puts in pt, and dst set from them.
func (k *keyed) tagsWith(dst []store.KeyedTag, lba int64, gen uint64, ad []byte, pt []poly1305.Tag, compute func(*poly1305.Nonce, []byte, []poly1305.Tag) error) error {
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

// tagCache keeps the committed tag pages that reads verified (their MAC
// checked), so that a read costs a copy of its tags rather than a store
// read and a page MAC. Entries are valid only while no tag page has been
// written since they were read (store.Tuples.TagWriteSeq); the volume
// writes tag pages at each fold and discard.
type tagCache struct {
	mu    sync.RWMutex
	pages map[int64]*tagCachePage // never changed once cached
}

type tagCachePage struct {
	seq  uint64
	tags []store.KeyedTag
	// reads is store.Tuples.TupleReads before the page was read and its
	// MAC checked: every tuple page read before then was read before the
	// check (see readCommitted).
	reads uint64
}

// maxTagCachePages bounds the cache: 256 pages of 1,024 tags, 6 MiB.
const maxTagCachePages = 256

// cachedTags returns the cached tag page page if it serves a caller whose
// tuple reads were counted by minReads (see readCommitted), else nil. The
// page is shared: its tags must not be changed.
func (v *Volume) cachedTags(page int64, minReads uint64) *tagCachePage {
	k := v.kd
	seq := v.tup.TagWriteSeq()
	k.cache.mu.RLock()
	cp := k.cache.pages[page]
	k.cache.mu.RUnlock()
	if cp != nil && cp.seq == seq && seq%2 == 0 && cp.reads >= minReads {
		return cp
	}
	return nil
}

// committedView is readCommitted without the copy where it can: the
// committed tags of blocks [lba, lba+n), a slice of the cached page when
// they lie in one (which the caller must not change), otherwise read into
// buf (of n tags at least), as readCommitted reads them.
func (v *Volume) committedView(lba int64, n int, buf []store.KeyedTag, minReads uint64) ([]store.KeyedTag, error) {
	P := int64(v.man.PageTuples)
	if page := lba / P; (lba+int64(n)-1)/P == page {
		if cp := v.cachedTags(page, minReads); cp != nil {
			s := lba - page*P
			return cp.tags[s : s+int64(n) : s+int64(n)], nil
		}
	}
	return buf[:n], v.readCommitted(lba, buf[:n], minReads)
}

// readCommitted reads the committed tags of blocks [lba, lba+len(dst)),
// from the cache where it can. It returns the store's *PageMACError, with
// dst filled, as ReadTags does.
//
// A cached page serves only a caller whose tuples were read from the
// store before the page's MAC was checked: minReads is the
// store.Tuples.TupleReads value the caller saw after reading its tuples,
// and a page cached with a smaller count is read and checked again. The
// keyed read path (keyed_read.go) needs this: it trusts the tuples it read
// because the MAC sealed them, and a tuple page read from the store after
// the check might not be the one the MAC sealed (edited in the store files
// under a running volume, and reloaded by the tuple cache). The ordinary
// path (keyedCheck) follows the same rule, so that such a page fails its
// MAC there too (every block of it) rather than only the guards edited.
func (v *Volume) readCommitted(lba int64, dst []store.KeyedTag, minReads uint64) error {
	k := v.kd
	P := int64(v.man.PageTuples)
	n := int64(len(dst))
	var macErr *store.PageMACError
	for page := lba / P; page*P < lba+n; page++ {
		ps := page * P
		s, e := max(ps, lba), min(ps+P, lba+n)
		if cp := v.cachedTags(page, minReads); cp != nil {
			copy(dst[s-lba:e-lba], cp.tags[s-ps:e-ps])
			continue
		}
		seq := v.tup.TagWriteSeq()
		pn := min(P, v.blocks-ps)
		tags := make([]store.KeyedTag, pn)
		reads := v.tup.TupleReads()
		err := v.tup.ReadTags(ps, tags)
		var me *store.PageMACError
		switch {
		case errors.As(err, &me):
			if macErr == nil {
				macErr = me
			} else {
				macErr.Pages = append(macErr.Pages, me.Pages...)
				macErr.Missing = append(macErr.Missing, me.Missing...)
			}
		case err != nil:
			return err
		default:
			if seq%2 == 0 && v.tup.TagWriteSeq() == seq {
				k.cache.mu.Lock()
				if len(k.cache.pages) >= maxTagCachePages {
					clear(k.cache.pages)
				}
				k.cache.pages[page] = &tagCachePage{seq: seq, tags: tags, reads: reads}
				k.cache.mu.Unlock()
			}
		}
		copy(dst[s-lba:e-lba], tags[s-ps:e-ps])
	}
	if macErr != nil {
		return macErr
	}
	return nil
}

// keyedCheck verifies the keyed tags of the blocks of a verified run that
// passed the other checks, appending a KindKeyedTag problem for each that
// fails and moving it from st.OK (or Unwritten, Escaped) to st.Failed.
// reread: the OK blocks are not in data (a check verified them in the
// device's mapping) and are read again. Tags come from staging
// (copyStagedTags), then the pending tags, then the store, in that order
// (see intent.go on why a reader looks at what the fold clears before what
// it commits). A run of splitMinBytes or more has its tags computed in
// pieces that the caller and the split helper take in turn (splitWork).
func (v *Volume) keyedCheck(lba int64, n int, data []byte, sc *scratch, st *RunStats, reread bool) error {
	k := v.kd
	ks := k.scratchFor(sc)
	defer clear(ks.staged)
	tags := ks.tags[:n]
	w := (n + 63) / 64
	have, failed, transient := ks.have[:w], ks.failed[:w], ks.transient[:w]
	copy(have, ks.staged[:w])
	clear(failed)
	clear(transient)
	end := lba + int64(n)
	k.eachPending(lba, n, func(i int, t *store.KeyedTag) bool {
		if !hasBit(have, i) {
			tags[i] = *t
			setBit(have, i)
		}
		return true
	})
	committed := ks.committed[:n]
	var pageErr *store.PageMACError
	err := v.readCommitted(lba, committed, v.tup.TupleReads())
	switch {
	case errors.As(err, &pageErr):
		// The tags are there (their CRC matches): each is still checked
		// against its data, and each failed page is reported once below.
	case err != nil:
		return fmt.Errorf("blockdev: reading the keyed tags of blocks [%d, %d): %w", lba, end, err)
	}
	for i := range n {
		if !hasBit(have, i) {
			tags[i] = committed[i]
		}
	}
	if reread {
		if err := v.readDev(data[:n*v.bs], lba, false); err != nil {
			return err
		}
	}
	states := sc.states[:n]
	bad := func(i int, e *KeyedTagError) {
		sc.probs = append(sc.probs, Problem{LBA: e.LBA, Kind: KindKeyedTag, Expected: tagWord(e.Expected), Actual: tagWord(e.Actual), Err: e})
		if hasBit(failed, i) {
			return
		}
		setBit(failed, i)
		switch {
		case states[i] == dif.StateUnwritten && !hasBit(sc.ioBad, i):
			st.Unwritten--
		case states[i] == dif.StateEscaped:
			st.Escaped--
		default:
			st.OK--
		}
		st.Failed++
		v.st.failed.Add(1)
	}
	calc := ks.calc[:n]
	failedBefore := len(sc.probs)
	// A block that failed and passed a re-read holds the re-read data now,
	// which must pass the keyed check too.
	for _, p := range sc.probs {
		if p.Transient && p.LBA >= lba && p.LBA < end {
			setBit(transient, int(p.LBA-lba))
		}
	}
	// The runs of eligible written blocks of one generation, each one
	// kernel call; the other blocks are decided here.
	// Blocks of tag pages that are missing (deleted: every tag page exists
	// from Create on) have no tags to check: each is a failure.
	var gone []uint64
	if pageErr != nil && len(pageErr.Missing) > 0 {
		gone = make([]uint64, w)
		P := int64(v.man.PageTuples)
		for _, page := range pageErr.Missing {
			for b := max(page*P, lba); b < min((page+1)*P, end); b++ {
				if i := int(b - lba); !hasBit(have, i) {
					setBit(gone, i)
				}
			}
		}
	}
	runs := ks.runs[:0]
	blocks := 0
	for i := 0; i < n; {
		if !keyedEligible(states, sc, transient, i) {
			i++
			continue
		}
		b := lba + int64(i)
		written := sc.written.Has(i)
		switch {
		case gone != nil && hasBit(gone, i):
			bad(i, &KeyedTagError{LBA: b, Reason: "page-missing"})
			i++
			continue
		case written && tags[i].Gen == 0:
			bad(i, &KeyedTagError{LBA: b, Reason: "missing"})
			i++
			continue
		case !written && tags[i].Gen != 0:
			bad(i, &KeyedTagError{LBA: b, Gen: tags[i].Gen, Actual: tags[i].Tag, Reason: "unwritten"})
			i++
			continue
		case !written:
			i++
			continue
		}
		j := i + 1
		for j < n && keyedEligible(states, sc, transient, j) && sc.written.Has(j) && tags[j].Gen == tags[i].Gen && (gone == nil || !hasBit(gone, j)) {
			j++
		}
		runs = append(runs, kRun{i, j, tags[i].Gen})
		blocks += j - i
		i = j
	}
	ks.runs = runs
	if err := v.keyedCompute(runs, blocks, lba, data, calc, ks, sc.kp); err != nil {
		return err
	}
	for _, r := range runs {
		for m := r.i; m < r.j; m++ {
			if !tagEqual(&calc[m].Tag, &tags[m].Tag) {
				bad(m, &KeyedTagError{LBA: lba + int64(m), Gen: tags[m].Gen, Expected: calc[m].Tag, Actual: tags[m].Tag, Reason: "mismatch"})
			}
		}
	}
	if pageErr != nil {
		// A page that fails its MAC may hold an older, authentic (data,
		// tag) pair put back by an attacker, which the tag check cannot
		// see, or say unwritten of blocks that were written: every block
		// of it not failed already fails.
		P := int64(v.man.PageTuples)
		for _, page := range pageErr.Pages {
			if pageErr.IsMissing(page) {
				continue
			}
			for b := max(page*P, lba); b < min((page+1)*P, end); b++ {
				i := int(b - lba)
				if hasBit(have, i) || hasBit(failed, i) || !keyedEligible(states, sc, transient, i) {
					continue
				}
				bad(i, &KeyedTagError{LBA: b, Gen: tags[i].Gen, Actual: tags[i].Tag, Reason: "page-mac"})
			}
		}
	}
	if len(sc.probs) > failedBefore {
		sortProblems(sc.probs)
	}
	return nil
}

// keyedCompute computes the tags of runs (blocks blocks in all) into calc:
// in pieces that a second CPU may share (splitWork); from the partials of
// the fused copy where classify computed them (kp, keyed_fused.go), from
// data otherwise.
func (v *Volume) keyedCompute(runs []kRun, blocks int, lba int64, data []byte, calc []store.KeyedTag, ks *keyedScratch, kp *keyedParts) error {
	if blocks*v.bs < splitMinBytes {
		for _, r := range runs {
			if err := v.runTags(calc[r.i:r.j], r, lba, data, ks.ad, ks.ptags, ks.transient, kp); err != nil {
				return err
			}
		}
		return nil
	}
	// Each run cut into pieces as blockPieces cuts it.
	var pieces []kRun
	for _, r := range runs {
		bp := newBlockPieces(r.j-r.i, v.bs)
		for p := range bp.pieces {
			i, j := bp.at(p)
			pieces = append(pieces, kRun{r.i + i, r.i + j, r.gen})
		}
	}
	ads := [2][]byte{ks.ad, ks.ad2}
	pts := [2][]poly1305.Tag{ks.ptags, ks.ptags2}
	var errs [2]error
	splitWork(len(pieces), func(w, p int) bool {
		r := pieces[p]
		errs[w] = v.runTags(calc[r.i:r.j], r, lba, data, ads[w], pts[w], ks.transient, kp)
		return errs[w] == nil
	})
	return errors.Join(errs[0], errs[1])
}

// keyedEligible reports whether block i of a verified run passed the other
// checks, at once or on a re-read (transient): only those get the keyed
// check, the others are failures already.
func keyedEligible(states []dif.State, sc *scratch, transient []uint64, i int) bool {
	if hasBit(sc.ioBad, i) {
		return false
	}
	return states[i] != dif.StateFailed || hasBit(transient, i)
}

// keyedDiscardIntent stages the tag intent of a discard piece of n blocks
// at lba: the tags of zero blocks under a fresh generation (recovery
// commits them if the zeros reached the device but the discard did not).
// The generation is reserved (takeGen) in a commit of its own before x.
func (v *Volume) keyedDiscardIntent(x *store.Txn, id store.IntentID, lba int64, n int) error {
	gen, err := v.kd.takeGen()
	if err != nil {
		return err
	}
	tags := make([]store.KeyedTag, n)
	zb := max(1, len(zeroBuf)/v.bs)
	for i := 0; i < n; i += zb {
		j := min(n, i+zb)
		if err := v.kd.newTags(tags[i:j], lba+int64(i), gen, zeroBuf[:(j-i)*v.bs], v.bs); err != nil {
			return err
		}
	}
	return x.RecordTagIntent(id, tags)
}

// keyedRecovery is the keyed part of crash recovery: the tags of the open
// intents, and the committed tags of the chunk being resolved. A block
// under an intent takes the intent's tuple only if its data matches the
// intent's keyed tag too, and keeps its committed tuple only if it matches
// its committed tag (or is unwritten, zeros, without a tag).
type keyedRecovery struct {
	v         *Volume
	intents   map[store.IntentID][]store.KeyedTag
	committed []store.KeyedTag
	pageBad   bool // the chunk's committed tags failed their page MAC
	newTags   []store.KeyedTag
	calc      [1]store.KeyedTag
}

func (v *Volume) newKeyedRecovery(ins []store.Intent) (*keyedRecovery, error) {
	kr := &keyedRecovery{v: v, intents: make(map[store.IntentID][]store.KeyedTag, len(ins)),
		committed: make([]store.KeyedTag, v.chunk), newTags: make([]store.KeyedTag, v.chunk)}
	for _, in := range ins {
		tags, err := v.tup.TagIntent(in.IntentID)
		if err != nil {
			return nil, err
		}
		kr.intents[in.IntentID] = tags
	}
	return kr, nil
}

// load reads the committed tags of the chunk of n blocks at c0.
func (kr *keyedRecovery) load(c0 int64, n int) error {
	kr.pageBad = false
	err := kr.v.tup.ReadTags(c0, kr.committed[:n])
	if errors.Is(err, store.ErrPageMAC) {
		kr.pageBad = true
		return nil
	}
	return err
}

// check reports whether data verifies against tag as block lba.
func (kr *keyedRecovery) check(data []byte, lba int64, t store.KeyedTag) bool {
	if kr.v.kd.tags(kr.calc[:], lba, t.Gen, data, kr.v.bs) != nil {
		return false
	}
	return poly1305.Equal(kr.calc[0].Tag, t.Tag)
}

// matches reports whether data (block lba, index i of the chunk, index j
// of intent in) matches the intent's keyed tag, and if so keeps it as the
// block's new tag.
func (kr *keyedRecovery) matches(in *store.Intent, j, i int, data []byte, lba int64) bool {
	t := kr.intents[in.IntentID][j]
	if t.Gen == 0 || !kr.check(data, lba, t) {
		return false
	}
	kr.newTags[i] = t
	return true
}

// committedOK reports whether block i of the chunk (lba) matches its
// committed keyed tag: written with a matching tag, or unwritten without
// one.
func (kr *keyedRecovery) committedOK(i int, data []byte, lba int64, written bool) bool {
	if kr.pageBad {
		return false
	}
	t := kr.committed[i]
	if !written {
		return t.Gen == 0
	}
	return t.Gen != 0 && kr.check(data, lba, t)
}

// keyManifest makes m the manifest of a new keyed volume under k: a fresh
// volume uid and the key check value. It returns the volume's page key,
// with which store.CreateKeyedTuples seals every tag page.
func (k *Key) keyManifest(m *store.Manifest) ([]byte, error) {
	uid, err := newVolumeUID()
	if err != nil {
		return nil, err
	}
	b, _ := hex.DecodeString(uid)
	vk, err := k.derive(b)
	if err != nil {
		return nil, err
	}
	m.KeyCheck, m.VolumeUID = vk.check, uid
	return vk.page, nil
}

// protectTags commits the keyed tags of n blocks of data at lba for
// Create, under one fresh generation. Generations are reserved ahead
// (takeGen: a synced commit per genAhead chunks) before any tag under
// them is computed; the tags' own commit is not synced (the protect
// checkpoint's synced commit makes it durable before the cursor covers the
// blocks). So blocks past the cursor, protected again after a crash, get
// new generations, never ones a lost commit had used. The blocks' tuples
// and sums are committed in the same batch (not through the bulk loader),
// since the tag page's MAC seals the tuple page as stored.
//
// A chunk of splitMinBytes or more has its tags computed in pieces that a
// second CPU may share (splitWork, split.go), as keyed reads do: Poly1305
// was most of a keyed protect's CPU time (BenchmarkProtect). ps keeps the
// buffers from chunk to chunk.
func (v *Volume) protectTags(lba int64, n int, data, tuples []byte, sums []uint32, ps *protectScratch) error {
	k := v.kd
	gen, err := k.takeGen()
	if err != nil {
		return err
	}
	tags := ps.grow(n)
	if err := k.protectCompute(tags, lba, gen, data, v.bs, ps); err != nil {
		return err
	}
	x := v.tup.NewTxn()
	if err := x.WriteRange(lba, tuples, sums); err != nil {
		x.Abort()
		return err
	}
	if err := x.WriteTags(lba, tags); err != nil {
		x.Abort()
		return err
	}
	return x.Commit(false)
}

// protectScratch holds protectTags' buffers: the tags of a chunk and, per
// splitWork worker, the associated data, kernel tags and mask stream (the
// pieces a worker takes in a row continue its keystream).
type protectScratch struct {
	tags []store.KeyedTag
	ad   [2][]byte
	pt   [2][]poly1305.Tag
	ms   [2]*poly1305.MaskStream
}

func (ps *protectScratch) grow(n int) []store.KeyedTag {
	if cap(ps.tags) < n {
		ps.tags = make([]store.KeyedTag, n)
		for i := range ps.ad {
			ps.ad[i] = make([]byte, n*adLen)
			ps.pt[i] = make([]poly1305.Tag, n)
		}
	}
	return ps.tags[:n]
}

// protectCompute computes the new tags of the n = len(dst) blocks of data
// at lba under gen: in pieces that a second CPU may share (splitWork) from
// splitMinBytes on. The pieces' nonces are those of one run (gen, lba+i),
// so the tags are the same either way.
func (k *keyed) protectCompute(dst []store.KeyedTag, lba int64, gen uint64, data []byte, bs int, ps *protectScratch) error {
	n := len(dst)
	if testHookNewTags != nil {
		testHookNewTags(k.uid, gen, lba, n)
	}
	if ps.ms[0] == nil {
		ps.ms = [2]*poly1305.MaskStream{k.tk.MaskStream(), k.tk.MaskStream()}
	}
	if n*bs < splitMinBytes {
		return k.tagsInto(dst, lba, gen, data, bs, ps.ad[0], ps.pt[0], ps.ms[0])
	}
	var errs [2]error
	splitBlocks(n, bs, func(w, i, j int) bool {
		errs[w] = k.tagsInto(dst[i:j], lba+int64(i), gen, data[i*bs:j*bs], bs, ps.ad[w], ps.pt[w], ps.ms[w])
		return errs[w] == nil
	})
	return errors.Join(errs[0], errs[1])
}

// tagEqual compares two tags in constant time: two 64-bit XORs, without the
// per-call cost of crypto/subtle on slices (10% of a 512-byte block's check).
func tagEqual(a, b *[16]byte) bool {
	x := binary.LittleEndian.Uint64(a[:8]) ^ binary.LittleEndian.Uint64(b[:8])
	y := binary.LittleEndian.Uint64(a[8:]) ^ binary.LittleEndian.Uint64(b[8:])
	return x|y == 0
}
