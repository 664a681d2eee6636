//go:build !race && !invariants

package pebble

// invariants tells that Pebble was built with its invariant checks.
const invariants = false
