//go:build !amd64 || purego

package crc64nvme

// updateEntry is Update: the dispatch variable's function. (On amd64 it is
// an assembly entry that runs the AVX-512 kernel of short inputs itself.)
func updateEntry(crc uint64, p []byte) uint64 { return update(crc, p) }
