package blockdev

import (
	"errors"
	"sync/atomic"

	"github.com/difctl/difctl/blockdev/internal/keyed"
	"github.com/difctl/difctl/blockdev/internal/split"
	"github.com/difctl/difctl/dif"
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
// keyed.Scratch.Committed.)
//
// So the guard is then the CRC of that data, and the sum its CRC-32C:
// computing them again proves nothing the tag has not. The keyed read path
// (verifyRunKeyed) does what remains: it reads the run's tags and checks
// their pages, copies the blocks from the device's mapping while
// computing their tags (poly1305.Key.BlocksADCopy: each tag of the bytes
// the caller gets), checks every app and ref tag (dif.Format.Classify with
// the guard skipped) and compares the tags. Anything else sends the whole run
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
//
// The keyed read path takes the stages of verifyRun in its own way, per
// part of the run (keyedReadPart): load (the tuples, and the committed
// tags through the keyed engine, keyed.Scratch.Committed), classify (dif,
// app and ref tags only), read (the blocks copied from the mapping while
// the engine computes their tags, keyed.Scratch.TagsOf) and check
// (keyed.Scratch.Matches). The ordinary path's stage 5, the keyed check of
// a run that took stages 1-4, is checkTags, at the end of this file.

// keyedReadRuns and keyedReadFallbacks count the runs the keyed read path
// served and those it passed to the ordinary path (for the tests).
var (
	keyedReadRuns      atomic.Int64
	keyedReadFallbacks atomic.Int64
)

// keyedReadable reports whether a run read with req may take the keyed
// read path.
func (v *Volume) keyedReadable(req readReq) bool {
	return v.tags != nil && !v.opts.KeyedCRC && !req.inPlace
}

// verifyRunKeyed is verifyRun's keyed read path (see above) for the run of
// n blocks at lba: ok reports whether it served the run; if not, the
// caller verifies it the ordinary way. err is a failure of the store,
// which the ordinary path would return too.
func (v *Volume) verifyRunKeyed(lba int64, n int, data []byte, sc *scratch) (st RunStats, ok bool, err error) {
	w := (n + 63) / 64
	clear(sc.ioBad[:w])
	// Staged blocks, and tuples and tags flushed but not folded (the
	// overlay), are the ordinary path's.
	loaded, over, _ := v.stg.load(lba, n, data, sc, sc.req.uncached)
	if loaded || over {
		return RunStats{}, false, nil
	}
	ok = split.Blocks(n, v.bs, func(w, i, j int) bool {
		return v.keyedReadPart(lba, i, j, data, w, sc)
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
// read, see keyed.Scratch.Committed), every block tagged (checked by
// keyed.Scratch.TagsOf), the tuples' checks without the guard (app and ref
// tags), the blocks read into data with their tags computed
// (keyedReadData), and the tags compared. w is the split worker running
// the part. It reports whether every block passed; a store error is false
// too (the ordinary path reads the tuples again and returns it). The parts
// read their own tuples so that the run's are not read before the split,
// on one CPU.
func (v *Volume) keyedReadPart(lba int64, i, j int, data []byte, w int, sc *scratch) bool {
	bs, ts := v.bs, v.ts
	read := v.tup.ReadRangeCached
	if sc.req.storeTuples {
		read = v.tup.ReadRange
	}
	if cnt, err := read(lba+int64(i), sc.tuples[i*ts:j*ts], nil, nil); err != nil || cnt != j-i {
		return false
	}
	tags, err := sc.tags.Committed(lba, i, j, v.tup.TupleReads())
	if err != nil {
		return false
	}
	// (A block without a tag, generation 0, is found by TagsOf: one pass
	// over the tags, which are not in the cache. A separate pass here
	// took 5% of the keyed CPU at 512-byte blocks, its cache misses.)
	p := v.paramsFrom(sc.req.ref, lba+int64(i))
	p.Skip |= dif.CheckGuard
	sum, err := v.f.Classify(&dif.Classification{States: sc.states[i:j]}, data[i*bs:j*bs], sc.tuples[i*ts:j*ts], p)
	if err != nil || sum.OK != j-i {
		return false
	}
	if !v.keyedReadData(lba, i, j, data, w, tags, sc) {
		return false
	}
	return sc.tags.Matches(i, tags)
}

// lastWordMask is the mask of word x of a bitmap of n bits: all ones but
// for the last word's bits past n.
func lastWordMask(n, x int) uint64 {
	if r := n - 64*x; r < 64 {
		return 1<<r - 1
	}
	return ^uint64(0)
}

// keyedReadData reads blocks [i, j) of the run at lba into data and
// computes their keyed tags (keyed.Scratch.TagsOf), under the generations
// of their committed tags (tags[0] is block i's), from the bytes written
// to data: from the device's mapping in pieces, each copied and tagged in
// one pass, or read into data first. It reports false if a piece could
// not be read (the ordinary path reads and reports it). w is the split
// worker calling it, whose mapped read callback and keyed buffers it uses.
func (v *Volume) keyedReadData(lba int64, i, j int, data []byte, w int, tags []store.KeyedTag, sc *scratch) bool {
	bs := v.bs
	m := sc.tagMaps[w]
	mapped := sc.req.mapper != nil && !sc.req.uncached && !v.noMap.Load()
	// Pieces of a multiple of the kernels' group of blocks where they can be.
	piece := split.KernelBlocks(pipePiece / bs)
	for a := i; a < j; a += piece {
		b := min(j, a+piece)
		q := data[a*bs : b*bs]
		var err error
		if mapped {
			*m = mappedTags{lba: lba, a: a, b: b, q: q, w: w, tags: tags[a-i:], ks: sc.tags, fn: m.fn}
			err = sc.req.mapper.ReadMapped((lba+int64(a))*int64(bs), (b-a)*bs, m.fn)
			*m = mappedTags{ks: sc.tags, w: w, fn: m.fn} // (not keeping the caller's buffer)
		} else {
			if err = sc.readDev(q, lba+int64(a), bs, sc.req.uncached); err == nil {
				err = sc.tags.TagsOf(w, lba, a, b, q, nil, tags[a-i:])
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
// helper.
type mappedTags struct {
	lba  int64
	a, b int
	q    []byte
	w    int // the worker
	tags []store.KeyedTag
	ks   *keyed.Scratch
	fn   func(src []byte) error
}

func newMappedTags(ks *keyed.Scratch, w int) *mappedTags {
	m := &mappedTags{ks: ks, w: w}
	m.fn = m.call
	return m
}

func (m *mappedTags) call(src []byte) error {
	return m.ks.TagsOf(m.w, m.lba, m.a, m.b, m.q, src, m.tags)
}

// checkTags is stage 5 of a verified read (verifyRun) of a keyed volume
// opened with its key. It verifies the keyed tags of the blocks of the run
// that passed the other checks, appending a KindKeyedTag problem for each
// that fails and moving it from st.OK (or Unwritten, Escaped) to
// st.Failed. reread: the OK blocks are not in data (a check verified them
// in the device's mapping) and are read again, after the tags. Tags come
// from staging (the batches, then the overlay: sc.ovTags), then the store,
// in that order (see staging.go on why a reader looks at what the fold
// clears before what it commits). A run of split.MinBytes or more has its
// tags computed in pieces that the caller and the split helper take in
// turn.
func (v *Volume) checkTags(lba int64, n int, data []byte, sc *scratch, st *RunStats, reread bool) error {
	ks := sc.tags
	sc.krun = keyed.Run{LBA: lba, N: n, Data: data, States: sc.states[:n], Written: sc.written,
		IOBad: sc.ioBad, Have: sc.ovMask, Tags: sc.ovTags}
	r := &sc.krun
	if err := ks.LoadTags(r); err != nil {
		return err
	}
	if reread {
		if err := sc.readDev(data[:n*v.bs], lba, v.bs, false); err != nil {
			return err
		}
	}
	// A block that failed and passed a re-read holds the re-read data now,
	// which must pass the keyed check too.
	r.Transient = ks.Transient(n)
	end := lba + int64(n)
	for _, p := range sc.probs {
		if p.Transient && p.LBA >= lba && p.LBA < end {
			setBit(r.Transient, int(p.LBA-lba))
		}
	}
	fails, err := ks.Check(r)
	if err != nil {
		return err
	}
	for _, f := range fails {
		i := f.I
		e := &KeyedTagError{LBA: lba + int64(i), Gen: f.Gen, Expected: f.Expected, Actual: f.Actual, Reason: f.Reason}
		sc.probs = append(sc.probs, Problem{LBA: e.LBA, Kind: KindKeyedTag, Expected: tagWord(e.Expected), Actual: tagWord(e.Actual), Err: e})
		switch {
		case r.States[i] == dif.StateUnwritten && !hasBit(sc.ioBad, i):
			st.Unwritten--
		case r.States[i] == dif.StateEscaped:
			st.Escaped--
		default:
			st.OK--
		}
		st.Failed++
		v.st.failed.Add(1)
	}
	if len(fails) > 0 {
		sortProblems(sc.probs)
	}
	return nil
}
