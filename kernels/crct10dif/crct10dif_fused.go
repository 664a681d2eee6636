package crct10dif

import (
	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/kernels/internal/layout"
)

// blocksSumsPortable is BlocksCRC32C as two passes: the active Blocks, then
// crc32c.Blocks. The layout was checked.
func blocksSumsPortable(dst []uint16, sums []uint32, p []byte, blockLen, stride int) {
	blocks(dst, p, blockLen, stride)
	if err := crc32c.Blocks(sums, p, blockLen, stride); err != nil {
		panic("crct10dif: crc32c.Blocks refused a checked layout: " + err.Error())
	}
}

// blocksSumsCopyPortable is BlocksCRC32CCopy as a copy of the blocks followed
// by the active BlocksCRC32C over q; the layout was checked.
func blocksSumsCopyPortable(dst []uint16, sums []uint32, q, p []byte, blockLen, stride int) {
	layout.Copy(q, p, len(dst), blockLen, stride)
	blocksSums(dst, sums, q, blockLen, stride)
}
