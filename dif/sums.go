package dif

import (
	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/kernels/crct10dif"
	"github.com/difctl/difctl/kernels/t10crc32c"
)

// Sector checksums. A store that keeps a CRC-32C of every data block beside
// its PI tuple (blockdev's sector sums) reads every block twice when it
// computes the two separately. GenerateSums and Classify (with
// Classification.Sums) compute the CRC-32C of each block's data in the
// same pass as the guard where the kernels allow it: for the 16-bit guard
// t10crc32c.Blocks folds the guard and runs the CRC32 instruction over the
// same loaded bytes, at about the cost of the guard alone on amd64 with
// AVX2 and VPCLMULQDQ. For the other guards, Type0 and a skipped guard
// check they run crc32c.Blocks after the guard.

// GenerateSums is Generate that also sets sums[i] to the CRC-32C
// (crc32c.Checksum) of the data of block i: its BlockSize data bytes, not
// the metadata the guard may also cover. sums must have room for the run's
// blocks (see Blocks); entries past them are left as they are. With Type0
// only the sums are computed. Nothing is written if an error is returned.
// Like Generate it does not allocate.
func (f Format) GenerateSums(data, md []byte, sums []uint32, p Params) error {
	r, err := f.run(data, md)
	if err != nil {
		return err
	}
	if len(sums) < r.n {
		return bufErr("sums has room for %d blocks, the run has %d", len(sums), r.n)
	}
	e, err := f.expect(&p)
	if err != nil || r.n == 0 {
		return err
	}
	so := sumOut{s: sums[:r.n], bs: int(f.bs)}
	if f.typ != Type0 && f.guard == Guard16 {
		return generateSums(&r, &e, so)
	}
	if f.typ != Type0 {
		if err := generate(&r, &e); err != nil {
			return err
		}
	}
	return so.all(&r)
}

// sumOut is where the guard loops put the sector checksums of a run: s[i]
// for block i, over the first bs bytes of the block. The zero sumOut asks
// for none.
type sumOut struct {
	s    []uint32
	bs   int
	copy CopyFunc // Classification.Copy: the copying loop of the separate layout
}

// guards16 computes the guards of the len(gs) blocks from block base of r
// over their data bytes (r.dcov of them, as crct10dif.Blocks does), and
// with so.s set their sums in the same pass: t10crc32c.Blocks over the
// bs data bytes, then the guard runs on over the rest of its coverage (the
// metadata before the tuple of an interleaved PI-last layout).
func (so sumOut) guards16(gs []uint16, r *run, base int) error {
	p := r.data[base*r.dstride:]
	if so.s == nil {
		if r.src != nil {
			return crct10dif.BlocksCopy(gs, p, r.src[base*r.dstride:], r.dcov, r.dstride)
		}
		return crct10dif.Blocks(gs, p, r.dcov, r.dstride)
	}
	var err error
	if r.src != nil {
		// Separate layout only: the guard covers the bs data bytes.
		if so.copy != nil {
			err = so.copy(gs, so.s[base:base+len(gs)], p, r.src[base*r.dstride:], so.bs, r.dstride, base)
		} else {
			err = t10crc32c.BlocksCopy(gs, so.s[base:base+len(gs)], p, r.src[base*r.dstride:], so.bs, r.dstride)
		}
	} else {
		err = t10crc32c.Blocks(gs, so.s[base:base+len(gs)], p, so.bs, r.dstride)
	}
	if err != nil {
		return err
	}
	if r.dcov > so.bs {
		for j := range gs {
			off := j * r.dstride
			gs[j] = crct10dif.Update(gs[j], p[off+so.bs:off+r.dcov])
		}
	}
	return nil
}

// all computes every sum of the run in a pass of its own.
func (so sumOut) all(r *run) error {
	return crc32c.Blocks(so.s, r.data, so.bs, r.dstride)
}

// SectorSum returns the sector checksum of one block's data: its CRC-32C
// (Castagnoli, reflected, initial and final XOR 0xFFFFFFFF; the check value
// of "123456789" is 0xE3069283), the sum GenerateSums and Classify
// compute for each block. Callers that keep sector sums beside PI tuples
// (blockdev) compute them here, so that the choice of kernel stays in dif.
func SectorSum(data []byte) uint32 { return crc32c.Checksum(data) }

// SectorSums sets sums[i] to SectorSum of block i of data, blocks of bs
// bytes one after the other: the sums of data that has no PI of its own
// (an import's data, taken from an image whose tuples are stored as they
// are). data must hold whole blocks and sums room for them.
func SectorSums(sums []uint32, data []byte, bs int) error {
	if bs <= 0 || len(data)%bs != 0 {
		return bufErr("data of %d bytes is not whole blocks of %d bytes", len(data), bs)
	}
	n := len(data) / bs
	if len(sums) < n {
		return bufErr("sums has room for %d blocks, the data has %d", len(sums), n)
	}
	if n == 0 {
		return nil
	}
	return crc32c.Blocks(sums[:n], data, bs, bs)
}
