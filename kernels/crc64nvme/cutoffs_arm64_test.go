//go:build !purego

package crc64nvme

// archCutoffs are the lengths where this architecture's implementations
// change strategy; the harness tests around each: the fold threshold, the
// eight-accumulator loop (128 bytes) and its second iteration, and the
// four-block Blocks minimum.
var archCutoffs = []int{pmullMin, 128, 256, blocksMin, 48}
