//go:build !race

package blocktest

// RaceEnabled: under the race detector sync.Pool drops objects at random,
// so allocation counts are not meaningful.
const RaceEnabled = false
