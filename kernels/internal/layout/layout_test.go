package layout

import (
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
		{math.MaxInt, 1 << 40, 1, 2, false},
	} {
		t.Run(fmt.Sprintf("n=%d/len=%d/block=%d/stride=%d", c.n, c.plen, c.blockLen, c.stride), func(t *testing.T) {
			if got := Valid(c.n, c.plen, c.blockLen, c.stride); got != c.want {
				t.Fatalf("Valid = %v, want %v", got, c.want)
			}
		})
	}
}
