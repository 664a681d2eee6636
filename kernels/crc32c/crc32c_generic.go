package crc32c

import "hash/crc32"

// The portable implementation is the standard library's Castagnoli CRC,
// which itself uses the SSE4.2 and ARMv8 CRC32 instructions where present
// and slicing-by-8 tables elsewhere.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func updateGeneric(crc uint32, p []byte) uint32 { return crc32.Update(crc, castagnoli, p) }
