package blockdev

import (
	"encoding/binary"
	"errors"
	"sync/atomic"

	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/kernels/poly1305"
	"github.com/difctl/difctl/store"
)

// The keyed read path. A verified read of a keyed volume opened with its
// key checks, for every block, the guard and sector checksum against its
// stored tuple and sum, and the keyed tag against the data. When the tag
// verifies and the block's tag page passes its MAC, the guard and sum
// checks cannot fail unless the volume itself wrote an inconsistent
// tuple:
//
//   - the tag verifies, so the data is, bit for bit, the data the volume
//     tagged under that generation (forging it is forging Poly1305-AES);
//   - the tag page's MAC seals the tuple page of the same blocks byte for
//     byte (store/keyed.go), so the stored guard, app tag, ref tag, sector
//     sum and written bit are those the volume committed with that tag;
//   - and the volume computes every tag and tuple it commits from one
//     private copy of the bytes it writes (WriteAt copies the caller's
//     buffer first, Create reads the device into its own buffer, recovery
//     takes an intent's tuple and tag together or neither, and a discarded
//     block is unwritten, which this path does not take).
//
// (The tuples it uses must be the ones the MAC sealed: a tag page cached
// after its MAC check serves it only if the tuples were read from the
// store before that check, else the page is read and checked again; see
// readCommitted.)
//
// So the guard is then the CRC of that data, and the sum its CRC-32C:
// computing them again proves nothing the tag has not. The keyed read path
// (verifyRunKeyed) does what remains: it reads the run's tags and checks
// their pages, copies the blocks from the device's mapping while
// computing their tags (poly1305.Key.BlocksADCopy: each tag of the bytes
// the caller gets), checks every app and ref tag (dif.Format.Classify with the
// guard skipped) and compares the tags. Anything else sends the whole run
// to the ordinary path, which computes everything and reports each
// failure exactly as before: a tag that does not match, a tag page that
// fails its MAC or is missing, a block without a tag, an unwritten,
// escaped or staged block, a tuple that fails, a read or mapping error.
// The fallback reads the run again; no result of the keyed path is kept.
//
// What this gives up: a bug of the volume's own that committed a tag with
// a tuple computed from other bytes would not be seen by reads (it would
// be, by every check: CheckRun, difctl verify and scrub compute guards,
// sums and tags). Options.KeyedCRC makes reads compute them too.

// keyedReadRuns and keyedReadFallbacks count the runs the keyed read path
// served and those it passed to the ordinary path (for the tests).
var (
	keyedReadRuns      atomic.Int64
	keyedReadFallbacks atomic.Int64
)

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
		sc.wcopy = AlignedBuffer(max(keyedWritePiece, len(p)))
	}
	return sc.wcopy[:copy(sc.wcopy, p)]
}

// keyedReadable reports whether a run read with req may take the keyed
// read path.
func (v *Volume) keyedReadable(req readReq) bool {
	return v.kd != nil && !v.opts.KeyedCRC && !req.inPlace
}

// verifyRunKeyed is verifyRun's keyed read path (see above) for the run of
// n blocks at lba: ok reports whether it served the run; if not, the
// caller verifies it the ordinary way. err is a failure of the store,
// which the ordinary path would return too.
func (v *Volume) verifyRunKeyed(lba int64, n int, data []byte, sc *scratch) (st RunStats, ok bool, err error) {
	w := (n + 63) / 64
	clear(sc.ioBad[:w])
	// Staged blocks, and tuples flushed but not folded (the overlay), are
	// the ordinary path's; so are pending tags.
	loaded, over, _ := v.stg.load(lba, n, data, sc, sc.req.uncached)
	if loaded || over {
		return RunStats{}, false, nil
	}
	ks := v.kd.scratchFor(sc)
	if v.kd.pendingIn(lba, n) {
		return RunStats{}, false, nil
	}
	ok = splitBlocks(n, v.bs, func(w, i, j int) bool {
		return v.keyedReadPart(lba, i, j, data, w, ks, sc)
	})
	if !ok {
		return RunStats{}, false, nil
	}
	// What loadRun leaves for the caller (verifyRun's contract): the
	// tuples (read by the parts) and the written bits, all set.
	sc.unwritten = false
	for x := range w {
		sc.written[x] = lastWordMask(n, x)
	}
	return RunStats{Blocks: int64(n), OK: int64(n)}, true, nil
}

