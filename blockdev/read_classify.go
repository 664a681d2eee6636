package blockdev

import (
	"bytes"
	"fmt"
	"unsafe"

	"github.com/difctl/difctl/blockdev/internal/check"
	"github.com/difctl/difctl/dif"
)

// Stage 3 of a verified read (verifyRun): classify. Each piece the read
// stage brings in is verified with one dif call per sub-chunk
// (dif.Format.Classify): guards, app, ref and storage tags, the sector
// sums, the copy from the device's mapping in the same pass, and for a
// keyed volume the Poly1305 partials of the keyed tags through the keyed
// engine's copy hook. Then the rule of unwritten blocks. Every block is
// left ok, failed, escaped or unwritten in sc.states.

// subChunk is the span, in bytes, of one dif call of the write path
// (tuples and sector checksums computed in one pass, see generate). Each
// call has fixed costs (dif's checks and set-up, the kernel's first
// groups, which its prefetch does not cover), which a larger span spreads
// thinner; past 256 KiB the verified read was no faster when it was
// also the read path's span (docs/performance.md, "Constants measured").
const subChunk = 256 << 10

// readSubChunk is the span, in bytes, of one dif call of classify: a
// whole run of a 1 MiB request (v.chunk). Since a run is read from the
// device's mapping in one call (readSerial), a span of 256 KiB only paid
// the calls' set-up four times a request, which showed at 512-byte blocks
// (docs/performance.md, the verified reads with the split off). A piece
// read some other way is at most pipePiece, one call either way.
const readSubChunk = 1 << 20

// classify verifies blocks [i, i+k) of the loaded run at lba, one
// sub-chunk after the other, leaving each block's state in sc.states, with
// one dif call per sub-chunk: with sector checksums, dif computes them in
// the same pass as the PI guards (one pass over the data for 16-bit
// guards). With src (the k blocks in a device mapping, see readMapped), the
// blocks are copied from src to data in that same pass and the copy is
// what is verified; with sc.req.inPlace, src itself is verified and only
// its failing blocks copied. Disjoint ranges of one run may be classified
// concurrently, each by its own worker w (0 the request's goroutine; see
// keyed.Scratch.Hook).
func (v *Volume) classify(lba int64, i, k int, data, src []byte, sc *scratch, w int) error {
	bs, ts := v.bs, v.ts
	sub := max(1, readSubChunk/bs)
	first := i
	for end := i + k; i < end; i += sub {
		k := min(sub, end-i)
		sc.tags.Unmark(i, k)
		states, blocks, tuples := sc.states[i:i+k], data[i*bs:(i+k)*bs], sc.tuples[i*ts:(i+k)*ts]
		var from, keep []byte
		if src != nil {
			from = src[(i-first)*bs : (i-first+k)*bs]
			if sc.req.inPlace {
				// Verify the mapping itself; keep the failing blocks.
				keep, blocks, from = blocks, from, nil
			}
		}
		c := dif.Classification{States: states, Src: from}
		if v.sums {
			c.Sums = sc.crcs[i : i+k]
			if from != nil {
				// The keyed partials in the copying pass (keyed.Scratch.Hook).
				c.Copy = sc.tags.Hook(w, i)
			}
		}
		sum, err := v.f.Classify(&c, blocks, tuples, v.paramsFrom(sc.req.ref, lba+int64(i)))
		if err != nil {
			return fmt.Errorf("blockdev: verify: %w", err)
		}
		if c.Copy != nil && c.Single {
			sc.tags.Mark(i, k)
		}
		if v.sums {
			crcs, sums := c.Sums, sc.sums[i:i+k]
			if !bytes.Equal(u32Bytes(crcs), u32Bytes(sums)) {
				for j := range crcs {
					if crcs[j] != sums[j] && sc.written.Has(i+j) {
						sc.states[i+j] = dif.StateFailed
					}
				}
			}
		}
		if sum.Unwritten > 0 {
			v.checkUnwritten(i, states, blocks, sc)
		}
		if keep != nil {
			copyFailed(keep, blocks, states, bs)
		}
	}
	return nil
}

// u32Bytes is the memory of s as bytes (for a vectorised comparison).
func u32Bytes(s []uint32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 4*len(s))
}

// checkUnwritten applies the rule of unwritten blocks (see unwritten.go)
// to the blocks of a classified piece starting at index i of the run: an
// unwritten block (not merely one whose stored tuple is all ones) whose
// data is not zeros fails (recheck reports it as KindUnwrittenData).
func (v *Volume) checkUnwritten(i int, states []dif.State, blocks []byte, sc *scratch) {
	bs := v.bs
	for j, st := range states {
		if st != dif.StateUnwritten || sc.written.Has(i+j) {
			continue
		}
		if !check.IsZero(blocks[j*bs : (j+1)*bs]) {
			states[j] = dif.StateFailed
		}
	}
}

// copyFailed copies the failing blocks of src (their states in states) to
// the same places in dst.
func copyFailed(dst, src []byte, states []dif.State, bs int) {
	for j, st := range states {
		if st == dif.StateFailed {
			copy(dst[j*bs:(j+1)*bs], src[j*bs:])
		}
	}
}
