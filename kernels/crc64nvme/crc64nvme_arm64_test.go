//go:build !purego

package crc64nvme

import (
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/difctl/difctl/kernels/internal/crcmath"
)

// The assembly against the pure-Go fold model it mirrors, lane count by lane
// count: eight accumulators from 128 bytes, one below.
func TestFoldPMULLModel(t *testing.T) {
	if !cpu.ARM64.HasPMULL {
		t.Skip("no PMULL")
	}
	r := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 2048)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	for l := 16; l <= len(buf); l += 16 {
		crc := r.Uint64()
		n := 1
		if l >= 128 {
			n = 8
		}
		want := crcmath.FoldUpdate(Params, &foldTable, n, crc, buf[:l])
		if got := foldUpdatePMULL(crc, buf[:l], &foldTable); got != want {
			t.Fatalf("len=%d: foldUpdatePMULL %#x, model %#x", l, got, want)
		}
	}
}

func TestBlocksPMULL(t *testing.T) {
	if !cpu.ARM64.HasPMULL {
		t.Skip("no PMULL")
	}
	r := rand.New(rand.NewPCG(5, 6))
	buf := make([]byte, 8*700)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	for lanes := 2; lanes <= 40; lanes++ {
		stride := 16*lanes + r.IntN(40)
		var got [8]uint64 // two groups of four
		foldBlocksPMULL(got[:], buf, 16*lanes, stride, &foldTable)
		for j := range got {
			b := buf[j*stride:][:16*lanes]
			if want := crcmath.Bitwise(Params, 0, b); got[j] != want {
				t.Fatalf("lanes=%d stride=%d block %d: %#x, oracle %#x", lanes, stride, j, got[j], want)
			}
		}
	}
}
