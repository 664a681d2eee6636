package ifma

import (
	"math/big"
	"math/rand/v2"
	"testing"
)

// limbsOf is Σ l[k]·2^(44k).
func limbsOf(l []uint64) *big.Int {
	x := new(big.Int)
	for k := len(l) - 1; k >= 0; k-- {
		x.Lsh(x, 44)
		x.Add(x, new(big.Int).SetUint64(l[k]))
	}
	return x
}

func TestSplit(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 100 {
		x := new(big.Int).SetUint64(rnd.Uint64() & 3)
		x.Lsh(x, 64).Or(x, new(big.Int).SetUint64(rnd.Uint64()))
		x.Lsh(x, 64).Or(x, new(big.Int).SetUint64(rnd.Uint64()))
		l := Split(x, 44, 3)
		for k, v := range l {
			if v >= 1<<44 {
				t.Fatalf("%x: limb %d = %#x", x, k, v)
			}
		}
		if limbsOf(l).Cmp(x) != 0 {
			t.Fatalf("%x: limbs %x", x, l)
		}
	}
}

// TestKeyTable checks the table's parts against each other and against
// the powers of r: each part's words where the layout puts them.
func TestKeyTable(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 10; trial++ {
		r := new(big.Int).SetUint64(rnd.Uint64() & 0x0ffffffc0ffffffc)
		r.Lsh(r, 64).Or(r, new(big.Int).SetUint64(rnd.Uint64()&0x0ffffffc0fffffff))
		k := KeyTable(r)
		if len(k) != KeyWords {
			t.Fatalf("%d words, want %d", len(k), KeyWords)
		}
		pow := func(e int) *big.Int { return new(big.Int).Exp(r, big.NewInt(int64(e)), P) }
		// word w of r^n as five words at k[at(w)].
		check := func(what string, n int, at func(w int) int) {
			t.Helper()
			w := []uint64{k[at(0)], k[at(1)], k[at(2)], k[at(3)], k[at(4)]}
			if limbsOf(w[:3]).Cmp(pow(n)) != 0 || w[3] != 20*w[1] || w[4] != 20*w[2] {
				t.Fatalf("r=%x: %s: %x are not the words of r^%d", r, what, w, n)
			}
		}
		for j := 0; j < 4; j++ {
			check("r^(j+1)", j+1, func(w int) int { return 5*j + w })
		}
		for ln := 0; ln < Lanes; ln++ {
			for j := 2; j < 4; j++ {
				check("KeyVec", j+1, func(w int) int { return KeyVec + 40*(j-2) + 8*w + ln })
			}
			check("KeyF", 4-ln/2, func(w int) int { return KeyF + 8*w + ln })
		}
		for p := 0; p < 4; p++ {
			check("KeyB", 4*(p+1), func(w int) int { return KeyB + 5*p + w })
		}
		// The pad parts: 2^128·Σ r^e, e = 4, 8, 12, 16 (V = 0) or 0, 4,
		// ..., 4(V-1).
		for v := 0; v <= 4; v++ {
			want := new(big.Int)
			for j := 1; j <= 4; j++ {
				if v == 0 {
					want.Add(want, pow(4*j))
				} else if j <= v {
					want.Add(want, pow(4*(j-1)))
				}
			}
			want.Lsh(want, 128).Mod(want, P)
			for ln := 0; ln < Lanes; ln++ {
				l := []uint64{k[KeyK+24*v+ln], k[KeyK+24*v+8+ln], k[KeyK+24*v+16+ln]}
				if limbsOf(l).Cmp(want) != 0 {
					t.Fatalf("r=%x: KeyK V=%d lane %d: %x", r, v, ln, l)
				}
			}
		}
	}
}
