//go:build !purego

package crct10dif

// archCutoffs are the lengths where this architecture's implementations
// change strategy; the harness tests around each: the table/fold crossover
// of Update, the shortest block Blocks interleaves, the vector widths (the
// kernels' single-vector and 16-byte-lane paths) and the lengths from which
// the main loops run (accumulators times vector bytes).
var archCutoffs = []int{
	foldMinPCLMUL, foldMinAVX2, foldMinAVX512, foldMinBlockLen,
	foldVecAVX2, foldVecAVX512,
	foldVecPCLMUL * foldAccsPCLMUL, foldVecAVX2 * foldAccsAVX2, foldVecAVX512 * foldAccsAVX512,
}
