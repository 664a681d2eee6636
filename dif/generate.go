package dif

import (
	"encoding/binary"

	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/kernels/crc64nvme"
	"github.com/difctl/difctl/kernels/crct10dif"
)

// Generate computes and stores the PI tuple of every block of a run: the
// guard over the covered bytes, Params.AppTag, Params.StorageTag and the
// ref tag (see Params.RefTag). Metadata bytes outside the tuple are left
// as they are (with PILast they are covered by the guard).
//
// In the interleaved layout data holds the extended blocks and md must be
// empty; in the separate layout data holds the data blocks and md their
// metadata, MetadataSize bytes per block. With Type0 Generate only checks
// the buffers. Nothing is written if an error is returned.
func (f Format) Generate(data, md []byte, p Params) error {
	r, err := f.run(data, md)
	if err != nil {
		return err
	}
	e, err := f.expect(&p)
	if err != nil || f.typ == Type0 || r.n == 0 {
		return err
	}
	return generate(&r, &e)
}

func generate(r *run, e *expect) error { return generateSums(r, e, sumOut{}) }

// generateSums is generate that also fills so's sector checksums where the
// guard kernel computes them in the same pass (see sumOut).
func generateSums(r *run, e *expect, so sumOut) error {
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	switch e.guard {
	case Guard16:
		return gen16(r, e, &s.g16, so)
	case Guard32:
		return gen32(r, e, &s.g32)
	default:
		return gen64(r, e, &s.g64)
	}
}

// The generate loops write each tuple as one or two big-endian words; the
// rare chunk whose ref tags wrap is encoded block by block.

func gen16(r *run, e *expect, g *[chunk]uint16, so sumOut) error {
	c := uint64(e.app)<<32 | e.stor.lo
	ts := r.tstride
	for base := 0; base < r.n; base += r.chunk {
		gs := g[:min(r.chunk, r.n-base)]
		if err := so.guards16(gs, r, base); err != nil {
			return err
		}
		if r.extra > 0 {
			m := r.md[base*ts:]
			for j := range gs {
				gs[j] = crct10dif.Update(gs[j], m[j*ts:][:r.extra])
			}
		}
		t := r.tb[base*ts+r.toff:]
		lo, _, wrap := e.chunkRef(base, len(gs), e.step)
		if wrap {
			encodeChunk(e, t, ts, base, gs)
			continue
		}
		put16(t, ts, gs, c|lo, e.step)
	}
	return nil
}

func gen32(r *run, e *expect, g *[chunk]uint32) error {
	c0 := uint64(e.app)<<16 | e.stor.hi
	c1 := e.stor.lo
	ts := r.tstride
	for base := 0; base < r.n; base += r.chunk {
		gs := g[:min(r.chunk, r.n-base)]
		if err := crc32c.Blocks(gs, r.data[base*r.dstride:], r.dcov, r.dstride); err != nil {
			return err
		}
		if r.extra > 0 {
			m := r.md[base*ts:]
			for j := range gs {
				gs[j] = crc32c.Update(gs[j], m[j*ts:][:r.extra])
			}
		}
		t := r.tb[base*ts+r.toff:]
		lo, hi, wrap := e.chunkRef(base, len(gs), e.step)
		if wrap {
			encodeChunk(e, t, ts, base, gs)
			continue
		}
		put32(t, ts, gs, c0|hi, c1|lo, e.step)
	}
	return nil
}

func gen64(r *run, e *expect, g *[chunk]uint64) error {
	c := uint64(e.app)<<48 | e.stor.lo
	ts := r.tstride
	for base := 0; base < r.n; base += r.chunk {
		gs := g[:min(r.chunk, r.n-base)]
		if err := crc64nvme.Blocks(gs, r.data[base*r.dstride:], r.dcov, r.dstride); err != nil {
			return err
		}
		if r.extra > 0 {
			m := r.md[base*ts:]
			for j := range gs {
				gs[j] = crc64nvme.Update(gs[j], m[j*ts:][:r.extra])
			}
		}
		t := r.tb[base*ts+r.toff:]
		lo, _, wrap := e.chunkRef(base, len(gs), e.step)
		if wrap {
			encodeChunk(e, t, ts, base, gs)
			continue
		}
		put64(t, ts, gs, c|lo, e.step)
	}
	return nil
}

// The put functions are small leaves, like the verify scans: the words of
// each tuple are the guard and constants, plus the ref tag in the low bits,
// stepped per block.

//go:noinline
func put16(t []byte, ts int, gs []uint16, w, step uint64) {
	off := 0
	for _, gv := range gs {
		binary.BigEndian.PutUint64(t[off:], uint64(gv)<<48|w)
		w += step
		off += ts
	}
}

//go:noinline
func put32(t []byte, ts int, gs []uint32, w0, w1, step uint64) {
	off := 0
	for _, gv := range gs {
		tt := t[off : off+16]
		binary.BigEndian.PutUint64(tt, uint64(gv)<<32|w0)
		binary.BigEndian.PutUint64(tt[8:], w1)
		w1 += step
		off += ts
	}
}

//go:noinline
func put64(t []byte, ts int, gs []uint64, w1, step uint64) {
	off := 0
	for _, gv := range gs {
		tt := t[off : off+16]
		binary.BigEndian.PutUint64(tt, gv)
		binary.BigEndian.PutUint64(tt[8:], w1)
		w1 += step
		off += ts
	}
}

// encodeChunk writes the tuples of a chunk one by one with the exact
// general arithmetic: the path for chunks whose ref tags wrap.
func encodeChunk[G uint16 | uint32 | uint64](e *expect, t []byte, ts, base int, gs []G) {
	for j, gv := range gs {
		encodeTuple(e.guard, t[j*ts:], tuple{guard: uint64(gv), app: e.app, space: e.spaceAt(base + j)})
	}
}
