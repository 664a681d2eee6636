package crcmath

import (
	"math/rand/v2"
	"testing"
)

func TestFoldModel(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, p := range all {
		tab := NewFoldTable(p)
		for _, n := range []int{1, 2, 4, 8, 16} {
			for lanes := n; lanes <= n+20; lanes++ {
				data := make([]byte, 16*lanes)
				for i := range data {
					data[i] = byte(r.Uint32())
				}
				crc := r.Uint64() & p.Mask()
				want := Bitwise(p, crc, data)
				if got := FoldUpdate(p, tab, n, crc, data); got != want {
					t.Fatalf("%s: n=%d lanes=%d: fold %#x, bitwise %#x", p.Name, n, lanes, got, want)
				}
			}
		}
	}
}

func TestFoldTableGolden(t *testing.T) {
	// x^128 mod P for T10-DIF and one more, computed independently by
	// bitwise CRC of a one bit followed by zeros (TestXPowModAgainstBitwise
	// proves XPowMod); here we pin the table shape.
	tab := NewFoldTable(T10DIF)
	if tab.Fold[1][1] != XPowMod(T10DIF, 128) || tab.Fold[1][0] != XPowMod(T10DIF, 192) {
		t.Fatalf("Fold[1] = %#x", tab.Fold[1])
	}
	if tab.Fold[0] != [2]uint64{} {
		t.Fatal("Fold[0] not zero")
	}
}
