package parity

import (
	"encoding/binary"
	"fmt"

	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/store"
)

// The checksums of the parity blocks live in the store (store records 'Q',
// store/parity.go), SumPageStripes stripes to a record, the way the
// store keeps tuples in pages. A record, version 1 (integers big-endian):
//
//	0   'R' magic
//	1   version (1)
//	2   m, parity blocks per stripe (1 to 128)
//	3   0
//	4   stripes per page P (uint32, SumPageStripes)
//	8   page number (uint64): stripes page·P to page·P+P-1
//	16  recorded bitmap: P/8 bytes, bit i = byte i/8, bit i%8 (LSB
//	    first); stripe page·P+i has checksums recorded
//	    checksums: P·m·4, stripe-major (stripe i's block j at i·m+j); a
//	    stripe not recorded, or past the volume's last, holds zeros
//	    CRC-32C of everything before it (4)
//
// That is 4 bytes per parity block and 1 bit per stripe, plus 20 bytes a
// page: 8340 bytes for a page of 16+2 (1024 stripes, 16 MiB of data at
// 4 KiB blocks). A stripe that is not recorded has no usable parity (its
// parity was never computed, or was dropped by a write that could not
// update it): every parity block of it is an erasure. The page number in
// the record makes a record stored under another page's key fail to
// decode, as Checksum's address makes a misplaced parity block fail.

// SumPageStripes is the number of stripes of a SumPage.
const SumPageStripes = 1024

const (
	sumMagic   = 'R'
	sumVersion = 1
	sumHeader  = 16
)

// SumPage holds the parity checksums of SumPageStripes consecutive stripes
// (the last page of a volume: fewer), and encodes them as a store record.
// It is not safe for concurrent use.
type SumPage struct {
	page int64
	m    int
	n    int // stripes of the volume in this page
	set  [SumPageStripes / 64]uint64
	sums []uint32 // SumPageStripes·m
}

// SumPages returns the number of SumPages of l's stripes.
func (l Layout) SumPages() int64 { return ceilDiv(l.stripes, SumPageStripes) }

// SumPageOf returns the page that holds stripe s's checksums.
func SumPageOf(s int64) int64 { return s / SumPageStripes }

// NewSumPage returns page number page of l's checksums, with no stripe
// recorded. It panics if page is not below l.SumPages().
func (l Layout) NewSumPage(page int64) *SumPage {
	if page < 0 || page >= l.SumPages() {
		panic(fmt.Sprintf("parity: sums page %d out of range (%d pages)", page, l.SumPages()))
	}
	return &SumPage{
		page: page,
		m:    l.m,
		n:    int(min(SumPageStripes, l.stripes-page*SumPageStripes)),
		sums: make([]uint32, SumPageStripes*l.m),
	}
}

// Page returns the page number.
func (p *SumPage) Page() int64 { return p.page }

func (p *SumPage) index(s int64) int {
	i := s - p.page*SumPageStripes
	if i < 0 || i >= int64(p.n) {
		panic(fmt.Sprintf("parity: stripe %d is not in sums page %d", s, p.page))
	}
	return int(i)
}

// Stripe returns the m checksums of stripe s, and false if none are
// recorded. The slice is the page's own, valid until the page changes.
// It panics if s is not in the page.
func (p *SumPage) Stripe(s int64) ([]uint32, bool) {
	i := p.index(s)
	if p.set[i/64]&(1<<(i%64)) == 0 {
		return nil, false
	}
	return p.sums[i*p.m : (i+1)*p.m : (i+1)*p.m], true
}

// Set records the m checksums of stripe s.
func (p *SumPage) Set(s int64, sums []uint32) {
	i := p.index(s)
	if len(sums) != p.m {
		panic(fmt.Sprintf("parity: %d checksums for a stripe of %d parity blocks", len(sums), p.m))
	}
	p.set[i/64] |= 1 << (i % 64)
	copy(p.sums[i*p.m:], sums)
}

