package crcmath

import (
	"math/rand/v2"
	"testing"
)

var all = []Params{T10DIF, CRC32C, CRC64NVME}

func TestCheck(t *testing.T) {
	for _, p := range all {
		if got := Bitwise(p, Start(p), []byte("123456789")); got != p.Check {
			t.Errorf("%s: Bitwise(123456789) = %#x, want %#x", p.Name, got, p.Check)
		}
		// Streaming: split at every point.
		msg := []byte("123456789")
		for i := range msg {
			c := Bitwise(p, Bitwise(p, Start(p), msg[:i]), msg[i:])
			if c != p.Check {
				t.Errorf("%s: split at %d = %#x", p.Name, i, c)
			}
		}
	}
}

// The CRC register of a message with init 0 is M·x^w mod P; for a single
// one bit at the front followed by n zero bits that is x^(n+w) mod P.
func TestXPowModAgainstBitwise(t *testing.T) {
	for _, p := range all {
		for n := 0; n < 40; n++ {
			msg := make([]byte, n+1)
			var want uint64
			if p.Reflected {
				msg[0] = 1
			} else {
				msg[0] = 0x80
			}
			// Register with init 0, no xorout: undo Start/XorOut.
			q := p
			q.Init, q.XorOut = 0, 0
			want = Bitwise(q, 0, msg)
			if p.Reflected {
				want = Reflect(want, p.Width)
			}
			if got := XPowMod(p, uint64(8*n+7)+uint64(p.Width)); got != want {
				t.Fatalf("%s: x^(%d) mod P = %#x, want %#x", p.Name, 8*n+7+int(p.Width), got, want)
			}
		}
	}
}

func TestBarrett(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, p := range all {
		mu := BarrettMu(p)
		w := p.Width
		for range 2000 {
			// T of degree < 64+w as (hi, lo).
			lo := r.Uint64()
			hi := r.Uint64()
			if w < 64 {
				hi &= 1<<w - 1
			}
			want := modP(p, hi, lo)
			// Q = T div x^w (64 bits).
			var q uint64
			if w == 64 {
				q = hi
			} else {
				q = hi<<(64-w) | lo>>w
			}
			// q' = floor(Q·mu / x^64) = Q ⊕ hi64(Q·mu_low)
			h, _ := Clmul(q, mu)
			q2 := q ^ h
			// remainder = (T ⊕ q'·P) mod x^w = T mod x^w ⊕ (q'·p mod x^w)
			_, l2 := Clmul(q2, p.Poly)
			got := (lo ^ l2) & p.Mask()
			if got != want {
				t.Fatalf("%s: Barrett %#x, want %#x", p.Name, got, want)
			}
		}
	}
}

func TestCombine(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, p := range all {
		for range 200 {
			a := make([]byte, r.IntN(300))
			b := make([]byte, r.IntN(300))
			for i := range a {
				a[i] = byte(r.Uint32())
			}
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			ca := Bitwise(p, Start(p), a)
			cb := Bitwise(p, Start(p), b)
			want := Bitwise(p, ca, b)
			if got := Combine(p, ca, cb, int64(len(b))); got != want {
				t.Fatalf("%s: Combine(len %d, %d) = %#x, want %#x", p.Name, len(a), len(b), got, want)
			}
		}
	}
}

func TestClmul(t *testing.T) {
	hi, lo := Clmul(3, 3) // (x+1)^2 = x^2+1
	if hi != 0 || lo != 5 {
		t.Fatalf("Clmul(3,3) = %#x:%#x", hi, lo)
	}
	hi, lo = Clmul(1<<63, 1<<63)
	if hi != 1<<62 || lo != 0 {
		t.Fatalf("Clmul(x^63,x^63) = %#x:%#x", hi, lo)
	}
}
