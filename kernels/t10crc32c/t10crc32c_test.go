package t10crc32c

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/kernels/crct10dif"
	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// Blocks against the two bitwise oracles, through every implementation
// of the registry (each selects its own kernels: fused or two passes).

func oracleSums(p []byte, n, blockLen, stride int) ([]uint16, []uint32) {
	g, s := make([]uint16, n), make([]uint32, n)
	for i := range n {
		b := p[i*stride : i*stride+blockLen]
		g[i] = uint16(crcmath.Bitwise(crcmath.T10DIF, 0, b))
		s[i] = uint32(crcmath.Bitwise(crcmath.CRC32C, crcmath.Start(crcmath.CRC32C), b))
	}
	return g, s
}

// checkSums runs Blocks on n blocks of p and compares with the
// oracles; dst and sums have a sentinel after them that must survive.
func checkSums(t *testing.T, p []byte, n, blockLen, stride int, what string) {
	t.Helper()
	dst, sums := make([]uint16, n+1), make([]uint32, n+1)
	dst[n], sums[n] = 0x5a5a, 0x5a5a5a5a
	if err := Blocks(dst[:n], sums[:n], p, blockLen, stride); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	wg, ws := oracleSums(p, n, blockLen, stride)
	for i := range n {
		if dst[i] != wg[i] || sums[i] != ws[i] {
			t.Fatalf("%s: block %d: guard %#x sum %#x, oracle %#x %#x", what, i, dst[i], sums[i], wg[i], ws[i])
		}
	}
	if dst[n] != 0x5a5a || sums[n] != 0x5a5a5a5a {
		t.Fatalf("%s: wrote past dst or sums", what)
	}
}

func TestBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 21))
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		kerneltest.BlockLayouts(r, [][2]int{{0, 0}, {3, 0}}, func(p []byte, n, blockLen, stride int, align [2]int) {
			checkSums(t, p, n, blockLen, stride, fmt.Sprintf("block=%d/stride=%d/n=%d/align=%d", blockLen, stride, n, align[0]))
		})
	})
}

// Every alignment 0..63 of the buffer, and every block length around the
// kernel's cutoffs (whole 32-byte steps, an odd 16-byte lane, tails).
func TestBlocksAlignLengths(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 23))
	buf := kerneltest.RandBytes(r, 64+8*600)
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		for a := range 64 {
			for _, c := range [][2]int{{512, 512}, {512, 520}, {64, 72}, {80, 80}, {100, 104}} {
				checkSums(t, buf[a:a+7*c[1]+c[0]], 8, c[0], c[1], fmt.Sprintf("align=%d/block=%d/stride=%d", a, c[0], c[1]))
			}
		}
		for bl := 0; bl <= 300; bl++ {
			for _, n := range []int{4, 5} {
				checkSums(t, buf[:n*bl], n, bl, bl, fmt.Sprintf("block=%d/n=%d", bl, n))
			}
		}
	})
}

// Blocks that end against an unmapped page: an over-read faults.
func TestBlocksGuardPage(t *testing.T) {
	get := kerneltest.GuardedBuffer(t)
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		for _, c := range kerneltest.BlockCases {
			bl, st := c[0], c[1]
			for _, n := range []int{1, 4, 5, 8, 9, 16} {
				size := (n-1)*st + bl
				if size > 70<<10 {
					continue
				}
				checkSums(t, get(size), n, bl, st, fmt.Sprintf("block=%d/stride=%d/n=%d at page end", bl, st, n))
			}
		}
	})
}

func TestBlocksLayout(t *testing.T) {
	buf := make([]byte, 4096)
	bad := []struct{ n, ns, plen, blockLen, stride int }{
		{2, 2, 4096, 512, 256},               // stride < blockLen
		{1, 1, 4096, 5000, 5000},             // block longer than the buffer
		{9, 9, 4096, 512, 512},               // too many blocks
		{2, 2, 4096, -1, 512},                // negative length
		{3, 3, 4096, 512, math.MaxInt/2 + 1}, // (n-1)*stride overflows int
		{8, 7, 4096, 512, 512},               // sums shorter than dst
		{4, 8, 4096, 512, 512},               // or longer
	}
	for _, c := range bad {
		dst, sums := make([]uint16, c.n), make([]uint32, c.ns)
		for i := range sums {
			sums[i] = 7
		}
		if err := Blocks(dst, sums, buf[:c.plen], c.blockLen, c.stride); err != ErrLayout {
			t.Errorf("Blocks(n=%d, sums=%d, len=%d, block=%d, stride=%d) = %v, want ErrLayout",
				c.n, c.ns, c.plen, c.blockLen, c.stride, err)
		}
		for i := range sums {
			if sums[i] != 7 {
				t.Fatalf("an error wrote sums")
			}
		}
	}
	if err := Blocks(nil, nil, nil, 512, 512); err != nil {
		t.Errorf("Blocks of zero blocks = %v", err)
	}
}

