package emu

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

func TestRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	want := make([]byte, 100)
	for i := range want {
		want[i] = byte(r.Uint32())
	}
	if got := Random(rand.New(rand.NewPCG(1, 2)), 100); !bytes.Equal(got, want) {
		t.Fatalf("Random: %x, want %x", got, want)
	}
	if got := Random(r, 0); len(got) != 0 {
		t.Fatalf("Random(0): %d bytes", len(got))
	}
}

func TestPutArgs(t *testing.T) {
	m, err := New(&Program{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.PutArgs(1, 0xffffffffffffffff, 3)
	for i, want := range []uint64{1, 0xffffffffffffffff, 3, 0} {
		if got := m.Get64(8 * i); got != want {
			t.Errorf("word %d: %#x, want %#x", i, got, want)
		}
	}
}
