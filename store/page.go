package store

import (
	"encoding/binary"
	"fmt"

	"github.com/difctl/difctl/kernels/crc32c"
)

// Page value, schema version 1 (all integers big-endian):
//
//	0  'P' magic
//	1  version (1)
//	2  flags: bit 0 = sector checksums present
//	3  tuple size (8 or 16)
//	4  tuples per page P (uint32)
//	8  written bitmap: P/8 bytes, bit i = byte i/8, bit i%8 (LSB first)
//	   tuples: P * tuple size; unwritten slots hold all ones (the escape)
//	   sums:   P * 4 (CRC-32C per block), only with flag bit 0
//	   CRC-32C of everything before it (4)
//
// A page has a fixed length for a given manifest, so every length is checked
// before anything is copied.
//
// A page with no written block is stored as an empty-page record, 8 bytes:
//
//	0  'E' magic
//	1  version (1)
//	2  0, 0
//	4  CRC-32C of bytes 0-3
//
// so that, from schema version 2 on, every page of a volume has a record
// and a page that is missing is a store that lost it (a *CorruptError),
// never blocks read as unwritten. From version 7 only pages that were
// written and emptied again have one (and those of a bulk load, until it
// lands): the pages never written lie in empty runs (runs.go). Volumes
// of schema version 1 recorded empty pages by their absence and are read
// that way (Tuples.Dense).

const (
	pageMagic   = 'P'
	pageVersion = 1
	pageHeader  = 8
	flagSums    = 1
)

const (
	emptyMagic   = 'E'
	emptyVersion = 1
)

// emptyPageValue is the record of a page with no written block.
var emptyPageValue = func() []byte {
	b := []byte{emptyMagic, emptyVersion, 0, 0}
	return binary.BigEndian.AppendUint32(b, crc32c.Checksum(b))
}()

// layout holds a volume's page geometry.
type layout struct {
	ts      int // tuple size
	p       int // tuples per page
	sums    bool
	tupOff  int
	sumOff  int
	crcOff  int
	size    int // page value length
	bitsLen int // bitmap words
}

func newLayout(m *Manifest) layout {
	l := layout{ts: m.TupleSize, p: m.PageTuples, sums: m.SectorSums}
	l.bitsLen = l.p / 64
	l.tupOff = pageHeader + l.p/8
	l.sumOff = l.tupOff + l.p*l.ts
	l.crcOff = l.sumOff
	if l.sums {
		l.crcOff += 4 * l.p
	}
	l.size = l.crcOff + 4
	return l
}

func (l *layout) flags() byte {
	if l.sums {
		return flagSums
	}
	return 0
}

// pageBuf is a decoded page being modified.
type pageBuf struct {
	bits   []uint64
	tuples []byte
	sums   []uint32
}

func (l *layout) newPageBuf() *pageBuf {
	pb := &pageBuf{bits: make([]uint64, l.bitsLen), tuples: make([]byte, l.p*l.ts)}
	if l.sums {
		pb.sums = make([]uint32, l.p)
	}
	pb.reset()
	return pb
}

// reset makes pb an empty page: nothing written, escape tuples, zero sums.
func (pb *pageBuf) reset() {
	clear(pb.bits)
	fillOnes(pb.tuples)
	clear(pb.sums)
}

func (pb *pageBuf) empty() bool {
	for _, w := range pb.bits {
		if w != 0 {
			return false
		}
	}
	return true
}

var onesPage = func() []byte {
	b := make([]byte, 64<<10)
	for i := range b {
		b[i] = 0xff
	}
	return b
}()

// fillOnes sets every byte of b to 0xff.
func fillOnes(b []byte) {
	for len(b) > 0 {
		b = b[copy(b, onesPage):]
	}
}

// encode appends the page value of pb to dst.
func (l *layout) encode(dst []byte, pb *pageBuf) []byte {
	start := len(dst)
	dst = append(dst, pageMagic, pageVersion, l.flags(), byte(l.ts))
	dst = binary.BigEndian.AppendUint32(dst, uint32(l.p))
	for _, w := range pb.bits {
		dst = binary.LittleEndian.AppendUint64(dst, w)
	}
	dst = append(dst, pb.tuples...)
	if l.sums {
		for _, s := range pb.sums {
			dst = binary.BigEndian.AppendUint32(dst, s)
		}
	}
	return binary.BigEndian.AppendUint32(dst, crc32c.Checksum(dst[start:]))
}

