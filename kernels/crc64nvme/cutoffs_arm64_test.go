//go:build !purego

package crc64nvme

// archCutoffs are the lengths where this architecture's implementations
// change strategy; the harness tests around each.
var archCutoffs []int
