package keyedcopy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/kerneltest"
	"github.com/difctl/difctl/kernels/poly1305"
	"github.com/difctl/difctl/kernels/t10crc32c"
)

func testKey(t testing.TB, seed uint64) *poly1305.Key {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed+1))
	k, err := poly1305.NewKey(kerneltest.RandBytes(r, 32), kerneltest.RandBytes(r, 16))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// allOnesKey has r = 2^128-1 before clamping: the largest limbs of every
// power, hence the largest products in the lanes.
func allOnesKey(t testing.TB) *poly1305.Key {
	t.Helper()
	k, err := poly1305.NewKey(make([]byte, 32), slices.Repeat([]byte{0xff}, 16))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const adLen = 32

// check runs BlocksCopy over n blocks of p and compares everything against
// the two reference passes: the guards and sums against t10crc32c.BlocksCopy,
// the tags made from the partials (with random associated data) against
// poly1305.Key.BlocksAD over p, q against p with nothing else of q written.
func check(t *testing.T, key *poly1305.Key, q, p []byte, n, blockLen, stride int, r *rand.Rand) {
	t.Helper()
	dst, sums, parts := make([]uint16, n), make([]uint32, n), make([]poly1305.Partial, n)
	if err := BlocksCopy(dst, sums, parts, q, p, blockLen, stride, key); err != nil {
		t.Fatalf("n=%d blockLen=%d stride=%d: %v", n, blockLen, stride, err)
	}
	if msg := kerneltest.CheckCopy(q, p, n, blockLen, stride); msg != "" {
		t.Fatalf("n=%d blockLen=%d stride=%d: %s", n, blockLen, stride, msg)
	}
	wantDst, wantSums := make([]uint16, n), make([]uint32, n)
	if err := t10crc32c.Blocks(wantDst, wantSums, p, blockLen, stride); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dst, wantDst) || !slices.Equal(sums, wantSums) {
		t.Fatalf("n=%d blockLen=%d stride=%d: guards or sums differ from t10crc32c", n, blockLen, stride)
	}
	ad := kerneltest.RandBytes(r, n*adLen)
	var nonce poly1305.Nonce
	for i := range nonce {
		nonce[i] = byte(r.Uint32())
	}
	for _, al := range []int{0, adLen} {
		got, want := make([]poly1305.Tag, n), make([]poly1305.Tag, n)
		if err := key.TagsFromPartials(got, &nonce, ad, al, parts, blockLen); err != nil {
			t.Fatal(err)
		}
		if err := key.BlocksAD(want, &nonce, ad, al, p, blockLen, stride); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("n=%d blockLen=%d stride=%d adLen=%d: tag %d = %x, want %x", n, blockLen, stride, al, i, got[i], want[i])
			}
		}
	}
}

// Every implementation, bit for bit against the reference passes: block
// lengths that the kernels take (multiples of 64; for avx512's kernel
// multiples of 64 from zMinLen, ending in last steps of 1 to 4 rows) and
// ones they leave to other paths, strides with gaps, counts with every remainder mod 4 and
// more than one kernel call, and source and destination at different
// alignments; with random keys and with the all-ones r.
func TestBlocksCopy(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	keys := []*poly1305.Key{testKey(t, 7), allOnesKey(t)}
	counts := []int{1, 3, 4, 5, 8, 11, 12, 13}
	if !testing.Short() {
		counts = append(counts, 64, 67, 68, 72)
	}
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		for _, blockLen := range []int{0, 16, 48, 64, 100, 128, 192, 256, 512, 2048, 2112, 2240, 4096} {
			for _, gap := range []int{0, 8, 64} {
				stride := blockLen + gap
				for _, n := range counts {
					if n*stride > 1<<20 {
						continue
					}
					for ki, key := range keys {
						for _, al := range [][2]int{{0, 0}, {1, 7}, {32, 3}} {
							p := kerneltest.RandBytes(r, al[0]+(n-1)*stride+blockLen)[al[0]:]
							if ki == 1 {
								for i := range p {
									p[i] = 0xff
								}
							}
							q := kerneltest.NewCopyDest(len(p), al[1])
							check(t, key, q, p, n, blockLen, stride, r)
						}
					}
				}
			}
		}
	})
}

