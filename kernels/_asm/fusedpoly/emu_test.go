package main

// The fused copy + T10-DIF + CRC-32C + Poly1305 kernel in the interpreter of
// internal/emu: every guard against a bitwise CRC-16/T10-DIF, every sum
// against hash/crc32's Castagnoli, every lane accumulator against Poly1305
// of the block's chunks evaluated with math/big (from h = 0), the bytes in
// q against p and nothing else of q, dst, sums or h written. Any
// instruction the interpreter does not model fails the test, and so does a
// generated function left unchecked. The package tests of kernels/keyedcopy
// run the same kernel on the hardware against t10crc32c and poly1305.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/difctl/difctl/kernels/_asm/internal/emu"
	"github.com/difctl/difctl/kernels/_asm/internal/ifma"
)

const gapByte = 0xa5

var polyP = ifma.P

// leBig is b as a little-endian number.
func leBig(b []byte) *big.Int {
	be := make([]byte, len(b))
	for i := range b {
		be[len(b)-1-i] = b[i]
	}
	return new(big.Int).SetBytes(be)
}

// splitBig returns n limbs of x of bits bits each.
var splitBig = ifma.Split

// keyTable is poly1305's laneKey for r: limb k of r^(j+1) at word
// 4(5j+k) (four lanes), five times it at 80+4(5j+k), r as two words at 160.
func keyTable(r *big.Int) []uint64 {
	k := make([]uint64, keyWords)
	pw := new(big.Int).Set(r)
	for j := 0; j < powers; j++ {
		for i, x := range splitBig(pw, limbBits, limbs) {
			for ln := 0; ln < lanes; ln++ {
				k[keyR/8+4*(limbs*j+i)+ln] = x
				k[keyS/8+4*(limbs*j+i)+ln] = 5 * x
			}
		}
		pw.Mul(pw, r)
		pw.Mod(pw, polyP)
	}
	rw := splitBig(r, 64, 2)
	k[2*keyS/8], k[2*keyS/8+1] = rw[0], rw[1]
	return k
}

// Where the outputs and the key go (the blocks are at emu.AddrData, q after
// them, ending the memory).
const (
	addrSums = emu.AddrDst + 0x200
	addrH    = emu.AddrDst + 0x400
	addrKey  = emu.AddrDst + 0x1000
)

// trialInput returns n bytes of message and a clamped r from rnd, or all
// ones (data and r: the largest limbs and products) if allOnes.
func trialInput(rnd *rand.Rand, n int, allOnes bool) ([]byte, *big.Int) {
	data := emu.Random(rnd, n)
	var rb [16]byte
	copy(rb[:], emu.Random(rnd, 16))
	if allOnes {
		for i := range data {
			data[i] = 0xff
		}
		for i := range rb {
			rb[i] = 0xff
		}
	}
	for _, i := range []int{3, 7, 11, 15} {
		rb[i] &= 15
	}
	for _, i := range []int{4, 8, 12} {
		rb[i] &= 252
	}
	return data, leBig(rb[:])
}

