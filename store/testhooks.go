package store

import "github.com/cockroachdb/pebble/v2/vfs"

// OpenPebbleOnFS opens (creating if needed) a Pebble store in dir on the
// file system fs, with the options of Open("pebble:dir").
//
// It is meant for crash tests, in this package and in the packages built on
// it: on a vfs.NewCrashableMem file system, fs.CrashClone yields the state a
// crash would leave (only synced data, or a chosen fraction of the rest),
// and a store opened on the clone shows what survived. Programs use Open.
func OpenPebbleOnFS(dir string, fs vfs.FS) (KV, error) { return openPebble(dir, fs) }
