package pebble

import "github.com/difctl/difctl/store"

// SetBulkFileBytes sets how many bytes of keys and values a bulk load of s
// puts in each sstable, so tests can load several tables cheaply.
func SetBulkFileBytes(s store.KV, n int64) { s.(*kv).bulkSize = n }

// BulkTempDir is the directory, inside a store, of unfinished bulk loads.
const BulkTempDir = bulkTempDir
