package blockdev

import (
	"runtime"
	"sync/atomic"

	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/kernels/keyedcopy"
	"github.com/difctl/difctl/kernels/poly1305"
	"github.com/difctl/difctl/store"
)

// Keyed reads in one pass. A verified read of a keyed volume from the
// device's mapping copies every block, checks its guard and sector sum, and
// checks its keyed tag. Done apart, the tag is a second pass over the copy
// (poly1305.Key.BlocksAD), whose time adds to the first. Where
// kernels/keyedcopy has its fused kernel, classify passes dif a copy hook
// (dif.Classification.Copy) that computes the Poly1305 polynomial of each
// block's data in the copying pass itself: the partial, Poly_r(data), of
// exactly the bytes the caller gets. The associated data (uid, LBA,
// generation) is not known then, since the generation comes with the
// stored tag that the keyed check reads afterwards; Poly1305 is linear, so
// keyedCompute adds it later, with the mask
// (poly1305.Key.TagsFromPartials): the tags are bit for bit those BlocksAD
// gives.
//
// A partial is used only while it describes the block's bytes in the run's
// buffer: classify marks the blocks it computed partials for and unmarks
// every other block it verifies (read by pread, served from staging, or a
// part redone serially), and keyedCompute ignores the marks of blocks
// re-read after a failure (transient: their data was replaced).

// keyedParts holds the partials of a run's blocks.
type keyedParts struct {
	parts []poly1305.Partial
	ok    []bool // parts[i] is of block i's bytes in the run's buffer
	key   *poly1305.Key
	// hooks are the copy hooks of the workers that classify parts of one
	// run at once (classify's w), made once with the scratch: a hook made
	// per call would be allocated per call (dif keeps it with the
	// buffers it passes to the kernels).
	hooks []partsHook
}

// partsHook is worker w's copy hook: the fused kernel, placing the
// partials of the blocks of the dif call that starts at block base of the
// run.
type partsHook struct {
	kp   *keyedParts
	base int
	fn   dif.CopyFunc
}

func (h *partsHook) blocksCopy(gs []uint16, sums []uint32, dst, src []byte, bs, stride, first int) error {
	i := h.base + first
	return keyedcopy.BlocksCopy(gs, sums, h.kp.parts[i:i+len(gs)], dst, src, bs, stride, h.kp.key)
}

// newKeyedParts returns the partials of a scratch of n blocks, for a keyed
// volume opened with its key whose guard and sums the fused copy computes
// (the sector sums kept), with a hook for each worker that may classify
// part of a run (the request's goroutine and the verification workers, or
// the split helper); nil otherwise.
func (v *Volume) newKeyedParts(n int) *keyedParts {
	if v.kd == nil || !v.sums {
		return nil
	}
	kp := &keyedParts{parts: make([]poly1305.Partial, n), ok: make([]bool, n), key: v.kd.tk}
	kp.hooks = make([]partsHook, 1+max(1, v.opts.VerifyWorkers))
	for w := range kp.hooks {
		h := &kp.hooks[w]
		h.kp = kp
		h.fn = h.blocksCopy
	}
	return kp
}

// hook returns worker w's copy hook for the dif call of the blocks from
// block base of the run, or nil when the partials cannot be had in the
// copying pass (no partials kept, or no fused kernel).
func (kp *keyedParts) hook(w, base int) dif.CopyFunc {
	if kp == nil || !keyedcopy.Fused() {
		return nil
	}
	h := &kp.hooks[w]
	h.base = base
	return h.fn
}

// mark records that blocks [i, i+k) of the run have their partials. The
// caller cleared their marks before classifying them.
func (kp *keyedParts) mark(i, k int) {
	for j := i; j < i+k; j++ {
		kp.ok[j] = true
	}
}

// clearKeyedParts unmarks blocks [i, i+k) of the run.
func (sc *scratch) clearKeyedParts(i, k int) {
	if sc.kp != nil {
		clear(sc.kp.ok[i : i+k])
	}
}

// runTags computes the tags of run r into dst (dst[0] is block r.i): from
// the partials of the blocks that have them, from data for the others.
func (v *Volume) runTags(dst []store.KeyedTag, r kRun, lba int64, data []byte, ad []byte, pt []poly1305.Tag, transient []uint64, kp *keyedParts) error {
	k, bs := v.kd, v.bs
	have := func(i int) bool { return kp != nil && kp.ok[i] && !hasBit(transient, i) }
	for i := r.i; i < r.j; {
		ok := have(i)
		j := i + 1
		for j < r.j && have(j) == ok {
			j++
		}
		var err error
		if ok {
			fusedRuns.Add(1)
			err = k.tagsFromParts(dst[i-r.i:j-r.i], lba+int64(i), r.gen, kp.parts[i:j], bs, ad, pt)
		} else {
			err = k.tagsInto(dst[i-r.i:j-r.i], lba+int64(i), r.gen, data[i*bs:j*bs], bs, ad, pt, nil)
		}
		if err != nil {
			return err
		}
		i = j
	}
	return nil
}

// tagsFromParts is tagsInto from the blocks' partials.
func (k *keyed) tagsFromParts(dst []store.KeyedTag, lba int64, gen uint64, parts []poly1305.Partial, bs int, ad []byte, pt []poly1305.Tag) error {
	return k.tagsWith(dst, lba, gen, ad, pt, func(nonce *poly1305.Nonce, ad []byte, pt []poly1305.Tag) error {
		return k.tk.TagsFromPartials(pt, nonce, ad, adLen, parts, bs)
	})
}

// keyedHelpers is the number of goroutines besides the caller's that a
// large verified read of a keyed volume is split over when the volume has
// no verification workers (Options.VerifyWorkers): one when the fused
// kernel computes the partials and a second CPU may run it: the run's
// parts are then pieces that the caller and the split helper take in turn
// (readParallel, splitWork).
func (v *Volume) keyedHelpers() int {
	if v.kd == nil || !v.sums || !keyedcopy.Fused() || runtime.GOMAXPROCS(0) < 2 {
		return 0
	}
	return 1
}

// fusedRuns counts the pieces of runs whose keyed tags were computed from
// the partials of the fused copy (for the tests: that a read took that
// path).
var fusedRuns atomic.Int64