// The kernel reads nothing past the last block of p and writes nothing past
// that of q: both end on the page before a PROT_NONE page.
func TestGuardPage(t *testing.T) {
	getP, getQ := kerneltest.GuardedBuffer(t), kerneltest.GuardedBuffer(t)
	key := testKey(t, 9)
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		for _, c := range [][3]int{{4, 64, 64}, {8, 512, 512}, {8, 512, 520}, {4, 4096, 4096}, {12, 4096, 4160}, {5, 128, 128}, {2, 2112, 2112}, {3, 2240, 2304}} {
			n, blockLen, stride := c[0], c[1], c[2]
			size := (n-1)*stride + blockLen
			p, q := getP(size), getQ(size)
			dst, sums, parts := make([]uint16, n), make([]uint32, n), make([]poly1305.Partial, n)
			if err := BlocksCopy(dst, sums, parts, q, p, blockLen, stride, key); err != nil {
				t.Fatal(err)
			}
			wantDst, wantSums, wantParts := make([]uint16, n), make([]uint32, n), make([]poly1305.Partial, n)
			if err := t10crc32c.Blocks(wantDst, wantSums, p, blockLen, stride); err != nil {
				t.Fatal(err)
			}
			if err := key.Partials(wantParts, p, blockLen, stride); err != nil {
				t.Fatal(err)
			}
			var nonce poly1305.Nonce
			got, want := make([]poly1305.Tag, n), make([]poly1305.Tag, n)
			if key.TagsFromPartials(got, &nonce, nil, 0, parts, blockLen) != nil || key.TagsFromPartials(want, &nonce, nil, 0, wantParts, blockLen) != nil {
				t.Fatal("TagsFromPartials failed")
			}
			if !slices.Equal(dst, wantDst) || !slices.Equal(sums, wantSums) || !slices.Equal(got, want) {
				t.Fatalf("%v: results differ at the guard page", c)
			}
			for i := range n {
				if !slices.Equal(q[i*stride:][:blockLen], p[i*stride:][:blockLen]) {
					t.Fatalf("%v: block %d not copied", c, i)
				}
			}
		}
	})
}

// Bad layouts are refused with the package's errors, and nothing is written.
func TestErrors(t *testing.T) {
	key := testKey(t, 3)
	p := make([]byte, 4096)
	q := make([]byte, 4096)
	d, s, pt := make([]uint16, 8), make([]uint32, 8), make([]poly1305.Partial, 8)
	for _, c := range []struct {
		name string
		err  error
		call func() error
	}{
		{"short sums", ErrLayout, func() error { return BlocksCopy(d, s[:7], pt, q, p, 512, 512, key) }},
		{"short parts", ErrLayout, func() error { return BlocksCopy(d, s, pt[:7], q, p, 512, 512, key) }},
		{"short p", ErrLayout, func() error { return BlocksCopy(d, s, pt, q, p[:4095], 512, 512, key) }},
		{"short q", ErrLayout, func() error { return BlocksCopy(d, s, pt, q[:4000], p, 512, 512, key) }},
		{"stride", ErrLayout, func() error { return BlocksCopy(d, s, pt, q, p, 512, 256, key) }},
		{"negative", ErrLayout, func() error { return BlocksCopy(d, s, pt, q, p, -1, 512, key) }},
		{"overlap", ErrOverlap, func() error { return BlocksCopy(d[:4], s[:4], pt[:4], p[512:], p, 512, 512, key) }},
		{"no key", ErrNoKey, func() error { return BlocksCopy(d, s, pt, q, p, 512, 512, nil) }},
	} {
		q[0], d[0] = 0x77, 0x77
		err := c.call()
		if !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
		if q[0] != 0x77 || d[0] != 0x77 {
			t.Errorf("%s: wrote on error", c.name)
		}
	}
}

// The avx512, pair and avx implementations compute the partials in the
// copying call, generic does not, and the best the CPU can run is the default.
func TestDispatch(t *testing.T) {
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		if got, want := Fused(), impl.Active(pkgName) != "generic"; got != want {
			t.Errorf("%s: Fused() = %v", impl.Active(pkgName), got)
		}
	})
	if _, forced := impl.Forced(pkgName); forced {
		return
	}
	if got := impl.List(pkgName)[0]; got.Available && impl.Active(pkgName) != got.Name {
		t.Errorf("active %q, want the best available %q", impl.Active(pkgName), got.Name)
	}
}

