package compare

import (
	"fmt"
	"hash/crc32"
	"hash/crc64"
	"math/rand/v2"
	"testing"

	minio "github.com/minio/crc64nvme"

	"github.com/difctl/difctl/kernels"
	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/kernels/crc64nvme"
	"github.com/difctl/difctl/kernels/crct10dif"
	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// An impl is one implementation of a CRC under comparison. Go
// implementations set update and blocks; the cgo ones (isal_test.go) set
// repeat and blocks instead, which loop in C.
type impl[T kerneltest.Word] struct {
	name   string
	update func(crc T, p []byte) T
	repeat func(crc T, p []byte, n int) T // n chained updates in one call
	blocks func(dst []T, p []byte, blockLen, stride int)
}

// The implementations of each benchmark; isal_test.go adds ISA-L's.
var (
	impls16 = []impl[uint16]{{
		name:   "difctl-" + kernels.Active("crct10dif"),
		update: crct10dif.Update,
		blocks: func(dst []uint16, p []byte, blockLen, stride int) { must(crct10dif.Blocks(dst, p, blockLen, stride)) },
	}}
	impls32 = []impl[uint32]{{
		name:   "difctl-" + kernels.Active("crc32c"),
		update: crc32c.Update,
		blocks: func(dst []uint32, p []byte, blockLen, stride int) { must(crc32c.Blocks(dst, p, blockLen, stride)) },
	}, {
		name:   "stdlib",
		update: func(crc uint32, p []byte) uint32 { return crc32.Update(crc, castagnoli, p) },
		blocks: func(dst []uint32, p []byte, blockLen, stride int) {
			for i := range dst {
				dst[i] = crc32.Update(0, castagnoli, p[i*stride:i*stride+blockLen])
			}
		},
	}}
	impls64 = []impl[uint64]{{
		name:   "difctl-" + kernels.Active("crc64nvme"),
		update: crc64nvme.Update,
		blocks: func(dst []uint64, p []byte, blockLen, stride int) { must(crc64nvme.Blocks(dst, p, blockLen, stride)) },
	}, {
		name:   "minio",
		update: minio.Update,
		blocks: func(dst []uint64, p []byte, blockLen, stride int) {
			for i := range dst {
				dst[i] = minio.Update(0, p[i*stride:i*stride+blockLen])
			}
		},
	}, {
		name:   "stdlib",
		update: func(crc uint64, p []byte) uint64 { return crc64.Update(crc, nvmeTable, p) },
		blocks: func(dst []uint64, p []byte, blockLen, stride int) {
			for i := range dst {
				dst[i] = crc64.Update(0, nvmeTable, p[i*stride:i*stride+blockLen])
			}
		},
	}}
)

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	nvmeTable  = crc64.MakeTable(0x9A6C9329AC4BC9B5) // CRC-64/NVME, reflected
)

func must(err error) {
	if err != nil {
		panic(err)
	}
}

var buf = func() []byte {
	b := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(1, 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

var sink uint64

// bench runs the update sizes of kerneltest.Sizes and the blocks of 512 and
// 4096 bytes over 1 MiB, with the names of kerneltest.Bench.
func bench[T kerneltest.Word](b *testing.B, impls []impl[T]) {
	for _, im := range impls {
		for _, n := range kerneltest.Sizes {
			b.Run(fmt.Sprintf("impl=%s/op=update/size=%s", im.name, kerneltest.SizeName(n)), func(b *testing.B) {
				p := buf[:n]
				b.SetBytes(int64(n))
				var crc T
				if im.repeat != nil {
					// One cgo call for all b.N iterations (b.Loop would
					// charge a cgo crossing to every one).
					crc = im.repeat(crc, p, b.N)
				} else {
					for b.Loop() {
						crc = im.update(crc, p)
					}
				}
				sink += uint64(crc)
			})
		}
		for _, bl := range []int{512, 4096} {
			b.Run(fmt.Sprintf("impl=%s/op=blocks/block=%d", im.name, bl), func(b *testing.B) {
				dst := make([]T, len(buf)/bl)
				b.SetBytes(int64(len(buf)))
				for b.Loop() {
					im.blocks(dst, buf, bl, bl)
				}
				sink += uint64(dst[len(dst)-1])
			})
		}
	}
}

func BenchmarkCRC16(b *testing.B)     { bench(b, impls16) }
func BenchmarkCRC32C(b *testing.B)    { bench(b, impls32) }
func BenchmarkCRC64NVME(b *testing.B) { bench(b, impls64) }

// testLengths are lengths around the fold widths and the sizes benchmarked.
func testLengths() []int {
	var ls []int
	for n := 0; n <= 1100; n++ {
		ls = append(ls, n)
	}
	for _, n := range append([]int{2048, 4096, 8192, 12288, 16384, 49152, 65536}, kerneltest.Sizes...) {
		for _, m := range []int{n - 1, n, n + 1, n + 15, n + 17} {
			if m <= len(buf) {
				ls = append(ls, m)
			}
		}
	}
	return ls
}

// TestMinio checks github.com/minio/crc64nvme against difctl's CRC-64/NVME.
func TestMinio(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 3))
	for _, n := range testLengths() {
		p := buf[:n]
		crc := r.Uint64()
		if got, want := minio.Update(crc, p), crc64nvme.Update(crc, p); got != want {
			t.Fatalf("len=%d: minio %#x, difctl %#x", n, got, want)
		}
	}
	if got, want := minio.Checksum([]byte("123456789")), uint64(0xAE8B14860A799888); got != want {
		t.Fatalf("minio check value %#x, want %#x", got, want)
	}
}

// TestBenchImpls checks every implementation benchmarked against difctl,
// so the benchmarks compare equal work.
func TestBenchImpls(t *testing.T) {
	testImpls(t, impls16, crct10dif.Update)
	testImpls(t, impls32, crc32c.Update)
	testImpls(t, impls64, crc64nvme.Update)
}

func testImpls[T kerneltest.Word](t *testing.T, impls []impl[T], ref func(T, []byte) T) {
	r := rand.New(rand.NewPCG(4, 5))
	for _, im := range impls {
		if im.update == nil {
			im.update = func(crc T, p []byte) T { return im.repeat(crc, p, 1) }
		}
		for _, n := range testLengths() {
			p := buf[:n]
			crc := T(r.Uint64())
			if got, want := im.update(crc, p), ref(crc, p); got != want {
				t.Fatalf("%s: len=%d crc=%#x: %#x, want %#x", im.name, n, crc, got, want)
			}
			if got, want := im.update(ref(crc, p[:n/3]), p[n/3:]), ref(crc, p); got != want {
				t.Fatalf("%s: len=%d continued at %d: %#x, want %#x", im.name, n, n/3, got, want)
			}
		}
		for _, c := range [][2]int{{512, 512}, {512, 520}, {4096, 4096}, {4096, 4104}, {4096, 4112}, {520, 520}} {
			n := (len(buf) - c[0]) / c[1]
			dst := make([]T, n)
			im.blocks(dst, buf, c[0], c[1])
			for i := range dst {
				if want := ref(T(0), buf[i*c[1]:i*c[1]+c[0]]); dst[i] != want {
					t.Fatalf("%s: block=%d stride=%d: dst[%d] = %#x, want %#x", im.name, c[0], c[1], i, dst[i], want)
				}
			}
		}
	}
}
