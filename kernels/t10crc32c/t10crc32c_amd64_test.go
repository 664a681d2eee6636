//go:build !purego

package t10crc32c

import (
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"

	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/kernels/crct10dif"
	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/foldgo"
	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// The fused kernel reads crcmath.RevFoldTable at the offsets its generator
// assumed (zfused_amd64.go).
func TestFusedTableOffsets(t *testing.T) {
	kerneltest.CheckFoldOffsets(t, kerneltest.FoldOffsets{
		Fold: fusedTableFold, Final: fusedTableFinal, Mu: fusedTableMu,
		Poly: fusedTablePoly, Rev: fusedTableRev, Size: fusedTableSize,
	})
}

// Each implementation dispatches as documented: avx2 the YMM fused kernel,
// avx the XMM one, generic the two passes; and the best the CPU can run is
// the default, so a CPU that can run a fused kernel runs it.
func TestDispatch(t *testing.T) {
	ptr := func(f any) uintptr { return reflect.ValueOf(f).Pointer() }
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		name := impl.Active(pkgName)
		want := map[string][2]any{
			"avx512":  {blocksAVX512, blocksCopyAVX512},
			"avx2":    {blocksAVX2, blocksCopyAVX2},
			"avx":     {blocksAVX, blocksCopyAVX},
			"generic": {blocksPortable, blocksCopyPortable},
		}[name]
		if ptr(blocks) != ptr(want[0]) || ptr(blocksCopy) != ptr(want[1]) {
			t.Errorf("%s: not its own kernels", name)
		}
	})
	if _, forced := impl.Forced(pkgName); forced {
		return
	}
	want := "generic"
	switch {
	case hasTwoPassAVX512:
		want = "avx512"
	case hasFusedAVX2:
		want = "avx2"
	case hasFusedAVX:
		want = "avx"
	}
	if got := impl.Active(pkgName); got != want {
		t.Errorf("active implementation %q, want %q", got, want)
	}
}

// The sub-block paths hand the kernels whole groups: the sub-blocks of a
// block of foldgo.SubBlockAlias bytes, and of each call, fill groups of
// every kernel that runs them.
func TestSubBlockGroups(t *testing.T) {
	per := foldgo.SubBlockAlias / foldgo.SubBlockLen
	for _, g := range []int{fusedGroup} {
		if per%g != 0 || subChunk%g != 0 {
			t.Errorf("group of %d blocks: %d sub-blocks a block, %d a call", g, per, subChunk)
		}
	}
}

// The sub-block paths allocate nothing: the partial CRCs stay on the stack.
func TestSubBlockAllocs(t *testing.T) {
	defer impl.Reset(pkgName)
	p, q := make([]byte, 1<<20), make([]byte, 1<<20)
	dst, sums := make([]uint16, 256), make([]uint32, 256)
	for _, name := range []string{"avx2", "avx"} {
		if err := impl.Select(pkgName, name); err != nil {
			t.Logf("%s: %v", name, err)
			continue
		}
		if n := testing.AllocsPerRun(10, func() {
			if BlocksCopy(dst, sums, q, p, 4096, 4096) != nil {
				t.Fatal("refused")
			}
		}); n != 0 {
			t.Errorf("%s: %v allocations a call", name, n)
		}
	}
}