// A call allocates nothing.
func TestAllocs(t *testing.T) {
	key := testKey(t, 4)
	p, q := make([]byte, 1<<20), make([]byte, 1<<20)
	n := 2048
	d, s, pt := make([]uint16, n), make([]uint32, n), make([]poly1305.Partial, n)
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		for _, bl := range []int{512, 4096} {
			if a := testing.AllocsPerRun(5, func() { _ = BlocksCopy(d[:len(p)/bl], s[:len(p)/bl], pt[:len(p)/bl], q, p, bl, bl, key) }); a != 0 {
				t.Errorf("block=%d: %v allocations", bl, a)
			}
		}
	})
}

func FuzzBlocksCopy(f *testing.F) {
	f.Add(kerneltest.SeedBytes(2048), uint16(512), uint16(0), uint8(4), uint8(0))
	f.Add(kerneltest.SeedBytes(4160*4), uint16(4096), uint16(64), uint8(4), uint8(3))
	f.Add(kerneltest.SeedBytes(200), uint16(48), uint16(2), uint8(3), uint8(1))
	key := testKey(f, 5)
	r := rand.New(rand.NewPCG(8, 9))
	f.Fuzz(func(t *testing.T, data []byte, blockLen, gap uint16, n, align uint8) {
		bl, stride, cnt := int(blockLen%4200), int(blockLen%4200)+int(gap%128), int(n%20)
		if cnt == 0 || (cnt-1)*stride+bl > len(data) {
			return
		}
		p := data[:(cnt-1)*stride+bl]
		for _, name := range []string{"avx512", "pair", "avx", "generic"} {
			t.Run(fmt.Sprint(name), func(t *testing.T) {
				defer impl.Reset(pkgName)
				if impl.Select(pkgName, name) != nil {
					t.Skip()
				}
				check(t, key, kerneltest.NewCopyDest(len(p), int(align%64)), p, cnt, bl, stride, r)
			})
		}
	})
}

// BenchmarkBlocksCopy compares the fused kernel with t10crc32c.BlocksCopy
// alone (the CRCs and the copy, no Poly1305) and with the two passes of the
// keyed read before it (t10crc32c.BlocksCopy, then poly1305.Key.BlocksAD
// over the copy), over 256 KiB of blocks, in the L2 cache's reach, in the
// same run, alternating:
//
//	go test -run '^$' -bench BlocksCopy ./kernels/keyedcopy
func BenchmarkBlocksCopy(b *testing.B) {
	key := testKey(b, 6)
	for _, bl := range []int{512, 4096} {
		const size = 256 << 10
		n := size / bl
		p, q := kerneltest.SeedBytes(size), make([]byte, size)
		d, s, pt := make([]uint16, n), make([]uint32, n), make([]poly1305.Partial, n)
		tags := make([]poly1305.Tag, n)
		// The associated data of a keyed volume (blockdev): a volume
		// identity, the same in every block, then the LBA and generation.
		ad := make([]byte, n*adLen)
		for i := range n {
			copy(ad[i*adLen:], "volume-identity!")
			binary.BigEndian.PutUint64(ad[i*adLen+16:], uint64(1000+i))
			binary.BigEndian.PutUint64(ad[i*adLen+24:], 77)
		}
		var nonce poly1305.Nonce
		paths := []struct {
			name string
			fn   func()
		}{
			{"fused", func() {
				_ = BlocksCopy(d, s, pt, q, p, bl, bl, key)
				_ = key.TagsFromPartials(tags, &nonce, ad, adLen, pt, bl)
			}},
			{"kernel", func() { _ = BlocksCopy(d, s, pt, q, p, bl, bl, key) }},
			{"finish", func() { _ = key.TagsFromPartials(tags, &nonce, ad, adLen, pt, bl) }},
			{"crcOnly", func() { _ = t10crc32c.BlocksCopy(d, s, q, p, bl, bl) }},
			{"twoPass", func() {
				_ = t10crc32c.BlocksCopy(d, s, q, p, bl, bl)
				_ = key.BlocksAD(tags, &nonce, ad, adLen, q, bl, bl)
			}},
		}
		for _, path := range paths {
			b.Run(fmt.Sprintf("block=%d/path=%s", bl, path.name), func(b *testing.B) {
				b.SetBytes(size)
				for b.Loop() {
					path.fn()
				}
			})
		}
	}
}
