package dif

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// ClassifyCopy and ClassifySumsCopy return what Classify and ClassifySums
// return on the same blocks, and leave a copy of src in data, in every
// layout, guard and check setting, on clean and damaged runs.
func TestClassifyCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(50, 51))
	for _, s := range sumsFormats {
		f := MustFormat(s)
		for _, n := range []int{0, 1, 3, 4, 7, 64, 300, 600} {
			t.Run(fmt.Sprintf("format=%s/n=%d", s, n), func(t *testing.T) {
				data, md := newRun(rng, f, n)
				p := Params{RefTag: 77, AppTag: 0x1234, AppMask: 0xFFFF}
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
				for _, skip := range []Check{0, CheckGuard} {
					p := p
					p.Skip = skip
					ws, states := make([]State, n), make([]State, n)
					wsum, werr := f.Classify(ws, data, md, p)
					dst := make([]byte, len(data))
					for i := range dst {
						dst[i] = 0xA5
					}
					sum, err := f.ClassifyCopy(states, dst, data, md, p)
					if err != werr || sum != wsum || !slices.Equal(states, ws) || !slices.Equal(dst, data) {
						t.Fatalf("skip=%v: ClassifyCopy %+v %v (copy equal %v), Classify %+v %v",
							skip, sum, err, slices.Equal(dst, data), wsum, werr)
					}
					wsums, sums := make([]uint32, n), make([]uint32, n+1)
					sums[n] = 0xdeadbeef
					if _, err := f.ClassifySums(ws, wsums, data, md, p); err != nil {
						t.Fatal(err)
					}
					clear(dst)
					sum, err = f.ClassifySumsCopy(states, sums, dst, data, md, p)
					if err != werr || sum != wsum || !slices.Equal(states, ws) || !slices.Equal(dst, data) ||
						!slices.Equal(sums[:n], wsums) || sums[n] != 0xdeadbeef {
						t.Fatalf("skip=%v: ClassifySumsCopy %+v %v (copy equal %v, sums equal %v), ClassifySums %+v %v",
							skip, sum, err, slices.Equal(dst, data), slices.Equal(sums[:n], wsums), wsum, werr)
					}
				}
			})
		}
	}
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
			if _, err := f.ClassifyCopy(c.states, c.dst, c.src, md, Params{}); !errors.Is(err, ErrBuffer) {
				t.Errorf("%s: ClassifyCopy: %v, want ErrBuffer", c.name, err)
			}
		}
		if _, err := f.ClassifySumsCopy(c.states, c.sums, c.dst, c.src, md, Params{}); !errors.Is(err, ErrBuffer) {
			t.Errorf("%s: ClassifySumsCopy: %v, want ErrBuffer", c.name, err)
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
		if a := testing.AllocsPerRun(20, func() { _, err = f.ClassifyCopy(states, dst, data, md, p) }); a != 0 || err != nil {
			t.Errorf("%v: ClassifyCopy: %v allocations, err %v", f, a, err)
		}
		if a := testing.AllocsPerRun(20, func() { _, err = f.ClassifySumsCopy(states, sums, dst, data, md, p) }); a != 0 || err != nil {
			t.Errorf("%v: ClassifySumsCopy: %v allocations, err %v", f, a, err)
		}
	}
}
