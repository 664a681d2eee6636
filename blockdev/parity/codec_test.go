package parity

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/klauspost/reedsolomon"
)

func mustCodec(t testing.TB, k, m, bs int) *Codec {
	t.Helper()
	c, err := NewCodec(k, m, bs)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func randBlocks(r *rand.Rand, n, bs int) [][]byte {
	b := make([][]byte, n)
	for i := range b {
		b[i] = make([]byte, bs)
		for j := range b[i] {
			b[i][j] = byte(r.Uint32())
		}
	}
	return b
}

func cloneBlocks(b [][]byte) [][]byte {
	c := make([][]byte, len(b))
	for i, x := range b {
		if x != nil {
			c[i] = bytes.Clone(x)
		}
	}
	return c
}

// stripe returns a random encoded stripe, k data then m parity blocks, with
// data positions from short on nil (missing blocks).
func stripe(t testing.TB, r *rand.Rand, c *Codec, short int) [][]byte {
	t.Helper()
	k, m := c.DataShards(), c.ParityShards()
	sh := randBlocks(r, k+m, c.BlockSize())
	for i := short; i < k; i++ {
		sh[i] = nil
	}
	if err := c.Encode(sh); err != nil {
		t.Fatal(err)
	}
	return sh
}

// TestEncodeGolden pins the parity the library computes: the encoding
// matrix is part of the parity file's format, and a library update that
// changed it would make every existing parity file wrong.
func TestEncodeGolden(t *testing.T) {
	want := map[string]uint32{
		"4+2": 0x2e4eef41, "8+1": 0x414e819c, "16+2": 0xcbce4e0e, "32+4": 0xa2a7e387, "10+10": 0x4bfe83a8,
	}
	for _, km := range [][2]int{{4, 2}, {8, 1}, {16, 2}, {32, 4}, {10, 10}} {
		k, m := km[0], km[1]
		name := fmt.Sprintf("%d+%d", k, m)
		c := mustCodec(t, k, m, 512)
		data := make([][]byte, k)
		for i := range data {
			data[i] = make([]byte, 512)
			for b := range data[i] {
				data[i][b] = byte(uint32(i+1) * uint32(b+3) * 2654435761 >> 13)
			}
		}
		parity := make([][]byte, m)
		for j := range parity {
			parity[j] = make([]byte, 512)
		}
		if err := c.Encode(append(data, parity...)); err != nil {
			t.Fatal(err)
		}
		sum := crc32c.Checksum(bytes.Join(parity, nil))
		if sum != want[name] {
			t.Errorf("%s: parity CRC-32C %#08x, want %#08x", name, sum, want[name])
		}
	}
}

func TestUpdateMatchesEncode(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ k, m, bs, short int }{
		{4, 2, 64, 4}, {4, 2, 64, 1}, {8, 1, 4096, 8}, {16, 2, 4096, 16}, {16, 2, 512, 9},
		{32, 4, 4096, 32}, {32, 4, 64, 17}, {10, 10, 64, 10}, {1, 1, 64, 1}, {128, 128, 64, 128},
	} {
		t.Run(fmt.Sprintf("km=%d+%d/bs=%d/short=%d", tc.k, tc.m, tc.bs, tc.short), func(t *testing.T) {
			c := mustCodec(t, tc.k, tc.m, tc.bs)
			for iter := range 50 {
				sh := stripe(t, r, c, tc.short)
				// Change a random subset of the present blocks: one block,
				// then ever larger sets.
				nChange := 1 + r.IntN(tc.short)
				if iter == 0 {
					nChange = 1
				}
				old, new := make([][]byte, tc.k), make([][]byte, tc.k)
				want := cloneBlocks(sh)
				for _, i := range r.Perm(tc.short)[:nChange] {
					old[i] = bytes.Clone(sh[i])
					new[i] = randBlocks(r, 1, tc.bs)[0]
					want[i] = new[i]
				}
				if err := c.Encode(want); err != nil {
					t.Fatal(err)
				}
				parity := cloneBlocks(sh[tc.k:])
				oldCopy := cloneBlocks(old)
				if err := c.Update(append(old, parity...), new); err != nil {
					t.Fatal(err)
				}
				for j := range parity {
					if !bytes.Equal(parity[j], want[tc.k+j]) {
						t.Fatalf("iter %d, %d blocks changed: parity block %d differs from a full encode", iter, nChange, j)
					}
				}
				// old holds old XOR new, as documented.
				for i := range old {
					if old[i] == nil {
						continue
					}
					for b := range old[i] {
						if old[i][b] != oldCopy[i][b]^new[i][b] {
							t.Fatalf("old[%d][%d] = %#x, want old^new", i, b, old[i][b])
						}
					}
				}
			}
		})
	}
}

