package keyed

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/difctl/difctl/blockdev/internal/split"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/kernels/poly1305"
	"github.com/difctl/difctl/store"
)

// Scratch is a request's keyed working memory, sized for one verified run
// of the engine's chunk of blocks: the tags it reads and computes, the
// buffers of the split workers, and with partials those of the fused copy
// (fused.go). One request uses it at a time; its split workers (w 0 and 1)
// share it on disjoint blocks.
type Scratch struct {
	e         *Engine
	calc      []store.KeyedTag // tags computed from the data
	committed []store.KeyedTag
	failed    []uint64 // blocks with a keyed problem
	transient []uint64 // blocks that passed a re-read (Transient)
	runs      []kRun
	fails     []Failure
	pageErr   *store.PageMACError // LoadTags': the tag pages that failed
	ad        [2][]byte           // associated data, per split worker (0 the caller, 1 the helper)
	ptags     [2][]poly1305.Tag   // their kernels' tags
	streams   [2]*poly1305.MaskStream
	parts     *parts // the partials of the fused copy, if kept
}

// kRun is a run of blocks [i, j) of one generation whose tags are computed
// in one call.
type kRun struct {
	i, j int
	gen  uint64
}

// NewScratch returns the working memory of a request. With partials it
// keeps the Poly1305 partials of the fused copy for up to workers dif
// calls at once (Hook).
func (e *Engine) NewScratch(workers int, partials bool) *Scratch {
	n, w := e.chunk, (e.chunk+63)/64
	ks := &Scratch{e: e, calc: make([]store.KeyedTag, n), committed: make([]store.KeyedTag, n),
		failed: make([]uint64, w), transient: make([]uint64, w),
		streams: [2]*poly1305.MaskStream{e.tag.MaskStream(), e.tag.MaskStream()}}
	for i := range ks.ad {
		ks.ad[i] = make([]byte, n*adLen)
		ks.ptags[i] = make([]poly1305.Tag, n)
		// The uid part of every block's associated data, once (fillAddr).
		e.fill(ks.ad[i], 0, 0, n)
	}
	if partials {
		ks.parts = newParts(n, workers, e.tag)
	}
	return ks
}

// Run is a verified run whose keyed tags LoadTags and Check check, as the
// Volume's verifier leaves it.
type Run struct {
	LBA       int64
	N         int
	Data      []byte           // the blocks' bytes, as verified (read after LoadTags, if need be)
	States    []dif.State      // their states: dif's, StateFailed for every other failure
	Written   store.Bitmap     // the blocks their tuples say are written
	IOBad     []uint64         // blocks that could not be read (failed already)
	Transient []uint64         // blocks that failed and passed a re-read (Scratch.Transient)
	Have      []uint64         // blocks whose tags are in Tags already: staged, or flushed and not folded
	Tags      []store.KeyedTag // the blocks' tags; LoadTags reads those of the others
}

// Failure is a block of a run that fails the keyed check: its data does
// not match its tag ("mismatch"), it has no tag while written ("missing"),
// one while unwritten ("unwritten"), its tag page fails its MAC
// ("page-mac") or is missing ("page-missing"). Expected is the tag
// computed from the data ("mismatch" only), Actual and Gen the stored
// ones.
type Failure struct {
	I        int // the block's index in the run
	Gen      uint64
	Expected [16]byte
	Actual   [16]byte
	Reason   string
}

// Transient returns the cleared bitmap of the blocks of a run of n that
// passed a re-read, for the caller to set and pass as Run.Transient.
func (ks *Scratch) Transient(n int) []uint64 {
	t := ks.transient[:(n+63)/64]
	clear(t)
	return t
}

// LoadTags reads the committed tags of the blocks of r that have none in
// r.Tags (r.Have): from the cache of verified tag pages, else the store,
// whose tag pages that fail their MAC or are missing Check reports. It
// returns the store's failure to read them.
func (ks *Scratch) LoadTags(r *Run) error {
	committed := ks.committed[:r.N]
	ks.pageErr = nil
	err := ks.e.readCommitted(r.LBA, committed, ks.e.tup.TupleReads())
	switch {
	case errors.As(err, &ks.pageErr):
		// The tags are there (their CRC matches): each is still checked
		// against its data, and each failed page is reported once (Check).
	case err != nil:
		return fmt.Errorf("blockdev: reading the keyed tags of blocks [%d, %d): %w", r.LBA, r.LBA+int64(r.N), err)
	}
	for i := range r.N {
		if !hasBit(r.Have, i) {
			r.Tags[i] = committed[i]
		}
	}
	return nil
}