// keyedReadPart is the keyed read path's work on blocks [i, j) of the run
// at lba: their tuples into sc.tuples (as loadRun reads them; every block
// written), their committed tags (tag pages checked after the tuples were
// read, see readCommitted), every block tagged (checked by keyedTagsOf),
// the tuples' checks without
// the guard (app and ref tags), the blocks read into data with their tags
// computed (keyedReadData), and the tags compared. w is the splitWork
// worker running the part. It reports whether every block passed; a store
// error is false too (the ordinary path reads the tuples again and returns
// it). The parts read their own tuples so that the run's are not read
// before the split, on one CPU.
func (v *Volume) keyedReadPart(lba int64, i, j int, data []byte, w int, ks *keyedScratch, sc *scratch) bool {
	bs, ts := v.bs, v.ts
	read := v.tup.ReadRangeCached
	if sc.req.storeTuples {
		read = v.tup.ReadRange
	}
	if cnt, err := read(lba+int64(i), sc.tuples[i*ts:j*ts], nil, nil); err != nil || cnt != j-i {
		return false
	}
	tags, err := v.committedView(lba+int64(i), j-i, ks.committed[i:j], v.tup.TupleReads())
	if err != nil {
		return false
	}
	// (A block without a tag, generation 0, is found by keyedTagsOf: one
	// pass over the tags, which are not in the cache. A separate pass here
	// took 5% of the keyed CPU at 512-byte blocks, its cache misses.)
	p := v.paramsFrom(sc.req.ref, lba+int64(i))
	p.Skip |= dif.CheckGuard
	sum, err := v.f.Classify(&dif.Classification{States: sc.states[i:j]}, data[i*bs:j*bs], sc.tuples[i*ts:j*ts], p)
	if err != nil || sum.OK != j-i {
		return false
	}
	if !v.keyedReadData(lba, i, j, data, w, tags, ks, sc.req.uncached) {
		return false
	}
	calc := ks.ptags[i:j]
	for x := range tags {
		if !tagEqual((*[16]byte)(&calc[x]), (*[16]byte)(&tags[x].Tag)) {
			return false
		}
	}
	return true
}

// lastWordMask is the mask of word x of a bitmap of n bits: all ones but
// for the last word's bits past n.
func lastWordMask(n, x int) uint64 {
	if r := n - 64*x; r < 64 {
		return 1<<r - 1
	}
	return ^uint64(0)
}

// pendingIn reports whether any block of [lba, lba+n) has a pending tag
// (flushed to the device, not yet committed).
func (k *keyed) pendingIn(lba int64, n int) bool {
	found := false
	k.eachPending(lba, n, func(int, *store.KeyedTag) bool {
		found = true
		return false
	})
	return found
}

// eachPending calls fn with the index i in [0, n) and the pending tag of
// every block lba+i that has one, in order, under pendMu, until fn
// returns false.
func (k *keyed) eachPending(lba int64, n int, fn func(i int, t *store.KeyedTag) bool) {
	k.pendMu.RLock()
	defer k.pendMu.RUnlock()
	if len(k.pend) == 0 {
		return
	}
	end := lba + int64(n)
	for p := lba >> ovShift; p <= (end-1)>>ovShift; p++ {
		pg := k.pend[p]
		if pg == nil {
			continue
		}
		s, t := max(p<<ovShift, lba), min((p+1)<<ovShift, end)
		for b := s; b < t; b++ {
			if o := int(b & (ovP - 1)); hasBit(pg.mask[:], o) && !fn(int(b-lba), &pg.tags[o]) {
				return
			}
		}
	}
}