func TestUpdateNothing(t *testing.T) {
	c := mustCodec(t, 4, 2, 64)
	sh := stripe(t, rand.New(rand.NewPCG(3, 4)), c, 4)
	parity := cloneBlocks(sh[4:])
	if err := c.Update(append(make([][]byte, 4), parity...), make([][]byte, 4)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(parity[0], sh[4]) || !bytes.Equal(parity[1], sh[5]) {
		t.Fatal("an update with no change changed the parity")
	}
}

// erase returns a copy of sh with the shards of set replaced by garbage
// (or nil when nilErased) and the erasure flags.
func erase(r *rand.Rand, sh [][]byte, set []int, nilErased bool) ([][]byte, []bool) {
	got := cloneBlocks(sh)
	erased := make([]bool, len(sh))
	for _, i := range set {
		erased[i] = true
		if nilErased {
			got[i] = nil
		} else {
			got[i] = randBlocks(r, 1, len(sh[len(sh)-1]))[0]
		}
	}
	return got, erased
}

// checkRebuild erases set from the encoded stripe sh, rebuilds it and
// checks the result against sh, or ErrTooManyErasures and no change.
func checkRebuild(t testing.TB, r *rand.Rand, c *Codec, sh [][]byte, set []int) {
	t.Helper()
	k := c.DataShards()
	set = slices.DeleteFunc(slices.Clone(set), func(i int) bool {
		return i < k && sh[i] == nil // a missing block is not lost
	})
	got, erased := erase(r, sh, set, false)
	before := cloneBlocks(got)
	ptrs := make([]*byte, len(got))
	for i, g := range got {
		if g != nil {
			ptrs[i] = &g[0]
		}
	}
	err := c.Rebuild(got, erased)
	if len(set) > c.ParityShards() {
		if !errors.Is(err, ErrTooManyErasures) {
			t.Fatalf("erasures %v: Rebuild = %v, want ErrTooManyErasures", set, err)
		}
		for i := range got {
			if !bytes.Equal(got[i], before[i]) {
				t.Fatalf("erasures %v: a refused rebuild changed shard %d", set, i)
			}
		}
		return
	}
	if err != nil {
		t.Fatalf("erasures %v: %v", set, err)
	}
	for i := range got {
		if !bytes.Equal(got[i], sh[i]) {
			t.Fatalf("erasures %v: shard %d rebuilt wrong", set, i)
		}
		if got[i] != nil && &got[i][0] != ptrs[i] {
			t.Fatalf("erasures %v: shard %d was not rebuilt in place", set, i)
		}
	}
}

// subsets calls f with every subset of [0, n) of at most max elements.
func subsets(n, max int, f func([]int)) {
	var rec func(start int, cur []int)
	rec = func(start int, cur []int) {
		f(cur)
		if len(cur) == max {
			return
		}
		for i := start; i < n; i++ {
			rec(i+1, append(cur, i))
		}
	}
	rec(0, nil)
}

// TestRebuildExhaustive rebuilds every combination of at most m erasures,
// data and parity mixed, and refuses every one of m+1.
func TestRebuildExhaustive(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct{ k, m, short int }{{4, 2, 4}, {4, 2, 3}, {4, 2, 1}, {16, 2, 16}, {16, 2, 5}, {3, 3, 3}, {8, 1, 8}} {
		t.Run(fmt.Sprintf("km=%d+%d/short=%d", tc.k, tc.m, tc.short), func(t *testing.T) {
			c := mustCodec(t, tc.k, tc.m, 64)
			sh := stripe(t, r, c, tc.short)
			cases := 0
			subsets(tc.k+tc.m, tc.m+1, func(set []int) {
				checkRebuild(t, r, c, sh, set)
				cases++
			})
			t.Logf("%d erasure sets", cases)
		})
	}
}

// TestRebuildSampled rebuilds random erasure sets of 0 to m+1 shards.
func TestRebuildSampled(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	n := 2000
	if testing.Short() {
		n = 200
	}
	// Every new pattern of 200+56 inverts a 200×200 matrix: fewer samples.
	for _, tc := range []struct{ k, m, bs, short, div int }{{16, 2, 4096, 16, 1}, {32, 4, 512, 32, 1}, {32, 4, 64, 20, 1}, {64, 16, 64, 64, 4}, {200, 56, 64, 100, 40}} {
		t.Run(fmt.Sprintf("km=%d+%d/bs=%d/short=%d", tc.k, tc.m, tc.bs, tc.short), func(t *testing.T) {
			c := mustCodec(t, tc.k, tc.m, tc.bs)
			sh := stripe(t, r, c, tc.short)
			for range n / tc.div {
				set := r.Perm(tc.k + tc.m)[:r.IntN(tc.m+2)]
				checkRebuild(t, r, c, sh, set)
			}
		})
	}
}

// TestRebuildSome rebuilds only the erased shards that are given: a nil
// erased shard stays nil.
func TestRebuildSome(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	c := mustCodec(t, 16, 2, 512)
	sh := stripe(t, r, c, 16)
	got, erased := erase(r, sh, []int{3, 17}, false)
	got[17] = nil // lost parity, not wanted
	if err := c.Rebuild(got, erased); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[3], sh[3]) || got[17] != nil {
		t.Fatal("Rebuild of data block 3 only")
	}
	// Nothing wanted: nothing to do, and no error.
	got, erased = erase(r, sh, []int{1, 2}, true)
	if err := c.Rebuild(got, erased); err != nil || got[1] != nil {
		t.Fatal(err)
	}
}

