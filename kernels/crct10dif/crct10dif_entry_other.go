//go:build !amd64 || purego

package crct10dif

// updateEntry is Update: the dispatch variable's function. (On amd64 it is
// an assembly entry that runs the AVX-512 kernel of short inputs itself.)
func updateEntry(crc uint16, p []byte) uint16 { return update(crc, p) }
