package crc32c

import (
	"hash/crc32"
	"testing"

	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// hash/crc32 Castagnoli is the standard-library baseline (the generic
// implementation is the same code; this names it for benchstat).
func BenchmarkBaseline(b *testing.B) {
	kerneltest.BenchUpdate(b, "stdlib", func(crc uint32, p []byte) uint32 { return crc32.Update(crc, castagnoli, p) })
}