func TestCodecRefuses(t *testing.T) {
	for _, a := range [][3]int{{0, 1, 64}, {1, 0, 64}, {2, 3, 64}, {250, 7, 64}, {4, 2, 0}} {
		if _, err := NewCodec(a[0], a[1], a[2]); !errors.Is(err, ErrInvalidLayout) {
			t.Errorf("NewCodec(%v) = %v", a, err)
		}
	}
	c := mustCodec(t, 4, 2, 64)
	b := func(n int) []byte { return make([]byte, n) }
	p := [][]byte{b(64), b(64)}
	d := [][]byte{b(64), b(64), b(64), b(64)}
	for name, err := range map[string]error{
		"encode 5 shards":       c.Encode(append(d[:3], p...)),
		"encode short data":     c.Encode([][]byte{b(64), b(63), nil, nil, b(64), b(64)}),
		"encode nil parity":     c.Encode(append(d, b(64), nil)),
		"encode short parity":   c.Encode(append(d, b(64), b(32))),
		"update nil parity":     c.Update(append(d, b(64), nil), d),
		"update old only":       c.Update([][]byte{b(64), nil, nil, nil, b(64), b(64)}, make([][]byte, 4)),
		"update new only":       c.Update(append(make([][]byte, 4), p...), [][]byte{b(64), nil, nil, nil}),
		"update short new":      c.Update([][]byte{b(64), nil, nil, nil, b(64), b(64)}, [][]byte{b(60), nil, nil, nil}),
		"update 3 new":          c.Update(append(d, p...), d[:3]),
		"update 5 shards":       c.Update(append(d[:3], p...), d),
		"rebuild 5 shards":      c.Rebuild(make([][]byte, 5), make([]bool, 6)),
		"rebuild short erased":  c.Rebuild([][]byte{b(64), b(64), b(64), b(64), b(64), b(10)}, []bool{false, false, false, false, false, true}),
		"rebuild nil parity":    c.Rebuild([][]byte{b(64), b(64), b(64), b(64), b(64), nil}, []bool{true, false, false, false, false, false}),
		"rebuild short present": c.Rebuild([][]byte{b(64), b(6), b(64), b(64), b(64), b(64)}, []bool{true, false, false, false, false, false}),
	} {
		if !errors.Is(err, ErrShards) {
			t.Errorf("%s: %v, want ErrShards", name, err)
		}
	}
}

// TestCodecPatternBound runs more erasure patterns than a Codec keeps
// inverted matrices for: it starts a fresh encoder, and stays right.
func TestCodecPatternBound(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	r := rand.New(rand.NewPCG(11, 12))
	c := mustCodec(t, 32, 4, 64)
	sh := stripe(t, r, c, 32)
	n := 0
	subsets(36, 3, func(set []int) { // 1+36+630+7140 sets
		if len(set) == 3 {
			checkRebuild(t, r, c, sh, set)
			n++
		}
	})
	c.mu.Lock()
	resets, patterns := c.resets, len(c.patterns)
	c.mu.Unlock()
	if resets != n/c.maxPatterns || patterns != n%c.maxPatterns {
		t.Fatalf("%d patterns: %d resets, %d kept", n, resets, patterns)
	}
}

