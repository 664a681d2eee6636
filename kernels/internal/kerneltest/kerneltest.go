// Package kerneltest is the shared correctness harness and benchmark set of
// the checksum kernels. Every kernel package runs Run, Fuzz and Bench on its
// own API; Run and Bench repeat everything for every implementation the CPU
// can run, selected through the impl registry, and compare each with the
// bitwise oracle of crcmath. It also holds the registry's test helpers
// (ForEach, CheckImplementations), so that programs linking the kernels do
// not link package testing.
package kerneltest

import (
	"bytes"
	"fmt"
	"hash"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/impl"
)

// Word is a guard type.
type Word interface{ ~uint16 | ~uint32 | ~uint64 }

// Kernel is the API of one kernel package.
type Kernel[T Word] struct {
	Pkg      string // registry name
	Params   crcmath.Params
	Update   func(crc T, p []byte) T
	Checksum func(p []byte) T
	Blocks   func(dst []T, p []byte, blockLen, stride int) error
	// BlocksCopy is Blocks that also copies the blocks from p to q.
	BlocksCopy func(dst []T, q, p []byte, blockLen, stride int) error
	Combine    func(crcA, crcB T, lenB int) T
	New        func() hash.Hash
	// Cutoffs are lengths where the implementation changes strategy (fold
	// widths, assembly minimums, batch thresholds); lengths around each and
	// their multiples up to 64 KiB are tested.
	Cutoffs []int
	// FoldTable is the package's generated fold table (zfold_consts.go):
	// Run checks it against crcmath and runs the pure-Go fold model with it.
	FoldTable *crcmath.FoldTable
	// Wants are the implementations this build registers, best first, and
	// whether the CPU can run each (CheckImplementations).
	Wants []Want
}

func (k Kernel[T]) oracle(crc T, p []byte) T {
	return T(crcmath.Bitwise(k.Params, uint64(crc), p))
}

func (k Kernel[T]) start() T { return T(crcmath.Start(k.Params)) }

// RandBytes returns n random bytes from r.
func RandBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Run runs the whole correctness suite for every implementation.
func Run[T Word](t *testing.T, k Kernel[T]) {
	t.Run("check", func(t *testing.T) {
		ForEach(t, k.Pkg, func(t *testing.T) {
			if got := k.Checksum([]byte("123456789")); uint64(got) != k.Params.Check {
				t.Fatalf("Checksum(123456789) = %#x, want %#x", got, k.Params.Check)
			}
		})
	})
	t.Run("lengths", func(t *testing.T) { ForEach(t, k.Pkg, func(t *testing.T) { testLengths(t, k) }) })
	t.Run("cutoffs", func(t *testing.T) { ForEach(t, k.Pkg, func(t *testing.T) { testCutoffs(t, k) }) })
	t.Run("align", func(t *testing.T) { ForEach(t, k.Pkg, func(t *testing.T) { testAlign(t, k) }) })
	t.Run("stream", func(t *testing.T) { ForEach(t, k.Pkg, func(t *testing.T) { testStream(t, k) }) })
	t.Run("blocks", func(t *testing.T) { ForEach(t, k.Pkg, func(t *testing.T) { testBlocks(t, k) }) })
	t.Run("blockscopy", func(t *testing.T) { ForEach(t, k.Pkg, func(t *testing.T) { testBlocksCopy(t, k) }) })
	t.Run("blockscopy-contiguous", func(t *testing.T) { testBlocksCopyContiguous(t, k) })
	t.Run("guardpage", func(t *testing.T) { ForEach(t, k.Pkg, func(t *testing.T) { testGuardPage(t, k) }) })
	t.Run("guardpage-copy", func(t *testing.T) { ForEach(t, k.Pkg, func(t *testing.T) { testGuardPageCopy(t, k) }) })
	t.Run("combine", func(t *testing.T) { testCombine(t, k) })
	t.Run("hash", func(t *testing.T) { testHash(t, k) })
	t.Run("layout", func(t *testing.T) { testLayoutErrors(t, k) })
	t.Run("layout-copy", func(t *testing.T) { testCopyLayoutErrors(t, k) })
	t.Run("foldtable", func(t *testing.T) { testFoldTable(t, k) })
	t.Run("registry", func(t *testing.T) { CheckImplementations(t, k.Pkg, k.Wants...) })
}

