// Package floor holds an assembly function that does nothing, for
// BenchmarkCallFloor: what a Go call of an assembly function costs by
// itself. It is a package of its own because the comparison package uses
// cgo, which cannot hold Go assembly.
package floor

// EmptyUpdate has crc32c.Update's signature and returns crc
// (floor_amd64.s).
//
//go:noescape
func EmptyUpdate(crc uint32, p []byte) uint32
