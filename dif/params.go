package dif

import (
	"math/bits"
	"sync"
)

// Check is a set of Verify checks.
type Check uint8

// The checks. Params.Skip switches them off.
const (
	CheckGuard      Check = 1 << iota // guard equals the CRC of the covered bytes
	CheckAppTag                       // app tag equals Params.AppTag under Params.AppMask
	CheckRefTag                       // ref tag equals the expected one (Types 1 and 2 only)
	CheckStorageTag                   // storage tag equals Params.StorageTag (when the format has one)
	CheckAll        = CheckGuard | CheckAppTag | CheckRefTag | CheckStorageTag
)

// Params are the per-call context of an operation on a run of blocks. The
// zero value of each field is its default.
type Params struct {
	// RefTag is the reference tag of the run's first block. With Types 1
	// and 2, block i carries the low RefTagBits() bits of RefTag+i (with a
	// ref tag wider than 64 bits, the carry goes into bit 64); with Type 3
	// every block carries RefTag and Verify does not check it. It must fit
	// in RefTagBits() bits. Default 0.
	RefTag uint64
	// StorageTag is the storage tag of every block. It must fit in
	// StorageTagBits() bits; with a storage tag wider than 64 bits (Guard32
	// only) the bits above 63 are zero. Default 0.
	StorageTag uint64
	// AppTag is the application tag Generate writes and Verify expects.
	// Default 0.
	AppTag uint16
	// AppMask selects the app tag bits Verify compares:
	// (stored & AppMask) == (AppTag & AppMask). Default 0: none, so the app
	// tag is not checked unless a mask is given (0xFFFF compares all bits).
	AppMask uint16
	// LBA is the logical block address of the run's first block. It only
	// labels failures (CheckError.LBA = LBA + Block); int64 like every LBA
	// of the library, and not negative (ErrParams). Default 0.
	LBA int64
	// Skip lists checks Verify does not run. Default 0: run every check.
	Skip Check
}

// ParamsAt returns the params of a run that starts at block lba of an
// image whose block 0 is checked with p: p with LBA set and, for Types 1
// and 2, the ref tag advanced by lba (in the format's ref tag bits, up to
// 64), as a run of the whole image from block 0 would expect it.
func (f Format) ParamsAt(p Params, lba int64) Params {
	p.LBA = lba
	if t := f.Type(); t == Type1 || t == Type2 {
		p.RefTag += uint64(lba)
		if b := f.RefTagBits(); b < 64 {
			p.RefTag &= 1<<b - 1
		}
	}
	return p
}

// u80 is a value of the storage+reference tag space, up to 80 bits:
// hi holds bits 64 to 79.
type u80 struct{ hi, lo uint64 }

func mask80(n int) u80 {
	switch {
	case n <= 0:
		return u80{}
	case n < 64:
		return u80{0, 1<<uint(n) - 1}
	case n == 64:
		return u80{0, ^uint64(0)}
	default:
		return u80{1<<uint(n-64) - 1, ^uint64(0)}
	}
}

func (x u80) and(y u80) u80    { return u80{x.hi & y.hi, x.lo & y.lo} }
func (x u80) or(y u80) u80     { return u80{x.hi | y.hi, x.lo | y.lo} }
func (x u80) andNot(y u80) u80 { return u80{x.hi &^ y.hi, x.lo &^ y.lo} }

func (x u80) shl(n int) u80 {
	switch {
	case n <= 0:
		return x
	case n < 64:
		return u80{x.hi<<uint(n) | x.lo>>uint(64-n), x.lo << uint(n)}
	default:
		return u80{x.lo << uint(n-64), 0}
	}
}

func (x u80) shr(n int) u80 {
	switch {
	case n <= 0:
		return x
	case n < 64:
		return u80{x.hi >> uint(n), x.lo>>uint(n) | x.hi<<uint(64-n)}
	default:
		return u80{0, x.hi >> uint(n-64)}
	}
}

// add64 returns x + v (modulo 2^128; callers mask).
func (x u80) add64(v uint64) u80 {
	lo, c := bits.Add64(x.lo, v, 0)
	return u80{x.hi + c, lo}
}

