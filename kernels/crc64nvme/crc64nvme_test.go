package crc64nvme

import (
	"hash/crc64"
	"testing"

	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// hash/crc64 with the NVMe table is the standard-library baseline.
func BenchmarkBaseline(b *testing.B) {
	tab := crc64.MakeTable(reflectedPoly)
	kerneltest.BenchUpdate(b, "stdlib", func(crc uint64, p []byte) uint64 { return crc64.Update(crc, tab, p) })
}

func TestStdlibAgrees(t *testing.T) {
	tab := crc64.MakeTable(reflectedPoly)
	if got := crc64.Checksum([]byte("123456789"), tab); got != Params.Check {
		t.Fatalf("hash/crc64 = %#x", got)
	}
}
