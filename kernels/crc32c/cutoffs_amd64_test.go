//go:build !purego

package crc32c

// archCutoffs are the lengths where this architecture's implementations
// change strategy; the harness tests around each.
//
// Measured on the AMD EPYC (Zen 3, 2 shared cores) this was written on, best
// of 200 runs against hash/crc32 (the active generic path below hybridMin):
//
//	size       384   512   640   768   1 KiB  4 KiB  64 KiB  1 MiB
//	hybrid     0.95  1.02  1.23  1.55  1.49   1.66   1.90    1.94
//	hybrid128  0.95  0.89  1.10  1.34  1.25   1.27   1.38    1.47
//
// so Update takes the chunk kernels from hybridMin = 512 bytes. Blocks runs
// six blocks at once from hybridBlocksMin = 64 bytes, 4.8 times hash/crc32
// called per block there (3.7 at 256, 2.2 at 512, 1.9 at 4096).
var archCutoffs = []int{
	hybridMin, hybridBlocksMin,
	6 * hybridSegUnit,                      // the tail is under one step of all six segments
	6 * hybridMaxSeg, 6*hybridMaxSeg + 192, // chunks of hybridMaxSeg segments
	6 * hybridBigSeg, 6*hybridBigSeg + 192, // chunks of hybridBigSeg segments
}
