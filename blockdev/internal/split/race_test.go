//go:build race

package split

// raceEnabled: under the race detector sync.Pool drops objects at random,
// so allocation counts are not meaningful.
const raceEnabled = true
