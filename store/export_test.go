package store

import "github.com/cockroachdb/pebble/v2/vfs"

// OpenPebbleFS opens a Pebble store on fs; tests use a crashable vfs.MemFS.
func OpenPebbleFS(dir string, fs vfs.FS) (KV, error) { return openPebble(dir, fs) }
