package crct10dif

import (
	"testing"

	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// Baselines for the benchmarks: a byte-at-a-time table and slicing-by-8.
func BenchmarkBaseline(b *testing.B) {
	kerneltest.BenchUpdate(b, "bytewise", updateBytes)
	kerneltest.BenchUpdate(b, "slicing8", updateSlicing8)
}

// updateSlicing8 is a slicing-by-8 table loop, the common hand-rolled
// implementation, kept as a benchmark baseline.
func updateSlicing8(crc uint16, p []byte) uint16 {
	t := table
	for len(p) >= 8 {
		crc = t[7][p[0]^byte(crc>>8)] ^ t[6][p[1]^byte(crc)] ^
			t[5][p[2]] ^ t[4][p[3]] ^ t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]]
		p = p[8:]
	}
	return updateBytes(crc, p)
}
