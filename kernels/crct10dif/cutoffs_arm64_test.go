//go:build !purego

package crct10dif

// archCutoffs are the lengths where this architecture's implementations
// change strategy; the harness tests around each.
var archCutoffs []int