// TestCodecConcurrent runs every operation of one Codec from several
// goroutines (run with -race).
func TestCodecConcurrent(t *testing.T) {
	c := mustCodec(t, 8, 3, 512)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 13))
			for range 100 {
				sh := stripe(t, r, c, 8)
				i := r.IntN(8)
				old, new := make([][]byte, 8), make([][]byte, 8)
				old[i], new[i] = bytes.Clone(sh[i]), randBlocks(r, 1, 512)[0]
				if err := c.Update(append(old, sh[8:]...), new); err != nil {
					t.Error(err)
					return
				}
				sh[i] = new[i]
				checkRebuild(t, r, c, sh, r.Perm(11)[:r.IntN(5)])
			}
		})
	}
	wg.Wait()
}

// TestLibraryPaths: each kernel the library may pick on this machine
// (GFNI, AVX-512, AVX2, SSSE3, generic Go) computes the same parity and
// rebuilds the same data as the Codec: the parity file's contents do not
// depend on the CPU that wrote them. (The noasm and nopshufb build tags
// and GOARCH=386 run the generic paths through the other tests.)
func TestLibraryPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	paths := []struct {
		name string
		opts []reedsolomon.Option
	}{
		{"default", nil},
		{"no-gfni", []reedsolomon.Option{reedsolomon.WithGFNI(false), reedsolomon.WithAVXGFNI(false)}},
		{"no-avx512", []reedsolomon.Option{reedsolomon.WithAVX512(false)}},
		{"no-avx2", []reedsolomon.Option{reedsolomon.WithAVX512(false), reedsolomon.WithAVX2(false)}},
		{"generic", []reedsolomon.Option{reedsolomon.WithAVX512(false), reedsolomon.WithAVX2(false), reedsolomon.WithSSSE3(false), reedsolomon.WithSSE2(false)}},
	}
	for _, km := range [][2]int{{4, 2}, {8, 1}, {16, 2}, {32, 4}} {
		k, m := km[0], km[1]
		c := mustCodec(t, k, m, 4096)
		sh := stripe(t, r, c, k)
		for _, p := range paths {
			t.Run(fmt.Sprintf("km=%d+%d/path=%s", k, m, p.name), func(t *testing.T) {
				enc, err := reedsolomon.New(k, m, append(p.opts, reedsolomon.WithMaxGoroutines(1))...)
				if err != nil {
					t.Fatal(err)
				}
				got := cloneBlocks(sh)
				for j := k; j < k+m; j++ {
					clear(got[j])
				}
				if err := enc.Encode(got); err != nil {
					t.Fatal(err)
				}
				for j := k; j < k+m; j++ {
					if !bytes.Equal(got[j], sh[j]) {
						t.Fatalf("parity block %d differs", j-k)
					}
				}
				for i := range m {
					got[i] = nil
				}
				if err := enc.ReconstructData(got); err != nil {
					t.Fatal(err)
				}
				for i := range m {
					if !bytes.Equal(got[i], sh[i]) {
						t.Fatalf("data block %d rebuilt differently", i)
					}
				}
			})
		}
	}
}

// TestEncodeRuns checks that encoding n stripes as runs (position p of
// stripe i at block i of run p) gives each stripe's Encode, and that runs
// of unequal or partial-block lengths, or the wrong count, are refused.
func TestEncodeRuns(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct{ k, m, bs, n int }{{4, 2, 64, 1}, {4, 2, 64, 7}, {16, 2, 512, 33}, {32, 4, 64, 5}} {
		c := mustCodec(t, tc.k, tc.m, tc.bs)
		runs := randBlocks(r, tc.k+tc.m, tc.n*tc.bs)
		if err := c.EncodeRuns(runs); err != nil {
			t.Fatal(err)
		}
		for i := range tc.n {
			sh := make([][]byte, tc.k+tc.m)
			for p := range sh {
				sh[p] = bytes.Clone(runs[p][i*tc.bs : (i+1)*tc.bs])
			}
			for j := range tc.m {
				clear(sh[tc.k+j])
			}
			if err := c.Encode(sh); err != nil {
				t.Fatal(err)
			}
			for j := range tc.m {
				if !bytes.Equal(sh[tc.k+j], runs[tc.k+j][i*tc.bs:(i+1)*tc.bs]) {
					t.Fatalf("%d+%d: stripe %d of %d: parity block %d differs from Encode's", tc.k, tc.m, i, tc.n, j)
				}
			}
		}
	}
	c := mustCodec(t, 4, 2, 64)
	for _, runs := range [][][]byte{
		randBlocks(r, 5, 128),
		append(randBlocks(r, 5, 128), make([]byte, 64)),
		randBlocks(r, 6, 100),
		randBlocks(r, 6, 0),
	} {
		if err := c.EncodeRuns(runs); !errors.Is(err, ErrShards) {
			t.Fatalf("EncodeRuns of %d runs of %d bytes: %v, want ErrShards", len(runs), len(runs[0]), err)
		}
	}
}
