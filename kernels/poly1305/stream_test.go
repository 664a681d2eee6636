package poly1305

import (
	"math/rand/v2"
	"testing"
)

// A MaskStream's tags are its Key's, bit for bit, over a sequence of calls
// of its three methods whose nonces continue the one before (its keystream
// kept), jump ahead, go back, repeat, and cross the 128-bit counter's wrap
// and the 64-bit half's carry; and a call that fails (its nonce continuing
// the one before) leaves it where it was, so the call after it, continuing
// the failed one's nonce, gets a keystream of its own.
func TestMaskStream(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	rnd := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	k, err := NewKey(rnd(16), rnd(16))
	if err != nil {
		t.Fatal(err)
	}
	const bl, adL = 512, 32
	nonceAt := func(hi, lo uint64) Nonce {
		var n Nonce
		for i := range 8 {
			n[i] = byte(hi >> (56 - 8*i))
			n[8+i] = byte(lo >> (56 - 8*i))
		}
		return n
	}
	for _, start := range []Nonce{nonceAt(7, 1000), nonceAt(3, ^uint64(0)-70), nonceAt(^uint64(0), ^uint64(0)-70)} {
		ms := k.MaskStream()
		next := start
		for step := range 60 {
			n := 1 + r.IntN(150)
			nonce := next
			switch c := r.IntN(8); {
			case c == 0:
				nonce = next.Add(uint64(1 + r.IntN(3)))
			case c == 1:
				nonce = start
			}
			p := rnd(n * bl)
			ad := rnd(n * adL)
			want := make([]Tag, n)
			if err := k.BlocksAD(want, &nonce, ad, adL, p, bl, bl); err != nil {
				t.Fatal(err)
			}
			got := make([]Tag, n)
			what := ""
			switch m := step % 3; m {
			case 0:
				what = "BlocksAD"
				err = ms.BlocksAD(got, &nonce, ad, adL, p, bl, bl)
			case 1:
				what = "BlocksADCopy"
				q := make([]byte, len(p))
				err = ms.BlocksADCopy(got, &nonce, ad, adL, q, p, bl, bl)
			case 2:
				what = "TagsFromPartials"
				parts := make([]Partial, n)
				if err := k.Partials(parts, p, bl, bl); err != nil {
					t.Fatal(err)
				}
				err = ms.TagsFromPartials(got, &nonce, ad, adL, parts, bl)
			}
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if got[i] != want[i] {
					t.Fatalf("start %x step %d: %s of %d blocks at %x: block %d: got %x, want %x", start, step, what, n, nonce, i, got[i], want[i])
				}
			}
			next = nonce.Add(uint64(n))
			if r.IntN(5) == 0 {
				// A failed call at the continuing nonce (associated data
				// not of whole chunks, each method), then a call after it.
				bad := make([]Tag, 4)
				q := make([]byte, 4*bl)
				for _, e := range []error{
					ms.BlocksAD(bad, &next, ad, 15, p, bl, bl),
					ms.BlocksADCopy(bad, &next, ad, 15, q, p, bl, bl),
					ms.TagsFromPartials(bad, &next, ad, 15, make([]Partial, 4), bl),
				} {
					if e == nil {
						t.Fatal("a call with 15 bytes of associated data per block did not fail")
					}
				}
				next = next.Add(4)
			}
		}
	}
}

// Keeping the keystream allocates nothing per call once it runs; a new one
// is started (and allocated) only when the nonce does not continue.
func TestMaskStreamAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	k, err := NewKey(make([]byte, 16), make([]byte, 16))
	if err != nil {
		t.Fatal(err)
	}
	const n, bl = 64, 512
	p := make([]byte, n*bl)
	q := make([]byte, n*bl)
	ad := make([]byte, n*adLenTest)
	dst := make([]Tag, n)
	for _, tc := range []struct {
		name string
		jump uint64
		want float64
	}{{"continuing", 0, 0}, {"jumping", 1, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			ms := k.MaskStream()
			var nonce Nonce
			got := testing.AllocsPerRun(100, func() {
				if err := ms.BlocksADCopy(dst, &nonce, ad, adLenTest, q, p, bl, bl); err != nil {
					t.Fatal(err)
				}
				nonce = nonce.Add(n + tc.jump)
			})
			if got != tc.want {
				t.Errorf("%v allocations per call, want %v", got, tc.want)
			}
		})
	}
}

const adLenTest = 32