// Unset forgets stripe s's checksums: its parity is not to be used.
func (p *SumPage) Unset(s int64) {
	i := p.index(s)
	p.set[i/64] &^= 1 << (i % 64)
	clear(p.sums[i*p.m : (i+1)*p.m])
}

// Recorded returns how many stripes of the page have checksums.
func (p *SumPage) Recorded() int {
	n := 0
	for i := range p.n {
		if p.set[i/64]&(1<<(i%64)) != 0 {
			n++
		}
	}
	return n
}

// EncodedLen returns the length of the page's record.
func (p *SumPage) EncodedLen() int { return sumHeader + SumPageStripes/8 + 4*SumPageStripes*p.m + 4 }

// Encode appends the page's record to dst.
func (p *SumPage) Encode(dst []byte) []byte {
	start := len(dst)
	dst = append(dst, sumMagic, sumVersion, byte(p.m), 0)
	dst = binary.BigEndian.AppendUint32(dst, SumPageStripes)
	dst = binary.BigEndian.AppendUint64(dst, uint64(p.page))
	for _, w := range p.set {
		dst = binary.LittleEndian.AppendUint64(dst, w) // bit i%8 of byte i/8
	}
	for _, v := range p.sums {
		dst = binary.BigEndian.AppendUint32(dst, v)
	}
	return binary.BigEndian.AppendUint32(dst, crc32c.Checksum(dst[start:]))
}

// CorruptSumsError reports a record of parity checksums that does not
// decode as the page expected. It matches store.ErrCorrupt: the store lost
// or damaged it.
type CorruptSumsError struct {
	Page   int64
	Reason string
}

func (e *CorruptSumsError) Error() string {
	return fmt.Sprintf("parity: checksums page %d: corrupt: %s", e.Page, e.Reason)
}

// Unwrap returns store.ErrCorrupt.
func (e *CorruptSumsError) Unwrap() error { return store.ErrCorrupt }

// Decode replaces the page's contents with record b, which must be the
// record of this page of this layout (its number, m and stripes), intact.
// On error (a *CorruptSumsError) the page is unchanged.
func (p *SumPage) Decode(b []byte) error {
	bad := func(format string, a ...any) error {
		return &CorruptSumsError{Page: p.page, Reason: fmt.Sprintf(format, a...)}
	}
	if len(b) != p.EncodedLen() {
		return bad("%d bytes, want %d", len(b), p.EncodedLen())
	}
	body := b[:len(b)-4]
	if got, want := crc32c.Checksum(body), binary.BigEndian.Uint32(b[len(body):]); got != want {
		return bad("CRC-32C %08x, recorded %08x", got, want)
	}
	switch {
	case b[0] != sumMagic:
		return bad("magic %#02x", b[0])
	case b[1] != sumVersion:
		return bad("version %d", b[1])
	case int(b[2]) != p.m || b[3] != 0:
		return bad("m %d (flags %d), want %d", b[2], b[3], p.m)
	case binary.BigEndian.Uint32(b[4:]) != SumPageStripes:
		return bad("%d stripes a page, want %d", binary.BigEndian.Uint32(b[4:]), SumPageStripes)
	case binary.BigEndian.Uint64(b[8:]) != uint64(p.page):
		return bad("the record of page %d", binary.BigEndian.Uint64(b[8:]))
	}
	var set [SumPageStripes / 64]uint64
	for w := range set {
		set[w] = binary.LittleEndian.Uint64(b[sumHeader+8*w:])
	}
	for i := p.n; i < SumPageStripes; i++ {
		if set[i/64]&(1<<(i%64)) != 0 {
			return bad("stripe %d recorded, past the last (%d)", p.page*SumPageStripes+int64(i), p.page*SumPageStripes+int64(p.n)-1)
		}
	}
	p.set = set
	sums := b[sumHeader+SumPageStripes/8:]
	for i := range p.sums {
		p.sums[i] = binary.BigEndian.Uint32(sums[4*i:])
	}
	return nil
}
