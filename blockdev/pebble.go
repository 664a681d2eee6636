package blockdev

// Package store links no engine but mem: store.Open's default, a plain
// path or pebble:PATH, is the embedded Pebble backend of store/pebble,
// which registers itself when a program links it. This package links it,
// so that every program that uses volumes opens Pebble stores by path
// without importing it.
import _ "github.com/difctl/difctl/store/pebble"