// Check verifies the keyed tags of the blocks of r that passed the other
// checks (eligible), after LoadTags, and returns a Failure for each that
// fails, at most one per block, valid until the next call. A run of
// split.MinBytes or more has its tags computed in pieces that the caller
// and the split helper take in turn (split.Work).
func (ks *Scratch) Check(r *Run) ([]Failure, error) {
	n, lba := r.N, r.LBA
	end := lba + int64(n)
	w := (n + 63) / 64
	failed := ks.failed[:w]
	clear(failed)
	ks.fails = ks.fails[:0]
	tags, pageErr := r.Tags[:n], ks.pageErr
	bad := func(f Failure) {
		ks.fails = append(ks.fails, f)
		setBit(failed, f.I)
	}
	// The runs of eligible written blocks of one generation, each one
	// kernel call; the other blocks are decided here.
	// Blocks of tag pages that are missing (deleted: every tag page is
	// recorded from Create on) have no tags to check: each is a failure.
	var gone []uint64
	if pageErr != nil && len(pageErr.Missing) > 0 {
		gone = make([]uint64, w)
		P := ks.e.pageTuples
		for _, page := range pageErr.Missing {
			for b := max(page*P, lba); b < min((page+1)*P, end); b++ {
				if i := int(b - lba); !hasBit(r.Have, i) {
					setBit(gone, i)
				}
			}
		}
	}
	runs := ks.runs[:0]
	blocks := 0
	for i := 0; i < n; {
		if !r.eligible(i) {
			i++
			continue
		}
		written := r.Written.Has(i)
		switch {
		case gone != nil && hasBit(gone, i):
			bad(Failure{I: i, Reason: "page-missing"})
			i++
			continue
		case written && tags[i].Gen == 0:
			bad(Failure{I: i, Reason: "missing"})
			i++
			continue
		case !written && tags[i].Gen != 0:
			bad(Failure{I: i, Gen: tags[i].Gen, Actual: tags[i].Tag, Reason: "unwritten"})
			i++
			continue
		case !written:
			i++
			continue
		}
		j := i + 1
		for j < n && r.eligible(j) && r.Written.Has(j) && tags[j].Gen == tags[i].Gen && (gone == nil || !hasBit(gone, j)) {
			j++
		}
		runs = append(runs, kRun{i, j, tags[i].Gen})
		blocks += j - i
		i = j
	}
	ks.runs = runs
	calc := ks.calc[:n]
	if err := ks.compute(runs, blocks, lba, r.Data, calc, r.Transient); err != nil {
		return nil, err
	}
	for _, kr := range runs {
		for m := kr.i; m < kr.j; m++ {
			if !tagEqual(&calc[m].Tag, &tags[m].Tag) {
				bad(Failure{I: m, Gen: tags[m].Gen, Expected: calc[m].Tag, Actual: tags[m].Tag, Reason: "mismatch"})
			}
		}
	}
	if pageErr != nil {
		// A page that fails its MAC may hold an older, authentic (data,
		// tag) pair put back by an attacker, which the tag check cannot
		// see, or say unwritten of blocks that were written: every block
		// of it not failed already fails.
		P := ks.e.pageTuples
		for _, page := range pageErr.Pages {
			if pageErr.IsMissing(page) {
				continue
			}
			for b := max(page*P, lba); b < min((page+1)*P, end); b++ {
				i := int(b - lba)
				if hasBit(r.Have, i) || hasBit(failed, i) || !r.eligible(i) {
					continue
				}
				bad(Failure{I: i, Gen: tags[i].Gen, Actual: tags[i].Tag, Reason: "page-mac"})
			}
		}
	}
	return ks.fails, nil
}

// eligible reports whether block i of the run passed the other checks, at
// once or on a re-read (transient): only those get the keyed check, the
// others are failures already.
func (r *Run) eligible(i int) bool {
	if hasBit(r.IOBad, i) {
		return false
	}
	return r.States[i] != dif.StateFailed || hasBit(r.Transient, i)
}

// compute computes the tags of runs (blocks blocks in all) into calc: in
// pieces that a second CPU may share (split.Work); from the partials of
// the fused copy where classify computed them (fused.go), from data
// otherwise.
func (ks *Scratch) compute(runs []kRun, blocks int, lba int64, data []byte, calc []store.KeyedTag, transient []uint64) error {
	bs := ks.e.bs
	if blocks*bs < split.MinBytes {
		for _, r := range runs {
			if err := ks.runTags(calc[r.i:r.j], r, lba, data, 0, transient); err != nil {
				return err
			}
		}
		return nil
	}
	// Each run cut into pieces as split.Pieces cuts it.
	var pieces []kRun
	for _, r := range runs {
		bp := split.NewPieces(r.j-r.i, bs)
		for p := range bp.Len() {
			i, j := bp.At(p)
			pieces = append(pieces, kRun{r.i + i, r.i + j, r.gen})
		}
	}
	var errs [2]error
	split.Work(len(pieces), func(w, p int) bool {
		r := pieces[p]
		errs[w] = ks.runTags(calc[r.i:r.j], r, lba, data, w, transient)
		return errs[w] == nil
	})
	return errors.Join(errs[0], errs[1])
}