// keyedReadData reads blocks [i, j) of the run at lba into data and
// computes their keyed tags into ks.ptags, under the generations of their
// committed tags (tags[0] is block i's), from the bytes written to data: from the device's mapping
// in pieces, each copied and tagged in one pass (keyedTagsOf), or read
// into data first. It reports false if a piece could not be read (the
// ordinary path reads and reports it). w is the splitWork worker calling
// it, whose associated data buffer and mapped read callback it uses.
func (v *Volume) keyedReadData(lba int64, i, j int, data []byte, w int, tags []store.KeyedTag, ks *keyedScratch, uncached bool) bool {
	bs := v.bs
	m := ks.maps[w]
	mapped := v.mapper != nil && !uncached && !v.noMap.Load()
	// Pieces of a multiple of kernelGroup blocks where they can be.
	piece := kernelBlocks(pipePiece / bs)
	for a := i; a < j; a += piece {
		b := min(j, a+piece)
		q := data[a*bs : b*bs]
		var err error
		if mapped {
			*m = mappedTags{v: v, lba: lba, a: a, b: b, q: q, w: w, tags: tags[a-i:], ks: ks, fn: m.fn}
			err = v.mapper.ReadMapped((lba+int64(a))*int64(bs), (b-a)*bs, m.fn)
			*m = mappedTags{ks: ks, w: w, fn: m.fn} // (not keeping the caller's buffer)
		} else {
			if err = v.readDev(q, lba+int64(a), uncached); err == nil {
				err = v.keyedTagsOf(lba, a, b, q, nil, w, tags[a-i:], ks)
			}
		}
		if err != nil {
			if errors.Is(err, errors.ErrUnsupported) {
				v.noMap.Store(true)
			}
			return false
		}
	}
	return true
}

// mappedTags is a worker's ReadMapped callback in keyedReadData, with the
// arguments of its next call: fn, m.call, is made once with the scratch,
// where a function literal per piece would be allocated (the callback
// escapes, called through the Mapper interface): about 120 bytes a piece,
// 2.3 KB per keyed read of 1 MiB in 512-byte blocks, a fifth of what it
// allocated (the rest is the AES-CTR streams, about 500 bytes each). Fewer
// allocations mean fewer garbage collections, which stall the split
// helper (splitGate).
type mappedTags struct {
	v    *Volume
	lba  int64
	a, b int
	q    []byte
	w    int // the worker
	tags []store.KeyedTag
	ks   *keyedScratch
	fn   func(src []byte) error
}

func (m *mappedTags) call(src []byte) error {
	return m.v.keyedTagsOf(m.lba, m.a, m.b, m.q, src, m.w, m.tags, m.ks)
}

// errUntagged is keyedTagsOf's report of a block without a committed tag.
var errUntagged = errors.New("blockdev: a block without a keyed tag")

// keyedTagsOf computes the tags of blocks [a, b) of the run, whose bytes
// are q (copied from src first when src is not nil), into ks.ptags, under
// the generations of the committed tags (tags[0] is block a's): one kernel
// call per generation, with worker w's associated data buffer and mask
// stream (the keystream continued from the worker's call before when the
// nonces follow on: within a run, when the worker takes consecutive
// pieces). A block whose tag has generation 0 (it has none)
// stops it with errUntagged, the blocks before it copied.
func (v *Volume) keyedTagsOf(lba int64, a, b int, q, src []byte, w int, tags []store.KeyedTag, ks *keyedScratch) error {
	bs := v.bs
	ad, ms := ks.workerAD(w), ks.streams[w]
	tags = tags[:b-a]
	for x := a; x < b; {
		gen := tags[x-a].Gen
		if gen == 0 {
			return errUntagged
		}
		y := x + 1
		for y < b && tags[y-a].Gen == gen {
			y++
		}
		m := y - x
		fillAddr(ad, lba+int64(x), gen, m) // the uids are there (scratchFor)
		var nonce poly1305.Nonce
		binary.BigEndian.PutUint64(nonce[:8], gen)
		binary.BigEndian.PutUint64(nonce[8:], uint64(lba+int64(x)))
		dst := q[(x-a)*bs : (y-a)*bs]
		var err error
		if src != nil {
			err = ms.BlocksADCopy(ks.ptags[x:y], &nonce, ad, adLen, dst, src[(x-a)*bs:(y-a)*bs], bs, bs)
		} else {
			err = ms.BlocksAD(ks.ptags[x:y], &nonce, ad, adLen, dst, bs, bs)
		}
		if err != nil {
			return err
		}
		x = y
	}
	return nil
}
