//go:build !purego

package crc32c

// archCutoffs are the lengths where this architecture's implementations
// change strategy; the harness tests around each: the 4-way threshold and
// its stripe granule, the largest chunk, and the 4-block Blocks minimum.
var archCutoffs = []int{fourWayMin, fourWayMin + stripeUnit, 4 * stripeUnit * 3, maxChunk, maxChunk + fourWayMin, blocksMin}
