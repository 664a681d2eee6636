//go:build !purego

package crct10dif

// archCutoffs are the lengths where the amd64 implementations change
// strategy (the generated fold kernels'); the harness tests around each.
var archCutoffs = foldCutoffs
