package crct10dif

// Slicing-by-16: table[k][b] is the CRC register contribution of byte b
// followed by k zero bytes, so sixteen lookups advance the CRC by sixteen
// bytes at once.
var table = makeTables()

func makeTables() *[16][256]uint16 {
	t := new([16][256]uint16)
	for b := 0; b < 256; b++ {
		crc := uint16(b) << 8
		for i := 0; i < 8; i++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ uint16(Params.Poly)
			} else {
				crc <<= 1
			}
		}
		t[0][b] = crc
	}
	for k := 1; k < 16; k++ {
		for b := 0; b < 256; b++ {
			prev := t[k-1][b]
			t[k][b] = prev<<8 ^ t[0][prev>>8]
		}
	}
	return t
}

// updateGeneric is the portable implementation: slicing-by-16, then bytes.
func updateGeneric(crc uint16, p []byte) uint16 {
	t := table
	for len(p) >= 16 {
		p = p[:len(p):len(p)]
		crc = t[15][p[0]^byte(crc>>8)] ^ t[14][p[1]^byte(crc)] ^
			t[13][p[2]] ^ t[12][p[3]] ^ t[11][p[4]] ^ t[10][p[5]] ^
			t[9][p[6]] ^ t[8][p[7]] ^ t[7][p[8]] ^ t[6][p[9]] ^
			t[5][p[10]] ^ t[4][p[11]] ^ t[3][p[12]] ^ t[2][p[13]] ^
			t[1][p[14]] ^ t[0][p[15]]
		p = p[16:]
	}
	return updateBytes(crc, p)
}

// updateBytes is the byte-at-a-time table loop, for tails.
func updateBytes(crc uint16, p []byte) uint16 {
	for _, b := range p {
		crc = crc<<8 ^ table[0][byte(crc>>8)^b]
	}
	return crc
}