// The generated table equals what crcmath derives now (go generate is fresh
// in spirit even where CI's regeneration check does not run), and the
// pure-Go model of the fold, with it, agrees with the oracle.
func testFoldTable[T Word](t *testing.T, k Kernel[T]) {
	if k.FoldTable == nil {
		t.Skip("no fold table")
	}
	if got := crcmath.NewFoldTable(k.Params); *got != *k.FoldTable {
		t.Fatal("zfold_consts.go is stale: run go generate")
	}
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte(i*7 + i>>8)
	}
	for _, n := range []int{1, 4, 8} {
		for l := 16 * n; l <= len(buf); l += 16 {
			want := k.oracle(0x1234, buf[:l])
			if got := T(crcmath.FoldUpdate(k.Params, k.FoldTable, n, 0x1234, buf[:l])); got != want {
				t.Fatalf("accumulators=%d len=%d: fold model %#x, oracle %#x", n, l, got, want)
			}
		}
	}
}

// BenchUpdate benchmarks a baseline Update (another library's, a simpler
// table) at the harness's sizes, as impl=NAME/op=update/size=N beside
// Bench's own rows.
func BenchUpdate[T Word](b *testing.B, name string, update func(T, []byte) T) {
	buf := make([]byte, 1<<20)
	for _, n := range Sizes {
		b.Run("impl="+name+"/op=update/size="+SizeName(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			var crc T
			for b.Loop() {
				crc = update(crc, buf[:n])
			}
			Sink += uint64(crc)
		})
	}
}

// All lengths 0..1024 with random initial CRCs.
func testLengths[T Word](t *testing.T, k Kernel[T]) {
	r := rand.New(rand.NewPCG(1, uint64(len(k.Pkg))))
	buf := RandBytes(r, 1024)
	for n := 0; n <= 1024; n++ {
		crc := T(r.Uint64()) & T(k.Params.Mask())
		if got, want := k.Update(crc, buf[:n]), k.oracle(crc, buf[:n]); got != want {
			t.Fatalf("len=%d crc=%#x: Update = %#x, oracle %#x", n, crc, got, want)
		}
	}
}

// Every cutoff (and its multiples) plus or minus one, up to 64 KiB.
func testCutoffs[T Word](t *testing.T, k Kernel[T]) {
	r := rand.New(rand.NewPCG(2, 3))
	const max = 64 << 10
	buf := RandBytes(r, max+1)
	seen := map[int]bool{}
	cut := append([]int{16, 32, 64, 128, 256, 512, 1024, 4096}, k.Cutoffs...)
	for _, c := range cut {
		if c <= 0 {
			continue
		}
		for m := c; m <= max; m *= 2 {
			for _, n := range []int{m - 1, m, m + 1, m + 15, m + 16, m + 17} {
				if n < 0 || n > max || seen[n] {
					continue
				}
				seen[n] = true
				crc := T(r.Uint64()) & T(k.Params.Mask())
				if got, want := k.Update(crc, buf[:n]), k.oracle(crc, buf[:n]); got != want {
					t.Fatalf("len=%d: Update = %#x, oracle %#x", n, got, want)
				}
			}
		}
	}
	for _, n := range []int{max - 1, max} {
		if got, want := k.Checksum(buf[:n]), k.oracle(k.start(), buf[:n]); got != want {
			t.Fatalf("len=%d: Checksum = %#x, oracle %#x", n, got, want)
		}
	}
}

// Every start alignment 0..63 at several lengths.
func testAlign[T Word](t *testing.T, k Kernel[T]) {
	r := rand.New(rand.NewPCG(4, 5))
	buf := RandBytes(r, 64+5000)
	for a := 0; a < 64; a++ {
		for _, n := range []int{1, 15, 16, 17, 63, 64, 65, 255, 256, 257, 511, 512, 520, 1000, 4096, 4104} {
			p := buf[a : a+n]
			if got, want := k.Update(k.start(), p), k.oracle(k.start(), p); got != want {
				t.Fatalf("align=%d len=%d: %#x, oracle %#x", a, n, got, want)
			}
		}
	}
}