// poly is the Poly1305 accumulator of block b (whole chunks) from zero,
// under r, mod 2^130-5.
func poly(b []byte, r *big.Int) *big.Int {
	h := new(big.Int)
	for c := 0; c < len(b); c += 16 {
		h.Add(h, leBig(append(bytes.Clone(b[c:c+16]), 1)))
		h.Mul(h, r)
		h.Mod(h, polyP)
	}
	return h
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// newMachine is a machine holding data and the fold table tab, with
// 0x5a from AddrDst up to the data, where nothing but the outputs may
// change (checkRest).
func newMachine(t *testing.T, prog *emu.Program, data, tab []byte) *emu.Machine {
	t.Helper()
	m, err := emu.New(prog, data)
	if err != nil {
		t.Fatal(err)
	}
	copy(m.Mem[emu.AddrTable:], tab)
	for i := emu.AddrDst; i < emu.AddrData; i++ {
		m.Mem[i] = 0x5a
	}
	return m
}

// checkCRCs checks block i's guard in dst and sum in sums against the
// bitwise T10-DIF and hash/crc32 of b.
func checkCRCs(t *testing.T, m *emu.Machine, i int, b []byte) {
	t.Helper()
	if got, want := binary.LittleEndian.Uint16(m.Mem[emu.AddrDst+2*i:]), uint16(emu.Bitwise(emu.T10DIF, 0, b)); got != want {
		t.Fatalf("dst[%d] = %#x, want %#x", i, got, want)
	}
	if got, want := binary.LittleEndian.Uint32(m.Mem[addrSums+4*i:]), crc32.Checksum(b, castagnoli); got != want {
		t.Fatalf("sums[%d] = %#x, want %#x", i, got, want)
	}
}

// checkRest checks that a kernel wrote nothing between AddrDst and
// AddrData (before is what was there) outside dst, sums and the hBytes of
// h of its cnt blocks, and that q holds the blocks of data and gapByte
// between them.
func checkRest(t *testing.T, m *emu.Machine, before []byte, cnt, hBytes int, q uint64, data []byte, blockLen, stride int) {
	t.Helper()
	after := bytes.Clone(m.Mem[emu.AddrDst:emu.AddrData])
	copy(after, before[:2*cnt])
	copy(after[addrSums-emu.AddrDst:], before[addrSums-emu.AddrDst:][:4*cnt])
	copy(after[addrH-emu.AddrDst:], before[addrH-emu.AddrDst:][:hBytes])
	if !bytes.Equal(after, before) {
		t.Fatal("wrote outside dst, sums and h")
	}
	qm := m.Mem[q:]
	for i := range qm {
		inBlock := i%stride < blockLen && i < len(data)
		if inBlock && qm[i] != data[i] || !inBlock && qm[i] != gapByte {
			t.Fatalf("q[%d] = %#x, data %#x", i, qm[i], data[i])
		}
	}
}

func TestEmulatedKernel(t *testing.T) {
	asm, _, err := generate([]string{"go", "run", "./fusedpoly"})
	if err != nil {
		t.Fatal(err)
	}
	prog, err := emu.Parse(string(asm))
	if err != nil {
		t.Fatal(err)
	}
	tab := emu.FoldTable(emu.T10DIF, 64)
	rnd := rand.New(rand.NewPCG(5, 6))
	var perByte float64
	for trial, c := range [][3]int{{64, 64, 4}, {64, 80, 8}, {128, 128, 4}, {192, 208, 8}, {512, 512, 8}, {512, 520, 12}, {4096, 4096, 4}, {4096, 4160, 4}, {1024 + 64, 1200, 4}} {
		blockLen, stride, cnt := c[0], c[1], c[2]
		t.Run(fmt.Sprintf("block=%d/stride=%d/count=%d", blockLen, stride, cnt), func(t *testing.T) {
			// All ones (data and r: the largest limbs and products) in
			// one trial of three, random bytes in the others.
			allOnes := trial%3 == 0
			data, r := trialInput(rnd, (cnt-1)*stride+blockLen, allOnes)
			m := newMachine(t, prog, data, tab)
			for i, v := range keyTable(r) {
				binary.LittleEndian.PutUint64(m.Mem[addrKey+8*i:], v)
			}
			before := bytes.Clone(m.Mem[emu.AddrDst:emu.AddrData])
			q := m.Append(len(data), gapByte)
			groups := cnt / group
			n := uint64(len(data))
			args := []uint64{
				emu.AddrDst, uint64(cnt), uint64(cnt),
				addrSums, uint64(cnt), uint64(cnt),
				addrH, uint64(hWords * groups), uint64(hWords * groups),
				q, n, n,
				emu.AddrData, n, n,
				uint64(blockLen), uint64(stride), emu.AddrTable, addrKey,
			}
			m.PutArgs(args...)
			steps, err := m.Run(prog, "fusedPolyCopyAVX")
			if err != nil {
				t.Fatal(err)
			}
			if blockLen == 4096 {
				perByte = float64(steps) / float64(len(data))
			}
			for i := 0; i < cnt; i++ {
				b := data[i*stride:][:blockLen]
				checkCRCs(t, m, i, b)
				want := poly(b, r)
				g, l := i/group, i%group
				got := new(big.Int)
				for k := limbs - 1; k >= 0; k-- {
					v := binary.LittleEndian.Uint64(m.Mem[addrH+8*(hWords*g+lanes*k+l):])
					if v >= 1<<(limbBits+1) {
						t.Fatalf("block %d: limb %d = %#x, not below 2^27", i, k, v)
					}
					got.Lsh(got, limbBits)
					got.Add(got, new(big.Int).SetUint64(v))
				}
				if got.Mod(got, polyP).Cmp(want) != 0 {
					t.Fatalf("block %d: Poly1305 %x, want %x", i, got, want)
				}
			}
			// Nothing written outside dst, sums and h.
			checkRest(t, m, before, cnt, 8*hWords*groups, q, data, blockLen, stride)
		})
	}
	t.Logf("instructions per byte over 4 KiB blocks: %.4f", perByte)
	// fusedPolyCopyZ runs in TestEmulatedKernelZ, on its own program.
	if nr := slices.DeleteFunc(prog.NotRun(), func(f string) bool { return f == "fusedPolyCopyZ" }); len(nr) > 0 {
		t.Errorf("generated functions not checked in the emulator: %v", nr)
	}
}

// ifmaKeyTable is poly1305's ifmaKey for r (kernels/poly1305,
// poly1305_lanes44.go), in the layout of kernels/_asm/internal/ifma.
var ifmaKeyTable = ifma.KeyTable

// fusedPolyCopyZ in the interpreter, as TestEmulatedKernel checks
// fusedPolyCopyAVX: guards, sums, the Poly1305 accumulators (radix 2^44,
// within their stated bounds) against math/big, the copy, and nothing else
// written. Every shape of the kernel's steps runs: blocks of 1..12 rows
// (the first step four rows or a last one of 1..4, the loop of four-row
// steps zero to two times, every last step after it), 64 rows, strides
// with gaps, one to four pairs.
func TestEmulatedKernelZ(t *testing.T) {
	asm, _, err := generate([]string{"go", "run", "./fusedpoly"})
	if err != nil {
		t.Fatal(err)
	}
	prog, err := emu.Parse(string(asm))
	if err != nil {
		t.Fatal(err)
	}
	const (
		addrTab32 = emu.AddrDst + 0x800
		addrKeyZ  = emu.AddrDst + 0x1080
	)
	tab := emu.FoldTable(emu.T10DIF, 64)
	tab32 := emu.FoldTable(emu.CRC32C, 64)
	t10R := emu.T10DIF
	t10R.Reflected = true
	tabR := emu.FoldTable(t10R, 64)
	rnd := rand.New(rand.NewPCG(7, 8))
	var cases [][3]int
	for rows := 1; rows <= 12; rows++ {
		cases = append(cases, [3]int{64 * rows, 64 * rows, 2 + 2*(rows%3)}, [3]int{64 * rows, 64*rows + 8*(rows%3), 2})
	}
	cases = append(cases, [3]int{4096, 4096, 2}, [3]int{4096, 4104, 4}, [3]int{512, 520, 8})
	const name = "fusedPolyCopyZ"
	var perByte float64
	for trial, c := range cases {
		blockLen, stride, cnt := c[0], c[1], c[2]
		t.Run(fmt.Sprintf("block=%d/stride=%d/count=%d", blockLen, stride, cnt), func(t *testing.T) {
			allOnes := trial%3 == 0
			data, r := trialInput(rnd, (cnt-1)*stride+blockLen, allOnes)
			m := newMachine(t, prog, data, tab)
			copy(m.Mem[addrTab32:], tab32)
			for i, v := range ifmaKeyTable(r) {
				binary.LittleEndian.PutUint64(m.Mem[addrKeyZ+8*i:], v)
			}
			before := bytes.Clone(m.Mem[emu.AddrDst:emu.AddrData])
			aR := m.Append(len(tabR), 0)
			copy(m.Mem[aR:], tabR)
			// q last in memory: any write past it fails.
			q := m.Append(len(data), gapByte)
			pairs := cnt / zGroup
			n := uint64(len(data))
			args := []uint64{
				emu.AddrDst, uint64(cnt), uint64(cnt),
				addrSums, uint64(cnt), uint64(cnt),
				addrH, uint64(zHWords * pairs), uint64(zHWords * pairs),
				q, n, n,
				emu.AddrData, n, n,
				uint64(blockLen), uint64(stride), emu.AddrTable, aR, addrTab32, addrKeyZ,
			}
			m.PutArgs(args...)
			steps, err := m.Run(prog, name)
			if err != nil {
				t.Fatal(err)
			}
			if blockLen == 4096 && stride == 4096 {
				perByte = float64(steps) / float64(len(data))
			}
			for i := 0; i < cnt; i++ {
				b := data[i*stride:][:blockLen]
				checkCRCs(t, m, i, b)
				want := poly(b, r)
				g, l := i/zGroup, i%zGroup
				got := new(big.Int)
				for k := 2; k >= 0; k-- {
					v := binary.LittleEndian.Uint64(m.Mem[addrH+8*(zHWords*g+zGroup*k+l):])
					if bound := []uint64{1 << 44, 1<<44 + 2, 1 << 42}[k]; v >= bound {
						t.Fatalf("block %d: limb %d = %#x, not below %#x", i, k, v, bound)
					}
					got.Lsh(got, 44)
					got.Add(got, new(big.Int).SetUint64(v))
				}
				if got.Mod(got, polyP).Cmp(want) != 0 {
					t.Fatalf("block %d: Poly1305 %x, want %x", i, got, want)
				}
			}
			checkRest(t, m, before, cnt, 8*zHWords*pairs, q, data, blockLen, stride)
		})
	}
	t.Logf("instructions per byte over 4 KiB blocks: %.4f", perByte)
	if slices.Contains(prog.NotRun(), name) {
		t.Errorf("%s did not run", name)
	}
}

// Every kernel writes the upper halves of vector registers (YMM, ZMM), so
// every return is preceded by VZEROUPPER: SSE code after it would otherwise
// pay the transition penalties.
func TestVZEROUPPERAtExit(t *testing.T) {
	asm, _, err := generate([]string{"go", "run", "./fusedpoly"})
	if err != nil {
		t.Fatal(err)
	}
	fn, prev, rets := "", "", 0
	for _, line := range strings.Split(string(asm), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "//") {
			continue
		}
		switch f[0] {
		case "TEXT":
			fn = f[1]
		case "RET":
			rets++
			if prev != "VZEROUPPER" {
				t.Errorf("%s: RET after %s, not VZEROUPPER", fn, prev)
			}
		}
		prev = f[0]
	}
	if rets < 2 {
		t.Fatalf("%d RETs in the generated kernels, want one a kernel at least", rets)
	}
}
