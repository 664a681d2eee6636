//go:build !race && !invariants

package store

// pebbleInvariants tells that Pebble was built with its invariant checks.
const pebbleInvariants = false
