package crc64nvme

import (
	"math/bits"
)

// Slicing-by-8 over the reflected polynomial. hash/crc64 computes the same
// CRC with crc64.MakeTable(0x9A6C9329AC4BC9B5), but for tables other than
// ISO and ECMA it runs byte at a time below 2 KiB and rebuilds a slicing
// table on every call above, so it is only the benchmark baseline here.
var table = makeTables()

// reflectedPoly is the CRC-64/NVME polynomial bit-reversed.
var reflectedPoly = bits.Reverse64(Params.Poly)

func makeTables() *[8][256]uint64 {
	t := new([8][256]uint64)
	for b := 0; b < 256; b++ {
		crc := uint64(b)
		for i := 0; i < 8; i++ {
			if crc&1 != 0 {
				crc = crc>>1 ^ reflectedPoly
			} else {
				crc >>= 1
			}
		}
		t[0][b] = crc
	}
	for k := 1; k < 8; k++ {
		for b := 0; b < 256; b++ {
			prev := t[k-1][b]
			t[k][b] = prev>>8 ^ t[0][byte(prev)]
		}
	}
	return t
}

func updateGeneric(crc uint64, p []byte) uint64 {
	crc = ^crc
	t := table
	for len(p) >= 8 {
		p = p[:len(p):len(p)]
		crc ^= uint64(p[0]) | uint64(p[1])<<8 | uint64(p[2])<<16 | uint64(p[3])<<24 |
			uint64(p[4])<<32 | uint64(p[5])<<40 | uint64(p[6])<<48 | uint64(p[7])<<56
		crc = t[7][byte(crc)] ^ t[6][byte(crc>>8)] ^ t[5][byte(crc>>16)] ^ t[4][byte(crc>>24)] ^
			t[3][byte(crc>>32)] ^ t[2][byte(crc>>40)] ^ t[1][byte(crc>>48)] ^ t[0][byte(crc>>56)]
		p = p[8:]
	}
	for _, b := range p {
		crc = t[0][byte(crc)^b] ^ crc>>8
	}
	return ^crc
}
