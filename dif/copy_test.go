package dif

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// Classify with a source returns what it returns on the same blocks in
// place, with and without sums, and leaves a copy of the source in data, in
// every layout, guard and check setting, on clean and damaged runs.
func TestClassifyCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(50, 51))
	eachDamagedRun(t, rng, []int{0, 1, 3, 4, 7, 64, 300, 600}, func(t *testing.T, f Format, n int, data, md []byte, p Params) {
		skip := p.Skip
		ws, states := make([]State, n), make([]State, n)
		wsum, werr := f.Classify(&Classification{States: ws}, data, md, p)
		dst := make([]byte, len(data))
		for i := range dst {
			dst[i] = 0xA5
		}
		c := Classification{States: states, Src: data}
		sum, err := f.Classify(&c, dst, md, p)
		if err != werr || sum != wsum || !slices.Equal(states, ws) || !slices.Equal(dst, data) {
			t.Fatalf("skip=%v: Classify with Src %+v %v (copy equal %v), in place %+v %v",
				skip, sum, err, slices.Equal(dst, data), wsum, werr)
		}
		if single := n > 0 && singlePass(f, skip); c.Single != single {
			t.Fatalf("skip=%v: Single %v, want %v", skip, c.Single, single)
		}
		wsums, sums := make([]uint32, n), make([]uint32, n+1)
		sums[n] = 0xdeadbeef
		if _, err := f.Classify(&Classification{States: ws, Sums: wsums}, data, md, p); err != nil {
			t.Fatal(err)
		}
		clear(dst)
		c = Classification{States: states, Sums: sums, Src: data}
		sum, err = f.Classify(&c, dst, md, p)
		if err != werr || sum != wsum || !slices.Equal(states, ws) || !slices.Equal(dst, data) ||
			!slices.Equal(sums[:n], wsums) || sums[n] != 0xdeadbeef {
			t.Fatalf("skip=%v: Classify with Src and Sums %+v %v (copy equal %v, sums equal %v), in place %+v %v",
				skip, sum, err, slices.Equal(dst, data), slices.Equal(sums[:n], wsums), wsum, werr)
		}
		if single := n > 0 && singlePass(f, skip); c.Single != single {
			t.Fatalf("skip=%v: with sums: Single %v, want %v", skip, c.Single, single)
		}
	})
}

func TestClassifyCopyErrors(t *testing.T) {
	f := MustFormat("512+8:dix")
	buf := make([]byte, 9*512)
	md := make([]byte, 4*8)
	states, sums := make([]State, 4), make([]uint32, 4)
	for _, c := range []struct {
		name      string
		dst, src  []byte
		states    []State
		sums      []uint32
		wantState bool
	}{
		{"short src", buf[:4*512], buf[5*512 : 8*512], states, sums, false},
		{"overlap", buf[:4*512], buf[3*512 : 7*512], states, sums, false},
		{"same", buf[:4*512], buf[:4*512], states, sums, false},
		{"short states", buf[:4*512], buf[5*512:], states[:3], sums, false},
		{"short sums", buf[:4*512], buf[5*512:], states, sums[:3], true},
	} {
		buf[0] = 1
		if !c.wantState {
			if _, err := f.Classify(&Classification{States: c.states, Src: c.src}, c.dst, md, Params{}); !errors.Is(err, ErrBuffer) {
				t.Errorf("%s: Classify with Src: %v, want ErrBuffer", c.name, err)
			}
		}
		if _, err := f.Classify(&Classification{States: c.states, Sums: c.sums, Src: c.src}, c.dst, md, Params{}); !errors.Is(err, ErrBuffer) {
			t.Errorf("%s: Classify with Src and Sums: %v, want ErrBuffer", c.name, err)
		}
		if buf[0] != 1 {
			t.Errorf("%s: an error copied", c.name)
		}
	}
}

func TestClassifyCopyAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(52, 53))
	for _, s := range []string{"512+8:dix", "4096+8:dix", "512+16", "4096+16:crc32:dix", "512+16:crc64:dix"} {
		f := MustFormat(s)
		data, md := newRun(rng, f, 300)
		dst := make([]byte, len(data))
		p := Params{RefTag: 5, AppMask: 0xFFFF}
		if err := f.Generate(data, md, p); err != nil {
			t.Fatal(err)
		}
		sums, states := make([]uint32, 300), make([]State, 300)
		var err error
		c := Classification{States: states, Src: data}
		if a := testing.AllocsPerRun(20, func() { _, err = f.Classify(&c, dst, md, p) }); a != 0 || err != nil {
			t.Errorf("%v: Classify with Src: %v allocations, err %v", f, a, err)
		}
		c.Sums = sums
		if a := testing.AllocsPerRun(20, func() { _, err = f.Classify(&c, dst, md, p) }); a != 0 || err != nil {
			t.Errorf("%v: Classify with Src and Sums: %v allocations, err %v", f, a, err)
		}
		h := &hookRecorder{seen: make([]int, 300)}
		c.Copy = h.copy
		if a := testing.AllocsPerRun(20, func() { _, err = f.Classify(&c, dst, md, p) }); a != 0 || err != nil || c.Single != singlePass(f, 0) {
			t.Errorf("%v: Classify with a copy hook: %v allocations, err %v, single %v", f, a, err, c.Single)
		}
	}
}

// singlePass is when Classify's single pass covers a run of f with a
// source and checks skipped: the separate layout, the 16-bit guard checked,
// not Type0.
func singlePass(f Format, skip Check) bool {
	return f.layout == Separate && f.typ != Type0 && f.guard == Guard16 && skip&CheckGuard == 0
}

// eachDamagedRun calls fn with a damagedRun of every format of sumsFormats
// and each length in ns, with the guard check on and off (p.Skip).
func eachDamagedRun(t *testing.T, rng *rand.Rand, ns []int, fn func(t *testing.T, f Format, n int, data, md []byte, p Params)) {
	for _, s := range sumsFormats {
		f := MustFormat(s)
		for _, n := range ns {
			t.Run(fmt.Sprintf("format=%s/n=%d", s, n), func(t *testing.T) {
				data, md, p := damagedRun(t, rng, f, n)
				for _, skip := range []Check{0, CheckGuard} {
					p.Skip = skip
					fn(t, f, n, data, md, p)
				}
			})
		}
	}
}

// damagedRun returns a run of n blocks of f protected with its params p,
// and from four blocks on (not Type0) a bad data byte in block 1, a bad
// guard in block 2 and a bad ref tag in the last block.
func damagedRun(t *testing.T, rng *rand.Rand, f Format, n int) (data, md []byte, p Params) {
	t.Helper()
	data, md = newRun(rng, f, n)
	p = Params{RefTag: 77, AppTag: 0x1234, AppMask: 0xFFFF}
	if f.typ == Type0 {
		p = Params{}
	}
	if err := f.Generate(data, md, p); err != nil {
		t.Fatal(err)
	}
	if n > 3 && f.typ != Type0 {
		f.Inject(data, md, 1, FieldData, 9)
		f.Inject(data, md, 2, FieldGuard, 3)
		f.Inject(data, md, n-1, FieldRefTag, 0)
	}
	return data, md, p
}