// expect holds the per-call constants derived from a format and Params.
type expect struct {
	typ      Type
	guard    Guard
	refBits  int
	refMask  u80 // the ref tag bits of the space
	storMask u80 // the storage tag bits of the space
	allOnes  u80 // the whole space
	stor     u80 // StorageTag placed in the space
	ref0     uint64
	step     uint64 // 1 for Types 1 and 2, 0 for Type 3
	app      uint16
	lba      int64

	// Verify only.
	guardOn   bool
	appMask   uint16 // 0 when the app check is off
	refOn     bool
	storOn    bool
	spaceMask u80 // space bits compared: refMask if refOn, storMask if storOn
}

func (f Format) expect(p *Params) (expect, error) {
	if p.Skip&^CheckAll != 0 {
		return expect{}, paramErr("unknown check bits %#x in Params.Skip", uint8(p.Skip&^CheckAll))
	}
	if p.LBA < 0 {
		return expect{}, paramErr("negative LBA %d in Params.LBA", p.LBA)
	}
	rb, sb := f.RefTagBits(), int(f.sts)
	if rb < 64 && p.RefTag>>uint(rb) != 0 {
		return expect{}, paramErr("ref tag %#x does not fit the format's %d-bit ref tag", p.RefTag, rb)
	}
	if sb < 64 && p.StorageTag>>uint(sb) != 0 {
		return expect{}, paramErr("storage tag %#x does not fit the format's %d-bit storage tag", p.StorageTag, sb)
	}
	w := f.guard.SpaceBits()
	e := expect{
		typ:       f.typ,
		guard:     f.guard,
		refBits:   rb,
		refMask:   mask80(rb),
		allOnes:   mask80(w),
		stor:      u80{0, p.StorageTag}.shl(rb).and(mask80(w)),
		ref0:      p.RefTag,
		step:      1,
		app:       p.AppTag,
		lba:       p.LBA,
		guardOn:   p.Skip&CheckGuard == 0,
		refOn:     p.Skip&CheckRefTag == 0 && f.typ != Type3 && rb > 0,
		storOn:    p.Skip&CheckStorageTag == 0 && sb > 0,
		spaceMask: u80{},
	}
	e.storMask = e.allOnes.andNot(e.refMask)
	if f.typ == Type3 {
		e.step = 0
	}
	if p.Skip&CheckAppTag == 0 {
		e.appMask = p.AppMask
	}
	if e.refOn {
		e.spaceMask = e.spaceMask.or(e.refMask)
	}
	if e.storOn {
		e.spaceMask = e.spaceMask.or(e.storMask)
	}
	return e, nil
}

// chunkRef returns the ref tag bits of block base, split into the low 64
// bits of the space and the bits above, and whether the ref tags of blocks
// base to base+k-1, stepping by step, wrap or carry into bit 64 (which the
// fast loops, adding step to the low word, do not model).
func (e *expect) chunkRef(base, k int, step uint64) (lo, hi uint64, wrap bool) {
	sum, cy := bits.Add64(e.ref0, uint64(base)*step, 0)
	rm := e.refMask.lo
	lo, hi = sum&rm, cy&e.refMask.hi
	span := uint64(k-1) * step
	if rm != ^uint64(0) {
		wrap = lo+span > rm
	} else if e.refMask.hi != 0 {
		wrap = lo+span < lo
	}
	return lo, hi, wrap
}

// refAt returns the expected ref tag (masked) of block i.
func (e *expect) refAt(i int) u80 {
	return u80{0, e.ref0}.add64(uint64(i) * e.step).and(e.refMask)
}

// spaceAt returns the expected storage+ref space of block i.
func (e *expect) spaceAt(i int) u80 { return e.refAt(i).or(e.stor) }

// run describes the buffers of a run of blocks in a format's layout.
type run struct {
	n       int
	data    []byte // blocks for the kernel
	md      []byte // separate layout only
	dstride int    // distance between blocks in data
	dcov    int    // bytes of each block covered in data
	extra   int    // separate layout: metadata bytes before the tuple, covered by the guard
	tb      []byte // where the tuples are (data or md)
	tstride int
	toff    int
	chunk   int    // blocks per kernel call
	src     []byte // copy-verify (separate layout): data's blocks are read from src
}

