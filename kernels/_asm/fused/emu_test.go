package main

// The fused T10-DIF + CRC-32C kernels in the interpreter of internal/emu
// (they need AVX2 and VPCLMULQDQ, which the machines here may lack): every
// guard against a bitwise CRC-16/T10-DIF, every sum against hash/crc32's
// Castagnoli, the copying kernel's bytes in q and nothing else of q
// written. Any instruction the interpreter does not model fails the test,
// and so does a generated function left unchecked.

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/difctl/difctl/kernels/_asm/internal/emu"
)

const gapByte = 0xa5

func TestEmulatedKernels(t *testing.T) {
	asm, _, err := generate([]string{"go", "run", "./fused"})
	if err != nil {
		t.Fatal(err)
	}
	prog, err := emu.Parse(string(asm))
	if err != nil {
		t.Fatal(err)
	}
	tab := emu.FoldTable(emu.T10DIF, 64)
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range [][3]int{{64, 64, 4}, {80, 80, 4}, {96, 104, 8}, {512, 512, 8}, {512, 520, 12}, {4096, 4096, 4}, {4096, 4112, 4}, {1024 + 48, 1200, 4}} {
		blockLen, stride, cnt := c[0], c[1], c[2]
		for _, kn := range []string{"fusedBlocksAVX2", "fusedBlocksCopyAVX2", "fusedBlocksAVX", "fusedBlocksCopyAVX"} {
			name, copy := kn, strings.Contains(kn, "Copy")
			t.Run(fmt.Sprintf("kernel=%s/block=%d/stride=%d", name, blockLen, stride), func(t *testing.T) {
				data := emu.Random(r, (cnt-1)*stride+blockLen)
				m, err := emu.New(prog, data)
				if err != nil {
					t.Fatal(err)
				}
				copyBytes(m.Mem[emu.AddrTable:], tab)
				var q uint64
				args := []uint64{emu.AddrDst, uint64(cnt), uint64(cnt), addrSums, uint64(cnt), uint64(cnt)}
				if copy {
					q = m.Append(len(data), gapByte)
					args = append(args, q, uint64(len(data)), uint64(len(data)))
				}
				args = append(args, emu.AddrData, uint64(len(data)), uint64(len(data)), uint64(blockLen), uint64(stride), emu.AddrTable)
				runFused(t, m, prog, name, args, data, cnt, blockLen, stride, q)
			})
		}
	}
	// fusedBlocksZ and fusedBlocksZG: groups of eight blocks; the CRC-32C
	// table at addrTab32. fusedBlocksCopyZG: groups of zCopyGroup blocks of
	// a multiple of 128 bytes (one pair of vectors a block at 128, no loop).
	const addrTab32 = emu.AddrDst + 0x1000
	tab32 := emu.FoldTable(emu.CRC32C, 64)
	t10R := emu.T10DIF
	t10R.Reflected = true
	tabR := emu.FoldTable(t10R, 64)
	for _, c := range [][3]int{{64, 64, 1}, {128, 136, 2}, {256, 320, 3}, {512, 512, 1}, {512, 520, 2}, {4096, 4096, 1}, {4096, 4104, 1}} {
		blockLen, stride, groups := c[0], c[1], c[2]
		names := []string{"fusedBlocksZ", "fusedBlocksZG"}
		if blockLen%128 == 0 {
			names = append(names, "fusedBlocksCopyZG")
		}
		for _, name := range names {
			copying := strings.HasPrefix(name, "fusedBlocksCopy")
			t.Run(fmt.Sprintf("kernel=%s/block=%d/stride=%d/groups=%d", name, blockLen, stride, groups), func(t *testing.T) {
				cnt := 8 * groups
				if copying {
					cnt = zCopyGroup * groups
				}
				data := emu.Random(r, (cnt-1)*stride+blockLen)
				m, err := emu.New(prog, data)
				if err != nil {
					t.Fatal(err)
				}
				copyBytes(m.Mem[emu.AddrTable:], tab)
				copy(m.Mem[addrTab32:], tab32)
				args := []uint64{emu.AddrDst, addrSums, emu.AddrData, uint64(groups), uint64(blockLen), uint64(stride), emu.AddrTable}
				if name != "fusedBlocksZ" {
					a := m.Append(len(tabR), 0)
					copyBytes(m.Mem[a:], tabR)
					args = append(args, a)
				}
				// q last in memory, so that checkCopy sees any write past it.
				var q uint64
				if copying {
					q = m.Append(len(data), gapByte)
					args = append([]uint64{emu.AddrDst, addrSums, q}, args[2:]...)
				}
				runFused(t, m, prog, name, append(args, addrTab32), data, cnt, blockLen, stride, q)
			})
		}
	}
	if nr := prog.NotRun(); len(nr) > 0 {
		t.Errorf("generated functions not checked in the emulator: %v", nr)
	}
}

func copyBytes(dst, src []byte) { copy(dst, src) }

// addrSums is where the sums go, after the guards.
const addrSums = emu.AddrDst + 0x800

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// runFused runs the kernel name in m with args and checks the guards and
// sums of data's cnt blocks (blockLen bytes every stride) against the
// bitwise T10-DIF and hash/crc32, that nothing past them was written, and,
// if q is not 0, the copy at q (checkCopy).
func runFused(t *testing.T, m *emu.Machine, prog *emu.Program, name string, args []uint64, data []byte, cnt, blockLen, stride int, q uint64) {
	t.Helper()
	m.PutArgs(args...)
	m.Mem[emu.AddrDst+2*cnt], m.Mem[addrSums+4*cnt] = 0x5a, 0x5a
	if _, err := m.Run(prog, name); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < cnt; i++ {
		b := data[i*stride:][:blockLen]
		got := binary.LittleEndian.Uint16(m.Mem[emu.AddrDst+2*i:])
		if want := uint16(emu.Bitwise(emu.T10DIF, 0, b)); got != want {
			t.Fatalf("dst[%d] = %#x, want %#x", i, got, want)
		}
		sum := binary.LittleEndian.Uint32(m.Mem[addrSums+4*i:])
		if want := crc32.Checksum(b, castagnoli); sum != want {
			t.Fatalf("sums[%d] = %#x, want %#x", i, sum, want)
		}
	}
	if m.Mem[emu.AddrDst+2*cnt] != 0x5a || m.Mem[addrSums+4*cnt] != 0x5a {
		t.Fatal("wrote past dst or sums")
	}
	if q != 0 {
		checkCopy(t, m.Mem[q:], data, blockLen, stride)
	}
}

// checkCopy fails t unless qm, from the emulator's memory after the
// appended buffer q (filled with gapByte), holds data's blocks and gapByte
// elsewhere: the copy wrote every byte of the blocks and nothing else.
func checkCopy(t *testing.T, qm, data []byte, blockLen, stride int) {
	t.Helper()
	for i := range qm {
		inBlock := i%stride < blockLen && i < len(data)
		if inBlock && qm[i] != data[i] || !inBlock && qm[i] != gapByte {
			t.Fatalf("q[%d] = %#x, want it copied (%#x) only within a block", i, qm[i], data[i])
		}
	}
}