// FuzzBlocks compares Blocks and BlocksCopy of every
// implementation with the oracles on fuzzed data and layouts.
func FuzzBlocks(f *testing.F) {
	f.Add(make([]byte, 4*512), 512, 512)
	f.Add([]byte("123456789"), 4, 5)
	// Contiguous blocks of 4 KiB (the copying sub-block path) and 8 KiB.
	f.Add(kerneltest.SeedBytes(5*4096+100), 4096, 4096)
	f.Add(kerneltest.SeedBytes(3*8192), 8192, 8192)
	f.Fuzz(func(t *testing.T, data []byte, blockLen, stride int) {
		if blockLen <= 0 || stride < blockLen || len(data) < blockLen {
			return
		}
		n := min((len(data)-blockLen)/stride+1, 64)
		wg, ws := oracleSums(data, n, blockLen, stride)
		for _, im := range impl.List(pkgName) {
			if !im.Available {
				continue
			}
			if err := impl.Select(pkgName, im.Name); err != nil {
				t.Fatal(err)
			}
			dst, sums := make([]uint16, n), make([]uint32, n)
			if err := Blocks(dst, sums, data, blockLen, stride); err != nil {
				t.Fatalf("%s: %v", im.Name, err)
			}
			for i := range n {
				if dst[i] != wg[i] || sums[i] != ws[i] {
					t.Fatalf("%s: block %d: guard %#x sum %#x, oracle %#x %#x", im.Name, i, dst[i], sums[i], wg[i], ws[i])
				}
			}
			q := kerneltest.NewCopyDest((n-1)*stride+blockLen, len(data)%64)
			clear(dst)
			clear(sums)
			if err := BlocksCopy(dst, sums, q, data, blockLen, stride); err != nil {
				t.Fatalf("%s: copy: %v", im.Name, err)
			}
			for i := range n {
				if dst[i] != wg[i] || sums[i] != ws[i] {
					t.Fatalf("%s: copy: block %d: guard %#x sum %#x, oracle %#x %#x", im.Name, i, dst[i], sums[i], wg[i], ws[i])
				}
			}
			if d := kerneltest.CheckCopy(q, data, n, blockLen, stride); d != "" {
				t.Fatalf("%s: copy: %s", im.Name, d)
			}
		}
		impl.Reset(pkgName)
	})
}

// BenchmarkBlocksCRC32C (the name of its crct10dif days, so that benchstat
// pairs it with older runs): the fused call against crct10dif.Blocks then crc32c.Blocks
// (op=twopass), over 1 MiB of 512 and 4096-byte blocks, for every
// implementation.
func BenchmarkBlocksCRC32C(b *testing.B) {
	buf := kerneltest.RandBytes(rand.New(rand.NewPCG(1, 1)), 1<<20)
	kerneltest.ForEachB(b, pkgName, func(b *testing.B) {
		for _, bl := range []int{512, 4096} {
			dst, sums := make([]uint16, len(buf)/bl), make([]uint32, len(buf)/bl)
			b.Run(fmt.Sprintf("op=fused/block=%d", bl), func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				for b.Loop() {
					if err := Blocks(dst, sums, buf, bl, bl); err != nil {
						b.Fatal(err)
					}
				}
				kerneltest.Sink += uint64(dst[len(dst)-1]) + uint64(sums[len(sums)-1])
			})
			b.Run(fmt.Sprintf("op=twopass/block=%d", bl), func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				for b.Loop() {
					if err := crct10dif.Blocks(dst, buf, bl, bl); err != nil {
						b.Fatal(err)
					}
					if err := crc32c.Blocks(sums, buf, bl, bl); err != nil {
						b.Fatal(err)
					}
				}
				kerneltest.Sink += uint64(dst[len(dst)-1]) + uint64(sums[len(sums)-1])
			})
		}
	})
}

