package dif

import (
	"encoding/binary"
	"math/bits"

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

func generate(r *run, e *expect) error {
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	switch e.guard {
	case Guard16:
		return gen16(r, e, &s.g16)
	case Guard32:
		return gen32(r, e, &s.g32)
	default:
		return gen64(r, e, &s.g64)
	}
}

func gen16(r *run, e *expect, g *[chunk]uint16) error {
	c := uint64(e.app)<<32 | e.stor.lo
	rm := e.refMask.lo
	step := e.step
	ts := r.tstride
	for base := 0; base < r.n; base += chunk {
		gs := g[:min(chunk, r.n-base)]
		if err := crct10dif.Blocks(gs, r.data[base*r.dstride:], r.dcov, r.dstride); err != nil {
			return err
		}
		if r.extra > 0 {
			m := r.md[base*ts:]
			for j := range gs {
				gs[j] = crct10dif.Update(gs[j], m[j*ts:][:r.extra])
			}
		}
		t := r.tb[base*ts+r.toff:]
		ref := e.ref0 + uint64(base)*step
		for j, gv := range gs {
			binary.BigEndian.PutUint64(t[j*ts:], uint64(gv)<<48|c|ref&rm)
			ref += step
		}
	}
	return nil
}

func gen32(r *run, e *expect, g *[chunk]uint32) error {
	c0 := uint64(e.app)<<16 | e.stor.hi
	c1 := e.stor.lo
	rmHi, rmLo := e.refMask.hi, e.refMask.lo
	step := e.step
	ts := r.tstride
	for base := 0; base < r.n; base += chunk {
		gs := g[:min(chunk, r.n-base)]
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
		lo, hi := bits.Add64(e.ref0, uint64(base)*step, 0)
		for j, gv := range gs {
			tt := t[j*ts:][:16]
			binary.BigEndian.PutUint64(tt, uint64(gv)<<32|c0|hi&rmHi)
			binary.BigEndian.PutUint64(tt[8:], c1|lo&rmLo)
			var cy uint64
			lo, cy = bits.Add64(lo, step, 0)
			hi += cy
		}
	}
	return nil
}

func gen64(r *run, e *expect, g *[chunk]uint64) error {
	c := uint64(e.app)<<48 | e.stor.lo
	rm := e.refMask.lo
	step := e.step
	ts := r.tstride
	for base := 0; base < r.n; base += chunk {
		gs := g[:min(chunk, r.n-base)]
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
		ref := e.ref0 + uint64(base)*step
		for j, gv := range gs {
			tt := t[j*ts:][:16]
			binary.BigEndian.PutUint64(tt, gv)
			binary.BigEndian.PutUint64(tt[8:], c|ref&rm)
			ref += step
		}
	}
	return nil
}
