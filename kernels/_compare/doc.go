// Package compare benchmarks the difctl checksum kernels against other
// implementations: the anchor, ISA-L 2.32.1 linked statically from the
// shared/ folder beside the repository (cgo, build tag isal; its AVX2
// kernels called by name where the CPU has VPCLMULQDQ), and
// github.com/minio/crc64nvme and the standard library. It is its own module
// so that none of them becomes a dependency of difctl. See README.md for the
// commands; BenchmarkAnchor prints the comparison table of docs/performance.md.
package compare