// checkSumsCopy runs BlocksCopy on n blocks of p into q (from
// kerneltest.NewCopyDest or a guarded buffer) and compares with the oracles
// and, where gaps is set, checks that q holds the blocks and nothing else.
func checkSumsCopy(t *testing.T, q, p []byte, n, blockLen, stride int, gaps bool, what string) {
	t.Helper()
	dst, sums := make([]uint16, n+1), make([]uint32, n+1)
	dst[n], sums[n] = 0x5a5a, 0x5a5a5a5a
	if err := BlocksCopy(dst[:n], sums[:n], q, p, blockLen, stride); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	wg, ws := oracleSums(p, n, blockLen, stride)
	for i := range n {
		if dst[i] != wg[i] || sums[i] != ws[i] {
			t.Fatalf("%s: block %d: guard %#x sum %#x, oracle %#x %#x", what, i, dst[i], sums[i], wg[i], ws[i])
		}
		if !bytes.Equal(q[i*stride:i*stride+blockLen], p[i*stride:i*stride+blockLen]) {
			t.Fatalf("%s: block %d of q differs from p", what, i)
		}
	}
	if dst[n] != 0x5a5a || sums[n] != 0x5a5a5a5a {
		t.Fatalf("%s: wrote past dst or sums", what)
	}
	if gaps {
		if d := kerneltest.CheckCopy(q, p, n, blockLen, stride); d != "" {
			t.Fatalf("%s: %s", what, d)
		}
	}
}

func TestBlocksCopy(t *testing.T) {
	r := rand.New(rand.NewPCG(24, 25))
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		kerneltest.BlockLayouts(r, kerneltest.CopyAligns, func(p []byte, n, blockLen, stride int, align [2]int) {
			q := kerneltest.NewCopyDest((n-1)*stride+blockLen, align[1])
			checkSumsCopy(t, q, p, n, blockLen, stride, true, fmt.Sprintf("block=%d/stride=%d/n=%d/align=%v", blockLen, stride, n, align))
		})
		buf := kerneltest.RandBytes(r, 64+8*600)
		for a := range 64 {
			for _, c := range [][2]int{{512, 512}, {512, 520}, {64, 72}, {80, 80}, {100, 104}} {
				size := 7*c[1] + c[0]
				checkSumsCopy(t, kerneltest.NewCopyDest(size, 63-a), buf[a:a+size], 8, c[0], c[1], true,
					fmt.Sprintf("align=%d/block=%d/stride=%d", a, c[0], c[1]))
			}
		}
		for bl := 0; bl <= 300; bl++ {
			for _, n := range []int{4, 5} {
				checkSumsCopy(t, kerneltest.NewCopyDest(n*bl, 0), buf[:n*bl], n, bl, bl, true, fmt.Sprintf("block=%d/n=%d", bl, n))
			}
		}
	})
}

// Many contiguous blocks of several KiB (kerneltest.ContiguousCases): for 4
// KiB blocks the fused copying kernel runs over 1 KiB sub-blocks and each
// block's partial guards and sums are joined; the other lengths take the
// other paths.
func TestBlocksCopyContiguous(t *testing.T) {
	r := rand.New(rand.NewPCG(26, 27))
	for _, c := range kerneltest.ContiguousCases {
		blockLen, n := c[0], c[1]
		if testing.Short() && n*blockLen > 128<<10 {
			n = max(1, (128<<10)/blockLen|1)
		}
		p := kerneltest.RandBytes(r, n*blockLen+5)[5:]
		wg, ws := oracleSums(p, n, blockLen, blockLen)
		t.Run(fmt.Sprintf("block=%d/n=%d", blockLen, n), func(t *testing.T) {
			kerneltest.ForEach(t, pkgName, func(t *testing.T) {
				q := kerneltest.NewCopyDest(n*blockLen, 33)
				dst, sums := make([]uint16, n), make([]uint32, n)
				if err := BlocksCopy(dst, sums, q, p, blockLen, blockLen); err != nil {
					t.Fatal(err)
				}
				for i := range n {
					if dst[i] != wg[i] || sums[i] != ws[i] {
						t.Fatalf("block %d: guard %#x sum %#x, oracle %#x %#x", i, dst[i], sums[i], wg[i], ws[i])
					}
				}
				if d := kerneltest.CheckCopy(q, p, n, blockLen, blockLen); d != "" {
					t.Fatal(d)
				}
			})
		})
	}
}

