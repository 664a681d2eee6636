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

// mergeConsts reads the arrays name ([N][14]uint64) of constsFile.
func mergeConsts(t *testing.T, name string) [][14]uint64 {
	f, err := parser.ParseFile(token.NewFileSet(), constsFile, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var rows [][14]uint64
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != name {
			return true
		}
		for _, e := range vs.Values[0].(*ast.CompositeLit).Elts {
			var row [14]uint64
			for i, v := range e.(*ast.CompositeLit).Elts {
				u, err := strconv.ParseUint(v.(*ast.BasicLit).Value, 0, 64)
				if err != nil {
					t.Fatal(err)
				}
				row[i] = u
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

// mergeConsts1 reads the array name ([N]uint64) of constsFile.
func mergeConsts1(t *testing.T, name string) []uint64 {
	f, err := parser.ParseFile(token.NewFileSet(), constsFile, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var row []uint64
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != name {
			return true
		}
		for _, v := range vs.Values[0].(*ast.CompositeLit).Elts {
			u, err := strconv.ParseUint(v.(*ast.BasicLit).Value, 0, 64)
			if err != nil {
				t.Fatal(err)
			}
			row = append(row, u)
		}
		return false
	})
	if len(row) == 0 {
		t.Fatalf("%s: no %s", constsFile, name)
	}
	return row
}

// mergeConsts2 reads the array name ([N][2]uint64) of constsFile.
func mergeConsts2(t *testing.T, name string) [][2]uint64 {
	f, err := parser.ParseFile(token.NewFileSet(), constsFile, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var rows [][2]uint64
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != name {
			return true
		}
		for _, e := range vs.Values[0].(*ast.CompositeLit).Elts {
			var row [2]uint64
			for i, v := range e.(*ast.CompositeLit).Elts {
				u, err := strconv.ParseUint(v.(*ast.BasicLit).Value, 0, 64)
				if err != nil {
					t.Fatal(err)
				}
				row[i] = u
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
				data := make([]byte, c.tail+6*c.s)
				for i := range data {
					data[i] = byte(r.Uint32())
				}
				m, err := emu.New(prog, data)
				if err != nil {
					t.Fatal(err)
				}
				copy(m.Mem[emu.AddrTable:], tab)
				for i, x := range row {
					binary.LittleEndian.PutUint64(m.Mem[addrK+8*i:], x)
				}
				reg := r.Uint32()
				for i, a := range []uint64{uint64(reg), emu.AddrData, uint64(c.tail), uint64(c.s), addrK, emu.AddrTable + 16} {
					m.Put64(8*i, a)
				}
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
					data := make([]byte, (n-1)*stride+blockLen)
					for i := range data {
						data[i] = byte(r.Uint32())
					}
					m, err := emu.New(prog, data)
					if err != nil {
						t.Fatal(err)
					}
					copy(m.Mem[emu.AddrTable:], tab)
					for i, a := range []uint64{emu.AddrDst, emu.AddrData, uint64(groups), uint64(blockLen), uint64(stride), emu.AddrTable + 32} {
						m.Put64(8*i, a)
					}
					m.Mem[emu.AddrDst+4*n] = 0x5a
					if _, err := m.Run(prog, name); err != nil {
						t.Fatal(err)
					}
					for i := 0; i < n; i++ {
						got := binary.LittleEndian.Uint32(m.Mem[emu.AddrDst+4*i:])
						if want := crc32.Checksum(data[i*stride:][:blockLen], castagnoli); got != want {
							t.Fatalf("dst[%d] = %#x, want %#x", i, got, want)
						}
					}
					if m.Mem[emu.AddrDst+4*n] != 0x5a {
						t.Fatal("wrote past dst")
					}
				})
			}
		}
	}
	t.Run("kernel=hybridShort", func(t *testing.T) {
		for n := 1; n <= 600; n++ {
			data := make([]byte, n)
			for i := range data {
				data[i] = byte(r.Uint32())
			}
			m, err := emu.New(prog, data)
			if err != nil {
				t.Fatal(err)
			}
			reg := r.Uint32()
			for i, a := range []uint64{uint64(reg), emu.AddrData, uint64(n)} {
				m.Put64(8*i, a)
			}
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
				data := make([]byte, tail+3*s)
				for i := range data {
					data[i] = byte(r.Uint32())
				}
				m, err := emu.New(prog, data)
				if err != nil {
					t.Fatal(err)
				}
				for i, x := range k3[s/8-2] {
					binary.LittleEndian.PutUint64(m.Mem[addrK+8*i:], x)
				}
				reg := r.Uint32()
				for i, a := range []uint64{uint64(reg), emu.AddrData, uint64(tail), uint64(s), addrK} {
					m.Put64(8*i, a)
				}
				if _, err := m.Run(prog, "hybridShort3"); err != nil {
					t.Fatal(err)
				}
				if got, want := uint32(m.Get64(40)), raw(reg, data); got != want {
					t.Fatalf("tail=%d s=%d: %#x, want %#x", tail, s, got, want)
				}
			}
		}
	})
	ks := mergeConsts1(t, "hybridKS")
	for _, v := range zVariants {
		name := zName(v)
		for _, l := range [][4]int{{64, 64, 1, 0}, {64, 72, 2, 1}, {100, 100, 1, 0}, {127, 130, 1, 1}, {512, 512, 2, 0}, {512, 520, 1, 1}, {1000, 1063, 1, 0}, {4096, 4104, 1, 1}} {
			blockLen, stride, groups, raws := l[0], l[1], l[2], l[3] == 1
			t.Run(fmt.Sprintf("kernel=%s/block=%d/stride=%d/raw=%v", name, blockLen, stride, raws), func(t *testing.T) {
				n := v.g * groups
				data := make([]byte, (n-1)*stride+blockLen)
				for i := range data {
					data[i] = byte(r.Uint32())
				}
				m, err := emu.New(prog, data)
				if err != nil {
					t.Fatal(err)
				}
				copy(m.Mem[emu.AddrTable:], tab)
				init, xorout := uint32(0xffffffff), uint32(0xffffffff)
				if raws {
					init, xorout = r.Uint32(), 0
				}
				args := []uint64{emu.AddrDst, emu.AddrData, uint64(groups), uint64(blockLen), uint64(stride),
					uint64(init) | uint64(xorout)<<32, emu.AddrTable + 16*4}
				if v.sub == 2 {
					// k = C(8D-64) for the D = 32·(blockLen/64) bytes of chain B.
					args = append(args, ks[blockLen/64-1])
				}
				for i, a := range args {
					m.Put64(8*i, a)
				}
				m.Mem[emu.AddrDst+4*n] = 0x5a
				if _, err := m.Run(prog, name); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < n; i++ {
					got := binary.LittleEndian.Uint32(m.Mem[emu.AddrDst+4*i:])
					b := data[i*stride:][:blockLen]
					want := crc32.Checksum(b, castagnoli)
					if raws {
						want = raw(init, b)
					}
					if got != want {
						t.Fatalf("dst[%d] = %#x, want %#x", i, got, want)
					}
				}
				if m.Mem[emu.AddrDst+4*n] != 0x5a {
					t.Fatal("wrote past dst")
				}
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
				data := make([]byte, align+(n-1)*stride+blockLen)
				for i := range data {
					data[i] = byte(r.Uint32())
				}
				m, err := emu.New(prog, data)
				if err != nil {
					t.Fatal(err)
				}
				copy(m.Mem[emu.AddrTable:], tab)
				init, xorout := uint32(0xffffffff), uint32(0xffffffff)
				if raws {
					init, xorout = r.Uint32(), 0
				}
				for i, a := range []uint64{emu.AddrDst, emu.AddrData + uint64(align), uint64(groups), uint64(blockLen), uint64(stride),
					uint64(init) | uint64(xorout)<<32, emu.AddrTable + 16*4} {
					m.Put64(8*i, a)
				}
				m.Mem[emu.AddrDst+4*n] = 0x5a
				if _, err := m.Run(prog, name); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < n; i++ {
					got := binary.LittleEndian.Uint32(m.Mem[emu.AddrDst+4*i:])
					b := data[align+i*stride:][:blockLen]
					want := crc32.Checksum(b, castagnoli)
					if raws {
						want = raw(init, b)
					}
					if got != want {
						t.Fatalf("dst[%d] = %#x, want %#x", i, got, want)
					}
				}
				if m.Mem[emu.AddrDst+4*n] != 0x5a {
					t.Fatal("wrote past dst")
				}
			})
		}
	}
	t.Run("kernel=hybridMergeZ", func(t *testing.T) {
		c := func(k int) uint64 { return crcmath.C(crcmath.CRC32C, uint64(k)) }
		for _, g := range []int{16, 13, 5, 2} {
			for _, l := range []int{64, 512, 4096} {
				data := make([]byte, g*l)
				for i := range data {
					data[i] = byte(r.Uint32())
				}
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
				for i, a := range []uint64{emu.AddrDst, uint64(regs[g]), addrK} {
					m.Put64(8*i, a)
				}
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
