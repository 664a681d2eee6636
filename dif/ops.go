package dif

// Insert builds a protected run from plain data: it copies src (whole data
// blocks) into the run data/md in f's layout, zeroes the metadata bytes
// outside the tuple, and generates the PI as Generate does. The buffers
// must not overlap. Nothing is written if an error is returned.
func (f Format) Insert(data, md, src []byte, p Params) error {
	r, err := f.run(data, md)
	if err != nil {
		return err
	}
	if len(src) != r.n*int(f.bs) {
		return bufErr("insert: source of %d bytes does not match the run's %d blocks of %d bytes", len(src), r.n, f.bs)
	}
	e, err := f.expect(&p)
	if err != nil {
		return err
	}
	bs, ext := int(f.bs), f.ExtendedBlockSize()
	if f.layout == Interleaved {
		for i := 0; i < r.n; i++ {
			b := data[i*ext : (i+1)*ext]
			copy(b, src[i*bs:(i+1)*bs])
			clear(b[bs:])
		}
	} else {
		copy(data, src)
		clear(md)
	}
	if f.typ == Type0 || r.n == 0 {
		return nil
	}
	return generate(&r, &e)
}

// Strip verifies a run (as Verify) and, if it passes, copies its data
// blocks, without metadata, to dst, which must hold exactly the run's data.
// On a failure it returns Verify's error and leaves dst untouched.
func (f Format) Strip(dst, data, md []byte, p Params) error {
	r, err := f.run(data, md)
	if err != nil {
		return err
	}
	if len(dst) != r.n*int(f.bs) {
		return bufErr("strip: destination of %d bytes does not match the run's %d blocks of %d bytes", len(dst), r.n, f.bs)
	}
	if err := f.Verify(data, md, p); err != nil {
		return err
	}
	if f.layout == Separate {
		copy(dst, data)
		return nil
	}
	bs, ext := int(f.bs), f.ExtendedBlockSize()
	for i := 0; i < r.n; i++ {
		copy(dst[i*bs:(i+1)*bs], data[i*ext:])
	}
	return nil
}

// ToSeparate converts a run from the interleaved layout (src, extended
// blocks) to the separate layout (data and md), whatever f's layout. The PI
// moves byte for byte: the guard covers the same bytes in both layouts, so
// nothing is recomputed or verified. The buffers must not overlap.
func (f Format) ToSeparate(data, md, src []byte) error {
	fi := f.WithLayout(Interleaved)
	r, err := fi.run(src, nil)
	if err != nil {
		return err
	}
	if _, err := f.WithLayout(Separate).run(data, md); err != nil {
		return err
	}
	if len(data) != r.n*int(f.bs) {
		return bufErr("convert: data buffer of %d bytes does not match the source's %d blocks", len(data), r.n)
	}
	bs, ms, ext := int(f.bs), int(f.md), f.ExtendedBlockSize()
	for i := 0; i < r.n; i++ {
		b := src[i*ext : (i+1)*ext]
		copy(data[i*bs:(i+1)*bs], b[:bs])
		copy(md[i*ms:(i+1)*ms], b[bs:])
	}
	return nil
}

// ToInterleaved converts a run from the separate layout (data and md) to
// the interleaved layout (dst, extended blocks), whatever f's layout, byte
// for byte like ToSeparate.
func (f Format) ToInterleaved(dst, data, md []byte) error {
	r, err := f.WithLayout(Separate).run(data, md)
	if err != nil {
		return err
	}
	if _, err := f.WithLayout(Interleaved).run(dst, nil); err != nil {
		return err
	}
	if len(dst) != r.n*f.ExtendedBlockSize() {
		return bufErr("convert: destination of %d bytes does not match the source's %d blocks", len(dst), r.n)
	}
	bs, ms, ext := int(f.bs), int(f.md), f.ExtendedBlockSize()
	for i := 0; i < r.n; i++ {
		b := dst[i*ext : (i+1)*ext]
		copy(b[:bs], data[i*bs:(i+1)*bs])
		copy(b[bs:], md[i*ms:(i+1)*ms])
	}
	return nil
}

// Remap moves the ref tags of a run from the initial value p.RefTag to
// newRefTag (a partition or an image copied to a new offset), without
// touching data, guards, app or storage tags. It verifies the run with p
// first and, on any failure, returns Verify's error and changes nothing.
// Escaped and unwritten blocks keep their tags. With Type0 and Type3 there
// is no ref-tag sequence: Remap only verifies.
func (f Format) Remap(data, md []byte, p Params, newRefTag uint64) error {
	r, err := f.run(data, md)
	if err != nil {
		return err
	}
	q := p
	q.RefTag = newRefTag
	e, err := f.expect(&q)
	if err != nil {
		return err
	}
	if err := f.Verify(data, md, p); err != nil {
		return err
	}
	if f.typ != Type1 && f.typ != Type2 {
		return nil
	}
	ts := f.TupleSize()
	for i := 0; i < r.n; i++ {
		t := r.tb[i*r.tstride+r.toff:][:ts]
		tu := decodeTuple(f.guard, t)
		if tu.app == 0xFFFF {
			continue
		}
		tu.space = tu.space.andNot(e.refMask).or(e.refAt(i))
		encodeTuple(f.guard, t, tu)
	}
	return nil
}