// Streamed splits: Update over pieces equals Update over the whole.
func testStream[T Word](t *testing.T, k Kernel[T]) {
	r := rand.New(rand.NewPCG(6, 7))
	buf := RandBytes(r, 9000)
	want := k.oracle(k.start(), buf)
	for range 300 {
		crc := k.start()
		p := buf
		for len(p) > 0 {
			n := r.IntN(len(p) + 1)
			if r.IntN(4) == 0 {
				n = min(len(p), r.IntN(20))
			}
			crc = k.Update(crc, p[:n])
			p = p[n:]
		}
		if crc != want {
			t.Fatalf("streamed = %#x, want %#x", crc, want)
		}
	}
}

// BlockCases are the (blockLen, stride) pairs every Blocks implementation is
// tested with: protection-information layouts and odd ones.
var BlockCases = [][2]int{
	{512, 512}, {512, 520}, {520, 520}, {512, 528}, {4096, 4096}, {4096, 4104},
	{4096, 4112}, {4096, 4160}, {4104, 4112}, {1024, 1024}, {2048, 2064},
	{2048, 2048}, {3072, 3072}, {8192, 8192}, {12288, 12288}, {16384, 16384}, {65536, 65536},
	{0, 0}, {1, 1}, {7, 9}, {15, 16}, {16, 16}, {17, 33}, {31, 31}, {64, 64}, {100, 128},
	{255, 256}, {513, 520}, {1000, 1000},
}

// BlockLayouts calls f for every layout of the batch tests: each of
// BlockCases, each count of blocks n (of at most 1 MiB) and each alignment
// in aligns, {source, destination}; p is random, at the source alignment.
func BlockLayouts(r *rand.Rand, aligns [][2]int, f func(p []byte, n, blockLen, stride int, align [2]int)) {
	for _, c := range BlockCases {
		blockLen, stride := c[0], c[1]
		for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33} {
			if n*stride > 1<<20 {
				continue
			}
			for _, align := range aligns {
				size := (n-1)*stride + blockLen
				f(RandBytes(r, size+align[0])[align[0]:], n, blockLen, stride, align)
			}
		}
	}
}

// Blocks over BlockLayouts against the oracle; dst has a sentinel after it
// that must survive.
func testBlocks[T Word](t *testing.T, k Kernel[T]) {
	BlockLayouts(rand.New(rand.NewPCG(8, 9)), [][2]int{{0, 0}, {3, 0}}, func(buf []byte, n, blockLen, stride int, align [2]int) {
		dst := make([]T, n+1)
		sentinel := T(uint64(0x5a5a5a5a5a5a5a5a) & k.Params.Mask())
		dst[n] = sentinel
		if err := k.Blocks(dst[:n], buf, blockLen, stride); err != nil {
			t.Fatalf("block=%d stride=%d n=%d: %v", blockLen, stride, n, err)
		}
		for i := 0; i < n; i++ {
			want := k.oracle(k.start(), buf[i*stride:i*stride+blockLen])
			if dst[i] != want {
				t.Fatalf("block=%d stride=%d n=%d align=%d: dst[%d] = %#x, oracle %#x",
					blockLen, stride, n, align[0], i, dst[i], want)
			}
		}
		if dst[n] != sentinel {
			t.Fatalf("block=%d stride=%d n=%d: wrote past dst", blockLen, stride, n)
		}
	})
}

// GapByte fills the bytes of q that BlocksCopy must not write.
const GapByte = 0xA5

// CheckCopy checks q after a copying batch call over n blocks of p: every
// block equals p's, every other byte of q (between blocks and after the
// last) is still GapByte. It returns a description of the first
// difference, or "".
func CheckCopy(q, p []byte, n, blockLen, stride int) string {
	next := 0 // first byte not yet checked
	for i := range n {
		off := i * stride
		for j := next; j < off; j++ {
			if q[j] != GapByte {
				return fmt.Sprintf("wrote q[%d] before block %d", j, i)
			}
		}
		if !bytes.Equal(q[off:off+blockLen], p[off:off+blockLen]) {
			return fmt.Sprintf("block %d of q differs from p", i)
		}
		next = max(next, off+blockLen)
	}
	for j := next; j < len(q); j++ {
		if q[j] != GapByte {
			return fmt.Sprintf("wrote q[%d] after the blocks", j)
		}
	}
	return ""
}

