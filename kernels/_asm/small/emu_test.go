package main

// smallUpdateZ in the interpreter of internal/emu, against the bitwise
// CRC-32C, at every length it takes and a few starting registers. The
// memory ends with the message, so a read past p[n-1] fails, as does any
// instruction the interpreter does not model; the test fails too if a
// function of the generated file was not run.

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/difctl/difctl/kernels/_asm/internal/emu"
	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
)

func TestEmulatedSmall(t *testing.T) {
	for _, c := range []struct {
		flag string
		spec emu.Spec
	}{{"t10dif", emu.T10DIF}, {"crc64nvme", emu.CRC64NVME}} {
		asm, _, err := generate([]string{"go", "run", "./small"}, scaffold.CRCs[c.flag])
		if err != nil {
			t.Fatal(err)
		}
		testEntry(t, string(asm), c.spec)
	}
	asm, _, err := generate([]string{"go", "run", "./small"}, scaffold.CRCs["crc32c"])
	if err != nil {
		t.Fatal(err)
	}
	prog, err := emu.Parse(string(asm))
	if err != nil {
		t.Fatal(err)
	}
	tab := emu.FoldTable(emu.CRC32C, scaffold.MaxFold)
	r := rand.New(rand.NewPCG(3, 4))
	for n := 1; n <= maxLen; n++ {
		for _, crc := range []uint64{0, 0xffffffff, uint64(r.Uint32())} {
			data := emu.Random(r, n)
			m, err := emu.New(prog, data)
			if err != nil {
				t.Fatal(err)
			}
			copy(m.Mem[emu.AddrTable:], tab)
			m.PutArgs(crc, emu.AddrData, uint64(n), emu.AddrTable)
			if _, err := m.Run(prog, "smallUpdateZ"); err != nil {
				t.Fatalf("n=%d: %v", n, err)
			}
			got := m.Get64(32) & 0xffffffff
			if want := emu.Bitwise(emu.CRC32C, crc, data); got != want {
				t.Fatalf("n=%d crc=%#x: %#x, want %#x", n, crc, got, want)
			}
		}
	}
	testEntry(t, string(asm), emu.CRC32C)
	if nr := prog.NotRun(); len(nr) > 1 || len(nr) == 1 && nr[0] != "updateEntry" {
		t.Errorf("generated functions not checked in the emulator: %v", nr)
	}
}

// testEntry runs updateEntry in the interpreter, with the Go symbols it
// names (which the interpreter does not hold) replaced: the table pointer
// by the table's address, the check of the dispatch variable dropped (as if
// it held entryTarget, so that the tail call of updateDispatch is dead
// code, left as a RET), and the tail call of entryTarget's function by a
// store of a sentinel result (and for T10-DIF and CRC-64/NVME the tail
// call of updateGeneric below 8 bytes by another). The lengths the entry takes (CRC-32C:
// 1..maxLen; the others 8..maxLen) must give the CRC, the others from 0
// to maxLen+16 the fallback.
func testEntry(t *testing.T, asm string, spec emu.Spec) {
	tab := emu.FoldTable(spec, scaffold.MaxFold)
	w := int(spec.Width)
	const sentinel, sentinelShort = 0x5eca1, 0x5b07
	for old, repl := range map[string]string{
		`MOVQ\s+·update\+0\(SB\), AX\n`:          "",
		`CMPQ\s+AX, ·entryTarget\+0\(SB\)\n`:     "",
		`JNE\s+dispatch\n`:                       "",
		`MOVQ\s+·foldTables\+0\(SB\), DX`:        fmt.Sprintf("MOVQ $%#x, DX", emu.AddrTable),
		`JMP\s+·updateDispatch\+0\(SB\)`:         "RET",
		`JMP\s+·update(AVX512|HybridZ)\+0\(SB\)`: fmt.Sprintf("MOVL $%#x, ret+32(FP)\n\tRET", sentinel),
		`JMP\s+·updateGeneric\+0\(SB\)`:          fmt.Sprintf("MOVL $%#x, ret+32(FP)\n\tRET", sentinelShort),
	} {
		re := regexp.MustCompile(old)
		k := len(re.FindAllStringIndex(asm, -1))
		if k == 0 && strings.Contains(old, "updateGeneric") && spec.Width == 32 {
			continue // CRC-32C's kernel takes inputs from one byte on
		}
		if k != 1 {
			t.Fatalf("updateEntry: %q occurs %d times, want once", old, k)
		}
		asm = re.ReplaceAllLiteralString(asm, repl)
	}
	prog, err := emu.Parse(asm)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	for n := 0; n <= maxLen+16; n++ {
		data := emu.Random(r, n)
		m, err := emu.New(prog, data)
		if err != nil {
			t.Fatal(err)
		}
		copy(m.Mem[emu.AddrTable:], tab)
		crc := r.Uint64() & emu.Mask(w)
		m.PutArgs(crc, emu.AddrData, uint64(n), uint64(n))
		if _, err := m.Run(prog, "updateEntry"); err != nil {
			t.Fatalf("updateEntry n=%d: %v", n, err)
		}
		got := m.Get64(32) & emu.Mask(w)
		want := emu.Bitwise(spec, crc, data)
		switch {
		case w != 32 && n < 8:
			want = sentinelShort & emu.Mask(w)
		case n == 0 || n > maxLen:
			want = sentinel & emu.Mask(w)
		}
		if got != want {
			t.Fatalf("updateEntry n=%d crc=%#x: %#x, want %#x", n, crc, got, want)
		}
	}
}

// TestNoLowVectorRegisters holds the kernel to X16-X31: a write to X0-X15
// would leave dirty upper state for the SSE code after the call, which the
// kernel, having no VZEROUPPER, must not.
func TestNoLowVectorRegisters(t *testing.T) {
	for _, flag := range []string{"t10dif", "crc32c", "crc64nvme"} {
		asm, _, err := generate([]string{"go", "run", "./small"}, scaffold.CRCs[flag])
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 16; i++ {
			for _, p := range []string{"X", "Y", "Z"} {
				for _, sep := range []string{" ", ",", "\n"} {
					if s := fmt.Sprintf(" %s%d%s", p, i, sep); containsOperand(string(asm), s) {
						t.Errorf("%s: the kernel names %s%d", flag, p, i)
					}
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