// BenchmarkBlocksCRC32CCopyPaths: the ways BlocksCRC32CCopy can take under
// avx2 for contiguous blocks, side by side (benchstat -col /path):
// path=fused runs fusedBlocksCopyAVX2 over whole blocks (the dispatch),
// path=split the copying guard kernel then
// crc32c.Blocks, sixteen blocks at a time, and path=sub the fused kernel
// over 1 KiB sub-blocks with the partial CRCs joined. Only 4 KiB blocks
// take the sub-block path; the other lengths show why.
func BenchmarkBlocksCRC32CCopyPaths(b *testing.B) {
	if !hasFusedAVX2 {
		b.Skip("the CPU cannot run the fused kernel")
	}
	if err := impl.Select(pkgName, "avx2"); err != nil {
		b.Fatal(err)
	}
	defer impl.Reset(pkgName)
	dst, sums := make([]uint16, 1<<10), make([]uint32, 1<<10)
	sink := func(n int) uint64 { return uint64(dst[n-1]) + uint64(sums[n-1]) }
	kerneltest.BenchCopyPaths(b, []kerneltest.CopyPath{
		{Name: "fused", Run: func(q, p []byte, bl int) uint64 {
			n := len(p) / bl
			fusedBlocksCopyAVX2(dst[:n], sums[:n], q, p, bl, bl, foldTables)
			return sink(n)
		}},
		{Name: "split", Run: func(q, p []byte, bl int) uint64 {
			n := len(p) / bl
			blocksSumsCopySplit(dst[:n], sums[:n], q, p, bl, bl)
			return sink(n)
		}},
		{Name: "sub", Run: func(q, p []byte, bl int) uint64 {
			n := len(p) / bl
			blocksSumsCopySub(dst[:n], sums[:n], q, p, bl)
			return sink(n)
		}},
	}, []int{2048, 3072, 4096, 8192, 16384, 65536})
}

// The two passes that strides of 2 KiB and more took until the fused
// kernels prefetched sequentially, kept as a comparison point of
// BenchmarkBlocksCRC32CCopyPaths (path=split): the copying guard kernel,
// then every 16 blocks crc32c.Blocks over the copy still in L1/L2. The
// reason was that the four blocks of a group, and their copies in q, are 2
// or 4 KiB apart, at the same offset in every page, so the fused kernel's
// eight streams (and, then, its per-block prefetches) competed for the same
// L1 sets, and the two passes were faster. With the sequential prefetch
// (kernels/_asm/fused) the fused kernel is faster from a source in memory
// into a destination in cache (mem=src, the case of a verified read into a
// reused buffer), level with neither in cache (mem=both), and a little
// slower with both in cache. docs/perf/poly1305-generator.md ("The CRC
// kernels") has the figures.
const copySplitBlocks = 16

func blocksSumsCopySplit(dst []uint16, sums []uint32, q, p []byte, blockLen, stride int) {
	for i := 0; i < len(dst); i += copySplitBlocks {
		k := min(copySplitBlocks, len(dst)-i)
		o := i * stride
		if crct10dif.BlocksCopy(dst[i:i+k], q[o:], p[o:], blockLen, stride) != nil ||
			crc32c.Blocks(sums[i:i+k], q[o:], blockLen, stride) != nil {
			panic("t10crc32c: a CRC package refused a checked layout")
		}
	}
}

// The sub-block path, measured and not taken (see blocksCopyFused):
// the fused kernel over the blocks' 1 KiB sub-blocks, whose streams no
// longer share L1 sets, and each block's partial guards and sums joined.
// Against the two passes it gained with the destination in cache (mem=src:
// a page-cache mapping read into a reused buffer, as blockdev's runs of
// the default size are; and with both in cache), but lost heavily where
// the destination is not in cache either (mem=both; likely because the
// fused kernel reads back from q what it has just stored, while the
// split's first pass only stores), as BenchmarkBlocksCRC32CDRAM, 64 MiB
// into 64 MiB in one call, is. Larger blocks gained little from memory and
// lost with q not in cache; 2 and 3 KiB blocks, whose streams do not all
// alias, lost with both in cache. The avx512 implementation shares this
// dispatch (the fused kernel is YMM code) and was not measured.
// docs/perf/poly1305-generator.md ("The CRC kernels") has the figures.
//
// blocksSumsCopySub runs fusedBlocksCopyAVX2 over the 1 KiB sub-blocks of
// contiguous 4 KiB blocks, and joins each block's partial guards and sums
// with L_1024 of each CRC. The layout was checked.
func blocksSumsCopySub(dst []uint16, sums []uint32, q, p []byte, blockLen int) {
	const s = foldgo.SubBlockLen
	jg := foldgo.NewJoiner(dst, blockLen/s, guardShift())
	js := foldgo.NewJoiner(sums, blockLen/s, sumShift())
	var g [subChunk]uint16
	var c [subChunk]uint32
	for o, end := 0, len(dst)*blockLen; o < end; {
		k := min(subChunk, (end-o)/s)
		fusedBlocksCopyAVX2(g[:k], c[:k], q[o:], p[o:], s, s, foldTables)
		jg.Add(g[:k])
		js.Add(c[:k])
		o += k * s
	}
}