// q and p each end against an unmapped page: an over-write or over-read
// faults.
func TestBlocksCopyGuardPage(t *testing.T) {
	getP, getQ := kerneltest.GuardedBuffer(t), kerneltest.GuardedBuffer(t)
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		for _, c := range kerneltest.BlockCases {
			bl, st := c[0], c[1]
			for _, n := range []int{1, 4, 5, 8, 9, 16} {
				size := (n-1)*st + bl
				if size > 70<<10 {
					continue
				}
				checkSumsCopy(t, getQ(size), getP(size), n, bl, st, false,
					fmt.Sprintf("block=%d/stride=%d/n=%d at page end", bl, st, n))
			}
		}
	})
}

func TestBlocksCopyLayout(t *testing.T) {
	for _, c := range kerneltest.CopyLayoutCases {
		t.Run("case="+c.Name, func(t *testing.T) {
			q, p := kerneltest.CopyBuffers(c)
			dst, sums := make([]uint16, c.N), make([]uint32, c.N)
			want := ErrLayout
			if c.Overlap {
				want = ErrOverlap
			}
			if err := BlocksCopy(dst, sums, q, p, c.BlockLen, c.Stride); err != want {
				t.Fatalf("BlocksCopy = %v, want %v", err, want)
			}
			for i := range dst {
				if dst[i] != 0 || sums[i] != 0 {
					t.Fatal("an error wrote dst or sums")
				}
			}
		})
	}
	q := make([]byte, 4096)
	if err := BlocksCopy(make([]uint16, 8), make([]uint32, 7), q, make([]byte, 4096), 512, 512); err != ErrLayout {
		t.Errorf("sums shorter than dst: %v, want ErrLayout", err)
	}
	if err := BlocksCopy(nil, nil, nil, nil, 512, 512); err != nil {
		t.Errorf("BlocksCopy of zero blocks = %v", err)
	}
}

// BenchmarkBlocksCRC32CCopy: the copying call over 1 MiB of 512 and
// 4096-byte blocks, for every implementation (compare with
// BenchmarkBlocksCRC32C op=fused).
func BenchmarkBlocksCRC32CCopy(b *testing.B) { benchSumsCopy(b, 1<<20, "") }

// BenchmarkBlocksCRC32CDRAM: BlocksCRC32C and BlocksCRC32CCopy over
// kerneltest.DRAMSize bytes, beyond the caches.
func BenchmarkBlocksCRC32CDRAM(b *testing.B) {
	benchSumsCopy(b, kerneltest.DRAMSize, "/mem="+kerneltest.SizeName(kerneltest.DRAMSize))
}

func benchSumsCopy(b *testing.B, size int, suffix string) {
	buf := kerneltest.RandBytes(rand.New(rand.NewPCG(1, 1)), size)
	q := make([]byte, len(buf))
	kerneltest.ForEachB(b, pkgName, func(b *testing.B) {
		for _, bl := range []int{512, 4096} {
			dst, sums := make([]uint16, len(buf)/bl), make([]uint32, len(buf)/bl)
			if suffix != "" {
				b.Run(fmt.Sprintf("op=fused/block=%d%s", bl, suffix), func(b *testing.B) {
					b.SetBytes(int64(len(buf)))
					for b.Loop() {
						if err := Blocks(dst, sums, buf, bl, bl); err != nil {
							b.Fatal(err)
						}
					}
					kerneltest.Sink += uint64(dst[len(dst)-1]) + uint64(sums[len(sums)-1])
				})
			}
			b.Run(fmt.Sprintf("op=fusedcopy/block=%d%s", bl, suffix), func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				for b.Loop() {
					if err := BlocksCopy(dst, sums, q, buf, bl, bl); err != nil {
						b.Fatal(err)
					}
				}
				kerneltest.Sink += uint64(dst[len(dst)-1]) + uint64(sums[len(sums)-1]) + uint64(q[len(q)-1])
			})
		}
	})
}
