//go:build !purego

package crc64nvme

// archCutoffs are the lengths where the amd64 implementations change
// strategy (the generated fold kernels'); the harness tests around each.
var archCutoffs = foldCutoffs
