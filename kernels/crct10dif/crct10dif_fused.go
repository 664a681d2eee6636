package crct10dif

import "github.com/difctl/difctl/kernels/crc32c"

// blocksSumsPortable is BlocksCRC32C as two passes: the active Blocks, then
// crc32c.Blocks. The layout was checked.
func blocksSumsPortable(dst []uint16, sums []uint32, p []byte, blockLen, stride int) {
	blocks(dst, p, blockLen, stride)
	if err := crc32c.Blocks(sums, p, blockLen, stride); err != nil {
		panic("crct10dif: crc32c.Blocks refused a checked layout: " + err.Error())
	}
}
