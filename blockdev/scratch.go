package blockdev

import (
	"sync/atomic"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/keyed"
	"github.com/difctl/difctl/blockdev/internal/split"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// scratch is the per-request working memory of the read and write paths,
// sized for one chunk (v.chunk blocks) and pooled.
type scratch struct {
	tuples   []byte
	sums     []uint32
	crcs     []uint32
	written  store.Bitmap
	ovMask   []uint64 // blocks whose tuple comes from staging or the overlay
	ovTuples []byte
	ovSums   []uint32
	staged   []uint64 // blocks whose data comes from staging
	ioBad    []uint64 // blocks that could not be read
	states   []dif.State
	head     []byte // partial blocks of reads and writes
	tail     []byte
	reread   []byte
	repair   *repairScratch // the repair stage's, made at its first repair
	rbatch   *repairBatch   // a check's repairs to sync and record at its end (nil: each at once)
	wcopy    []byte         // a keyed write's piece (keyedWriteCopy)
	probs    []Problem
	// A keyed volume opened with its key: the tags of staged and overlay
	// blocks (as ovTuples), the keyed scratch, and the keyed read path's
	// mapped read callbacks, per split worker.
	ovTags     []store.KeyedTag
	tags       *keyed.Scratch
	krun       keyed.Run // the run checkTags checked last (the repair stage's keyed check)
	tagMaps    [2]*mappedTags
	jobErr     atomic.Pointer[error]
	partFailed atomic.Uint64 // parts whose read failed, redone serially

	// req is the request of the run being read (see verifyRun).
	req readReq

	// unwritten: every block of the loaded run is unwritten (see
	// verifyRun's hole check).
	unwritten bool

	// The mapped read's callbacks of the request's goroutine and the
	// split helper (see readMapped), and the split read's piece callback
	// (readParallel), made once so that a read allocates nothing, with
	// their arguments.
	maps    [2]mappedCall
	partFn  func(w, p int) bool
	partLBA int64
	parts   split.Pieces
	partBuf []byte
}

// mappedCall is one worker's mapped read callback (readMapped): it
// classifies blocks [i, i+k) of the run at lba, copying them to data.
type mappedCall struct {
	fn   func([]byte) error
	lba  int64
	i, k int
	data []byte
}

func (v *Volume) newScratch() any {
	n := v.chunk
	w := (n + 63) / 64
	sc := &scratch{
		tuples:   make([]byte, n*v.ts),
		crcs:     make([]uint32, n),
		written:  store.NewBitmap(n),
		ovMask:   make([]uint64, w),
		staged:   make([]uint64, w),
		ovTuples: make([]byte, n*v.ts),
		ioBad:    make([]uint64, w),
		states:   make([]dif.State, n),
		head:     device.AlignedBuffer(v.bs),
		tail:     device.AlignedBuffer(v.bs),
		reread:   device.AlignedBuffer(v.bs),
	}
	if v.sums {
		sc.sums = make([]uint32, n)
		sc.ovSums = make([]uint32, n)
	}
	if v.tags != nil {
		// With sector sums, the partials of the fused copy, for each
		// worker that may classify part of a run at once: the request's
		// goroutine and the verification workers, or the split helper.
		sc.ovTags = make([]store.KeyedTag, n)
		sc.tags = v.tags.NewScratch(1+max(1, v.opts.VerifyWorkers), v.sums)
		for w := range sc.tagMaps {
			sc.tagMaps[w] = newMappedTags(sc.tags, w)
		}
	}
	for w := range sc.maps {
		m := &sc.maps[w]
		m.fn = func(src []byte) error { return v.classify(m.lba, m.i, m.k, m.data, src, sc, w) }
	}
	sc.partFn = func(w, p int) bool {
		i, j := sc.parts.At(p)
		return v.runPart(verifyJob{lba: sc.partLBA, i: i, k: j - i, part: p, data: sc.partBuf, sc: sc}, w)
	}
	return sc
}

func (v *Volume) getScratch() *scratch { return v.scratch.Get().(*scratch) }

func (v *Volume) putScratch(sc *scratch) {
	clear(sc.probs) // drop references to errors
	sc.probs = sc.probs[:0]
	v.scratch.Put(sc)
}

func hasBit(m []uint64, i int) bool { return m[i/64]>>(i%64)&1 != 0 }
func setBit(m []uint64, i int)      { m[i/64] |= 1 << (i % 64) }
