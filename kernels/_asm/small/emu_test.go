package main

// smallUpdateZ in the interpreter of internal/emu, against the bitwise
// CRC-32C, at every length it takes and a few starting registers. The
// memory ends with the message, so a read past p[n-1] fails, as does any
// instruction the interpreter does not model; the test fails too if a
// function of the generated file was not run.

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/difctl/difctl/kernels/_asm/internal/emu"
	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
)

func TestEmulatedSmall(t *testing.T) {
	asm, _, err := generate([]string{"go", "run", "./small"}, "crc32c")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := emu.Parse(string(asm))
	if err != nil {
		t.Fatal(err)
	}
	tab := emu.FoldTable(emu.CRC32C, scaffold.MaxFold)
	r := rand.New(rand.NewPCG(3, 4))
	for n := 1; n <= MaxLen; n++ {
		for _, crc := range []uint64{0, 0xffffffff, uint64(r.Uint32())} {
			data := make([]byte, n)
			for i := range data {
				data[i] = byte(r.Uint32())
			}
			m, err := emu.New(prog, data)
			if err != nil {
				t.Fatal(err)
			}
			copy(m.Mem[emu.AddrTable:], tab)
			m.Put64(0, crc)
			m.Put64(8, emu.AddrData)
			m.Put64(16, uint64(n))
			m.Put64(24, emu.AddrTable)
			if _, err := m.Run(prog, "smallUpdateZ"); err != nil {
				t.Fatalf("n=%d: %v", n, err)
			}
			got := m.Get64(32) & 0xffffffff
			if want := emu.Bitwise(emu.CRC32C, crc, data); got != want {
				t.Fatalf("n=%d crc=%#x: %#x, want %#x", n, crc, got, want)
			}
		}
	}
	if nr := prog.NotRun(); len(nr) > 0 {
		t.Errorf("generated functions not checked in the emulator: %v", nr)
	}
}

// TestNoLowVectorRegisters holds the kernel to X16-X31: a write to X0-X15
// would leave dirty upper state for the SSE code after the call, which the
// kernel, having no VZEROUPPER, must not.
func TestNoLowVectorRegisters(t *testing.T) {
	asm, _, err := generate([]string{"go", "run", "./small"}, "crc32c")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 16; i++ {
		for _, p := range []string{"X", "Y", "Z"} {
			for _, sep := range []string{" ", ",", "\n"} {
				if s := fmt.Sprintf(" %s%d%s", p, i, sep); containsOperand(string(asm), s) {
					t.Errorf("the kernel names %s%d", p, i)
				}
			}
		}
	}
}

// containsOperand reports whether s occurs in asm, or with its leading
// space as a comma (an operand after the first).
func containsOperand(asm, s string) bool {
	return strings.Contains(asm, s) || strings.Contains(asm, ","+s[1:])
}
