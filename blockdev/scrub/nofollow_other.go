//go:build !unix

package scrub

// oNoFollow is not available here; scrub state files are checked with
// Lstat instead.
const oNoFollow = 0
