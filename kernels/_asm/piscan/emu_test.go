package main

// The scan kernels in the interpreter of internal/emu (the AVX-512 ones need
// a CPU the machine running the tests may lack): every kernel at every
// length 0..70 and some long ones, with the tuples and then the guards at
// the end of the memory (so that an over-read of either faults), against
// goScan, the word package piscan's generic Go scan returns (its tests hold
// the two to the same oracle; this module does not link piscan, whose
// dependencies it does not carry). A kernel takes the whole vectors of a
// run; the rest goes to goScan from the next block's expected word, as
// piscan's wrappers do, and the two words OR into the whole run's.

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/difctl/difctl/kernels/_asm/internal/emu"
)

// goScan is piscan.Scan (esc) or piscan.ScanNoEscape, one block at a time:
// the masked differences, and bit 48 where an app tag is 0xFFFF.
func goScan(t [][8]byte, g []uint16, e, step, mask uint64, esc bool) uint64 {
	var r uint64
	for j := range min(len(t), len(g)) {
		w := binary.BigEndian.Uint64(t[j][:])
		r |= (w ^ (uint64(g[j])<<48 | e)) & mask
		if esc && w>>32&0xFFFF == 0xFFFF {
			r |= 1 << 48
		}
		e += step
	}
	return r
}

func TestEmulatedScan(t *testing.T) {
	asm, _, err := generate([]string{"go", "run", "./piscan"})
	if err != nil {
		t.Fatal(err)
	}
	prog, err := emu.Parse(string(asm))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(11, 12))
	lengths := []int{}
	for n := 0; n <= 70; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 255, 256, 1000, 1024, 2048+7)
	steps := 0
	for _, v := range variants {
		lanes := 4
		if v.zmm {
			lanes = 8
		}
		for _, n := range lengths {
			for c := range 4 {
				// c = 0: a clean run; 1: one bit of one tuple flipped; 2: one
				// app tag 0xFFFF; 3: random words, guards, e, step and mask.
				tu, g := make([][8]byte, n), make([]uint16, n)
				app := uint64(r.IntN(0xFFFF))
				e, step, mask := app<<32|uint64(r.Uint32()), uint64(1), ^uint64(0)
				if c == 3 {
					e, step, mask = r.Uint64(), r.Uint64()>>r.IntN(64), r.Uint64()|r.Uint64()
				}
				for j, ej := 0, e; j < n; j, ej = j+1, ej+step {
					g[j] = uint16(r.Uint32())
					w := uint64(g[j])<<48 | ej
					if c == 3 {
						w = r.Uint64()
					}
					binary.BigEndian.PutUint64(tu[j][:], w)
				}
				if n > 0 && c == 1 {
					tu[r.IntN(n)][r.IntN(8)] ^= 1 << r.IntN(8)
				}
				if n > 0 && c == 2 {
					j := r.IntN(n)
					tu[j][2], tu[j][3] = 0xFF, 0xFF
				}
				want := goScan(tu, g, e, step, mask, v.esc)
				for _, guardsLast := range []bool{false, true} {
					if guardsLast && 8*n > emu.AddrData-emu.AddrDst {
						continue
					}
					t.Run(fmt.Sprintf("kernel=%s/n=%d/case=%d/guardslast=%v", v.name, n, c, guardsLast), func(t *testing.T) {
						k := n &^ (lanes - 1)
						tb := make([]byte, 8*k)
						for j := range k {
							copy(tb[8*j:], tu[j][:])
						}
						gb := make([]byte, 2*k)
						for j := range k {
							binary.LittleEndian.PutUint16(gb[2*j:], g[j])
						}
						data, other := tb, gb
						if guardsLast {
							data, other = gb, tb
						}
						m, err := emu.New(prog, data)
						if err != nil {
							t.Fatal(err)
						}
						copy(m.Mem[emu.AddrDst:], other)
						ta, ga := uint64(emu.AddrData), uint64(emu.AddrDst)
						if guardsLast {
							ta, ga = ga, ta
						}
						for i, a := range []uint64{ta, uint64(k), uint64(k), ga, uint64(k), uint64(k), e, step, mask} {
							m.Put64(8*i, a)
						}
						s, err := m.Run(prog, v.name)
						if err != nil {
							t.Fatal(err)
						}
						steps += s
						got := m.Get64(72)
						ek := e + uint64(k)*step
						got |= goScan(tu[k:], g[k:], ek, step, mask, v.esc)
						if got != want {
							t.Fatalf("got %#x, want %#x", got, want)
						}
					})
				}
			}
		}
	}
	for _, f := range prog.NotRun() {
		for _, v := range variants {
			if f == v.name {
				t.Fatalf("%s not run", f)
			}
		}
	}
	t.Logf("%d instructions emulated", steps)
}