// NewCopyDest returns a destination of size bytes filled with GapByte and
// 16 more after it, starting align bytes into its allocation.
func NewCopyDest(size, align int) []byte {
	q := make([]byte, align+size+16)[align:]
	for i := range q {
		q[i] = GapByte
	}
	return q
}

// BlocksCopy over the Blocks cases, with source and destination at
// different alignments: the CRCs against the oracle over p, the blocks of q
// against p, the rest of q untouched.
func testBlocksCopy[T Word](t *testing.T, k Kernel[T]) {
	BlockLayouts(rand.New(rand.NewPCG(14, 15)), CopyAligns, func(p []byte, n, blockLen, stride int, align [2]int) {
		q := NewCopyDest((n-1)*stride+blockLen, align[1])
		dst := make([]T, n+1)
		sentinel := T(uint64(0x5a5a5a5a5a5a5a5a) & k.Params.Mask())
		dst[n] = sentinel
		what := fmt.Sprintf("block=%d stride=%d n=%d align=%v", blockLen, stride, n, align)
		if err := k.BlocksCopy(dst[:n], q, p, blockLen, stride); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for i := range n {
			if want := k.oracle(k.start(), p[i*stride:i*stride+blockLen]); dst[i] != want {
				t.Fatalf("%s: dst[%d] = %#x, oracle %#x", what, i, dst[i], want)
			}
		}
		if dst[n] != sentinel {
			t.Fatalf("%s: wrote past dst", what)
		}
		if d := CheckCopy(q, p, n, blockLen, stride); d != "" {
			t.Fatalf("%s: %s", what, d)
		}
	})
}

// CopyAligns are the {source, destination} alignments of the copy tests.
var CopyAligns = [][2]int{{0, 0}, {3, 0}, {0, 5}, {7, 33}}

// ContiguousCases are contiguous layouts (stride == blockLen) of several
// KiB with many blocks, as {blockLen, blocks}. For 4 KiB blocks the copying
// calls' sub-block paths (kernels/internal/foldgo) run their kernel over 1
// KiB sub-blocks, 64 to a call, and join each block's partial CRCs; the
// counts are odd and 129 blocks span nine calls. The other lengths take
// the other paths (whole blocks)
// and are here as the neighbours of the rule.
var ContiguousCases = [][2]int{
	{2048, 257}, {3072, 171}, {4096, 1}, {4096, 3}, {4096, 129}, {8192, 65},
	{12288, 43}, {16384, 33}, {20480, 13}, {65536, 9}, {131072, 3},
}

// testBlocksCopyContiguous runs BlocksCopy over ContiguousCases for every
// implementation: the CRCs against the oracle (computed once), the copy
// against p, the rest of q untouched.
func testBlocksCopyContiguous[T Word](t *testing.T, k Kernel[T]) {
	r := rand.New(rand.NewPCG(16, 17))
	for _, c := range ContiguousCases {
		blockLen, n := c[0], c[1]
		if testing.Short() && n*blockLen > 128<<10 {
			n = max(1, (128<<10)/blockLen|1)
		}
		p := RandBytes(r, n*blockLen+7)[7:]
		want := make([]T, n)
		for i := range want {
			want[i] = k.oracle(k.start(), p[i*blockLen:(i+1)*blockLen])
		}
		t.Run(fmt.Sprintf("block=%d/n=%d", blockLen, n), func(t *testing.T) {
			ForEach(t, k.Pkg, func(t *testing.T) {
				q := NewCopyDest(n*blockLen, 33)
				dst := make([]T, n+1)
				sentinel := T(uint64(0x5a5a5a5a5a5a5a5a) & k.Params.Mask())
				dst[n] = sentinel
				if err := k.BlocksCopy(dst[:n], q, p, blockLen, blockLen); err != nil {
					t.Fatal(err)
				}
				for i := range n {
					if dst[i] != want[i] {
						t.Fatalf("dst[%d] = %#x, oracle %#x", i, dst[i], want[i])
					}
				}
				if dst[n] != sentinel {
					t.Fatal("wrote past dst")
				}
				if d := CheckCopy(q, p, n, blockLen, blockLen); d != "" {
					t.Fatal(d)
				}
			})
		})
	}
}

