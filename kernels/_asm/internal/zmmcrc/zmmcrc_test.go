package zmmcrc

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"

	"github.com/difctl/difctl/kernels/_asm/internal/emu"
	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
	"github.com/difctl/difctl/kernels/internal/crcmath"
)

// The emitters in the interpreter of internal/emu, against crcmath (the
// model the fold kernels follow): each test function takes x, 256 bytes of
// vectors (four ZMM registers) at AddrData, and the fold table of its CRC
// at AddrTable, and leaves its result in x's first register.
const (
	fnFold    = "fold"    // x0 = Fold(x0 by Fold[4]) ⊕ x1 (reflected)
	fnLanes4  = "lanes4"  // x0 = Lanes4(x0..x3 with Rev[61]) (reflected)
	fnReduceZ = "reduceZ" // x0 = ReduceZ(x0) (unreflected, 16 bits)
	fnReduce  = "reduce"  // x0's low lane = Reduce(x0's low lane) (unreflected, 16 bits)
)

func program(t *testing.T) *emu.Program {
	c := build.NewContext()
	fn := func(name string, body func(x []reg.VecVirtual, tab reg.Register)) {
		c.Function(name)
		c.SignatureExpr("func(x, tab *byte)")
		xp := c.Load(c.Param("x"), c.GP64())
		tab := c.Load(c.Param("tab"), c.GP64())
		x := []reg.VecVirtual{c.ZMM(), c.ZMM(), c.ZMM(), c.ZMM()}
		for i, r := range x {
			c.VMOVDQU64(operand.Mem{Base: xp, Disp: 64 * i}, r)
		}
		body(x, tab)
		c.VMOVDQU64(x[0], operand.Mem{Base: xp})
		c.VZEROUPPER()
		c.RET()
	}
	fn(fnFold, func(x []reg.VecVirtual, tab reg.Register) {
		k := c.ZMM()
		c.VBROADCASTI32X4(operand.Mem{Base: tab, Disp: scaffold.TableFold + 16*4}, k)
		Fold(c, 0x00, 0x11, k, x[0], c.ZMM(), x[1])
	})
	fn(fnLanes4, func(x []reg.VecVirtual, tab reg.Register) {
		k, last4 := c.ZMM(), c.ZMM()
		c.VMOVDQU64(operand.Mem{Base: tab, Disp: scaffold.TableRev + 16*61}, k)
		Last4(c, last4, c.ZMM(), c.ZMM())
		r := Lanes4Regs{T: c.ZMM()}
		for j := range r.W {
			r.W[j] = c.ZMM()
		}
		r.X = [2]reg.Register{c.ZMM(), c.ZMM()}
		for i := range r.Lo {
			r.Lo[i], r.Hi[i] = c.ZMM(), c.ZMM()
		}
		Lanes4(c, x, k, last4, 0x00, 0x11, r, x[0])
	})
	fn(fnReduceZ, func(x []reg.VecVirtual, tab reg.Register) {
		fin, muP := c.ZMM(), c.ZMM()
		c.VBROADCASTI32X4(operand.Mem{Base: tab, Disp: scaffold.TableFinal}, fin)
		c.VBROADCASTI32X4(operand.Mem{Base: tab, Disp: scaffold.TableMu}, muP)
		ReduceZ(c, x[0], fin, muP, c.ZMM(), c.ZMM(), c.ZMM(), 16)
	})
	fn(fnReduce, func(x []reg.VecVirtual, tab reg.Register) {
		fin, muP, out := c.XMM(), c.XMM(), c.XMM()
		c.VMOVDQU(operand.Mem{Base: tab, Disp: scaffold.TableFinal}, fin)
		c.VMOVDQU(operand.Mem{Base: tab, Disp: scaffold.TableMu}, muP)
		Reduce(c, x[0].AsX(), fin, muP, out, c.XMM(), c.XMM(), 16)
		c.VMOVDQA64(out, x[0].AsX())
	})
	asm, err := scaffold.Asm(c, []string{"go", "run", "./zmmcrc_test"}, "zmmcrc")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := emu.Parse(string(asm))
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

// run runs fn over x with the table of p and returns x's first 64 bytes
// as four lanes.
func run(t *testing.T, prog *emu.Program, fn string, p crcmath.Params, x []byte) [4]crcmath.Lane {
	t.Helper()
	m, err := emu.New(prog, x)
	if err != nil {
		t.Fatal(err)
	}
	copy(m.Mem[emu.AddrTable:], emu.FoldTable(p, 64))
	m.PutArgs(emu.AddrData, emu.AddrTable)
	if _, err := m.Run(prog, fn); err != nil {
		t.Fatal(err)
	}
	return lanes(m.Mem[emu.AddrData:])
}

// lanes is the four lanes of the 64 bytes b, as the registers hold them.
func lanes(b []byte) (l [4]crcmath.Lane) {
	for i := range l {
		l[i] = crcmath.Lane{Q0: binary.LittleEndian.Uint64(b[16*i:]), Q1: binary.LittleEndian.Uint64(b[16*i+8:])}
	}
	return l
}

func xor(a, b crcmath.Lane) crcmath.Lane { return crcmath.Lane{Q0: a.Q0 ^ b.Q0, Q1: a.Q1 ^ b.Q1} }

func TestEmitters(t *testing.T) {
	prog := program(t)
	r := rand.New(rand.NewPCG(1, 2))
	c32 := crcmath.NewFoldTable(crcmath.CRC32C)
	t10 := crcmath.NewFoldTable(crcmath.T10DIF)
	for trial := 0; trial < 50; trial++ {
		x := emu.Random(r, 256)
		in := [4][4]crcmath.Lane{lanes(x), lanes(x[64:]), lanes(x[128:]), lanes(x[192:])}

		got := run(t, prog, fnFold, crcmath.CRC32C, x)
		for l := range got {
			if want := xor(crcmath.Fold(crcmath.CRC32C, in[0][l], c32.Fold[4]), in[1][l]); got[l] != want {
				t.Fatalf("Fold: lane %d %x, want %x", l, got[l], want)
			}
		}

		got = run(t, prog, fnLanes4, crcmath.CRC32C, x)
		for j := range got {
			want := in[j][3]
			for l := 0; l < 3; l++ {
				want = xor(want, crcmath.Fold(crcmath.CRC32C, in[j][l], c32.Fold[3-l]))
			}
			if got[j] != want {
				t.Fatalf("Lanes4: lane %d %x, want %x", j, got[j], want)
			}
		}

		got = run(t, prog, fnReduceZ, crcmath.T10DIF, x)
		for l := range got {
			if g, want := got[l].Q0&0xffff, crcmath.Reduce(crcmath.T10DIF, t10, in[0][l]); g != want {
				t.Fatalf("ReduceZ: lane %d %#x, want %#x", l, g, want)
			}
		}

		got = run(t, prog, fnReduce, crcmath.T10DIF, x)
		if g, want := got[0].Q0&0xffff, crcmath.Reduce(crcmath.T10DIF, t10, in[0][0]); g != want {
			t.Fatalf("Reduce: %#x, want %#x", g, want)
		}
	}
	if nr := prog.NotRun(); len(nr) > 0 {
		t.Errorf("not run: %v", nr)
	}
}
