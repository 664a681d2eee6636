package blockdev

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/keyed"
	"github.com/difctl/difctl/store"
)

// Keyed volumes (ARCHITECTURE.md; docs/keyed.md). A volume
// created with CreateOptions.Key keeps a Poly1305-AES tag and its write
// generation per block beside the tuple. This file holds their public API
// and the Volume's side of them; the tag engine (the keys a Key gives a
// volume, the generations and their durable reservation, the tags of
// writes, protects and discards, the cache of verified tag pages, the
// keyed check with the partials of the fused copy, the keyed part of
// recovery) is blockdev/internal/keyed, whose package documentation has
// the construction and the threat model. The Volume calls it through
// tagEngine: stage (the tags of a write), check (a read run's tags,
// through a request's keyed.Scratch), recover (the intents' tags). The
// tags of staged and flushed blocks ride staging's batches and overlay
// beside their tuples (staging.tagged).
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
		return fmt.Sprintf("blockdev: block %d: keyed tag page missing (deleted from the store: every tag page of a keyed volume is recorded from its creation on)", e.LBA)
	}
	return fmt.Sprintf("blockdev: block %d: keyed tag: %s", e.LBA, e.Reason)
}

func (e *KeyedTagError) Unwrap() error { return ErrKeyedTag }

func tagWord(t [16]byte) uint64 { return binary.BigEndian.Uint64(t[:8]) }

// tagEngine is what a Volume asks of its keyed state (keyed.Engine).
type tagEngine interface {
	// Stage computes the tags of a write of len(dst) blocks at lba (data
	// nil: zeros, a discard) under a fresh generation; a failure to hand
	// one out is a *keyed.ReserveError.
	Stage(dst []store.KeyedTag, lba int64, data []byte) error
	// Protect returns the tags of a chunk of Create, in ps.
	Protect(lba int64, n int, data []byte, ps *keyed.ProtectScratch) ([]store.KeyedTag, error)
	// NewScratch returns a request's keyed scratch, with which reads
	// check a run's tags (keyed.Scratch.LoadTags, Check; the keyed read
	// path's Committed, TagsOf, Matches; the partials' Hook).
	NewScratch(workers int, partials bool) *keyed.Scratch
	// Recover returns the keyed part of the recovery of ins.
	Recover(ins []store.Intent) (*keyed.Recovery, error)
}

var _ tagEngine = (*keyed.Engine)(nil)

// setupKeyed sets up the keyed state of v from its manifest and key. A
// keyed volume without a key opens for reads only (see above); a key for
// an unkeyed volume is refused.
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
	keys, err := checkKey(name, m, key)
	if err != nil {
		return err
	}
	if err := v.tup.SetPageMACKey(keys.PageKey()); err != nil {
		return fmt.Errorf("blockdev: volume %q: %w", name, err)
	}
	e, err := keyed.Open(keys, v.tup, v.bs, v.chunk)
	if err != nil {
		return fmt.Errorf("blockdev: volume %q: %w", name, err)
	}
	v.tags = e
	v.stg.tagged = true
	return nil
}

// Keyed reports whether the volume is keyed.
func (v *Volume) Keyed() bool { return v.man.Keyed() }

// KeyedChecked reports whether reads and checks verify the keyed tags: the
// volume is keyed and was opened with its key. A keyed volume opened
// without it verifies tuples and sector checksums only.
func (v *Volume) KeyedChecked() bool { return v.tags != nil }

// keyedWritable refuses changes to a keyed volume opened without its key.
func (v *Volume) keyedWritable(op string) error {
	if v.keyedNoKey {
		return fmt.Errorf("blockdev: %s on volume %q: %w", op, v.opts.Name, ErrKeyRequired)
	}
	return nil
}

// reserveFailure returns the failure to hand out a generation that err
// reports (a *keyed.ReserveError), and whether it is one; otherwise err.
func reserveFailure(err error) (error, bool) {
	var re *keyed.ReserveError
	if errors.As(err, &re) {
		return re.Err, true
	}
	return err, false
}

// stageTags computes the tags of a write of n blocks at lba into the
// batch's slots (see staging.stage). A generation that cannot be handed
// out fails the volume. Caller holds the write's range lock.
func (v *Volume) stageTags(dst []store.KeyedTag, lba int64, n int, data []byte) error {
	err := v.tags.Stage(dst[:n], lba, data)
	if err, gen := reserveFailure(err); gen {
		return v.fail(err)
	}
	return err
}

// discardIntent stages, in x, the tag intent of a discard piece of n
// blocks at lba (intent id): the tags of zero blocks under a fresh
// generation (recovery commits them if the zeros reached the device but
// the discard did not). The generation is reserved in a commit of its own
// before x.
func (v *Volume) discardIntent(x *store.Txn, id store.IntentID, lba int64, n int) error {
	tags := make([]store.KeyedTag, n)
	if err := v.tags.Stage(tags, lba, nil); err != nil {
		err, _ = reserveFailure(err)
		return err
	}
	return x.RecordTagIntent(id, tags)
}

// protectTags commits the keyed tags of n blocks of data at lba for
// Create, under one fresh generation. Generations are reserved ahead (a
// synced commit per so many chunks, keyed.Engine.Protect) before any tag
// under them is computed; the tags' own commit is not synced (the protect
// checkpoint's synced commit makes it durable before the cursor covers the
// blocks). So blocks past the cursor, protected again after a crash, get
// new generations, never ones a lost commit had used. The blocks' tuples
// and sums are committed in the same batch (not through the bulk loader),
// since the tag page's MAC seals the tuple page as stored. ps keeps the
// buffers from chunk to chunk.
func (v *Volume) protectTags(lba int64, n int, data, tuples []byte, sums []uint32, ps *keyed.ProtectScratch) error {
	tags, err := v.tags.Protect(lba, n, data, ps)
	if err != nil {
		err, _ = reserveFailure(err)
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

// keyedWritePiece bounds the bytes of one piece of a keyed WriteAt: the
// piece is copied to the scratch's buffer of this size, and its tuples,
// sums and tags are computed from the copy, which is staged. So they
// describe the same bytes even if the caller's buffer changes during the
// call (a caller's data race, which would otherwise leave a tuple of one
// version of the bytes beside a tag of another).
const keyedWritePiece = 256 << 10

// testHookKeyedWrite, if set, runs in a keyed WriteAt between the tuples
// and the tags of a piece, with the caller's bytes of the piece.
var testHookKeyedWrite func(p []byte)

// keyedWriteCopy copies p (a piece: keyedWritePiece bytes or one block) to the scratch's
// write buffer and returns the copy.
func (sc *scratch) keyedWriteCopy(p []byte) []byte {
	if len(sc.wcopy) < len(p) {
		sc.wcopy = device.AlignedBuffer(max(keyedWritePiece, len(p)))
	}
	return sc.wcopy[:copy(sc.wcopy, p)]
}
