package main

// The Poly1305 lane kernels in the interpreter of internal/emu: the
// committed kernels/poly1305/zblocks_amd64.s (the CI leg "generated code is
// fresh" keeps it equal to this generator's output), every lane of every
// kernel against Poly1305 evaluated with math/big on that lane's chunks.
// lanesAVX2 and lanesHybridAVX2 also run on this machine's hardware (the
// package tests of kernels/poly1305), so their agreement here checks the
// interpreter's semantics of what the kernels share; the IFMA kernels
// (lanesIFMA, lanesIFMAS, lanesIFMASCopy) run natively only where the CPU
// has AVX-512 IFMA (some machines here do, CI's may not), so they are
// checked here on every machine. The instruction counts per byte of the
// kernels are logged. Any instruction the interpreter does
// not model fails the test, and so does a function of the file left
// unchecked.

import (
	"bytes"
	"encoding/binary"
	"math/big"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/difctl/difctl/kernels/_asm/internal/emu"
	"github.com/difctl/difctl/kernels/_asm/internal/ifma"
)

const asmFile = "../../poly1305/zblocks_amd64.s"

var polyP = ifma.P

// leBig is b as a little-endian number.
func leBig(b []byte) *big.Int {
	be := make([]byte, len(b))
	for i := range b {
		be[len(b)-1-i] = b[i]
	}
	return new(big.Int).SetBytes(be)
}

// limbsBig returns Σ limb[k]·2^(bits·k).
func limbsBig(l []uint64, bits uint) *big.Int {
	x := new(big.Int)
	for k := len(l) - 1; k >= 0; k-- {
		x.Lsh(x, bits)
		x.Add(x, new(big.Int).SetUint64(l[k]))
	}
	return x
}

// splitBig returns n limbs of x (below 2^(bits·n)).
var splitBig = ifma.Split

// polyLayout describes one lane kernel to the test.
type polyLayout struct {
	fn     string
	lanes  int // vector lanes
	scalar int // blocks in general registers (h[20+3i:23+3i], the generic form)
	limbs  int
	bits   uint // radix 2^bits
	hWords int  // words of h
	wrap   uint64
	powers int  // of r in a radix-2^26 key: 4 (laneKey) or 8 (laneKey8)
	copy   bool // the kernel copies p to q and absorbs q (lanesAVX2R8Copy)
	pf     bool // the kernel takes a prefetch address last (lanesIFMA)
	stream bool // chunks a multiple of 4 (lanesIFMAS)
	scopy  bool // and then q, the blocks copied there (lanesIFMASCopy)
	// wrap multiplies the key's wrap words: 5 (2^130 ≡ 5) for radix 2^26,
	// 20 (2^132 ≡ 20) for radix 2^44.
}

var polyLayouts = []polyLayout{
	{fn: "lanesAVX2", lanes: lanes, limbs: limbs, bits: limbBits, hWords: limbs * lanes, wrap: 5, powers: powers},
	{fn: "lanesHybridAVX2", lanes: lanes, scalar: scalarLanes, limbs: limbs, bits: limbBits, hWords: hybridWords, wrap: 5, powers: powers},
	{fn: "lanesAVX2R8", lanes: lanes, limbs: limbs, bits: limbBits, hWords: limbs * lanes, wrap: 5, powers: powers8},
	{fn: "lanesHybridR8", lanes: lanes, scalar: scalarLanes, limbs: limbs, bits: limbBits, hWords: hybridWords, wrap: 5, powers: powers8},
	{fn: "lanesAVX2R8Copy", lanes: lanes, limbs: limbs, bits: limbBits, hWords: limbs * lanes, wrap: 5, powers: powers8, copy: true},
	{fn: "lanesIFMA", lanes: lanes44, limbs: 3, bits: 44, hWords: 3 * lanes44, wrap: 20, pf: true},
	{fn: "lanesIFMAS", lanes: lanes44, limbs: 3, bits: 44, hWords: 3 * lanes44, wrap: 20, pf: true, stream: true},
	{fn: "lanesIFMASCopy", lanes: lanes44, limbs: 3, bits: 44, hWords: 3 * lanes44, wrap: 20, pf: true, stream: true, scopy: true},
}

// blocks is the number of blocks a kernel absorbs.
func (l polyLayout) blocks() int { return l.lanes + l.scalar }

