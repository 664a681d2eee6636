package main

// The fold kernels of every CRC and vector width run in the interpreter of
// internal/emu: the AVX-512 kernels, which no machine here can execute, and
// the AVX2 and PCLMUL ones, which also pass the kernel packages' tests on
// hardware that has them, so agreement checks the interpreter's semantics
// of the instructions the widths share. Every result is compared with a
// bitwise CRC, at every length from 16 to 1200 bytes (tails included) and
// longer ones, and every block layout with the copying kernel's bytes. The
// memory ends with the message (or the copy's destination), so an over-read
// (an over-write) fails, as does any instruction the interpreter does not
// model. The test fails too if a function of a generated file was not run.

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/difctl/difctl/kernels/_asm/internal/emu"
)

var emuSpecs = map[string]emu.Spec{"t10dif": emu.T10DIF, "crc32c": emu.CRC32C, "crc64nvme": emu.CRC64NVME}

const gapByte = 0xa5

func run(t *testing.T, m *emu.Machine, p *emu.Program, fn string) {
	t.Helper()
	if _, err := m.Run(p, fn); err != nil {
		t.Fatal(err)
	}
}

func TestEmulatedKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range crcs {
		es := emuSpecs[s.flag]
		tab := emu.FoldTable(es, maxFold)
		if len(tab) != tableSize {
			t.Fatalf("fold table of %d bytes, want %d", len(tab), tableSize)
		}
		asm, err := generateAsm(s, []string{"go", "run", "./fold"})
		if err != nil {
			t.Fatal(err)
		}
		prog, err := emu.Parse(string(asm))
		if err != nil {
			t.Fatal(err)
		}
		wb := s.width / 8
		for _, v := range s.kernels() {
			// The bitrev kernels (not the copying ones) read the
			// reflected CRC's table.
			copyTab, tab := tab, tab
			if s.bitrev && v.bytes == 64 {
				r := es
				r.Reflected = true
				tab = emu.FoldTable(r, maxFold)
			}
			machine := func(tab []byte) func(t *testing.T, data []byte) *emu.Machine {
				return func(t *testing.T, data []byte) *emu.Machine {
					m, err := emu.New(prog, data)
					if err != nil {
						t.Fatal(err)
					}
					copy(m.Mem[emu.AddrTable:], tab)
					return m
				}
			}
			newMachine, copyMachine := machine(tab), machine(copyTab)
			t.Run(fmt.Sprintf("crc=%s/kernel=%s", s.flag, v.name), func(t *testing.T) {
				var lens []int
				for n := 16; n <= 1200; n++ {
					lens = append(lens, n)
				}
				lens = append(lens, 4096, 4096+16*7, 4096+16*7+9, 8192+48, 8192+63)
				for _, n := range lens {
					data := emu.Random(r, n)
					crc := r.Uint64() & emu.Mask(s.width)
					m := newMachine(t, data)
					m.PutArgs(crc, emu.AddrData, uint64(n), uint64(n), emu.AddrTable)
					run(t, m, prog, "foldUpdate"+v.name)
					got := m.Get64(40) & emu.Mask(s.width)
					if want := emu.Bitwise(es, crc, data); got != want {
						t.Fatalf("update len=%d: %#x, want %#x", n, got, want)
					}
					if s.bitrev && v.bytes == 64 {
						m := copyMachine(t, data)
						m.PutArgs(crc, emu.AddrData, uint64(n), uint64(n), emu.AddrTable)
						run(t, m, prog, "foldUpdate"+v.name+"Shuf")
						got := m.Get64(40) & emu.Mask(s.width)
						if want := emu.Bitwise(es, crc, data); got != want {
							t.Fatalf("update (Shuf) len=%d: %#x, want %#x", n, got, want)
						}
					}
				}
				for _, c := range [][3]int{{512, 512, 8}, {512, 520, 16}, {64, 64, 8}, {80, 96, 8}, {4096, 4104, 8}, {1024 + 48, 1200, 8}, {32, 48, 8}, {16, 16, 4}, {16, 24, 8}, {512, 512, 4}, {2048, 2048, 12}, {256, 256, 8}, {320, 336, 4}, {384 + 16, 384 + 24, 4}} {
					blockLen, stride, cnt := c[0], c[1], c[2]
					if blockLen < v.bytes {
						continue
					}
					data := emu.Random(r, (cnt-1)*stride+blockLen)
					m := newMachine(t, data)
					m.PutArgs(emu.AddrDst, uint64(cnt), uint64(cnt), emu.AddrData, uint64(len(data)), uint64(len(data)), uint64(blockLen), uint64(stride), emu.AddrTable)
					sentinel := byte(0x5a)
					m.Mem[emu.AddrDst+cnt*wb] = sentinel
					run(t, m, prog, "foldBlocks"+v.name)
					for i := 0; i < cnt; i++ {
						var buf [8]byte
						copy(buf[:], m.Mem[emu.AddrDst+i*wb:emu.AddrDst+(i+1)*wb])
						got := binary.LittleEndian.Uint64(buf[:])
						// init = xorout: the finalised empty CRC is 0.
						want := emu.Bitwise(es, 0, data[i*stride:i*stride+blockLen])
						if got != want {
							t.Fatalf("blocks %d/%d: dst[%d] = %#x, want %#x", blockLen, stride, i, got, want)
						}
					}
					if m.Mem[emu.AddrDst+cnt*wb] != sentinel {
						t.Fatalf("blocks %d/%d: wrote past dst", blockLen, stride)
					}

					// The copying kernels: the same CRCs, the blocks in q,
					// nothing else of q written; the ZMM one also one block
					// at a time (Seq).
					seqs := []bool{false}
					if v.bytes == 64 {
						seqs = append(seqs, true)
					}
					for _, seq := range seqs {
						m = copyMachine(t, data)
						q := m.Append(len(data), gapByte)
						m.PutArgs(emu.AddrDst, uint64(cnt), uint64(cnt), q, uint64(len(data)), uint64(len(data)), emu.AddrData, uint64(len(data)), uint64(len(data)), uint64(blockLen), uint64(stride), emu.AddrTable)
						kn := "foldBlocksCopy" + v.name
						if seq {
							kn += "Seq"
						}
						run(t, m, prog, kn)
						for i := 0; i < cnt; i++ {
							var buf [8]byte
							copy(buf[:], m.Mem[emu.AddrDst+i*wb:emu.AddrDst+(i+1)*wb])
							got := binary.LittleEndian.Uint64(buf[:])
							want := emu.Bitwise(es, 0, data[i*stride:i*stride+blockLen])
							if got != want {
								t.Fatalf("blocks copy %d/%d: dst[%d] = %#x, want %#x", blockLen, stride, i, got, want)
							}
						}
						qm := m.Mem[q:]
						for i := range qm {
							inBlock := i%stride < blockLen
							if inBlock && qm[i] != data[i] || !inBlock && qm[i] != gapByte {
								t.Fatalf("blocks copy %d/%d: q[%d] = %#x, data %#x", blockLen, stride, i, qm[i], data[i])
							}
						}
					}
				}
			})
		}
		if nr := prog.NotRun(); len(nr) > 0 {
			t.Errorf("crc=%s: generated functions not checked in the emulator: %v", s.flag, nr)
		}
	}
}

// TestEmulatorRejects checks that the interpreter fails on what it does not
// model instead of skipping it: an unknown instruction, an access past the
// memory.
func TestEmulatorRejects(t *testing.T) {
	for _, c := range []struct{ name, asm string }{
		{"instruction", "TEXT ·f(SB), NOSPLIT, $0-0\n\tVPERMQ $0x4e, Y1, Y2\n\tRET\n"},
		{"over-read", "TEXT ·f(SB), NOSPLIT, $0-0\n\tMOVQ $0x100000, AX\n\tMOVQ (AX), BX\n\tRET\n"},
		{"register", "TEXT ·f(SB), NOSPLIT, $0-0\n\tMOVQ $1, EAX\n\tRET\n"},
	} {
		p, err := emu.Parse(c.asm)
		if err != nil {
			t.Fatal(err)
		}
		m, err := emu.New(p, make([]byte, 64))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Run(p, "f"); err == nil {
			t.Errorf("%s: Run succeeded, want an error", c.name)
		} else {
			t.Logf("%s: %v", c.name, err)
		}
	}
}
