package layout

import (
	"errors"
	"fmt"
	"math"
	"testing"
)

func TestValid(t *testing.T) {
	for _, c := range []struct {
		n, plen, blockLen, stride int
		want                      bool
	}{
		{0, 0, 512, 512, true},
		{1, 512, 512, 0, true},
		{1, 511, 512, 512, false},
		{2, 1024, 512, 512, true},
		{2, 1023, 512, 512, false},
		{2, 1032, 512, 520, true},
		{2, 1031, 512, 520, false},
		{3, 4096, 512, 256, false},
		{2, 4096, -1, 512, false},
		{-1, 4096, 512, 512, false},
		{3, 4096, 0, 0, true},
		{3, 4096, 512, math.MaxInt / 2, false},
		{math.MaxInt, math.MaxInt, 1, 1, true},
		{math.MaxInt, math.MaxInt / 4, 1, 2, false},
	} {
		t.Run(fmt.Sprintf("n=%d/len=%d/block=%d/stride=%d", c.n, c.plen, c.blockLen, c.stride), func(t *testing.T) {
			if got := Valid(c.n, c.plen, c.blockLen, c.stride); got != c.want {
				t.Fatalf("Valid = %v, want %v", got, c.want)
			}
		})
	}
}

func TestOverlap(t *testing.T) {
	buf := make([]byte, 100)
	for _, c := range []struct {
		a, b []byte
		want bool
	}{
		{buf[0:10], buf[10:20], false},
		{buf[10:20], buf[0:10], false},
		{buf[0:11], buf[10:20], true},
		{buf[10:20], buf[0:11], true},
		{buf[0:100], buf[50:51], true},
		{buf[50:51], buf[0:100], true},
		{buf[0:10], buf[0:10], true},
		{buf[0:0], buf[0:10], false},
		{buf[5:5], buf[0:10], false},
		{buf[0:10], make([]byte, 10), false},
	} {
		if got := Overlap(c.a, c.b); got != c.want {
			t.Errorf("Overlap(%p+%d, %p+%d) = %v, want %v", c.a, len(c.a), c.b, len(c.b), got, c.want)
		}
	}
}

func TestCopy(t *testing.T) {
	for _, c := range [][3]int{{4, 8, 8}, {4, 8, 11}, {1, 5, 0}, {3, 0, 4}} {
		n, bl, st := c[0], c[1], c[2]
		size := Span(n, bl, st)
		p, q := make([]byte, size), make([]byte, size)
		for i := range p {
			p[i], q[i] = byte(i+1), 0xEE
		}
		Copy(q, p, n, bl, st)
		for i := range q {
			inBlock := st == 0 || (i%st < bl && i/st < n)
			if st == 0 {
				inBlock = i < bl
			}
			if inBlock && q[i] != p[i] || !inBlock && q[i] != 0xEE {
				t.Fatalf("n=%d block=%d stride=%d: q[%d] = %#x", n, bl, st, i, q[i])
			}
		}
	}
}

func TestCheckCopy(t *testing.T) {
	errLayout, errOverlap := errors.New("layout"), errors.New("overlap")
	buf := make([]byte, 4096)
	for _, c := range []struct {
		name             string
		n                int
		q, p             []byte
		blockLen, stride int
		want             error
	}{
		{"disjoint", 4, buf[:2048], buf[2048:], 512, 512, nil},
		{"short q", 4, buf[:2047], buf[2048:], 512, 512, errLayout},
		{"short p", 4, buf[:2048], buf[2049:], 512, 512, errLayout},
		{"overlap", 4, buf[:2048], buf[1024:3072], 512, 512, errOverlap},
		{"same", 2, buf[:1024], buf[:1024], 512, 512, errOverlap},
		// Only the spans count: q's tail past the last block may overlap p.
		{"tail beyond the span", 1, buf[:2048], buf[1024:1536], 512, 512, nil},
		{"zero blocks", 0, buf, buf, 512, 512, nil},
		{"gaps", 2, buf[:1040], buf[2048:3088], 512, 528, nil},
	} {
		if got := CheckCopy(c.n, c.q, c.p, c.blockLen, c.stride, errLayout, errOverlap); got != c.want {
			t.Errorf("%s: CheckCopy = %v, want %v", c.name, got, c.want)
		}
	}
}