// subChunk is the number of sub-blocks per kernel call of blocksSumsCopySub.
const subChunk = 64

// guardShift is L_1024 of T10-DIF (foldgo.Shift), built on first use.
var guardShift = sync.OnceValue(func() *foldgo.Shift[uint16] {
	return foldgo.NewShift[uint16](crcmath.T10DIF, foldgo.SubBlockLen)
})

// sumShift is L_1024 of CRC-32C (foldgo.Shift), built on first use.
var sumShift = sync.OnceValue(func() *foldgo.Shift[uint32] {
	return foldgo.NewShift[uint32](crcmath.CRC32C, foldgo.SubBlockLen)
})

// blocksSumsCopySub and blocksSumsCopySplit, kept for
// BenchmarkBlocksCRC32CCopyPaths, still give every block's guard and
// CRC-32C and copy the blocks.
func TestBlocksSumsCopyPaths(t *testing.T) {
	if !hasFusedAVX2 {
		t.Skip("the CPU cannot run the fused kernel")
	}
	const bl, n = 4096, 37
	p := make([]byte, bl*n)
	for i := range p {
		p[i] = byte(i*131 + i>>11)
	}
	for _, path := range []struct {
		name string
		run  func(dst []uint16, sums []uint32, q, p []byte)
	}{
		{"sub", func(dst []uint16, sums []uint32, q, p []byte) { blocksSumsCopySub(dst, sums, q, p, bl) }},
		{"split", func(dst []uint16, sums []uint32, q, p []byte) { blocksSumsCopySplit(dst, sums, q, p, bl, bl) }},
	} {
		q := make([]byte, bl*n)
		dst, sums := make([]uint16, n), make([]uint32, n)
		path.run(dst, sums, q, p)
		if string(q) != string(p) {
			t.Fatalf("%s: the copy differs", path.name)
		}
		for i := range n {
			b := p[i*bl : (i+1)*bl]
			if dst[i] != crct10dif.Checksum(b) || sums[i] != crc32c.Checksum(b) {
				t.Fatalf("%s: block %d: %04x %08x, want %04x %08x", path.name, i, dst[i], sums[i], crct10dif.Checksum(b), crc32c.Checksum(b))
			}
		}
	}
}

// TestTwoPassChunks runs the avx512 implementation's Blocks over batches
// that span several chunks (and end in a partial one), at strides on
// either side of twoPassLong: BlockLayouts' batches fit in one chunk of the
// long strides.
func TestTwoPassChunks(t *testing.T) {
	if !hasTwoPassAVX512 {
		t.Skip("the CPU lacks AVX-512 VPCLMULQDQ")
	}
	r := rand.New(rand.NewPCG(30, 31))
	for _, l := range [][2]int{{512, 512}, {512, 520}, {1000, 1000}, {twoPassLong - 8, twoPassLong}, {twoPassLong, twoPassLong}, {4096, 4104}} {
		blockLen, stride := l[0], l[1]
		n := 2*twoPassBlocks(stride) + 17
		p := kerneltest.RandBytes(r, (n-1)*stride+blockLen)
		dst, sums := make([]uint16, n), make([]uint32, n)
		blocksTwoPass(dst, sums, p, blockLen, stride)
		wg, ws := oracleSums(p, n, blockLen, stride)
		for i := range n {
			if dst[i] != wg[i] || sums[i] != ws[i] {
				t.Fatalf("block=%d stride=%d: block %d of %d: guard %#x sum %#x, oracle %#x %#x", blockLen, stride, i, n, dst[i], sums[i], wg[i], ws[i])
			}
		}
	}
}
