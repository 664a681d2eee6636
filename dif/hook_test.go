package dif

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/difctl/difctl/kernels/t10crc32c"
)

// hookRecorder is a CopyFunc over t10crc32c.BlocksCopy that counts the
// blocks of the run it was called for, by index (first + j).
type hookRecorder struct {
	seen []int
	fail error // returned instead of copying, when set
}

func (h *hookRecorder) copy(gs []uint16, sums []uint32, dst, src []byte, bs, stride, first int) error {
	if h.fail != nil {
		return h.fail
	}
	for j := range gs {
		h.seen[first+j]++
	}
	return t10crc32c.BlocksCopy(gs, sums, dst, src, bs, stride)
}

// Classify with a copy hook returns what it returns without one, and where
// it reports the single pass (the separate layout, 16-bit guard checked,
// not Type0, and only there) the hook was called for every block of the
// run exactly once, at its index; elsewhere never.
func TestClassifyCopyHook(t *testing.T) {
	rng := rand.New(rand.NewPCG(62, 63))
	eachDamagedRun(t, rng, []int{0, 1, 4, 7, 64, 300, 600}, func(t *testing.T, f Format, n int, data, md []byte, p Params) {
		skip := p.Skip
		ws, states := make([]State, n), make([]State, n)
		wsums, sums := make([]uint32, n), make([]uint32, n)
		dst := make([]byte, len(data))
		wsum, werr := f.Classify(&Classification{States: ws, Sums: wsums, Src: data}, dst, md, p)
		clear(dst)
		h := &hookRecorder{seen: make([]int, n)}
		c := Classification{States: states, Sums: sums, Src: data, Copy: h.copy}
		sum, err := f.Classify(&c, dst, md, p)
		if err != werr || sum != wsum || !slices.Equal(states, ws) || !slices.Equal(dst, data) || !slices.Equal(sums, wsums) {
			t.Fatalf("skip=%v: with a hook %+v %v, without %+v %v", skip, sum, err, wsum, werr)
		}
		single := n > 0 && singlePass(f, skip)
		if c.Single != single {
			t.Fatalf("skip=%v: Single %v, want %v", skip, c.Single, single)
		}
		want := 0
		if single {
			want = 1
		}
		for i, k := range h.seen {
			if k != want {
				t.Fatalf("skip=%v: block %d: the hook copied it %d times, want %d", skip, i, k, want)
			}
		}
	})
}

func TestClassifyCopyHookErrors(t *testing.T) {
	f := MustFormat("512+8:dix")
	rng := rand.New(rand.NewPCG(64, 65))
	data, md := newRun(rng, f, 8)
	dst := make([]byte, len(data))
	states, sums := make([]State, 8), make([]uint32, 8)
	h := &hookRecorder{seen: make([]int, 8)}
	if _, err := f.Classify(&Classification{States: states, Src: data, Copy: h.copy}, dst, md, Params{}); !errors.Is(err, ErrParams) {
		t.Errorf("a hook without sums: %v", err)
	}
	if _, err := f.Classify(&Classification{States: states, Sums: sums, Copy: h.copy}, data, md, Params{}); !errors.Is(err, ErrParams) {
		t.Errorf("a hook without a source: %v", err)
	}
	if _, err := f.Classify(&Classification{States: states, Sums: sums, Src: data, Copy: h.copy}, dst[:100], md, Params{}); !errors.Is(err, ErrBuffer) {
		t.Errorf("short data: %v", err)
	}
	if _, err := f.Classify(&Classification{States: states, Sums: sums, Src: data, Copy: h.copy}, data, md, Params{}); !errors.Is(err, ErrBuffer) {
		t.Errorf("overlap: %v", err)
	}
	if slices.Max(h.seen) != 0 {
		t.Error("the hook was called on refused buffers")
	}
	h.fail = errors.New("the hook's error")
	c := Classification{States: states, Sums: sums, Src: data, Copy: h.copy}
	if _, err := f.Classify(&c, dst, md, Params{}); err != h.fail || c.Single {
		t.Errorf("a failing hook: %v, Single %v", err, c.Single)
	}
}