// runTags computes the tags of run r into dst (dst[0] is block r.i) with
// split worker w's buffers: from the partials of the blocks that have
// them, from data for the others.
func (ks *Scratch) runTags(dst []store.KeyedTag, r kRun, lba int64, data []byte, w int, transient []uint64) error {
	e, bs, p := ks.e, ks.e.bs, ks.parts
	ad, pt := ks.ad[w], ks.ptags[w]
	for i := r.i; i < r.j; {
		ok := p.have(i, transient)
		j := i + 1
		for j < r.j && p.have(j, transient) == ok {
			j++
		}
		var err error
		if ok {
			fusedRuns.Add(1)
			err = e.tagsFromParts(dst[i-r.i:j-r.i], lba+int64(i), r.gen, p.parts[i:j], bs, ad, pt)
		} else {
			err = e.tagsInto(dst[i-r.i:j-r.i], lba+int64(i), r.gen, data[i*bs:j*bs], bs, ad, pt, nil)
		}
		if err != nil {
			return err
		}
		i = j
	}
	return nil
}

// The keyed read path (blockdev's read_keyed.go) checks a run whose blocks
// all verify with their tags through these: the committed tags of a part
// of the run, the tags of its blocks computed as they are read or copied
// from the device, and the comparison.

// Committed returns the committed tags of blocks [i, j) of the run at lba,
// a slice of the cache of verified tag pages (which the caller must not
// change) or of the scratch, for a caller whose tuples were read before
// the store's tuple read count minReads (see readCommitted). Its error is
// the store's, a *store.PageMACError for tag pages that fail.
func (ks *Scratch) Committed(lba int64, i, j int, minReads uint64) ([]store.KeyedTag, error) {
	return ks.e.committedView(lba+int64(i), j-i, ks.committed[i:j], minReads)
}

// errUntagged is TagsOf's report of a block without a committed tag.
var errUntagged = errors.New("blockdev: a block without a keyed tag")

// TagsOf computes the tags of blocks [a, b) of the run at lba, whose bytes
// are q (copied from src first when src is not nil), under the generations
// of their committed tags (tags[0] is block a's), keeping them for
// Matches: one kernel call per generation, with split worker w's
// associated data buffer and mask stream (the keystream continued from the
// worker's call before when the nonces follow on: within a run, when the
// worker takes consecutive pieces). A block whose tag has generation 0 (it
// has none) stops it with an error, the blocks before it copied.
func (ks *Scratch) TagsOf(w int, lba int64, a, b int, q, src []byte, tags []store.KeyedTag) error {
	bs := ks.e.bs
	ad, ms := ks.ad[w], ks.streams[w]
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
		fillAddr(ad, lba+int64(x), gen, m) // the uids are there (NewScratch)
		var nonce poly1305.Nonce
		binary.BigEndian.PutUint64(nonce[:8], gen)
		binary.BigEndian.PutUint64(nonce[8:], uint64(lba+int64(x)))
		dst := q[(x-a)*bs : (y-a)*bs]
		var err error
		if src != nil {
			err = ms.BlocksADCopy(ks.ptags[0][x:y], &nonce, ad, adLen, dst, src[(x-a)*bs:(y-a)*bs], bs, bs)
		} else {
			err = ms.BlocksAD(ks.ptags[0][x:y], &nonce, ad, adLen, dst, bs, bs)
		}
		if err != nil {
			return err
		}
		x = y
	}
	return nil
}

// Matches reports whether the tags TagsOf computed of blocks [i,
// i+len(tags)) of the run are tags.
func (ks *Scratch) Matches(i int, tags []store.KeyedTag) bool {
	calc := ks.ptags[0][i : i+len(tags)]
	for x := range tags {
		if !tagEqual((*[16]byte)(&calc[x]), (*[16]byte)(&tags[x].Tag)) {
			return false
		}
	}
	return true
}

func hasBit(m []uint64, i int) bool { return m[i/64]>>(i%64)&1 != 0 }
func setBit(m []uint64, i int)      { m[i/64] |= 1 << (i % 64) }

// Verify reports whether data verifies as block i (lba) of the run r that
// Check last checked, against the block's keyed tag r.Tags[i]: a written
// block's tag computed from data must match it, and an unwritten block
// must have none. The repair stage asks it of every copy it would write
// over a failing block. A block whose tag came from a tag page that
// failed its MAC (or is missing) has no tag that can be trusted: no copy
// verifies.
func (ks *Scratch) Verify(r *Run, i int, data []byte) bool {
	lba := r.LBA + int64(i)
	if pe := ks.pageErr; pe != nil && !hasBit(r.Have, i) {
		page := lba / ks.e.pageTuples
		for _, p := range pe.Pages {
			if p == page {
				return false
			}
		}
	}
	t := r.Tags[i]
	if !r.Written.Has(i) {
		return t.Gen == 0
	}
	if t.Gen == 0 {
		return false
	}
	var calc [1]store.KeyedTag
	if ks.e.Tags(calc[:], lba, t.Gen, data[:ks.e.bs], ks.e.bs) != nil {
		return false
	}
	return poly1305.Equal(calc[0].Tag, t.Tag)
}
