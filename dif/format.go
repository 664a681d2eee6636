package dif

import (
	"strconv"
)

// Guard selects the guard (checksum) of a format and with it the tuple
// layout.
type Guard uint8

// The guards. The zero value is Guard16.
const (
	Guard16 Guard = iota // CRC-16/T10-DIF, 8-byte tuple
	Guard32              // CRC-32C, 16-byte tuple
	Guard64              // CRC-64/NVME, 16-byte tuple
)

var guardNames = [...]string{"crc16", "crc32", "crc64"}

// String returns the guard's name in the text form: crc16, crc32 or crc64.
func (g Guard) String() string {
	if int(g) < len(guardNames) {
		return guardNames[g]
	}
	return "Guard(" + strconv.Itoa(int(g)) + ")"
}

// Bits returns the width of the guard in bits (16, 32 or 64), or 0 for an
// unknown guard.
func (g Guard) Bits() int {
	switch g {
	case Guard16:
		return 16
	case Guard32:
		return 32
	case Guard64:
		return 64
	}
	return 0
}

// TupleSize returns the size in bytes of the PI tuple of the guard (8 or
// 16), or 0 for an unknown guard.
func (g Guard) TupleSize() int {
	switch g {
	case Guard16:
		return 8
	case Guard32, Guard64:
		return 16
	}
	return 0
}

// SpaceBits returns the width in bits of the guard's storage+reference tag
// space (32, 80 or 48), or 0 for an unknown guard.
func (g Guard) SpaceBits() int {
	switch g {
	case Guard16:
		return 32
	case Guard32:
		return 80
	case Guard64:
		return 48
	}
	return 0
}

// Type is the protection-information type, 0 to 3, as numbered by T10 and
// NVMe.
type Type uint8

// The PI types.
const (
	Type0 Type = 0 // no protection information
	Type1 Type = 1 // ref tag = initial + block index, checked
	Type2 Type = 2 // as Type1, with the initial ref tag chosen by the caller
	Type3 Type = 3 // ref tag not checked
)

// String returns the type's name in the text form: type0 to type3.
func (t Type) String() string { return "type" + strconv.Itoa(int(t)) }

// Position says where the tuple sits in a block's metadata.
type Position uint8

// The PI positions. The zero value is PILast.
const (
	// PILast: the tuple is the last TupleSize bytes of the metadata; the
	// guard covers the data and the metadata bytes before the tuple.
	PILast Position = iota
	// PIFirst: the tuple is the first TupleSize bytes of the metadata; the
	// guard covers the data only.
	PIFirst
)

// String returns the position's name in the text form: pi-last or pi-first.
func (p Position) String() string {
	switch p {
	case PILast:
		return "pi-last"
	case PIFirst:
		return "pi-first"
	}
	return "Position(" + strconv.Itoa(int(p)) + ")"
}

// Layout says where the metadata of a run of blocks lives.
type Layout uint8

// The layouts. The zero value is Interleaved.
const (
	// Interleaved: extended blocks, each block's data immediately followed by
	// its metadata (extended LBA, e.g. 520-byte sectors), in one buffer.
	Interleaved Layout = iota
	// Separate: the data blocks in one buffer and the metadata of each block,
	// in the same order, in another (DIX).
	Separate
)

// String returns the layout's name in the text form: interleaved or dix.
func (l Layout) String() string {
	switch l {
	case Interleaved:
		return "interleaved"
	case Separate:
		return "dix"
	}
	return "Layout(" + strconv.Itoa(int(l)) + ")"
}

// Limits of a format.
const (
	MinBlockSize    = 512
	MaxBlockSize    = 64 << 10
	MaxMetadataSize = 1<<16 - 1 // the NVMe metadata size field is 16 bits
)

// Options describe a format to NewFormat. The zero value of each field is
// its default, except BlockSize, which is required.
type Options struct {
	// BlockSize is the number of data bytes per block: a power of two from
	// 512 to 65536. Required.
	BlockSize int
	// MetadataSize is the number of metadata bytes per block, at least the
	// guard's tuple size and at most 65535. Default (0): the tuple size.
	MetadataSize int
	// Guard is the guard. Default: Guard16.
	Guard Guard
	// Type is the PI type. The zero value is Type0, no protection
	// information (Generate and Verify then do nothing); most callers want
	// Type1. (The text form defaults to type1.)
	Type Type
	// Position is where the tuple sits in the metadata. Default: PILast.
	Position Position
	// StorageTagBits is the width of the storage tag in the upper bits of
	// the storage+reference tag space: 0 to 32 for Guard16, 0 to 80 for
	// Guard32, 0 to 48 for Guard64. The reference tag takes the remaining
	// low bits. Default: 0.
	StorageTagBits int
	// Layout is the layout of runs of blocks. Default: Interleaved.
	Layout Layout
}

// Format describes a protection-information format: block size, metadata
// size, guard, type, tuple position, storage tag width and layout. Build one
// with NewFormat or Parse; the zero Format is invalid and every operation on
// it returns an error. Formats are small comparable values, safe for
// concurrent use.
type Format struct {
	bs     int32
	md     int32
	guard  Guard
	typ    Type
	pos    Position
	layout Layout
	sts    uint8
}

