// Package keyed is the tag engine of blockdev's keyed volumes
// (ARCHITECTURE.md; docs/keyed.md): the keys a volume derives from
// its Key, the generations of its writes and their durable reservation,
// the tags of writes, protects and discards, the cache of verified tag
// pages, the keyed check of a verified run (with the Poly1305 partials of
// the fused copy, computed through dif's copy hook), and the keyed part of
// crash recovery. blockdev's Volume calls it; the public API (blockdev.Key,
// KeyedTagError, ErrKeyRequired, ...) stays in blockdev.
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
// reads. Blocks of one write have consecutive nonces, so the masks of a
// run come from one AES-CTR keystream (poly1305.Key.BlocksAD).
//
// The store keeps tags in tag pages that carry a page MAC (see
// store/keyed.go) which also seals the tuple page of the same blocks, so
// a forged tag or generation, a page copied from another page or volume,
// or any edit of a tuple page (guard, app tag, ref tag, sector sum,
// written bit) fails when it is read with the key: every block of the page
// fails (reason "page-mac"). Every tag page is recorded from Create on (in
// the empty run, sealed with a MAC, that store.CreateKeyedTuples writes
// for every page, until the page is written; a discard of a whole page
// seals it empty again, never deletes it), so a tag page that is missing was
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
//     hole, the empty run sealed at Create), put back with its tuple page
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
// (blockdev's Volume.KeyedChecked reports false) and this package is not
// used; writes, discards and remaps are refused with
// blockdev.ErrKeyRequired, and so is the crash recovery of a volume
// that has intents to resolve.
package keyed
