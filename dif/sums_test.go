package dif

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/difctl/difctl/kernels/crc32c"
)

var sumsFormats = []string{
	"512+8", "512+8:dix", "512+16", "512+16:pi-first", "512+16:dix", "4096+8", "4096+64",
	"4096+64:dix", "512+8:type3", "512+8:type2:sts=8", "512+8:type0",
	"512+16:crc32", "4096+16:crc32:dix", "4096+16:crc64", "512+24:crc64",
}

// wantSums is the oracle of the sums: crc32c.Blocks over the data blocks.
func wantSums(t *testing.T, f Format, data []byte, n int) []uint32 {
	t.Helper()
	stride := f.BlockSize()
	if f.Layout() == Interleaved {
		stride = f.ExtendedBlockSize()
	}
	s := make([]uint32, n)
	if err := crc32c.Blocks(s, data, f.BlockSize(), stride); err != nil {
		t.Fatal(err)
	}
	return s
}

// GenerateSums writes what Generate writes and the CRC-32C of every data
// block; Classify with sums returns what it returns without and the same sums, on
// clean, corrupted, escaped and unwritten blocks, with and without the
// guard check.
func TestSums(t *testing.T) {
	rng := rand.New(rand.NewPCG(40, 41))
	for _, s := range sumsFormats {
		f := MustFormat(s)
		for _, n := range []int{0, 1, 3, 4, 7, 64, 300, 600} {
			t.Run(fmt.Sprintf("format=%s/n=%d", s, n), func(t *testing.T) {
				data, md := newRun(rng, f, n)
				p := Params{RefTag: 77, AppTag: 0x1234, AppMask: 0xFFFF}
				if f.typ == Type0 {
					p = Params{}
				}
				d2, m2 := clone(data), clone(md)
				if err := f.Generate(d2, m2, p); err != nil {
					t.Fatal(err)
				}
				sums := make([]uint32, n+1)
				sums[n] = 0xdeadbeef
				if err := f.GenerateSums(data, md, sums, p); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(data, d2) || !slices.Equal(md, m2) {
					t.Fatal("GenerateSums wrote other tuples than Generate")
				}
				want := wantSums(t, f, data, n)
				if !slices.Equal(sums[:n], want) || sums[n] != 0xdeadbeef {
					t.Fatalf("GenerateSums: sums %x, want %x", sums[:min(n, 4)], want[:min(n, 4)])
				}
				if n > 3 && f.typ != Type0 {
					f.Inject(data, md, 1, FieldData, 9)
					f.Inject(data, md, 2, FieldGuard, 3)
					f.Inject(data, md, n-1, FieldRefTag, 0)
				}
				for _, skip := range []Check{0, CheckGuard} {
					p := p
					p.Skip = skip
					states, ws := make([]State, n), make([]State, n)
					wsum, werr := f.Classify(&Classification{States: ws}, data, md, p)
					for i := range sums {
						sums[i] = 0
					}
					sums[n] = 0xdeadbeef
					sum, err := f.Classify(&Classification{States: states, Sums: sums}, data, md, p)
					if err != werr || sum != wsum || !slices.Equal(states, ws) {
						t.Fatalf("skip=%v: Classify with sums %+v %v, without %+v %v", skip, sum, err, wsum, werr)
					}
					want := wantSums(t, f, data, n)
					if !slices.Equal(sums[:n], want) || sums[n] != 0xdeadbeef {
						t.Fatalf("skip=%v: Classify: sums differ from crc32c.Blocks", skip)
					}
				}
			})
		}
	}
}

func TestSumsErrors(t *testing.T) {
	f := MustFormat("512+8:dix")
	data, md := make([]byte, 4*512), make([]byte, 4*8)
	sums := []uint32{1, 2, 3}
	if err := f.GenerateSums(data, md, sums, Params{}); err == nil {
		t.Error("GenerateSums with a short sums: no error")
	}
	if _, err := f.Classify(&Classification{States: make([]State, 4), Sums: sums}, data, md, Params{}); err == nil {
		t.Error("Classify with a short sums: no error")
	}
	if _, err := f.Classify(&Classification{States: make([]State, 3), Sums: make([]uint32, 4)}, data, md, Params{}); err == nil {
		t.Error("Classify with sums and a short states: no error")
	}
	if !slices.Equal(sums, []uint32{1, 2, 3}) || !slices.Equal(md, make([]byte, 32)) {
		t.Error("an error wrote")
	}
}

func TestSumsAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 43))
	for _, s := range []string{"512+8", "4096+8:dix", "512+16", "4096+16:crc32", "512+16:crc64:dix", "512+8:type0"} {
		f := MustFormat(s)
		data, md := newRun(rng, f, 300)
		p := Params{RefTag: 5, AppMask: 0xFFFF}
		sums, states := make([]uint32, 300), make([]State, 300)
		var err error
		if a := testing.AllocsPerRun(20, func() { err = f.GenerateSums(data, md, sums, p) }); a != 0 || err != nil {
			t.Errorf("%v: GenerateSums: %v allocations, err %v", f, a, err)
		}
		c := Classification{States: states, Sums: sums}
		if a := testing.AllocsPerRun(20, func() { _, err = f.Classify(&c, data, md, p) }); a != 0 || err != nil {
			t.Errorf("%v: Classify with sums: %v allocations, err %v", f, a, err)
		}
	}
}

// SectorSum is the CRC-32C (check value 0xE3069283), and SectorSums is
// SectorSum block by block, refusing partial blocks and short sums.
func TestSectorSums(t *testing.T) {
	if got := SectorSum([]byte("123456789")); got != 0xE3069283 {
		t.Fatalf("SectorSum(123456789) = %#08x, want 0xe3069283", got)
	}
	for _, bs := range []int{512, 4096} {
		data := make([]byte, 5*bs)
		for i := range data {
			data[i] = byte(i*7 + i/bs)
		}
		sums := make([]uint32, 6)
		sums[5] = 0xdeadbeef
		if err := SectorSums(sums, data, bs); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if want := SectorSum(data[i*bs : (i+1)*bs]); sums[i] != want {
				t.Fatalf("bs=%d: block %d: sum %#08x, want %#08x", bs, i, sums[i], want)
			}
		}
		if sums[5] != 0xdeadbeef {
			t.Fatalf("bs=%d: entry past the blocks written", bs)
		}
		if err := SectorSums(sums, data[:bs+1], bs); !errors.Is(err, ErrBuffer) {
			t.Fatalf("bs=%d: partial block: %v, want ErrBuffer", bs, err)
		}
		if err := SectorSums(sums[:4], data, bs); !errors.Is(err, ErrBuffer) {
			t.Fatalf("bs=%d: short sums: %v, want ErrBuffer", bs, err)
		}
	}
}