// FormatError reports an invalid format: the field (as named in the text
// form or Options), the offending value and why it was refused.
type FormatError struct {
	Field  string // "block size", "metadata size", "guard", "type", "position", "storage tag bits", "layout" or "text"
	Value  string // the offending value as written
	Reason string
}

func (e *FormatError) Error() string {
	return "dif: invalid format: " + e.Field + " " + strconv.Quote(e.Value) + ": " + e.Reason
}

func fmtErr(field string, v int, reason string) error {
	return &FormatError{Field: field, Value: strconv.Itoa(v), Reason: reason}
}

// NewFormat validates o and returns the format it describes, or a
// *FormatError naming the first invalid field.
func NewFormat(o Options) (Format, error) {
	if o.BlockSize < MinBlockSize || o.BlockSize > MaxBlockSize || o.BlockSize&(o.BlockSize-1) != 0 {
		return Format{}, fmtErr("block size", o.BlockSize, "must be a power of two from 512 to 65536")
	}
	ts := o.Guard.TupleSize()
	if ts == 0 {
		return Format{}, fmtErr("guard", int(o.Guard), "unknown guard (want Guard16, Guard32 or Guard64)")
	}
	md := o.MetadataSize
	if md == 0 {
		md = ts
	}
	if md < ts {
		return Format{}, fmtErr("metadata size", o.MetadataSize,
			"smaller than the "+strconv.Itoa(ts)+"-byte "+o.Guard.String()+" tuple")
	}
	if md > MaxMetadataSize {
		return Format{}, fmtErr("metadata size", o.MetadataSize, "larger than 65535")
	}
	if o.Type > Type3 {
		return Format{}, fmtErr("type", int(o.Type), "PI type must be 0, 1, 2 or 3")
	}
	if o.Position > PIFirst {
		return Format{}, fmtErr("position", int(o.Position), "unknown PI position (want PILast or PIFirst)")
	}
	if w := o.Guard.SpaceBits(); o.StorageTagBits < 0 || o.StorageTagBits > w {
		return Format{}, fmtErr("storage tag bits", o.StorageTagBits,
			"must be 0 to "+strconv.Itoa(w)+" with the "+o.Guard.String()+" guard")
	}
	if o.Layout > Separate {
		return Format{}, fmtErr("layout", int(o.Layout), "unknown layout (want Interleaved or Separate)")
	}
	return Format{
		bs: int32(o.BlockSize), md: int32(md), guard: o.Guard, typ: o.Type,
		pos: o.Position, layout: o.Layout, sts: uint8(o.StorageTagBits),
	}, nil
}

// MustFormat is like Parse but panics on error. It is meant for formats
// written as constants in programs and tests.
func MustFormat(s string) Format {
	f, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return f
}

// Options returns the options that describe f (with MetadataSize filled in).
func (f Format) Options() Options {
	return Options{
		BlockSize: int(f.bs), MetadataSize: int(f.md), Guard: f.guard, Type: f.typ,
		Position: f.pos, StorageTagBits: int(f.sts), Layout: f.layout,
	}
}

// Valid reports whether f was built by NewFormat or Parse (the zero Format
// is not valid).
func (f Format) Valid() bool { return f.bs != 0 }

// WithLayout returns f with the layout l. It returns the zero (invalid)
// Format if f is invalid or l unknown.
func (f Format) WithLayout(l Layout) Format {
	if !f.Valid() || l > Separate {
		return Format{}
	}
	f.layout = l
	return f
}

// BlockSize returns the number of data bytes per block.
func (f Format) BlockSize() int { return int(f.bs) }

// MetadataSize returns the number of metadata bytes per block.
func (f Format) MetadataSize() int { return int(f.md) }

// ExtendedBlockSize returns BlockSize + MetadataSize, the size of a block in
// the interleaved layout (520, 4104, 4112, ...).
func (f Format) ExtendedBlockSize() int { return int(f.bs) + int(f.md) }

// Guard returns the guard.
func (f Format) Guard() Guard { return f.guard }

// Type returns the PI type.
func (f Format) Type() Type { return f.typ }

// Position returns the tuple's position in the metadata.
func (f Format) Position() Position { return f.pos }

// Layout returns the layout.
func (f Format) Layout() Layout { return f.layout }

// TupleSize returns the size of the PI tuple: 8 for Guard16, 16 otherwise.
func (f Format) TupleSize() int { return f.guard.TupleSize() }

// StorageTagBits returns the width of the storage tag.
func (f Format) StorageTagBits() int { return int(f.sts) }

// RefTagBits returns the width of the reference tag: the guard's space
// (32, 80 or 48 bits) minus the storage tag.
func (f Format) RefTagBits() int { return f.guard.SpaceBits() - int(f.sts) }

// PIOffset returns the offset of the tuple within a block's metadata: 0 for
// PIFirst, MetadataSize - TupleSize for PILast.
func (f Format) PIOffset() int {
	if f.pos == PIFirst {
		return 0
	}
	return int(f.md) - f.TupleSize()
}

// GuardCoverage returns the number of bytes the guard covers: the data, plus
// for PILast the metadata bytes before the tuple.
func (f Format) GuardCoverage() int { return int(f.bs) + f.PIOffset() }
