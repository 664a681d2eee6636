package store

// SetCacheMissHook sets a function ReadRangeCached runs between reading the
// pages of a miss and filling the cache with them (nil: none).
func SetCacheMissHook(f func()) { testHookCacheMiss = f }
