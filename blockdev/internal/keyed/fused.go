package keyed

import (
	"sync/atomic"

	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/kernels/keyedcopy"
	"github.com/difctl/difctl/kernels/poly1305"
)

// Keyed reads in one pass. A verified read of a keyed volume from the
// device's mapping copies every block, checks its guard and sector sum, and
// checks its keyed tag. Done apart, the tag is a second pass over the copy
// (poly1305.Key.BlocksAD), whose time adds to the first. Where
// kernels/keyedcopy has its fused kernel, the Volume's classify passes dif
// a copy hook (Scratch.Hook, dif.Classification.Copy) that computes the
// Poly1305 polynomial of each block's data in the copying pass itself: the
// partial, Poly_r(data), of exactly the bytes the caller gets. The
// associated data (uid, LBA, generation) is not known then, since the
// generation comes with the stored tag that the keyed check reads
// afterwards; Poly1305 is linear, so the check adds it later, with the
// mask (poly1305.Key.TagsFromPartials): the tags are bit for bit those
// BlocksAD gives.
//
// A partial is used only while it describes the block's bytes in the run's
// buffer: classify marks the blocks it computed partials for (Mark) and
// unmarks every other block it verifies (Unmark: read by pread, served
// from staging, or a part redone serially), and the check ignores the
// marks of blocks re-read after a failure (Run.Transient: their data was
// replaced).

// Fused reports whether the active keyedcopy kernel copies and computes
// the partials in one pass (elsewhere a copy hook would cost a second
// pass, and the partials are not computed in the copy).
func Fused() bool { return keyedcopy.Fused() }

// fusedRuns counts the pieces of runs whose keyed tags were computed from
// the partials of the fused copy.
var fusedRuns atomic.Int64

// FusedRuns returns the number of pieces of runs whose keyed tags were
// computed from the partials of the fused copy (for the tests: that a read
// took that path).
func FusedRuns() int64 { return fusedRuns.Load() }

// parts holds the partials of a run's blocks.
type parts struct {
	parts []poly1305.Partial
	ok    []bool // parts[i] is of block i's bytes in the run's buffer
	key   *poly1305.Key
	// hooks are the copy hooks of the workers that classify parts of one
	// run at once (Hook's w), made once with the scratch: a hook made per
	// call would be allocated per call (dif keeps it with the buffers it
	// passes to the kernels).
	hooks []partsHook
}

// partsHook is worker w's copy hook: the fused kernel, placing the
// partials of the blocks of the dif call that starts at block base of the
// run.
type partsHook struct {
	p    *parts
	base int
	fn   dif.CopyFunc
}

func (h *partsHook) blocksCopy(gs []uint16, sums []uint32, dst, src []byte, bs, stride, first int) error {
	i := h.base + first
	return keyedcopy.BlocksCopy(gs, sums, h.p.parts[i:i+len(gs)], dst, src, bs, stride, h.p.key)
}

func newParts(n, workers int, key *poly1305.Key) *parts {
	p := &parts{parts: make([]poly1305.Partial, n), ok: make([]bool, n), key: key}
	p.hooks = make([]partsHook, workers)
	for w := range p.hooks {
		h := &p.hooks[w]
		h.p = p
		h.fn = h.blocksCopy
	}
	return p
}

// Hook returns worker w's copy hook for the dif call that classifies the
// blocks from block base of the run, copying them: it computes their
// partials in the copying pass. It returns nil when the partials cannot be
// had there (the scratch keeps none, or the keyedcopy kernel is not
// fused). w is below the workers given to NewScratch; one worker makes one
// dif call at a time.
func (ks *Scratch) Hook(w, base int) dif.CopyFunc {
	if ks == nil || ks.parts == nil || !keyedcopy.Fused() {
		return nil
	}
	h := &ks.parts.hooks[w]
	h.base = base
	return h.fn
}

// Mark records that blocks [i, i+k) of the run have their partials: the
// dif call with Hook's hook covered them all (dif.Classification.Single).
// Unmark cleared their marks before.
func (ks *Scratch) Mark(i, k int) {
	for j := i; j < i+k; j++ {
		ks.parts.ok[j] = true
	}
}

// Unmark records that blocks [i, i+k) of the run have no partials (they
// are being verified again).
func (ks *Scratch) Unmark(i, k int) {
	if ks != nil && ks.parts != nil {
		clear(ks.parts.ok[i : i+k])
	}
}

// have reports whether block i has its partial: marked, and not re-read.
func (p *parts) have(i int, transient []uint64) bool {
	return p != nil && p.ok[i] && !hasBit(transient, i)
}
