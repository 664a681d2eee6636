package keyed

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"sync"

	"github.com/difctl/difctl/blockdev/internal/split"
	"github.com/difctl/difctl/kernels/poly1305"
	"github.com/difctl/difctl/store"
)

// Engine is the keyed state of a volume opened with its key: its keys,
// its store, the generations it hands out and the cache of the tag pages
// its reads verified. Its methods are safe for concurrent use; a request's
// own buffers are a Scratch (NewScratch).
type Engine struct {
	*Keys
	tup        *store.Tuples // where takeGen commits its reservations, and the tags are read
	bs         int
	chunk      int   // blocks per verified run: a Scratch's size
	pageTuples int64 // blocks per tag page
	blocks     int64

	genMu    sync.Mutex
	next     uint64 // next generation to hand out
	reserved uint64 // highest generation durably reserved; next <= reserved+1 unless exhausted

	cache tagCache
}

// Open returns the engine of the keyed volume whose tuples are tup (its
// page MAC key set), of blocks of bs bytes verified in runs of up to chunk
// blocks, under keys; it resumes the volume's generations
// (resumeGeneration).
func Open(keys *Keys, tup *store.Tuples, bs, chunk int) (*Engine, error) {
	m := tup.Manifest()
	e := &Engine{Keys: keys, tup: tup, bs: bs, chunk: chunk, pageTuples: int64(m.PageTuples), blocks: m.Blocks()}
	e.cache.pages = make(map[int64]*tagCachePage)
	var err error
	if e.next, e.reserved, err = resumeGeneration(tup); err != nil {
		return nil, err
	}
	return e, nil
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
	j, err := GenJump()
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

// GenJump returns the random part of resumeGeneration's jump, in [0,
// 2^32). Tests set it to return 0, to show that the reservation alone
// keeps generations from repeating across crashes.
var GenJump = func() (uint64, error) {
	j, err := rand.Int(rand.Reader, big.NewInt(1<<32))
	if err != nil {
		return 0, err
	}
	return j.Uint64(), nil
}

// TestHookNewTags, if set, is called for every run of new tags an engine
// computes (not for the checks): volume uid, generation, first LBA, count.
var TestHookNewTags func(uid [16]byte, gen uint64, lba int64, n int)

// genAhead is how many generations one reservation commit covers. Each
// staged piece of a write, each discard piece and each Create chunk takes
// one, so a volume makes one extra synced commit per genAhead of them; a
// crash wastes at most genAhead generations of the 2^64, against the
// 2^32 that every Open's jump skips anyway.
const genAhead = 1 << 16

// ReserveError is the failure of Stage or Protect to hand out a
// generation: the reservation of more could not be committed, or the
// generations are exhausted. Err is the failure; the message is Err's.
type ReserveError struct{ Err error }

func (e *ReserveError) Error() string { return e.Err.Error() }
func (e *ReserveError) Unwrap() error { return e.Err }

// takeGen hands out the generation of one write (or discard piece, or
// Create chunk). A generation is handed out only once it is durably
// reserved: when next passes the reservation, takeGen first commits,
// synced, a reservation of the next genAhead generations, and hands out
// none while that commit runs or after it failed. So whatever the timing
// of a crash, every generation any session handed out (and any tag
// computed under it, whether or not it reached the store or the device)
// is at or below the reservation the next Open reads. The reservation is
// committed here only, under genMu, so it never goes down. Its errors are
// *ReserveError.
//
// Lock order: range locks and flushMu (a discard) come before genMu,
// and genMu before the store's own lock; a writer holds genMu across the
// reservation's commit, once per genAhead generations.
func (e *Engine) takeGen() (uint64, error) {
	e.genMu.Lock()
	defer e.genMu.Unlock()
	g := e.next
	if g == 0 { // wrapped: every generation was handed out
		return 0, &ReserveError{errGensExhausted}
	}
	if g > e.reserved {
		r := g + genAhead - 1
		if r < g {
			r = ^uint64(0)
		}
		x := e.tup.NewTxn()
		if err := x.ReserveGeneration(r); err != nil {
			x.Abort()
			return 0, &ReserveError{err}
		}
		if testHookReserve != nil {
			testHookReserve(r)
		}
		if err := x.Commit(true); err != nil {
			return 0, &ReserveError{fmt.Errorf("blockdev: reserving keyed generations: %w", err)}
		}
		e.reserved = r
	}
	e.next++
	return g, nil
}

// testHookReserve, if set, is called before each reservation commit with
// the generation it reserves up to.
var testHookReserve func(upTo uint64)

// newTags computes new tags of n blocks at lba under gen (see Tags).
func (e *Engine) newTags(dst []store.KeyedTag, lba int64, gen uint64, data []byte) error {
	if TestHookNewTags != nil {
		TestHookNewTags(e.uid, gen, lba, len(dst))
	}
	return e.Tags(dst, lba, gen, data, e.bs)
}

// zeros are the blocks of a discard: blocks are at most 64 KiB.
var zeros [1 << 16]byte

// Stage computes the tags of a write of the len(dst) blocks of data at
// lba into dst, under a fresh generation (takeGen: its failure is a
// *ReserveError). With data nil the blocks are zeros: the tags a discard
// records as its intent (recovery commits them if the zeros reached the
// device but the discard did not).
func (e *Engine) Stage(dst []store.KeyedTag, lba int64, data []byte) error {
	gen, err := e.takeGen()
	if err != nil {
		return err
	}
	if data != nil {
		return e.newTags(dst, lba, gen, data)
	}
	zb := max(1, len(zeros)/e.bs)
	for i := 0; i < len(dst); i += zb {
		j := min(len(dst), i+zb)
		if err := e.newTags(dst[i:j], lba+int64(i), gen, zeros[:(j-i)*e.bs]); err != nil {
			return err
		}
	}
	return nil
}

// ProtectScratch holds Protect's buffers from chunk to chunk: the tags of
// a chunk and, per split worker, the associated data, kernel tags and mask
// stream (the pieces a worker takes in a row continue its keystream).
type ProtectScratch struct {
	tags []store.KeyedTag
	ad   [2][]byte
	pt   [2][]poly1305.Tag
	ms   [2]*poly1305.MaskStream
}

func (ps *ProtectScratch) grow(n int) []store.KeyedTag {
	if cap(ps.tags) < n {
		ps.tags = make([]store.KeyedTag, n)
		for i := range ps.ad {
			ps.ad[i] = make([]byte, n*adLen)
			ps.pt[i] = make([]poly1305.Tag, n)
		}
	}
	return ps.tags[:n]
}

// Protect returns the tags of the n blocks of data at lba that Create
// protects, under one fresh generation (takeGen: its failure is a
// *ReserveError), in ps's buffer (valid until the next call). A chunk of
// split.MinBytes or more has its tags computed in pieces that a second
// CPU may share (split.Blocks), as keyed reads do: Poly1305 is most of a
// keyed protect's CPU time. The pieces' nonces are those of one run (gen,
// lba+i), so the tags are the same either way.
func (e *Engine) Protect(lba int64, n int, data []byte, ps *ProtectScratch) ([]store.KeyedTag, error) {
	gen, err := e.takeGen()
	if err != nil {
		return nil, err
	}
	dst, bs := ps.grow(n), e.bs
	if TestHookNewTags != nil {
		TestHookNewTags(e.uid, gen, lba, n)
	}
	if ps.ms[0] == nil {
		ps.ms = [2]*poly1305.MaskStream{e.tag.MaskStream(), e.tag.MaskStream()}
	}
	if n*bs < split.MinBytes {
		return dst, e.tagsInto(dst, lba, gen, data, bs, ps.ad[0], ps.pt[0], ps.ms[0])
	}
	var errs [2]error
	split.Blocks(n, bs, func(w, i, j int) bool {
		errs[w] = e.tagsInto(dst[i:j], lba+int64(i), gen, data[i*bs:j*bs], bs, ps.ad[w], ps.pt[w], ps.ms[w])
		return errs[w] == nil
	})
	return dst, errors.Join(errs[0], errs[1])
}
