//go:build !race

package poly1305

const raceEnabled = false
