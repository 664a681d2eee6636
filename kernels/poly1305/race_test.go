//go:build race

package poly1305

// raceEnabled: the race detector is on (TestBlocksADCopyTOCTOU races on
// purpose).
const raceEnabled = true
