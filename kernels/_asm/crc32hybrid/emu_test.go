package main

// The hybrid CRC-32C kernels in the interpreter of internal/emu: the
// committed assembly (the CI leg "generated code is fresh" keeps it equal
// to this generator's output), with the merge constants of the committed
// zhybrid_consts_amd64.go (kernels/_asm/crcgen), against
// hash/crc32's Castagnoli. hybrid256 needs VPCLMULQDQ, which the machines
// here may lack; the pclmul one (hybridChunk128) runs on hardware too. Any instruction the
// interpreter does not model fails the test, and so does a function of the
// file left unchecked.

import (
	"encoding/binary"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/difctl/difctl/kernels/_asm/internal/emu"
	"github.com/difctl/difctl/kernels/internal/crcmath"
)

const (
	asmFile    = "../../crc32c/zhybrid_amd64.s"
	constsFile = "../../crc32c/zhybrid_consts_amd64.go"
	segUnit    = 32 // hybridSegUnit
	maxSeg     = 2048
	bigSeg     = 8192
)

// constRows reads the array name of constsFile, a row a value: its
// elements' numbers for an array of arrays, the one number for an array of
// numbers.
func constRows(t *testing.T, name string) [][]uint64 {
	f, err := parser.ParseFile(token.NewFileSet(), constsFile, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]uint64
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != name {
			return true
		}
		for _, e := range vs.Values[0].(*ast.CompositeLit).Elts {
			elts := []ast.Expr{e}
			if cl, ok := e.(*ast.CompositeLit); ok {
				elts = cl.Elts
			}
			var row []uint64
			for _, v := range elts {
				u, err := strconv.ParseUint(v.(*ast.BasicLit).Value, 0, 64)
				if err != nil {
					t.Fatal(err)
				}
				row = append(row, u)
			}
			rows = append(rows, row)
		}
		return false
	})
	if len(rows) == 0 {
		t.Fatalf("%s: no %s", constsFile, name)
	}
	return rows
}

// mergeConsts reads the arrays name ([N][14]uint64) of constsFile.
func mergeConsts(t *testing.T, name string) [][14]uint64 {
	var out [][14]uint64
	for _, r := range constRows(t, name) {
		if len(r) != 14 {
			t.Fatalf("%s: a row of %d numbers in %s", constsFile, len(r), name)
		}
		out = append(out, [14]uint64(r))
	}
	return out
}

// mergeConsts1 reads the array name ([N]uint64) of constsFile.
func mergeConsts1(t *testing.T, name string) []uint64 {
	var out []uint64
	for _, r := range constRows(t, name) {
		out = append(out, r...)
	}
	return out
}

// mergeConsts2 reads the array name ([N][2]uint64) of constsFile.
func mergeConsts2(t *testing.T, name string) [][2]uint64 {
	var out [][2]uint64
	for _, r := range constRows(t, name) {
		if len(r) != 2 {
			t.Fatalf("%s: a row of %d numbers in %s", constsFile, len(r), name)
		}
		out = append(out, [2]uint64(r))
	}
	return out
}

// runBlocks runs the batch kernel name in a machine holding data and the
// fold table tab, with args in its frame, and checks its n sums at
// AddrDst, sum i want(block i) for the blockLen bytes at off + i·stride of
// data, and that it wrote nothing past them.
func runBlocks(t *testing.T, prog *emu.Program, name string, data, tab []byte, args []uint64, n, off, blockLen, stride int, want func(b []byte) uint32) {
	t.Helper()
	m, err := emu.New(prog, data)
	if err != nil {
		t.Fatal(err)
	}
	copy(m.Mem[emu.AddrTable:], tab)
	m.PutArgs(args...)
	m.Mem[emu.AddrDst+4*n] = 0x5a
	if _, err := m.Run(prog, name); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		got := binary.LittleEndian.Uint32(m.Mem[emu.AddrDst+4*i:])
		if w := want(data[off+i*stride:][:blockLen]); got != w {
			t.Fatalf("dst[%d] = %#x, want %#x", i, got, w)
		}
	}
	if m.Mem[emu.AddrDst+4*n] != 0x5a {
		t.Fatal("wrote past dst")
	}
}

