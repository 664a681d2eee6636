package store

// SetBulkFileBytes sets how many bytes of keys and values a Pebble bulk
// load puts in each sstable, so tests can load several tables cheaply. It
// is a no-op on other backends.
func SetBulkFileBytes(kv KV, n int64) {
	if p, ok := kv.(*pebbleKV); ok {
		p.bulkSize = n
	}
}

// BulkTempDir is the directory, inside a Pebble store, of unfinished bulk
// loads.
const BulkTempDir = bulkTempDir

// SetCacheMissHook sets a function ReadRangeCached runs between reading the
// pages of a miss and filling the cache with them (nil: none).
func SetCacheMissHook(f func()) { testHookCacheMiss = f }
