package main

// The AVX2 tier's entry, updateEntryY, in the interpreter of internal/emu
// against the bitwise CRC at every length from 0 to maxLenY+16, and
// updateEntry's choice between the AVX-512 body, updateEntryY and the Go
// dispatch.

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/difctl/difctl/kernels/_asm/internal/emu"
	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
)

var tiersY = []struct {
	flag, target string
	spec         emu.Spec
}{
	{"t10dif", "updateAVX2", emu.T10DIF},
	{"crc32c", "updateHybrid256", emu.CRC32C},
	{"crc64nvme", "updateAVX2", emu.CRC64NVME},
}

// replaceOnce replaces the one match of each key of repl in asm by its value,
// and fails if a key matches other than once.
func replaceOnce(t *testing.T, asm string, repl map[string]string) string {
	t.Helper()
	for old, new := range repl {
		re := regexp.MustCompile(old)
		if k := len(re.FindAllStringIndex(asm, -1)); k != 1 {
			t.Fatalf("%q occurs %d times, want once", old, k)
		}
		asm = re.ReplaceAllLiteralString(asm, new)
	}
	return asm
}

// runEntry runs fn of prog over data from register crc and returns its
// result, masked to the CRC's width.
func runEntry(t *testing.T, prog *emu.Program, fn string, tab []byte, w int, crc uint64, data []byte) uint64 {
	t.Helper()
	m, err := emu.New(prog, data)
	if err != nil {
		t.Fatal(err)
	}
	copy(m.Mem[emu.AddrTable:], tab)
	m.Put64(0, crc)
	m.Put64(8, emu.AddrData)
	m.Put64(16, uint64(len(data)))
	m.Put64(24, uint64(len(data)))
	if _, err := m.Run(prog, fn); err != nil {
		t.Fatalf("%s n=%d: %v", fn, len(data), err)
	}
	return m.Get64(32) & emu.Mask(w)
}

// TestEmulatedEntryY runs updateEntryY with the Go symbols it names
// replaced: the table pointer by the table's address, the tail call of the
// avx2 implementation's Update by the store of a sentinel, and (T10-DIF,
// CRC-64/NVME) that of updateGeneric below 8 bytes by another. The lengths
// it takes (CRC-32C 1..maxLenY, the others 8..maxLenY) must give the CRC,
// from a few registers, the others the sentinels.
func TestEmulatedEntryY(t *testing.T) {
	const sentinel, sentinelShort = 0x5eca1, 0x5b07
	for _, c := range tiersY {
		t.Run("crc="+c.flag, func(t *testing.T) {
			asm, _, err := generateY([]string{"go", "run", "./small"}, scaffold.CRCs[c.flag])
			if err != nil {
				t.Fatal(err)
			}
			w := int(c.spec.Width)
			repl := map[string]string{
				`MOVQ\s+·foldTables\+0\(SB\), DX`:  fmt.Sprintf("MOVQ $%#x, DX", emu.AddrTable),
				`JMP\s+·` + c.target + `\+0\(SB\)`: fmt.Sprintf("MOVL $%#x, ret+32(FP)\n\tRET", sentinel),
			}
			if w != 32 {
				repl[`JMP\s+·updateGeneric\+0\(SB\)`] = fmt.Sprintf("MOVL $%#x, ret+32(FP)\n\tRET", sentinelShort)
			}
			prog, err := emu.Parse(replaceOnce(t, string(asm), repl))
			if err != nil {
				t.Fatal(err)
			}
			tab := emu.FoldTable(c.spec, scaffold.MaxFold)
			r := rand.New(rand.NewPCG(7, 8))
			for n := 0; n <= maxLenY+16; n++ {
				data := make([]byte, n)
				for i := range data {
					data[i] = byte(r.Uint32())
				}
				for _, crc := range []uint64{0, emu.Mask(w), r.Uint64() & emu.Mask(w)} {
					got := runEntry(t, prog, "updateEntryY", tab, w, crc, data)
					want := emu.Bitwise(c.spec, crc, data)
					switch {
					case w != 32 && n < 8:
						want = sentinelShort & emu.Mask(w)
					case n == 0 || n > maxLenY:
						want = sentinel & emu.Mask(w)
					}
					if got != want {
						t.Fatalf("updateEntryY n=%d crc=%#x: %#x, want %#x", n, crc, got, want)
					}
				}
			}
			if nr := prog.NotRun(); len(nr) != 0 {
				t.Errorf("generated functions not run in the emulator: %v", nr)
			}
		})
	}
}

