//go:build !amd64 || purego

package crc32c

// updateEntry is Update: the dispatch variable's function. (On amd64 it is
// an assembly entry that runs the AVX-512 kernel of short inputs itself.)
func updateEntry(crc uint32, p []byte) uint32 { return update(crc, p) }
