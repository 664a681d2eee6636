package crc32c

import (
	"hash/crc32"

	"github.com/difctl/difctl/kernels/internal/layout"
)

// The portable implementation is the standard library's Castagnoli CRC,
// which itself uses the SSE4.2 and ARMv8 CRC32 instructions where present
// and slicing-by-8 tables elsewhere.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func updateGeneric(crc uint32, p []byte) uint32 { return crc32.Update(crc, castagnoli, p) }

func blocksGeneric(dst []uint32, p []byte, blockLen, stride int) {
	for i := range dst {
		off := i * stride
		dst[i] = crc32.Update(0, castagnoli, p[off:off+blockLen])
	}
}

// blocksCopyPortable is BlocksCopy as a copy of the blocks followed by the
// active Blocks over q; the layout was checked.
func blocksCopyPortable(dst []uint32, q, p []byte, blockLen, stride int) {
	layout.Copy(q, p, len(dst), blockLen, stride)
	blocks(dst, q, blockLen, stride)
}
