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
// kernels/keyedcopy has its fused kernel, classify asks dif for the
// Poly1305 polynomial of each block's data in the copying pass itself
// (dif.ClassifySumsCopyKeyed): the partial, Poly_r(data), of exactly the
// bytes the caller gets. The associated data (uid, LBA, generation) is not
// known then, since the generation comes with the stored tag that the keyed
// check reads afterwards; Poly1305 is linear, so keyedCompute adds it
// later, with the mask (poly1305.Key.TagsFromPartials): the tags are bit
// for bit those BlocksAD gives.
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
}

// newKeyedParts returns the partials of a scratch of n blocks, for a keyed
// volume opened with its key whose guard and sums the fused copy computes
// (the sector sums kept); nil otherwise.
func (v *Volume) newKeyedParts(n int) *keyedParts {
	if v.kd == nil || !v.sums {
		return nil
	}
	return &keyedParts{parts: make([]poly1305.Partial, n), ok: make([]bool, n)}
}

// classifySumsCopy is ClassifySumsCopy of blocks [i, i+k) of the run, with
// the partials where they can be had in the same pass. The caller cleared
// their marks.
func (v *Volume) classifySumsCopy(states []dif.State, crcs []uint32, blocks, from, tuples []byte, p dif.Params, sc *scratch, i, k int) (dif.Summary, error) {
	kp := sc.kp
	if kp == nil || !keyedcopy.Fused() {
		return v.f.ClassifySumsCopy(states, crcs, blocks, from, tuples, p)
	}
	sum, ok, err := v.f.ClassifySumsCopyKeyed(states, crcs, kp.parts[i:i+k], v.kd.tk, blocks, from, tuples, p)
	if err == nil && ok {
		for j := i; j < i+k; j++ {
			kp.ok[j] = true
		}
	}
	return sum, err
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