// chunkBlocks returns the number of blocks per kernel call. A fixed 256
// measured best: the kernels gain from long batches, and the tuples of 256
// blocks are still in L2 when the scan after the kernel call reads them.
func chunkBlocks(stride int) int { return chunk }

var errZeroFormat = &FormatError{Field: "format", Value: "", Reason: "zero Format (use NewFormat or Parse)"}

func (f Format) run(data, md []byte) (run, error) {
	if !f.Valid() {
		return run{}, errZeroFormat
	}
	bs, ms := int(f.bs), int(f.md)
	if f.layout == Interleaved {
		ext := bs + ms
		if len(md) != 0 {
			return run{}, bufErr("metadata buffer must be empty in the interleaved layout (got %d bytes)", len(md))
		}
		if len(data)%ext != 0 {
			return run{}, bufErr("buffer of %d bytes is not a whole number of %d-byte extended blocks", len(data), ext)
		}
		return run{
			n: len(data) / ext, data: data, dstride: ext, dcov: f.GuardCoverage(),
			tb: data, tstride: ext, toff: bs + f.PIOffset(), chunk: chunkBlocks(ext),
		}, nil
	}
	if len(data)%bs != 0 {
		return run{}, bufErr("data buffer of %d bytes is not a whole number of %d-byte blocks", len(data), bs)
	}
	n := len(data) / bs
	if len(md) != n*ms {
		return run{}, bufErr("metadata buffer of %d bytes does not match %d blocks of %d metadata bytes", len(md), n, ms)
	}
	return run{
		n: n, data: data, md: md, dstride: bs, dcov: bs, extra: f.PIOffset(),
		tb: md, tstride: ms, toff: f.PIOffset(), chunk: chunkBlocks(bs),
	}, nil
}

// Blocks returns the number of blocks in the run data (with md for the
// separate layout; md must be empty for the interleaved layout), or an
// error wrapping ErrBuffer if the buffers do not hold whole blocks.
func (f Format) Blocks(data, md []byte) (int, error) {
	r, err := f.run(data, md)
	return r.n, err
}

// chunk is the largest number of blocks whose guards are computed in one
// kernel call, into a reusable array.
const chunk = 256

type scratch struct {
	g16 [chunk]uint16
	g32 [chunk]uint32
	g64 [chunk]uint64
}

// The kernels' Blocks is called through a dispatch variable, so its dst
// escapes: the guard arrays come from a pool instead of the stack.
var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// tuple is a decoded PI tuple.
type tuple struct {
	guard uint64
	app   uint16
	space u80
}

func decodeTuple(g Guard, t []byte) tuple {
	switch g {
	case Guard16:
		t = t[:8]
		return tuple{
			guard: uint64(t[0])<<8 | uint64(t[1]),
			app:   uint16(t[2])<<8 | uint16(t[3]),
			space: u80{0, uint64(t[4])<<24 | uint64(t[5])<<16 | uint64(t[6])<<8 | uint64(t[7])},
		}
	case Guard32:
		t = t[:16]
		return tuple{
			guard: be(t[0:4]),
			app:   uint16(t[4])<<8 | uint16(t[5]),
			space: u80{be(t[6:8]), be(t[8:16])},
		}
	default:
		t = t[:16]
		return tuple{
			guard: be(t[0:8]),
			app:   uint16(t[8])<<8 | uint16(t[9]),
			space: u80{0, be(t[10:16])},
		}
	}
}

func encodeTuple(g Guard, t []byte, tu tuple) {
	switch g {
	case Guard16:
		putBE(t[0:2], tu.guard)
		putBE(t[2:4], uint64(tu.app))
		putBE(t[4:8], tu.space.lo)
	case Guard32:
		putBE(t[0:4], tu.guard)
		putBE(t[4:6], uint64(tu.app))
		putBE(t[6:8], tu.space.hi)
		putBE(t[8:16], tu.space.lo)
	default:
		putBE(t[0:8], tu.guard)
		putBE(t[8:10], uint64(tu.app))
		putBE(t[10:16], tu.space.lo)
	}
}

// be decodes a big-endian unsigned integer of len(b) <= 8 bytes.
func be(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

// putBE encodes the low len(b) bytes of v big-endian.
func putBE(b []byte, v uint64) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
}