func TestEmulatedKernels(t *testing.T) {
	src, err := os.ReadFile(asmFile)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := emu.Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	k, kBig := mergeConsts(t, "hybridK"), mergeConsts(t, "hybridKBig")
	tab := emu.FoldTable(emu.CRC32C, 64)
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	raw := func(reg uint32, p []byte) uint32 { return ^crc32.Update(^reg, castagnoli, p) }
	checksum := func(p []byte) uint32 { return crc32.Checksum(p, castagnoli) }
	r := rand.New(rand.NewPCG(5, 6))
	const addrK = emu.AddrTable + 0x900 // after the fold table
	for _, v := range []string{"128", "256"} {
		t.Run("kernel=hybridChunk"+v, func(t *testing.T) {
			type cs struct{ tail, s int }
			var cases []cs
			for _, s := range []int{segUnit, 2 * segUnit, 5 * segUnit, 512, maxSeg, bigSeg} {
				for _, tail := range []int{0, 1, 7, 8, 9, 63, 6*segUnit - 1} {
					cases = append(cases, cs{tail, s})
				}
			}
			for _, c := range cases {
				row := kBig[0]
				if c.s != bigSeg {
					row = k[c.s/segUnit-1]
				}
				data := emu.Random(r, c.tail+6*c.s)
				m, err := emu.New(prog, data)
				if err != nil {
					t.Fatal(err)
				}
				copy(m.Mem[emu.AddrTable:], tab)
				for i, x := range row {
					binary.LittleEndian.PutUint64(m.Mem[addrK+8*i:], x)
				}
				reg := r.Uint32()
				m.PutArgs(uint64(reg), emu.AddrData, uint64(c.tail), uint64(c.s), addrK, emu.AddrTable+16)
				if _, err := m.Run(prog, "hybridChunk"+v); err != nil {
					t.Fatal(err)
				}
				if got, want := uint32(m.Get64(48)), raw(reg, data); got != want {
					t.Fatalf("tail=%d s=%d: %#x, want %#x", c.tail, c.s, got, want)
				}
			}
		})
		for _, name := range []string{"hybridBlocks" + v, "hybridBlocksPrefetch" + v} {
			for _, c := range [][3]int{{64, 64, 1}, {96, 104, 2}, {512, 512, 2}, {512, 520, 1}, {4096, 4112, 1}, {100, 100, 1}, {1000, 1008, 2}} {
				blockLen, stride, groups := c[0], c[1], c[2]
				t.Run(fmt.Sprintf("kernel=%s/block=%d/stride=%d", name, blockLen, stride), func(t *testing.T) {
					n := 6 * groups
					data := emu.Random(r, (n-1)*stride+blockLen)
					args := []uint64{emu.AddrDst, emu.AddrData, uint64(groups), uint64(blockLen), uint64(stride), emu.AddrTable + 32}
					runBlocks(t, prog, name, data, tab, args, n, 0, blockLen, stride, checksum)
				})
			}
		}
	}
	// The two-chain YMM kernel: blocks of a multiple of 64 bytes, from the
	// shortest (one step a chain) to the longest row of hybridKS, with
	// strides of a line and off one.
	ks := mergeConsts1(t, "hybridKS")
	for _, c := range [][3]int{{64, 64, 1}, {128, 136, 2}, {512, 512, 2}, {512, 520, 1}, {1024, 1088, 1}, {4096, 4104, 1}, {64 * len(ks), 64 * len(ks), 1}} {
		blockLen, stride, groups := c[0], c[1], c[2]
		t.Run(fmt.Sprintf("kernel=hybridBlocks256S/block=%d/stride=%d", blockLen, stride), func(t *testing.T) {
			n := 6 * groups
			data := emu.Random(r, (n-1)*stride+blockLen)
			args := []uint64{emu.AddrDst, emu.AddrData, uint64(groups), uint64(blockLen), uint64(stride), emu.AddrTable + 32, ks[blockLen/64-1]}
			runBlocks(t, prog, "hybridBlocks256S", data, tab, args, n, 0, blockLen, stride, checksum)
		})
	}
	t.Run("kernel=hybridShort", func(t *testing.T) {
		for n := 1; n <= 600; n++ {
			data := emu.Random(r, n)
			m, err := emu.New(prog, data)
			if err != nil {
				t.Fatal(err)
			}
			reg := r.Uint32()
			m.PutArgs(uint64(reg), emu.AddrData, uint64(n))
			if _, err := m.Run(prog, "hybridShort"); err != nil {
				t.Fatal(err)
			}
			if got, want := uint32(m.Get64(24)), raw(reg, data); got != want {
				t.Fatalf("n=%d: %#x, want %#x", n, got, want)
			}
		}
	})
	t.Run("kernel=hybridShort3", func(t *testing.T) {
		k3 := mergeConsts2(t, "hybridK3")
		for s := 16; s <= 8*len(k3)+8; s += 8 {
			for _, tail := range []int{0, 1, 2, 3, 4, 7, 8, 15, 16, 17, 23} {
				data := emu.Random(r, tail+3*s)
				m, err := emu.New(prog, data)
				if err != nil {
					t.Fatal(err)
				}
				for i, x := range k3[s/8-2] {
					binary.LittleEndian.PutUint64(m.Mem[addrK+8*i:], x)
				}
				reg := r.Uint32()
				m.PutArgs(uint64(reg), emu.AddrData, uint64(tail), uint64(s), addrK)
				if _, err := m.Run(prog, "hybridShort3"); err != nil {
					t.Fatal(err)
				}
				if got, want := uint32(m.Get64(40)), raw(reg, data); got != want {
					t.Fatalf("tail=%d s=%d: %#x, want %#x", tail, s, got, want)
				}
			}
		}
	})
	// initWant is the ZMM kernels' init argument (the initial register in
	// the low 32 bits, xorout in the high 32) and the sum of a block it
	// gives: the CRC-32C, or with raws the raw register from a random one.
	initWant := func(raws bool) (uint64, func(p []byte) uint32) {
		if !raws {
			return 0xffffffff | 0xffffffff<<32, checksum
		}
		init := r.Uint32()
		return uint64(init), func(p []byte) uint32 { return raw(init, p) }
	}
	ks = mergeConsts1(t, "hybridKS")
	for _, v := range zVariants {
		name := zName(v)
		for _, l := range [][4]int{{64, 64, 1, 0}, {64, 72, 2, 1}, {100, 100, 1, 0}, {127, 130, 1, 1}, {512, 512, 2, 0}, {512, 520, 1, 1}, {1000, 1063, 1, 0}, {4096, 4104, 1, 1}} {
			blockLen, stride, groups, raws := l[0], l[1], l[2], l[3] == 1
			t.Run(fmt.Sprintf("kernel=%s/block=%d/stride=%d/raw=%v", name, blockLen, stride, raws), func(t *testing.T) {
				n := v.g * groups
				data := emu.Random(r, (n-1)*stride+blockLen)
				init, want := initWant(raws)
				args := []uint64{emu.AddrDst, emu.AddrData, uint64(groups), uint64(blockLen), uint64(stride),
					init, emu.AddrTable + 16*4}
				if v.sub == 2 {
					// k = C(8D-64) for the D = 32·(blockLen/64) bytes of chain B.
					args = append(args, ks[blockLen/64-1])
				}
				runBlocks(t, prog, name, data, tab, args, n, 0, blockLen, stride, want)
			})
		}
	}
	for _, c := range zaVariants {
		name := zaName(c)
		// {block, stride, groups, raw registers, the buffer's offset from a line}
		for _, l := range [][5]int{{128, 128, 1, 0, 0}, {128, 136, 1, 1, 8}, {191, 200, 1, 0, 3}, {512, 520, 2, 0, 0}, {512, 520, 1, 1, 40},
			{512, 512, 1, 0, 8}, {1000, 1063, 1, 1, 1}, {4096, 4104, 1, 0, 0}, {4096, 4112, 1, 1, 63}} {
			blockLen, stride, groups, raws, align := l[0], l[1], l[2], l[3] == 1, l[4]
			t.Run(fmt.Sprintf("kernel=%s/block=%d/stride=%d/raw=%v/align=%d", name, blockLen, stride, raws, align), func(t *testing.T) {
				n := zBlocks * groups
				data := emu.Random(r, align+(n-1)*stride+blockLen)
				init, want := initWant(raws)
				args := []uint64{emu.AddrDst, emu.AddrData + uint64(align), uint64(groups), uint64(blockLen), uint64(stride),
					init, emu.AddrTable + 16*4}
				runBlocks(t, prog, name, data, tab, args, n, align, blockLen, stride, want)
			})
		}
	}
	t.Run("kernel=hybridMergeZ", func(t *testing.T) {
		c := func(k int) uint64 { return crcmath.C(crcmath.CRC32C, uint64(k)) }
		for _, g := range []int{16, 13, 5, 2} {
			for _, l := range []int{64, 512, 4096} {
				data := emu.Random(r, g*l)
				m, err := emu.New(prog, nil)
				if err != nil {
					t.Fatal(err)
				}
				// regs at AddrDst: the register before, then the segments'
				// (the last one's also passed as last); k at addrK.
				var regs [17]uint32
				regs[0] = r.Uint32()
				for i := 0; i < g; i++ {
					regs[i+1] = raw(0, data[i*l:][:l])
				}
				for i := range 16 {
					binary.LittleEndian.PutUint32(m.Mem[emu.AddrDst+4*i:], regs[i])
					var k uint64
					if i < g {
						k = c(8*(g-i)*l - 64)
					}
					binary.LittleEndian.PutUint64(m.Mem[addrK+8*i:], k)
				}
				m.PutArgs(emu.AddrDst, uint64(regs[g]), addrK)
				if _, err := m.Run(prog, "hybridMergeZ"); err != nil {
					t.Fatal(err)
				}
				if got, want := uint32(m.Get64(24)), raw(regs[0], data); got != want {
					t.Fatalf("segments=%d length=%d: %#x, want %#x", g, l, got, want)
				}
			}
		}
	})
	if nr := prog.NotRun(); len(nr) > 0 {
		t.Errorf("functions not checked in the emulator: %v", nr)
	}
}
