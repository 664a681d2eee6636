package dif

import (
	"errors"

	"github.com/difctl/difctl/kernels/keyedcopy"
	"github.com/difctl/difctl/kernels/poly1305"
)

// Keyed verified reads. A store that keeps a Poly1305-AES tag of every
// block beside its PI tuple (blockdev's keyed volumes) checks each block
// read with the key too. ClassifySumsCopyKeyed computes, in the single pass
// of ClassifySumsCopy (the copy, the guards and the sector sums), the
// Poly1305 polynomial of each block's data as copied (kernels/keyedcopy),
// so the tag check costs no second pass over the data: the caller adds the
// associated data and the mask with poly1305.Key.TagsFromPartials.

// ErrNoKey is returned by ClassifySumsCopyKeyed for a nil key.
var ErrNoKey = errors.New("dif: no key for the keyed partials")

// keyedOut is where the guard loops put the partials of a run.
type keyedOut struct {
	parts []poly1305.Partial
	key   *poly1305.Key
}

// blocksCopy is t10crc32c.BlocksCopy with the partials of the blocks from
// block base of the run.
func (k keyedOut) blocksCopy(gs []uint16, sums []uint32, q, p []byte, bs, stride, base int) error {
	return keyedcopy.BlocksCopy(gs, sums, k.parts[base:base+len(gs)], q, p, bs, stride, k.key)
}

// ClassifySumsCopyKeyed is ClassifySumsCopy that also sets parts[i] to the
// poly1305.Partial under key of block i's data as copied to data, and
// reports whether it did for every block of the run. It does where
// ClassifyCopy verifies in a single pass (the separate layout with the
// 16-bit guard checked, not Type0); otherwise it reports false, parts is
// left as it is, and the caller computes the tags from data (an empty run
// reports false). parts must
// have room for the run's blocks. It does not allocate.
func (f Format) ClassifySumsCopyKeyed(states []State, sums []uint32, parts []poly1305.Partial, key *poly1305.Key, data, src, md []byte, p Params) (Summary, bool, error) {
	if key == nil {
		return Summary{}, false, ErrNoKey
	}
	if err := checkCopy(data, src); err != nil {
		return Summary{}, false, err
	}
	if sums == nil {
		sums = []uint32{}
	}
	return f.classifyWith(states, sums, keyedOut{parts: parts, key: key}, data, src, md, p)
}