// CopyLayoutCase is a bad call of a copying batch call on a 4096-byte
// source p and a destination q (which may share p's allocation).
type CopyLayoutCase struct {
	Name                      string
	N, QLen, BlockLen, Stride int
	// QOff >= 0 takes q from p's allocation at that offset (an overlap
	// error), else q is separate.
	QOff    int
	Overlap bool // the error is an overlap, not a layout error
}

// CopyLayoutCases lists the copy layout errors every package must report.
var CopyLayoutCases = []CopyLayoutCase{
	{"q-short", 8, 4095, 512, 512, -1, false},
	{"q-short-stride", 2, 1031, 512, 520, -1, false},
	{"q-empty", 1, 0, 1, 1, -1, false},
	{"stride", 2, 4096, 512, 256, -1, false},
	{"p-short", 9, 8192, 512, 512, -1, false},
	{"same", 8, 4096, 512, 512, 0, true},
	{"q-inside", 2, 1024, 512, 512, 512, true},
	{"q-overlaps-end", 8, 4096, 512, 512, 3000, true},
	{"q-one-byte", 8, 4096, 512, 512, 4095, true},
	{"q-shifted", 4, 2072, 512, 520, 1, true},
}

// CopyBuffers returns the p and q of a CopyLayoutCase: p is 4096 bytes
// (a part of a larger allocation), q is filled with GapByte.
func CopyBuffers(c CopyLayoutCase) (q, p []byte) {
	mem := make([]byte, 8192)
	p = mem[:4096]
	if c.QOff >= 0 {
		q = mem[c.QOff : c.QOff+c.QLen]
	} else {
		q = make([]byte, c.QLen)
		for i := range q {
			q[i] = GapByte
		}
	}
	return q, p
}

func testCopyLayoutErrors[T Word](t *testing.T, k Kernel[T]) {
	for _, c := range CopyLayoutCases {
		t.Run("case="+c.Name, func(t *testing.T) {
			q, p := CopyBuffers(c)
			dst := make([]T, c.N)
			err := k.BlocksCopy(dst, q, p, c.BlockLen, c.Stride)
			if err == nil {
				t.Fatalf("BlocksCopy(n=%d, len(q)=%d, block=%d, stride=%d) = nil, want an error", c.N, len(q), c.BlockLen, c.Stride)
			}
			if got := strings.Contains(err.Error(), "overlap"); got != c.Overlap {
				t.Fatalf("BlocksCopy: %v, want overlap=%v", err, c.Overlap)
			}
			for i := range dst {
				if dst[i] != 0 {
					t.Fatal("an error wrote dst")
				}
			}
			if c.QOff < 0 {
				for i := range q {
					if q[i] != GapByte {
						t.Fatal("an error wrote q")
					}
				}
			}
		})
	}
	if err := k.BlocksCopy(nil, nil, nil, 512, 512); err != nil {
		t.Errorf("BlocksCopy of zero blocks = %v", err)
	}
	// Disjoint parts of one allocation are fine, also when the slices
	// overlap beyond the blocks' spans (p's span is mem[:1536]).
	mem := make([]byte, 4096)
	dst := make([]T, 2)
	if err := k.BlocksCopy(dst, mem[2048:], mem[:2048], 512, 1024); err != nil {
		t.Errorf("BlocksCopy between halves of one buffer = %v", err)
	}
}