// keyTable builds the key table of layout l for r (clamped), with the
// powers of r from math/big. laneKey (the AVX2 kernels): R(j,k), limb k of
// r^(j+1), at word 4(5j+k), S = 5R at 80+4(5j+k), four lanes each, j =
// 0..3, then r itself as two words at 160 (laneKey8: j = 0..7, S at 160, r
// at 320). ifmaKey: ifma.KeyTable, in the layout of ifma's Key* constants.
func (l polyLayout) keyTable(r *big.Int) []uint64 {
	if l.lanes == lanes44 {
		return ifma.KeyTable(r)
	}
	sOff, scalarOff := keySOf(l.powers)/8, keyScalarOf(l.powers)/8
	k := make([]uint64, scalarOff+2)
	pw := new(big.Int).Set(r)
	for j := 0; j < l.powers; j++ {
		for i, x := range splitBig(pw, l.bits, l.limbs) {
			for ln := 0; ln < lanes; ln++ {
				k[(keyR/8)+4*(limbs*j+i)+ln] = x
				k[sOff+4*(limbs*j+i)+ln] = l.wrap * x
			}
		}
		pw.Mul(pw, r)
		pw.Mod(pw, polyP)
	}
	rw := splitBig(r, 64, 2)
	k[scalarOff], k[scalarOff+1] = rw[0], rw[1]
	return k
}

// Where the key table and h go; the blocks are at emu.AddrData, ending the
// memory, so an over-read fails.
// ifmaKey (4320 bytes) runs past emu.AddrDst, so h is 4 KiB further on.
const (
	addrKey = emu.AddrTable
	addrH   = emu.AddrDst + 0x1000
)

// runKernel runs kernel l over chunks chunks of each block in data (block j
// at j·stride) from the accumulators h0, and returns the accumulators and
// the number of instructions executed. It fails t if the kernel wrote
// anything but h, or for a copying kernel anything but h and the blocks'
// chunks in q, or those not equal to data's. A copying kernel's q is at
// emu.AddrData, filled with gapByte, and p (data) after it (after the
// associated data for lanesAVX2R8Copy), ending the memory.
func runKernel(t *testing.T, prog *emu.Program, l polyLayout, key, h0 []uint64, data []byte, stride, chunks int, ad []byte, adLen int) ([]uint64, int) {
	t.Helper()
	init := data
	if l.copy || l.scopy {
		init = bytes.Repeat([]byte{gapByte}, len(data))
	}
	m, err := emu.New(prog, init)
	if err != nil {
		t.Fatal(err)
	}
	addrP, addrAD := uint64(emu.AddrData), uint64(0)
	if l.scopy {
		addrP = m.Append(len(data), 0)
		copy(m.Mem[addrP:], data)
	}
	if l.copy {
		addrAD = m.Append(len(ad), 0)
		copy(m.Mem[addrAD:], ad)
		addrP = m.Append(len(data), 0)
		copy(m.Mem[addrP:], data)
	}
	// Everything from the key to the end of h's page is a canary but key
	// and h.
	for i := addrKey; i < emu.AddrData; i++ {
		m.Mem[i] = 0x5a
	}
	if addrKey+8*len(key) > addrH {
		t.Fatalf("%s: the key table (%d words) overlaps h", l.fn, len(key))
	}
	for i, v := range key {
		binary.LittleEndian.PutUint64(m.Mem[addrKey+8*i:], v)
	}
	for i, v := range h0 {
		binary.LittleEndian.PutUint64(m.Mem[addrH+8*i:], v)
	}
	before := bytes.Clone(m.Mem[addrKey:])
	dn := uint64(len(data))
	args := []uint64{addrH, addrP, dn, dn, uint64(stride), uint64(chunks), addrKey}
	if l.pf {
		// An address outside the emulator's memory: a prefetch reads
		// nothing and never faults.
		args = append(args, 1<<62)
	}
	if l.scopy {
		args = append(args, emu.AddrData)
	}
	if l.copy {
		// The prefetch distance 0 (the blocks themselves; a prefetch has
		// no effect here), then the associated data.
		an := uint64(len(ad))
		args = []uint64{addrH, emu.AddrData, dn, dn, addrP, dn, dn, uint64(stride), uint64(chunks), 0, addrAD, an, an, uint64(adLen), addrKey}
	}
	for i, v := range args {
		m.Put64(8*i, v)
	}
	steps, err := m.Run(prog, l.fn)
	if err != nil {
		t.Fatal(err)
	}
	h := make([]uint64, len(h0))
	for i := range h {
		h[i] = binary.LittleEndian.Uint64(m.Mem[addrH+8*i:])
	}
	// What must be unchanged: all of it but the h words (and the copy).
	after := bytes.Clone(m.Mem[addrKey:])
	copy(after[addrH-addrKey:], before[addrH-addrKey:][:8*l.hWords])
	if l.copy || l.scopy {
		q := after[emu.AddrData-addrKey:][:len(data)]
		for b := range l.blocks() {
			off := b * stride
			if !bytes.Equal(q[off:off+16*chunks], data[off:off+16*chunks]) {
				t.Fatalf("%s: block %d of q is not p's", l.fn, b)
			}
			copy(q[off:off+16*chunks], bytes.Repeat([]byte{gapByte}, 16*chunks))
		}
	}
	if !bytes.Equal(after, before) {
		for i := range after {
			if after[i] != before[i] {
				t.Fatalf("%s wrote %#x outside h's words (and the copy)", l.fn, addrKey+i)
			}
		}
	}
	return h, steps
}

