package poly1305

import (
	"bytes"
	"math/big"
	"testing"

	"github.com/difctl/difctl/kernels/internal/impl"
)

// limbsBig returns Σ x[k]·2^(bits·k).
func limbsBigInt(x []uint64, bits uint) *big.Int {
	v := new(big.Int)
	for k := len(x) - 1; k >= 0; k-- {
		v.Lsh(v, bits)
		v.Add(v, new(big.Int).SetUint64(x[k]))
	}
	return v
}

// checkState fails unless s is in the generic form (h2 <= 4, so below
// 2^131 and a valid input to last and reduce) and reduce(s) is x mod p.
func checkState(t *testing.T, what string, s state, x *big.Int) {
	t.Helper()
	if s.h2 > 4 {
		t.Fatalf("%s: h2 = %d, want <= 4", what, s.h2)
	}
	want := new(big.Int).Mod(x, refP)
	g0, g1 := reduce(s.h0, s.h1, s.h2)
	got := limbsBigInt([]uint64{g0, g1}, 64)
	w := new(big.Int).And(want, new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1)))
	if got.Cmp(w) != 0 {
		t.Fatalf("%s: reduced %x, want %x (x mod p = %x)", what, got, w, want)
	}
}

// The conversion of radix-2^26 accumulators (every AVX2, hybrid and NEON
// lane, and their models) into the generic form, on every combination of
// limbs at the edges of the carry chain's bounds: limbs of 2^26 - 1 with a
// carry coming in ripple across every limb boundary, and 2^26 - 5 in limb 0
// with a carry out of limb 4 wraps to exactly 2^26. A conversion that ORs
// the limbs together without carrying them first loses such a carry (the
// bug the corpus entry FuzzBlocks/1cfde75b9e6d160e found: a tag off by
// 2^52).
func TestLimbsToStateEdges(t *testing.T) {
	const m = 1<<26 - 1
	edges := []uint64{0, 1, 5, m - 5, m - 4, m - 1, m, m + 1, m + 1<<12, 1<<27 - 1}
	var x [5]uint64
	var rec func(k int)
	rec = func(k int) {
		if k == 5 {
			checkState(t, "limbs "+hexLimbs(x[:]), limbsToState(x, 0, 0), limbsBigInt(x[:], 26))
			return
		}
		for _, v := range edges {
			x[k] = v
			rec(k + 1)
		}
	}
	rec(0)
}

// The same for the radix-2^44 accumulators of the IFMA kernel and its
// model: limbs up to 2^44 + 2^4, 2^44 + 2^4 and 2^42 (the bounds its carry
// chain leaves).
func TestLaneToState44Edges(t *testing.T) {
	const m44, m42 = 1<<44 - 1, 1<<42 - 1
	e44 := []uint64{0, 1, 5, 20, m44 - 20, m44 - 5, m44 - 1, m44, m44 + 1, m44 + 16}
	e42 := []uint64{0, 1, m42 - 1, m42, m42 + 1, m42 + 2, 1<<43 - 1}
	for _, x0 := range e44 {
		for _, x1 := range e44 {
			for _, x2 := range e42 {
				var h laneState44
				h[3], h[8+3], h[16+3] = x0, x1, x2
				x := []uint64{x0, x1, x2}
				checkState(t, "limbs "+hexLimbs(x), laneToState44(&h, 3, 0, 0), limbsBigInt(x, 44))
			}
		}
	}
}

func hexLimbs(x []uint64) string {
	var b bytes.Buffer
	for i, v := range x {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(new(big.Int).SetUint64(v).Text(16))
	}
	return b.String()
}

// The input of FuzzBlocks/1cfde75b9e6d160e and its neighbours as a plain
// test, through every implementation and every lane model: all-ones data
// and associated data, one chunk per block (an empty block after 16 bytes
// of associated data) and more, under keys whose r leaves accumulators with
// limbs of exactly 2^26 - 1 and 2^26 - 5 after the kernels' carry chains.
func TestBlocksCarryEdges(t *testing.T) {
	keys := [][]byte{
		[]byte("\x00\x00\x00\x00\x00\x00\x00\x12\xff\xff\xff\xff\x00\x00\x00\x00"), // the corpus entry's r
		bytes.Repeat([]byte{0xff}, 16),
	}
	check := func(t *testing.T) {
		for _, rb := range keys {
			aesKey := bytes.Repeat([]byte{0xff}, 16)
			k, err := NewKey(aesKey, rb)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range [][3]int{{0, 28, 16}, {0, 0, 16}, {16, 16, 0}, {16, 16, 16}, {32, 32, 32}, {48, 64, 16}, {64, 64, 0}} {
				bl, st, adLen := c[0], c[1], c[2]
				const n = 24
				p := bytes.Repeat([]byte{0xff}, (n-1)*st+bl)
				ad := bytes.Repeat([]byte{0xff}, n*adLen)
				dst := make([]Tag, n)
				var nonce Nonce
				if err := k.BlocksAD(dst, &nonce, ad, adLen, p, bl, st); err != nil {
					t.Fatal(err)
				}
				want := wantTags(t, aesKey, rb, nonce, ad, adLen, p, n, bl, st)
				for i := range dst {
					if dst[i] != want[i] {
						t.Fatalf("r=%x block=%d stride=%d ad=%d: dst[%d] = %x, want %x", rb, bl, st, adLen, i, dst[i], want[i])
					}
				}
			}
		}
	}
	for _, im := range impl.List(pkgName) {
		if !im.Available {
			continue
		}
		t.Run("impl="+im.Name, func(t *testing.T) {
			defer impl.Reset(pkgName)
			if err := impl.Select(pkgName, im.Name); err != nil {
				t.Fatal(err)
			}
			check(t)
		})
	}
	for _, m := range []struct {
		name string
		kern *laneKernel
	}{{"lanes26", &modelKernel26}, {"lanes26x8", &modelKernel8}, {"lanes44", &modelKernel44}, {"neon", &modelKernelNEON}} {
		t.Run("model="+m.name, func(t *testing.T) {
			defer impl.Reset(pkgName)
			blocks = func(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, p []byte, blockLen, stride int) {
				blocksLanes(m.kern, k, acc, h, ad, adLen, p, blockLen, stride)
			}
			check(t)
		})
	}
}