func testCombine[T Word](t *testing.T, k Kernel[T]) {
	r := rand.New(rand.NewPCG(10, 11))
	// Short second parts, a 1-byte one above all (one shift by x^8), and
	// short or empty first parts, each checked here rather than left to
	// the random lengths below.
	for _, la := range []int{0, 1, 2, 7, 16, 100, 4096} {
		for _, lb := range []int{0, 1, 2, 3, 8, 15, 16, 17} {
			a, b := RandBytes(r, la), RandBytes(r, lb)
			want := k.Checksum(append(append([]byte{}, a...), b...))
			if got := k.Combine(k.Checksum(a), k.Checksum(b), lb); got != want {
				t.Fatalf("Combine(len %d, %d) = %#x, want %#x", la, lb, got, want)
			}
		}
	}
	for range 300 {
		a := RandBytes(r, r.IntN(5000))
		b := RandBytes(r, r.IntN(5000))
		ca, cb := k.Checksum(a), k.Checksum(b)
		want := k.Checksum(append(append([]byte{}, a...), b...))
		if got := k.Combine(ca, cb, len(b)); got != want {
			t.Fatalf("Combine(len %d, %d) = %#x, want %#x", len(a), len(b), got, want)
		}
	}
}

func testHash[T Word](t *testing.T, k Kernel[T]) {
	h := k.New()
	if h.Size()*8 != int(k.Params.Width) {
		t.Fatalf("Size = %d", h.Size())
	}
	h.Write([]byte("1234"))
	h.Write([]byte("56789"))
	sum := h.Sum([]byte{0xAA})
	want := []byte{0xAA}
	for i := int(k.Params.Width) - 8; i >= 0; i -= 8 {
		want = append(want, byte(k.Params.Check>>i))
	}
	if !bytes.Equal(sum, want) {
		t.Fatalf("Sum = %x, want %x", sum, want)
	}
	h.Reset()
	if got := h.Sum(nil); !bytes.Equal(got, make([]byte, len(got))) && k.Params.Init == 0 {
		t.Fatalf("Sum after Reset = %x", got)
	}
}

func testLayoutErrors[T Word](t *testing.T, k Kernel[T]) {
	buf := make([]byte, 4096)
	bad := []struct {
		n, plen, blockLen, stride int
	}{
		{2, 4096, 512, 256},               // stride < blockLen
		{1, 4096, 5000, 5000},             // block longer than buffer
		{9, 4096, 512, 512},               // too many blocks
		{2, 4096, -1, 512},                // negative length
		{3, 4096, 512, math.MaxInt/2 + 1}, // (n-1)*stride overflows int
	}
	for _, c := range bad {
		dst := make([]T, c.n)
		if err := k.Blocks(dst, buf[:c.plen], c.blockLen, c.stride); err == nil {
			t.Errorf("Blocks(n=%d, len=%d, block=%d, stride=%d) = nil, want an error", c.n, c.plen, c.blockLen, c.stride)
		}
	}
	if err := k.Blocks(nil, nil, 512, 512); err != nil {
		t.Errorf("Blocks of zero blocks = %v", err)
	}
}

