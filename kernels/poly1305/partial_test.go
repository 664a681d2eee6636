package poly1305

import (
	"bytes"
	"errors"
	"math/big"
	"math/rand/v2"
	"testing"
)

// TagsFromPartials of Partials is BlocksAD, bit for bit: block lengths with
// and without a partial last chunk, and zero; associated data of 0, 1, 2
// and 3 chunks; random keys, the all-ones r and all-ones data (the largest
// limbs); counts across the keystream's runs. And the lane kernels' own
// accumulators, as a lane kernel leaves them (limbs up to 2^26 + 2^12), are
// valid partials: converted here from the lane model's state.
func TestTagsFromPartials(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	rnd := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	keys := []*Key{}
	for _, rb := range [][]byte{rnd(16), bytes.Repeat([]byte{0xff}, 16)} {
		k, err := NewKey(rnd(32), rb)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	for ki, k := range keys {
		for _, bl := range []int{0, 1, 15, 16, 17, 64, 100, 512, 4096} {
			for _, adLen := range []int{0, 16, 32, 48} {
				for _, n := range []int{1, 5, 65} {
					stride := bl + 3
					p := rnd(n * stride)
					ad := rnd(n * adLen)
					if adLen > 0 && bl%2 == 0 {
						// A chunk the same in every block (a volume
						// identity), another in pairs of blocks: the
						// terms TagsFromPartials reuses.
						for i := 1; i < n; i++ {
							copy(ad[i*adLen:][:16], ad[:16])
							if adLen > 16 && i%2 == 1 {
								copy(ad[i*adLen+16:][:16], ad[(i-1)*adLen+16:])
							}
						}
					}
					if ki == 1 {
						for i := range p {
							p[i] = 0xff
						}
					}
					var nonce Nonce
					copy(nonce[:], rnd(16))
					parts := make([]Partial, n)
					if err := k.Partials(parts, p, bl, stride); err != nil {
						t.Fatal(err)
					}
					got, want := make([]Tag, n), make([]Tag, n)
					if err := k.TagsFromPartials(got, &nonce, ad, adLen, parts, bl); err != nil {
						t.Fatal(err)
					}
					if err := k.BlocksAD(want, &nonce, ad, adLen, p, bl, stride); err != nil {
						t.Fatal(err)
					}
					for i := range got {
						if got[i] != want[i] {
							t.Fatalf("key %d blockLen=%d adLen=%d n=%d: tag %d = %x, want %x", ki, bl, adLen, n, i, got[i], want[i])
						}
					}
					// The lane model's accumulators as partials.
					if bl%16 != 0 || n < lanes {
						continue
					}
					var h laneState
					laneModel(&h, p, stride, bl/16, &k.poly.lanes)
					lp := make([]Partial, lanes)
					for l := range lanes {
						for kk := range 5 {
							lp[l][kk] = h[lanes*kk+l]
						}
					}
					lt := make([]Tag, lanes)
					if err := k.TagsFromPartials(lt, &nonce, ad, adLen, lp, bl); err != nil {
						t.Fatal(err)
					}
					for i := range lt {
						if lt[i] != want[i] {
							t.Fatalf("key %d blockLen=%d adLen=%d: lane %d tag %x, want %x", ki, bl, adLen, i, lt[i], want[i])
						}
					}
				}
			}
		}
	}
}

// Bad arguments are refused with ErrLayout, and nothing is written.
func TestTagsFromPartialsErrors(t *testing.T) {
	k, err := NewKey(make([]byte, 16), make([]byte, 16))
	if err != nil {
		t.Fatal(err)
	}
	var nonce Nonce
	dst := make([]Tag, 2)
	parts := make([]Partial, 2)
	big := []Partial{{}, {0, 0, 1 << 27}}
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"short parts", func() error { return k.TagsFromPartials(dst, &nonce, nil, 0, parts[:1], 16) }},
		{"negative length", func() error { return k.TagsFromPartials(dst, &nonce, nil, 0, parts, -1) }},
		{"ad not chunks", func() error { return k.TagsFromPartials(dst, &nonce, make([]byte, 20), 10, parts, 16) }},
		{"short ad", func() error { return k.TagsFromPartials(dst, &nonce, make([]byte, 16), 16, parts, 16) }},
		{"limb too large", func() error { return k.TagsFromPartials(dst, &nonce, nil, 0, big, 16) }},
		{"partials layout", func() error { return k.Partials(parts, make([]byte, 31), 16, 16) }},
	} {
		dst[0][0] = 0x77
		if err := c.call(); !errors.Is(err, ErrLayout) {
			t.Errorf("%s: %v, want ErrLayout", c.name, err)
		}
		if dst[0][0] != 0x77 {
			t.Errorf("%s: wrote on error", c.name)
		}
	}
}

// The lane key handed out is the one the lane kernels use.
func TestLaneKey(t *testing.T) {
	k, err := NewKey(make([]byte, 16), []byte("0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	if lk := k.LaneKey(); *lk != [LaneKeyWords]uint64(k.poly.lanes) || lk[160] != k.poly.r0 {
		t.Fatal("LaneKey differs from the key's lane table")
	}
}

// Partials that are congruent mod 2^130-5 give the same tags: every
// combination of edge limbs (0, 1, 2^26-5, 2^26-1, 2^26, 2^27-1: the carries
// that ripple through limbs of 2^26-1 after limb 4's fold into limb 0)
// against the canonical limbs of its value, computed with math/big.
func TestPartialCarries(t *testing.T) {
	k, err := NewKey(make([]byte, 16), bytes.Repeat([]byte{0xff}, 16))
	if err != nil {
		t.Fatal(err)
	}
	p := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 130), big.NewInt(5))
	edges := []uint64{0, 1, 1<<26 - 5, 1<<26 - 1, 1 << 26, 1<<27 - 1}
	var parts, canon []Partial
	var x [5]int
	for {
		var pt Partial
		v := new(big.Int)
		for l := 4; l >= 0; l-- {
			pt[l] = edges[x[l]]
			v.Lsh(v, 26)
			v.Add(v, new(big.Int).SetUint64(pt[l]))
		}
		v.Mod(v, p)
		var c Partial
		for l := range c {
			c[l] = new(big.Int).And(v, big.NewInt(1<<26-1)).Uint64()
			v.Rsh(v, 26)
		}
		parts, canon = append(parts, pt), append(canon, c)
		l := 0
		for ; l < 5; l++ {
			if x[l]++; x[l] < len(edges) {
				break
			}
			x[l] = 0
		}
		if l == 5 {
			break
		}
	}
	ad := make([]byte, 16*len(parts))
	for _, adLen := range []int{0, 16} {
		var nonce Nonce
		got, want := make([]Tag, len(parts)), make([]Tag, len(parts))
		if err := k.TagsFromPartials(got, &nonce, ad, adLen, parts, 64); err != nil {
			t.Fatal(err)
		}
		if err := k.TagsFromPartials(want, &nonce, ad, adLen, canon, 64); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("adLen=%d: partial %x: tag %x, its canonical form's %x", adLen, parts[i], got[i], want[i])
			}
		}
	}
}
