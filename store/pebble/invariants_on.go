//go:build race || invariants

package pebble

// invariants tells that Pebble was built with its invariant checks
// (the race detector turns them on). One of them misfires when a flushed
// table's first key is the empty key: see kv.Close.
const invariants = true