// goScan64 is piscan.Scan64 (esc) or piscan.Scan64NoEscape, one block at a
// time.
func goScan64(t [][16]byte, g []uint64, e, step, gm, mask uint64, esc bool) uint64 {
	var r uint64
	for j := range min(len(t), len(g)) {
		w0 := binary.BigEndian.Uint64(t[j][:8])
		w1 := binary.BigEndian.Uint64(t[j][8:])
		r |= (w0^g[j])&gm | (w1^e)&mask
		if esc && w1>>48 == 0xFFFF {
			r |= 1
		}
		e += step
	}
	return r
}

// TestEmulatedScan64 is TestEmulatedScan for the kernels of 16-byte tuples
// (the region before AddrData holds at most 1024 guards or 512 tuples).
func TestEmulatedScan64(t *testing.T) {
	asm, _, err := generate([]string{"go", "run", "./piscan"})
	if err != nil {
		t.Fatal(err)
	}
	prog, err := emu.Parse(string(asm))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(13, 14))
	lengths := []int{}
	for n := 0; n <= 70; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 255, 256, 515, 1000, 1024+7)
	for _, name := range []string{"scan64Z", "scan64NZ"} {
		esc := name == "scan64Z"
		for _, n := range lengths {
			for c := range 4 {
				// The cases of TestEmulatedScan.
				tu, g := make([][16]byte, n), make([]uint64, n)
				app := uint64(r.IntN(0xFFFF))
				e, step, gm, mask := app<<48|r.Uint64()>>16, uint64(1), ^uint64(0), ^uint64(0)
				if c == 3 {
					e, step, gm, mask = r.Uint64(), r.Uint64()>>r.IntN(64), r.Uint64()|r.Uint64(), r.Uint64()|r.Uint64()
				}
				for j, ej := 0, e; j < n; j, ej = j+1, ej+step {
					g[j] = r.Uint64()
					w0, w1 := g[j], ej
					if c == 3 {
						w0, w1 = r.Uint64(), r.Uint64()
					}
					binary.BigEndian.PutUint64(tu[j][:8], w0)
					binary.BigEndian.PutUint64(tu[j][8:], w1)
				}
				if n > 0 && c == 1 {
					tu[r.IntN(n)][r.IntN(16)] ^= 1 << r.IntN(8)
				}
				if n > 0 && c == 2 {
					j := r.IntN(n)
					tu[j][8], tu[j][9] = 0xFF, 0xFF
				}
				want := goScan64(tu, g, e, step, gm, mask, esc)
				for _, guardsLast := range []bool{false, true} {
					k := n &^ 7
					if guardsLast && 16*k > emu.AddrData-emu.AddrDst || !guardsLast && 8*k > emu.AddrData-emu.AddrDst {
						continue
					}
					t.Run(fmt.Sprintf("kernel=%s/n=%d/case=%d/guardslast=%v", name, n, c, guardsLast), func(t *testing.T) {
						tb := make([]byte, 16*k)
						for j := range k {
							copy(tb[16*j:], tu[j][:])
						}
						gb := make([]byte, 8*k)
						for j := range k {
							binary.LittleEndian.PutUint64(gb[8*j:], g[j])
						}
						data, other := tb, gb
						if guardsLast {
							data, other = gb, tb
						}
						m, err := emu.New(prog, data)
						if err != nil {
							t.Fatal(err)
						}
						copy(m.Mem[emu.AddrDst:], other)
						ta, ga := uint64(emu.AddrData), uint64(emu.AddrDst)
						if guardsLast {
							ta, ga = ga, ta
						}
						for i, a := range []uint64{ta, uint64(k), uint64(k), ga, uint64(k), uint64(k), e, step, gm, mask} {
							m.Put64(8*i, a)
						}
						if _, err := m.Run(prog, name); err != nil {
							t.Fatal(err)
						}
						got := m.Get64(80) | goScan64(tu[k:], g[k:], e+uint64(k)*step, step, gm, mask, esc)
						if got != want {
							t.Fatalf("got %#x, want %#x", got, want)
						}
					})
				}
			}
		}
	}
	for _, f := range prog.NotRun() {
		if f == "scan64Z" || f == "scan64NZ" {
			t.Fatalf("%s not run", f)
		}
	}
}