// Fuzz compares every implementation with the oracle on fuzzed input,
// initial CRC, split point and block layout.
func Fuzz[T Word](f *testing.F, k Kernel[T]) {
	f.Add([]byte("123456789"), uint64(0), 4, 3, 4)
	f.Add(make([]byte, 1100), uint64(1), 512, 520, 300)
	// Contiguous blocks of 4 KiB (the sub-block paths) and 8 KiB.
	f.Add(SeedBytes(5*4096+100), uint64(2), 4096, 4096, 4099)
	f.Add(SeedBytes(3*8192), uint64(3), 8192, 8192, 1)
	f.Fuzz(func(t *testing.T, data []byte, crc uint64, blockLen, stride, split int) {
		c := T(crc) & T(k.Params.Mask())
		want := k.oracle(c, data)
		if split < 0 {
			split = -split
		}
		if len(data) > 0 {
			split %= len(data) + 1
		} else {
			split = 0
		}
		var wantBlocks []T
		var n int
		if blockLen > 0 && stride >= blockLen && len(data) >= blockLen {
			n = (len(data)-blockLen)/stride + 1
			n = min(n, 64)
			for i := 0; i < n; i++ {
				wantBlocks = append(wantBlocks, k.oracle(k.start(), data[i*stride:i*stride+blockLen]))
			}
		}
		for _, im := range impl.List(k.Pkg) {
			if !im.Available {
				continue
			}
			if err := impl.Select(k.Pkg, im.Name); err != nil {
				t.Fatal(err)
			}
			if got := k.Update(c, data); got != want {
				t.Fatalf("%s: Update = %#x, oracle %#x", im.Name, got, want)
			}
			if got := k.Update(k.Update(c, data[:split]), data[split:]); got != want {
				t.Fatalf("%s: split at %d = %#x, oracle %#x", im.Name, split, got, want)
			}
			if n > 0 {
				dst := make([]T, n)
				if err := k.Blocks(dst, data, blockLen, stride); err != nil {
					t.Fatalf("%s: Blocks: %v", im.Name, err)
				}
				for i := range dst {
					if dst[i] != wantBlocks[i] {
						t.Fatalf("%s: Blocks[%d] = %#x, oracle %#x", im.Name, i, dst[i], wantBlocks[i])
					}
				}
				size := (n-1)*stride + blockLen
				q := NewCopyDest(size, split%64)
				clear(dst)
				if err := k.BlocksCopy(dst, q, data, blockLen, stride); err != nil {
					t.Fatalf("%s: BlocksCopy: %v", im.Name, err)
				}
				for i := range dst {
					if dst[i] != wantBlocks[i] {
						t.Fatalf("%s: BlocksCopy[%d] = %#x, oracle %#x", im.Name, i, dst[i], wantBlocks[i])
					}
				}
				if d := CheckCopy(q, data, n, blockLen, stride); d != "" {
					t.Fatalf("%s: BlocksCopy: %s", im.Name, d)
				}
			}
		}
		impl.Reset(k.Pkg)
	})
}

// SeedBytes returns n bytes of fixed pseudo-random data, for fuzz seeds.
func SeedBytes(n int) []byte { return RandBytes(rand.New(rand.NewPCG(18, 19)), n) }

// Sink keeps benchmark results alive.
var Sink uint64

// Sizes are the benchmark message sizes.
var Sizes = []int{16, 64, 256, 512, 1 << 10, 4 << 10, 64 << 10, 1 << 20}

// SizeName formats a size for a benchmark name: 512, 4KiB, 1MiB.
func SizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// Bench runs the standard benchmarks for every implementation:
// Update at every size in Sizes, and Blocks and BlocksCopy over 1 MiB of
// 512 and 4096-byte blocks. Names: impl=NAME/op=update/size=4KiB,
// impl=NAME/op=blocks/block=512, impl=NAME/op=blockscopy/block=512.
func Bench[T Word](b *testing.B, k Kernel[T]) {
	buf := RandBytes(rand.New(rand.NewPCG(1, 1)), 1<<20)
	ForEachB(b, k.Pkg, func(b *testing.B) {
		for _, n := range Sizes {
			b.Run("op=update/size="+SizeName(n), func(b *testing.B) {
				p := buf[:n]
				b.SetBytes(int64(n))
				var crc T
				for b.Loop() {
					crc = k.Update(crc, p)
				}
				Sink += uint64(crc)
			})
		}
		for _, bl := range []int{512, 4096} {
			b.Run(fmt.Sprintf("op=blocks/block=%d", bl), func(b *testing.B) {
				dst := make([]T, len(buf)/bl)
				b.SetBytes(int64(len(buf)))
				for b.Loop() {
					if err := k.Blocks(dst, buf, bl, bl); err != nil {
						b.Fatal(err)
					}
				}
				Sink += uint64(dst[len(dst)-1])
			})
		}
		q := make([]byte, len(buf))
		for _, bl := range []int{512, 4096} {
			b.Run(fmt.Sprintf("op=blockscopy/block=%d", bl), func(b *testing.B) {
				dst := make([]T, len(buf)/bl)
				b.SetBytes(int64(len(buf)))
				for b.Loop() {
					if err := k.BlocksCopy(dst, q, buf, bl, bl); err != nil {
						b.Fatal(err)
					}
				}
				Sink += uint64(dst[len(dst)-1]) + uint64(q[len(q)-1])
			})
		}
	})
}

