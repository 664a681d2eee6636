//go:build !unix

package blockdev

// oNoFollow is not available here; scrub state files are checked with
// Lstat instead.
const oNoFollow = 0