// gapByte fills the q of a copying kernel before the call.
const gapByte = 0xa5

// lane returns lane ln's limbs of a vector state (limb k at [lanes·k+ln]).
func (l polyLayout) lane(h []uint64, ln int) []uint64 {
	out := make([]uint64, l.limbs)
	for k := range out {
		out[k] = h[l.lanes*k+ln]
	}
	return out
}

func TestEmulatedPoly1305(t *testing.T) {
	src, err := os.ReadFile(asmFile)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := emu.Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(11, 12))
	perByte := map[string]float64{}
	for _, l := range polyLayouts {
		t.Run("kernel="+l.fn, func(t *testing.T) {
			for trial := 0; trial < 61; trial++ {
				// Trial 60, the copying kernel's alone: the four one-chunk
				// blocks of kernels/poly1305's TestBlocksADCopyCarry
				// (carryGroup 1499464, under the r of all ones), whose
				// lane leaves carryChain with limb 1 at 2^26: fullCarry
				// must carry it.
				carryTrial := trial == 60
				if carryTrial && !l.copy {
					continue
				}
				chunks := trial % 23 // every remainder mod 8, 4 and 2, and 0
				if l.stream {
					// Rows of four chunks: 0 (h unchanged), then 1..9,
					// the last step of every length 1..4 alone and after
					// one or two ordinary steps.
					chunks = 4 * (trial % 10)
				}
				if trial == 59 {
					chunks = 256 // a 4 KiB block
				}
				if carryTrial {
					chunks = 1
				}
				stride := 16*chunks + 16*(trial%3) // gaps of 0, 16, 32 bytes
				if carryTrial {
					stride = 16
				}
				data := make([]byte, (l.blocks()-1)*stride+16*chunks)
				// All ones (data and r, the largest limbs and products)
				// in one trial of seven, random bytes in the others.
				allOnes := trial%7 == 0 || carryTrial
				for i := range data {
					data[i] = byte(rnd.Uint32())
					if allOnes {
						data[i] = 0xff
					}
				}
				if carryTrial {
					crng := rand.New(rand.NewPCG(1, 1499464))
					for i := 0; i < len(data); i += 8 {
						binary.LittleEndian.PutUint64(data[i:], crng.Uint64())
					}
				}
				var rb [16]byte
				for i := range rb {
					rb[i] = byte(rnd.Uint32())
					if allOnes {
						rb[i] = 0xff
					}
				}
				for _, i := range []int{3, 7, 11, 15} {
					rb[i] &= 15
				}
				for _, i := range []int{4, 8, 12} {
					rb[i] &= 252
				}
				r := leBig(rb[:])
				// Starting accumulators: zero; or random limbs below
				// 2^bits (left by an earlier call), or below 2^(bits+1)
				// (the kernels' precondition); the scalar lane h0, h1
				// random and h2 <= 4 (the generic form between calls).
				h0 := make([]uint64, l.hWords)
				if trial%2 == 1 && !carryTrial {
					top := l.bits
					if trial%4 == 3 {
						top++
					}
					for i := range l.lanes * l.limbs {
						h0[i] = rnd.Uint64() >> (64 - top)
					}
					for i := range l.scalar {
						w := l.lanes*l.limbs + 3*i
						h0[w], h0[w+1], h0[w+2] = rnd.Uint64(), rnd.Uint64(), rnd.Uint64N(5)
					}
				}
				// The copying kernel's associated data: 0 to 10 chunks a
				// block (every step of eight, four, two and one), and it
				// starts from zero accumulators whatever h holds.
				adLen := 0
				var ad []byte
				if l.copy {
					adLen = 16 * (trial % 11)
					if carryTrial {
						adLen = 0
					}
					ad = make([]byte, l.blocks()*adLen)
					for i := range ad {
						ad[i] = byte(rnd.Uint32())
						if allOnes {
							ad[i] = 0xff
						}
					}
				}
				h, n := runKernel(t, prog, l, l.keyTable(r), h0, data, stride, chunks, ad, adLen)
				if chunks == 256 {
					perByte[l.fn] = float64(n) / float64(l.blocks()*16*chunks)
				}
				for b := 0; b < l.blocks(); b++ {
					var got, want *big.Int
					if b < l.lanes {
						want = limbsBig(l.lane(h0, b), l.bits)
						limbs := l.lane(h, b)
						for k, v := range limbs {
							if v >= 1<<(l.bits+1) {
								t.Fatalf("trial %d block %d: limb %d = %#x, not below 2^%d", trial, b, k, v, l.bits+1)
							}
						}
						if l.copy {
							// The copying kernel carries its output fully
							// (fullCarry; blocksAVX2R8CopyWhole relies on it).
							for k, v := range limbs {
								if bound := uint64(1) << l.bits; v >= bound && (k < len(limbs)-1 || v >= bound+1<<10) {
									t.Fatalf("trial %d block %d: limb %d = %#x, not carried", trial, b, k, v)
								}
							}
						}
						if l.stream && chunks > 0 {
							// The stream kernels carry the streams' sum to
							// combine44's bounds (packReduce44 relies on
							// them): 2^44, 2^44 + 1, 2^42.
							for k, bound := range []uint64{1 << 44, 1<<44 + 1, 1 << 42} {
								if limbs[k] >= bound {
									t.Fatalf("trial %d block %d: limb %d = %#x, not below %#x", trial, b, k, limbs[k], bound)
								}
							}
						}
						got = limbsBig(limbs, l.bits)
					} else {
						w := l.lanes*l.limbs + 3*(b-l.lanes)
						want = limbsBig(h0[w:w+3], 64)
						if h[w+2] > 4 {
							t.Fatalf("trial %d scalar block %d: h2 = %d, above 4", trial, b, h[w+2])
						}
						got = limbsBig(h[w:w+3], 64)
					}
					want.Mod(want, polyP)
					var msg []byte
					if l.copy {
						want.SetInt64(0)
						msg = append(msg, ad[b*adLen:(b+1)*adLen]...)
					}
					msg = append(msg, data[b*stride:][:16*chunks]...)
					for c := 0; c < len(msg)/16; c++ {
						chunk := msg[16*c:][:16]
						want.Add(want, leBig(append(bytes.Clone(chunk), 1)))
						want.Mul(want, r)
						want.Mod(want, polyP)
					}
					got.Mod(got, polyP)
					if got.Cmp(want) != 0 {
						t.Fatalf("trial %d chunks=%d stride=%d block %d: %x, want %x", trial, chunks, stride, b, got, want)
					}
				}
			}
		})
	}
	t.Logf("instructions per byte over 4 KiB blocks: AVX2 %.4f, hybrid AVX2 %.4f, AVX2 R8 %.4f, hybrid R8 %.4f, AVX2 R8 copy %.4f, AVX-512 IFMA %.4f (%.2fx fewer than AVX2), IFMA streams %.4f, IFMA streams copying %.4f",
		perByte["lanesAVX2"], perByte["lanesHybridAVX2"], perByte["lanesAVX2R8"], perByte["lanesHybridR8"],
		perByte["lanesAVX2R8Copy"], perByte["lanesIFMA"], perByte["lanesAVX2"]/perByte["lanesIFMA"],
		perByte["lanesIFMAS"], perByte["lanesIFMASCopy"])
	if nr := prog.NotRun(); len(nr) > 0 {
		t.Errorf("functions not checked in the emulator: %v", nr)
	}
}

// TestEmulatorRejectsPoly checks that the forms of the Poly1305
// instructions the interpreter does not model fail rather than run: a
// masked EVEX add, a broadcast from a general register, SHLD, the
// three-operand IMULQ, a misaligned VMOVDQA64.
func TestEmulatorRejectsPoly(t *testing.T) {
	for _, c := range []struct{ name, body string }{
		{"masked", "VPADDQ Z1, Z2, K1, Z3"},
		{"broadcast from GPR", "VPBROADCASTQ AX, Z1"},
		{"SHLD", "SHLQ $2, AX, BX"},
		{"IMUL3", "IMULQ $3, AX, BX"},
		{"VMOVDQA64 misaligned", "MOVQ $0x4008, AX\n\tVMOVDQA64 (AX), Z1"},
	} {
		p, err := emu.Parse("TEXT ·f(SB), NOSPLIT, $0-0\n\t" + c.body + "\n\tRET\n")
		if err != nil {
			t.Fatal(err)
		}
		m, err := emu.New(p, make([]byte, 256))
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