// checkAny validates a stored page record, a page value or an empty-page
// record, and tells which it is.
func (l *layout) checkAny(volume string, page int64, v []byte) (empty bool, err error) {
	if len(v) > 0 && v[0] == emptyMagic && len(v) != l.size {
		if string(v) != string(emptyPageValue) {
			return false, &CorruptError{Volume: volume, Record: fmt.Sprintf("page %d", page), Reason: fmt.Sprintf("bad empty-page record %x", v)}
		}
		return true, nil
	}
	return false, l.check(volume, page, v)
}

// check validates a stored page value: length, header and checksum.
func (l *layout) check(volume string, page int64, v []byte) error {
	corrupt := func(format string, args ...any) error {
		return &CorruptError{Volume: volume, Record: fmt.Sprintf("page %d", page), Reason: fmt.Sprintf(format, args...)}
	}
	if len(v) != l.size {
		return corrupt("length %d, want %d", len(v), l.size)
	}
	if v[0] != pageMagic || v[1] != pageVersion {
		return corrupt("magic/version %#02x/%d, want %#02x/%d", v[0], v[1], pageMagic, pageVersion)
	}
	if v[2] != l.flags() || int(v[3]) != l.ts || binary.BigEndian.Uint32(v[4:]) != uint32(l.p) {
		return corrupt("geometry flags=%d tuple=%d page=%d, manifest says flags=%d tuple=%d page=%d",
			v[2], v[3], binary.BigEndian.Uint32(v[4:]), l.flags(), l.ts, l.p)
	}
	if got, want := crc32c.Checksum(v[:l.crcOff]), binary.BigEndian.Uint32(v[l.crcOff:]); got != want {
		return corrupt("checksum %08x, stored %08x", got, want)
	}
	return nil
}

// pageBits decodes the bitmap of a checked page value into dst.
func (l *layout) pageBits(dst []uint64, v []byte) {
	b := v[pageHeader:l.tupOff]
	for i := range dst[:l.bitsLen] {
		dst[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
}

// decode fills pb from a checked page value.
func (l *layout) decode(pb *pageBuf, v []byte) { l.decodeTo(pb.bits, pb.tuples, pb.sums, v) }

// decodeTo decodes a checked page value into its bitmap, tuples and (with
// sums) sector checksums.
func (l *layout) decodeTo(bits []uint64, tuples []byte, sums []uint32, v []byte) {
	l.pageBits(bits, v)
	copy(tuples, v[l.tupOff:l.sumOff])
	if l.sums {
		decodeSums(sums, v[l.sumOff:l.crcOff])
	}
}

// decodeCached fills the cached page cp from a checked page value,
// allocating its arrays on first use.
func (l *layout) decodeCached(cp *cachedPage, v []byte) {
	if cp.tuples == nil {
		cp.bits = make([]uint64, l.bitsLen)
		cp.tuples = make([]byte, l.p*l.ts)
		if l.sums {
			cp.sums = make([]uint32, l.p)
		}
	}
	l.decodeTo(cp.bits, cp.tuples, cp.sums, v)
}

// decodeSums decodes len(dst) big-endian uint32s from src, four per step
// from two 8-byte loads (2.3 times the speed of one Uint32 at a time).
func decodeSums(dst []uint32, src []byte) {
	src = src[:4*len(dst)]
	for len(dst) >= 4 {
		x := binary.BigEndian.Uint64(src)
		y := binary.BigEndian.Uint64(src[8:])
		dst[0], dst[1], dst[2], dst[3] = uint32(x>>32), uint32(x), uint32(y>>32), uint32(y)
		src, dst = src[16:], dst[4:]
	}
	for i := range dst {
		dst[i] = binary.BigEndian.Uint32(src[4*i:])
	}
}