// Inject flips one bit of block `block` of a run, to test error detection.
// field selects what is hit:
//   - FieldData: bit of the block's data, byte bit/8, bit value 1<<(bit%8);
//   - FieldMetadata: bit of the metadata bytes outside the tuple, numbered
//     the same way from their first byte;
//   - FieldGuard, FieldAppTag, FieldRefTag, FieldStorageTag: bit of the
//     field's value, bit 0 the least significant.
//
// It returns an error wrapping ErrParams if the block, field or bit is out
// of range.
func (f Format) Inject(data, md []byte, block int, field Field, bit int) error {
	r, err := f.run(data, md)
	if err != nil {
		return err
	}
	if block < 0 || block >= r.n {
		return paramErr("inject: block %d outside the run of %d blocks", block, r.n)
	}
	var b []byte       // the bytes holding the field
	lsbFirst := false  // data and metadata: bit k is in byte k/8; fields: big-endian
	width, off := 0, 0 // the field's width and the position of its bit 0 in b
	ts, gb := f.TupleSize(), f.guard.Bits()/8
	t := r.tb[block*r.tstride+r.toff:][:ts]
	switch field {
	case FieldData:
		b = data[block*r.dstride:][:f.bs]
		width, lsbFirst = len(b)*8, true
	case FieldMetadata:
		var m []byte
		if f.layout == Interleaved {
			m = data[block*r.dstride+int(f.bs):][:f.md]
		} else {
			m = md[block*int(f.md):][:f.md]
		}
		if f.pos == PIFirst {
			b = m[ts:]
		} else {
			b = m[:int(f.md)-ts]
		}
		width, lsbFirst = len(b)*8, true
	case FieldGuard:
		b, width = t[:gb], gb*8
	case FieldAppTag:
		b, width = t[gb:gb+2], 16
	case FieldRefTag:
		b, width = t[gb+2:], f.RefTagBits()
	case FieldStorageTag:
		b, width, off = t[gb+2:], int(f.sts), f.RefTagBits()
	default:
		return paramErr("inject: unknown field %v", field)
	}
	if bit < 0 || bit >= width {
		return paramErr("inject: bit %d outside the %d-bit %v of block %d", bit, width, field, block)
	}
	if k := bit + off; lsbFirst {
		b[k/8] ^= 1 << uint(k%8)
	} else {
		b[len(b)-1-k/8] ^= 1 << uint(k%8)
	}
	return nil
}

// Tuple is a decoded PI tuple.
type Tuple struct {
	Guard      uint64 // 16, 32 or 64 bits
	AppTag     uint16
	RefTag     uint64 // the low RefTagBits of the tag space (bits 0-63)
	StorageTag uint64 // the high StorageTagBits of the tag space (bits 0-63)
	// RefTagHigh and StorageTagHigh hold bits 64 to 79 of tags wider than
	// 64 bits (Guard32 only); zero otherwise.
	RefTagHigh, StorageTagHigh uint16
}

// Unwritten reports whether the tuple is the unwritten/discarded pattern of
// format f: app, storage and ref tags all ones.
func (t Tuple) Unwritten(f Format) bool {
	return t.AppTag == 0xFFFF && t.space(f) == mask80(f.guard.SpaceBits())
}

func (t Tuple) space(f Format) u80 {
	rb := f.RefTagBits()
	ref := u80{uint64(t.RefTagHigh), t.RefTag}.and(mask80(rb))
	st := u80{uint64(t.StorageTagHigh), t.StorageTag}.and(mask80(int(f.sts)))
	return ref.or(st.shl(rb)).and(mask80(f.guard.SpaceBits()))
}

// UnwrittenTuple returns the tuple of an unwritten or discarded block:
// app, storage and ref tags all ones (the guard is left zero).
func (f Format) UnwrittenTuple() Tuple {
	sp := mask80(f.guard.SpaceBits())
	return f.tupleOf(tuple{app: 0xFFFF, space: sp})
}

func (f Format) tupleOf(tu tuple) Tuple {
	rb := f.RefTagBits()
	ref := tu.space.and(mask80(rb))
	st := tu.space.shr(rb)
	return Tuple{
		Guard: tu.guard, AppTag: tu.app,
		RefTag: ref.lo, RefTagHigh: uint16(ref.hi),
		StorageTag: st.lo, StorageTagHigh: uint16(st.hi),
	}
}

// ReadTuple decodes the tuple of block `block` of a run.
func (f Format) ReadTuple(data, md []byte, block int) (Tuple, error) {
	r, err := f.run(data, md)
	if err != nil {
		return Tuple{}, err
	}
	if block < 0 || block >= r.n {
		return Tuple{}, paramErr("block %d outside the run of %d blocks", block, r.n)
	}
	return f.tupleOf(decodeTuple(f.guard, r.tb[block*r.tstride+r.toff:])), nil
}

// WriteTuple encodes t as the tuple of block `block` of a run. Values wider
// than their fields are truncated to the field (the guard to its width, the
// tags to RefTagBits and StorageTagBits).
func (f Format) WriteTuple(data, md []byte, block int, t Tuple) error {
	r, err := f.run(data, md)
	if err != nil {
		return err
	}
	if block < 0 || block >= r.n {
		return paramErr("block %d outside the run of %d blocks", block, r.n)
	}
	g := t.Guard
	if gb := f.guard.Bits(); gb < 64 {
		g &= 1<<uint(gb) - 1
	}
	encodeTuple(f.guard, r.tb[block*r.tstride+r.toff:], tuple{guard: g, app: t.AppTag, space: t.space(f)})
	return nil
}
