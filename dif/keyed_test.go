package dif

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/difctl/difctl/kernels/poly1305"
)

func keyedTestKey(t *testing.T) *poly1305.Key {
	t.Helper()
	r := rand.New(rand.NewPCG(60, 61))
	b := make([]byte, 48)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	k, err := poly1305.NewKey(b[:32], b[32:])
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// ClassifySumsCopyKeyed returns what ClassifySumsCopy returns, and where it
// reports the partials computed (the single-pass formats: separate layout,
// 16-bit guard checked, not Type0, and only there) they are those of the
// data blocks: the tags made from them are BlocksAD's over the data.
func TestClassifySumsCopyKeyed(t *testing.T) {
	rng := rand.New(rand.NewPCG(62, 63))
	key := keyedTestKey(t)
	for _, s := range sumsFormats {
		f := MustFormat(s)
		for _, n := range []int{0, 1, 4, 7, 64, 300} {
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
				}
				for _, skip := range []Check{0, CheckGuard} {
					p := p
					p.Skip = skip
					ws, states := make([]State, n), make([]State, n)
					wsums, sums := make([]uint32, n), make([]uint32, n)
					dst := make([]byte, len(data))
					wsum, werr := f.ClassifySumsCopy(ws, wsums, dst, data, md, p)
					clear(dst)
					parts := make([]poly1305.Partial, n)
					sum, ok, err := f.ClassifySumsCopyKeyed(states, sums, parts, key, dst, data, md, p)
					if err != werr || sum != wsum || !slices.Equal(states, ws) || !slices.Equal(dst, data) || !slices.Equal(sums, wsums) {
						t.Fatalf("skip=%v: ClassifySumsCopyKeyed %+v %v, ClassifySumsCopy %+v %v", skip, sum, err, wsum, werr)
					}
					single := f.layout == Separate && f.typ != Type0 && f.guard == Guard16 && skip == 0
					if n > 0 && ok != single {
						t.Fatalf("skip=%v: partials computed %v, want %v", skip, ok, single)
					}
					if !ok || n == 0 {
						continue
					}
					bs := f.BlockSize()
					var nonce poly1305.Nonce
					got, want := make([]poly1305.Tag, n), make([]poly1305.Tag, n)
					if err := key.TagsFromPartials(got, &nonce, nil, 0, parts, bs); err != nil {
						t.Fatal(err)
					}
					if err := key.Blocks(want, &nonce, data, bs, bs); err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(got, want) {
						t.Fatalf("skip=%v: tags from the partials differ from Blocks", skip)
					}
				}
			})
		}
	}
}

func TestClassifySumsCopyKeyedErrors(t *testing.T) {
	f := MustFormat("512+8:dix")
	rng := rand.New(rand.NewPCG(64, 65))
	data, md := newRun(rng, f, 8)
	dst := make([]byte, len(data))
	states, sums, parts := make([]State, 8), make([]uint32, 8), make([]poly1305.Partial, 8)
	key := keyedTestKey(t)
	if _, _, err := f.ClassifySumsCopyKeyed(states, sums, parts, nil, dst, data, md, Params{}); !errors.Is(err, ErrNoKey) {
		t.Errorf("no key: %v", err)
	}
	if _, _, err := f.ClassifySumsCopyKeyed(states, sums, parts[:7], key, dst, data, md, Params{}); !errors.Is(err, ErrBuffer) {
		t.Errorf("short parts: %v", err)
	}
	if _, _, err := f.ClassifySumsCopyKeyed(states, sums, parts, key, dst[:100], data, md, Params{}); !errors.Is(err, ErrBuffer) {
		t.Errorf("short data: %v", err)
	}
	if _, _, err := f.ClassifySumsCopyKeyed(states, sums, parts, key, data, data, md, Params{}); !errors.Is(err, ErrBuffer) {
		t.Errorf("overlap: %v", err)
	}
}

func TestClassifySumsCopyKeyedAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(66, 67))
	key := keyedTestKey(t)
	for _, s := range []string{"512+8:dix", "4096+8:dix"} {
		f := MustFormat(s)
		data, md := newRun(rng, f, 300)
		dst := make([]byte, len(data))
		p := Params{RefTag: 5, AppMask: 0xFFFF}
		if err := f.Generate(data, md, p); err != nil {
			t.Fatal(err)
		}
		sums, states, parts := make([]uint32, 300), make([]State, 300), make([]poly1305.Partial, 300)
		var err error
		if a := testing.AllocsPerRun(20, func() { _, _, err = f.ClassifySumsCopyKeyed(states, sums, parts, key, dst, data, md, p) }); a != 0 || err != nil {
			t.Errorf("%v: %v allocations, err %v", f, a, err)
		}
	}
}
