//go:build !linux

package scrub

import "testing"

// dropCache skips: only Linux is known to drop a file's pages on request.
func dropCache(b *testing.B, path string) { b.Skip("cache=cold needs Linux") }
