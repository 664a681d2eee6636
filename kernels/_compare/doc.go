// Package compare benchmarks the difctl checksum kernels against other
// implementations: ISA-L (cgo, build tag isal) and github.com/minio/crc64nvme.
// It is its own module so that none of them becomes a dependency of difctl.
// See README.md for the commands.
package compare