// DRAMSize is the buffer of the benchmarks that read from memory: twice
// the 32 MiB L3 of the machines the kernels were tuned on.
const DRAMSize = 64 << 20

// BenchDRAM runs Blocks and BlocksCopy over DRAMSize bytes of 512 and
// 4096-byte blocks, and Update over the same buffer for comparison, so
// that the data comes from DRAM rather than from a cache. Names:
// impl=NAME/op=blocks/block=512/mem=64MiB, impl=NAME/op=update/mem=64MiB.
func BenchDRAM[T Word](b *testing.B, k Kernel[T]) {
	buf := RandBytes(rand.New(rand.NewPCG(1, 1)), DRAMSize)
	q := make([]byte, len(buf))
	mem := "mem=" + SizeName(len(buf))
	ForEachB(b, k.Pkg, func(b *testing.B) {
		b.Run("op=update/"+mem, func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			var crc T
			for b.Loop() {
				crc = k.Update(crc, buf)
			}
			Sink += uint64(crc)
		})
		for _, bl := range []int{512, 4096} {
			dst := make([]T, len(buf)/bl)
			b.Run(fmt.Sprintf("op=blocks/block=%d/%s", bl, mem), func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				for b.Loop() {
					if err := k.Blocks(dst, buf, bl, bl); err != nil {
						b.Fatal(err)
					}
				}
				Sink += uint64(dst[len(dst)-1])
			})
			b.Run(fmt.Sprintf("op=blockscopy/block=%d/%s", bl, mem), func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				for b.Loop() {
					if err := k.BlocksCopy(dst, q, buf, bl, bl); err != nil {
						b.Fatal(err)
					}
				}
				Sink += uint64(dst[len(dst)-1]) + uint64(q[len(q)-1])
			})
		}
	})
}

// CopyPath is one way of computing a copying batch call over contiguous
// blocks, for BenchCopyPaths: Run copies the len(p)/blockLen blocks of p to
// q and returns something of the CRCs for the benchmark to consume.
type CopyPath struct {
	Name string
	Run  func(q, p []byte, blockLen int) uint64
}

// BenchCopyPaths compares copying paths over 1 MiB of contiguous blocks
// per call (rounded down to a multiple of four blocks). Source and
// destination are each either a 1 MiB buffer that stays in cache or the
// next MiB of a DRAMSize buffer, which comes from memory: mem=cache (both
// in cache), mem=src (the source from memory into a destination in cache,
// as a page-cache mapping read once into a reused buffer) and mem=both.
// Names: mem=src/block=4096/path=NAME, so that benchstat can set the paths
// side by side (-col /path). Besides MB/s it reports MB/cpu-s, the bytes
// per second of the benchmark thread's CPU time, which the time the thread
// waits for a CPU (on a shared machine) does not change.
func BenchCopyPaths(b *testing.B, paths []CopyPath, blockLens []int) {
	const size = 1 << 20
	r := rand.New(rand.NewPCG(1, 1))
	src, dst := RandBytes(r, DRAMSize), RandBytes(r, DRAMSize)
	for _, mem := range []string{"cache", "src", "both"} {
		for _, bl := range blockLens {
			n := size / bl &^ 3 * bl
			for _, path := range paths {
				b.Run(fmt.Sprintf("mem=%s/block=%d/path=%s", mem, bl, path.Name), func(b *testing.B) {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					b.SetBytes(int64(n))
					var sink uint64
					i, j := 0, 0 // the MiB of src and of dst
					cpu := ThreadCPU()
					for b.Loop() {
						p, q := src[i*size:][:n], dst[j*size:][:n]
						if mem != "cache" {
							i = (i + 1) % (DRAMSize / size)
						}
						if mem == "both" {
							j = (j + 1) % (DRAMSize / size)
						}
						sink += path.Run(q, p, bl)
					}
					if cpu := ThreadCPU() - cpu; cpu > 0 {
						b.ReportMetric(float64(n)*float64(b.N)/cpu.Seconds()/1e6, "MB/cpu-s")
					}
					Sink += sink + uint64(dst[n-1])
				})
			}
		}
	}
}