// TestEmulatedEntryChoice runs updateEntry with the dispatch variable and
// the two targets replaced by constants (update = 1, 2 or 3; entryTarget
// = 1, entryTargetY = 2) and its jumps out by sentinel stores: under 1 it
// computes the CRC itself, under 2 it goes to updateEntryY, under 3 to
// updateDispatch, at a length every kernel takes.
func TestEmulatedEntryChoice(t *testing.T) {
	const toY, toDispatch, toOther = 0x7e5, 0xd15, 0x07e
	for _, c := range tiersY {
		t.Run("crc="+c.flag, func(t *testing.T) {
			asm, _, err := generate([]string{"go", "run", "./small"}, scaffold.CRCs[c.flag])
			if err != nil {
				t.Fatal(err)
			}
			w := int(c.spec.Width)
			tab := emu.FoldTable(c.spec, scaffold.MaxFold)
			data := make([]byte, 100)
			for i := range data {
				data[i] = byte(3*i + 1)
			}
			for u, want := range map[int]uint64{1: emu.Bitwise(c.spec, 5, data), 2: toY, 3: toDispatch} {
				src := replaceOnce(t, string(asm), map[string]string{
					`MOVQ\s+·update\+0\(SB\), AX`:               fmt.Sprintf("MOVQ $%d, AX", u),
					`CMPQ\s+AX, ·entryTarget\+0\(SB\)\n\s*JNE`:  "CMPQ AX, $1\n\tJNZ",
					`CMPQ\s+AX, ·entryTargetY\+0\(SB\)\n\s*JNE`: "CMPQ AX, $2\n\tJNZ",
					`MOVQ\s+·foldTables\+0\(SB\), DX`:           fmt.Sprintf("MOVQ $%#x, DX", emu.AddrTable),
					`JMP\s+·updateEntryY\+0\(SB\)`:              fmt.Sprintf("MOVL $%#x, ret+32(FP)\n\tRET", toY),
					`JMP\s+·updateDispatch\+0\(SB\)`:            fmt.Sprintf("MOVL $%#x, ret+32(FP)\n\tRET", toDispatch),
					`JMP\s+·update(AVX512|HybridZ)\+0\(SB\)`:    fmt.Sprintf("MOVL $%#x, ret+32(FP)\n\tRET", toOther),
				})
				prog, err := emu.Parse(src)
				if err != nil {
					t.Fatal(err)
				}
				if got := runEntry(t, prog, "updateEntry", tab, w, 5, data); got != want&emu.Mask(w) {
					t.Errorf("update=%d: %#x, want %#x", u, got, want&emu.Mask(w))
				}
			}
		})
	}
}

// TestEntryYVEX holds updateEntryY to the AVX2 tier: no AVX-512
// extension (avo's Requires line), no register above X15, and a
// VZEROUPPER before every RET except those of CRC-32C's CRC32 stream below
// 64 bytes (the sections whose labels start with "short"), which write no
// vector register.
func TestEntryYVEX(t *testing.T) {
	for _, c := range tiersY {
		asm, _, err := generateY([]string{"go", "run", "./small"}, scaffold.CRCs[c.flag])
		if err != nil {
			t.Fatal(err)
		}
		s := string(asm)
		for _, line := range strings.Split(s, "\n") {
			if strings.HasPrefix(line, "// Requires:") && strings.Contains(line, "AVX512") {
				t.Errorf("%s: %s", c.flag, line)
			}
		}
		if regexp.MustCompile(`\b([XY](1[6-9]|2[0-9]|3[01])|Z[0-9]+|K[1-7])\b`).MatchString(s) {
			t.Errorf("%s: updateEntryY names an EVEX-only register", c.flag)
		}
		label, prev := "", ""
		for _, line := range strings.Split(s, "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || strings.HasPrefix(f[0], "//") {
				continue
			}
			switch {
			case strings.HasSuffix(f[0], ":"):
				label = f[0]
			case f[0] == "RET":
				if prev != "VZEROUPPER" && !strings.HasPrefix(label, "short") {
					t.Errorf("%s: RET after %s at label %s, want VZEROUPPER", c.flag, prev, label)
				}
			case strings.HasPrefix(label, "short") && regexp.MustCompile(`\b[XY][0-9]+\b`).MatchString(line):
				t.Errorf("%s: %q writes a vector register in the CRC32 stream", c.flag, line)
			}
			prev = f[0]
		}
	}
}
