package main

// A small interpreter of the generated Go assembly, for the kernels this
// machine cannot run. It executes the AVX2 kernels too: the same kernels pass
// the kernel packages' tests on real hardware, so agreement here checks the
// interpreter's semantics of every instruction the two widths share, and what
// is left unchecked by hardware is the AVX-512-only instructions
// (VMOVDQU64, VPXORQ, VPTERNLOGD, VBROADCASTI32X4, VSHUFI64X2,
// VEXTRACTI32X4, VEXTRACTI64X4) and the ZMM width of the shared ones, which
// follow the Intel SDM definitions below. Every result is compared with a
// bitwise CRC, at every length from 16 to 1200 bytes (tails included) and
// longer ones. The memory ends with the message, so an over-read panics.

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

type opKind int

const (
	opImm opKind = iota
	opGPR
	opVec
	opMem
)

type operandT struct {
	kind  opKind
	imm   int64
	reg   string // GPR name
	vec   int    // vector register number
	width int    // vector bytes: 16, 32, 64
	// memory: base + index*scale + disp, or an FP/SB symbol
	base, index string
	scale       int64
	disp        int64
	sym         string // "FP" or a static symbol name
}

type instr struct {
	op   string
	args []operandT
	line string
}

type program struct {
	funcs  map[string][]instr
	labels map[string]map[string]int
}

func parseOperand(s string) (operandT, error) {
	s = strings.TrimSpace(s)
	switch {
	case strings.HasPrefix(s, "$"):
		v, err := strconv.ParseInt(s[1:], 0, 64)
		if err != nil {
			u, err2 := strconv.ParseUint(s[1:], 0, 64)
			if err2 != nil {
				return operandT{}, err
			}
			v = int64(u)
		}
		return operandT{kind: opImm, imm: v}, nil
	case strings.Contains(s, "("):
		o := operandT{kind: opMem, scale: 1}
		i := strings.Index(s, "(")
		pre, rest := s[:i], s[i:]
		if strings.HasSuffix(rest, "(FP)") || strings.HasSuffix(rest, "(SB)") {
			o.sym = rest[1 : len(rest)-1]
			if j := strings.LastIndexAny(pre, "+-"); j >= 0 {
				v, err := strconv.ParseInt(pre[j:], 0, 64)
				if err != nil {
					return o, err
				}
				o.disp = v
				pre = pre[:j]
			}
			if o.sym == "SB" {
				o.sym = pre
			}
			return o, nil
		}
		if pre != "" {
			v, err := strconv.ParseInt(pre, 0, 64)
			if err != nil {
				return o, err
			}
			o.disp = v
		}
		parts := strings.Split(strings.TrimSuffix(strings.TrimPrefix(rest, "("), ")"), ")(")
		o.base = parts[0]
		if len(parts) > 1 {
			idx, sc, _ := strings.Cut(parts[1], "*")
			o.index = idx
			v, err := strconv.ParseInt(sc, 10, 64)
			if err != nil {
				return o, err
			}
			o.scale = v
		}
		return o, nil
	case len(s) >= 2 && (s[0] == 'X' || s[0] == 'Y' || s[0] == 'Z') && s[1] >= '0' && s[1] <= '9':
		n, err := strconv.Atoi(s[1:])
		if err != nil {
			return operandT{}, err
		}
		w := map[byte]int{'X': 16, 'Y': 32, 'Z': 64}[s[0]]
		return operandT{kind: opVec, vec: n, width: w}, nil
	}
	return operandT{kind: opGPR, reg: s}, nil
}

func parse(asm string) (*program, error) {
	p := &program{funcs: map[string][]instr{}, labels: map[string]map[string]int{}}
	var cur string
	for _, line := range strings.Split(asm, "\n") {
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "DATA") || strings.HasPrefix(line, "GLOBL"):
			continue
		case strings.HasPrefix(line, "TEXT"):
			name := strings.TrimPrefix(strings.Fields(line)[1], "·")
			cur = strings.TrimSuffix(name, "(SB),")
			p.labels[cur] = map[string]int{}
			continue
		case strings.HasSuffix(line, ":"):
			p.labels[cur][strings.TrimSuffix(line, ":")] = len(p.funcs[cur])
			continue
		}
		op, rest, _ := strings.Cut(line, " ")
		in := instr{op: op, line: line}
		if rest = strings.TrimSpace(rest); rest != "" {
			for _, a := range strings.Split(rest, ",") {
				o, err := parseOperand(a)
				if err != nil {
					return nil, fmt.Errorf("%q: %v", line, err)
				}
				in.args = append(in.args, o)
			}
		}
		p.funcs[cur] = append(p.funcs[cur], in)
	}
	return p, nil
}

type machine struct {
	gpr    map[string]uint64
	v      [32][8]uint64
	mem    []byte
	fp     uint64
	syms   map[string]uint64
	cf, zf bool
}

func (m *machine) addr(o operandT) uint64 {
	if o.sym == "FP" {
		return m.fp + uint64(o.disp)
	}
	if o.sym != "" {
		a, ok := m.syms[o.sym]
		if !ok {
			panic("unknown symbol " + o.sym)
		}
		return a + uint64(o.disp)
	}
	a := m.gpr[o.base] + uint64(o.disp)
	if o.index != "" {
		a += m.gpr[o.index] * uint64(o.scale)
	}
	return a
}

func (m *machine) load(a uint64, n int) []byte { return m.mem[a : a+uint64(n) : a+uint64(n)] }

// vecVal reads n bytes of a vector operand (register or memory) as quadwords.
func (m *machine) vecVal(o operandT, n int) [8]uint64 {
	var r [8]uint64
	if o.kind == opVec {
		copy(r[:n/8], m.v[o.vec][:n/8])
		return r
	}
	b := m.load(m.addr(o), n)
	for i := 0; i < n/8; i++ {
		r[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return r
}

// setVec writes a VEX/EVEX destination: bits beyond its width are zeroed.
func (m *machine) setVec(o operandT, v [8]uint64) {
	for i := range m.v[o.vec] {
		if i < o.width/8 {
			m.v[o.vec][i] = v[i]
		} else {
			m.v[o.vec][i] = 0
		}
	}
}

func (m *machine) gval(o operandT) uint64 {
	switch o.kind {
	case opImm:
		return uint64(o.imm)
	case opGPR:
		return m.gpr[o.reg]
	case opMem:
		return binary.LittleEndian.Uint64(m.load(m.addr(o), 8))
	}
	panic("bad operand")
}

func clmul(a, b uint64) (lo, hi uint64) {
	for i := uint(0); i < 64; i++ {
		if b>>i&1 != 0 {
			lo ^= a << i
			if i > 0 {
				hi ^= a >> (64 - i)
			}
		}
	}
	return
}

func bytesOf(v [8]uint64) (b [64]byte) {
	for i, q := range v {
		binary.LittleEndian.PutUint64(b[8*i:], q)
	}
	return
}

func fromBytes(b [64]byte) (v [8]uint64) {
	for i := range v {
		v[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return
}

func (m *machine) run(p *program, fn string) (steps int) {
	code := p.funcs[fn]
	if code == nil {
		panic("no function " + fn)
	}
	pc := 0
	for {
		steps++
		if steps > 10_000_000 {
			panic("runaway")
		}
		in := code[pc]
		pc++
		a := in.args
		last := func() operandT { return a[len(a)-1] }
		w := 0
		if len(a) > 0 && last().kind == opVec {
			w = last().width
		}
		switch in.op {
		case "RET":
			return steps
		case "MOVQ", "MOVL", "MOVW", "MOVWQZX", "MOVLQZX":
			src, dst := a[0], a[1]
			size := map[string]int{"MOVQ": 8, "MOVL": 4, "MOVW": 2, "MOVWQZX": 2, "MOVLQZX": 4}[in.op]
			var v uint64
			switch {
			case src.kind == opMem:
				b := m.load(m.addr(src), size)
				var buf [8]byte
				copy(buf[:], b)
				v = binary.LittleEndian.Uint64(buf[:])
			default:
				v = m.gval(src)
			}
			if size < 8 {
				v &= 1<<(8*size) - 1
			}
			switch dst.kind {
			case opGPR:
				m.gpr[dst.reg] = v
			case opMem:
				var buf [8]byte
				binary.LittleEndian.PutUint64(buf[:], v)
				copy(m.load(m.addr(dst), size), buf[:size])
			default:
				panic(in.line)
			}
		case "ADDQ":
			m.gpr[a[1].reg] += m.gval(a[0])
		case "ANDQ":
			m.gpr[a[1].reg] &= m.gval(a[0])
		case "TESTQ":
			m.cf, m.zf = false, m.gval(a[0])&m.gval(a[1]) == 0
		case "NEGQ":
			m.gpr[a[0].reg] = -m.gpr[a[0].reg]
		case "SUBQ", "CMPQ":
			x, y := m.gval(a[0]), m.gval(a[1])
			if in.op == "SUBQ" {
				x, y = y, x // SUBQ src, dst: dst - src
			}
			r := x - y
			m.cf, m.zf = x < y, r == 0
			switch {
			case in.op != "SUBQ":
			case a[1].kind == opMem:
				// The kernels keep their count of blocks in the frame.
				binary.LittleEndian.PutUint64(m.load(m.addr(a[1]), 8), r)
			default:
				m.gpr[a[1].reg] = r
			}
		case "JB", "JAE", "JNZ", "JZ", "JMP":
			take := map[string]bool{"JB": m.cf, "JAE": !m.cf, "JNZ": !m.zf, "JZ": m.zf, "JMP": true}[in.op]
			if take {
				t, ok := p.labels[fn][a[0].reg]
				if !ok {
					panic("no label " + a[0].reg)
				}
				pc = t
			}
		case "LEAQ":
			m.gpr[a[1].reg] = m.addr(a[0])
		case "SHLQ":
			m.gpr[a[1].reg] <<= uint(a[0].imm)
		case "SHRQ":
			m.gpr[a[1].reg] >>= uint(a[0].imm)
		case "XORQ":
			m.gpr[a[1].reg] ^= m.gval(a[0])
		case "NOTQ":
			m.gpr[a[0].reg] = ^m.gpr[a[0].reg]
		case "NOTL":
			m.gpr[a[0].reg] = uint64(^uint32(m.gpr[a[0].reg]))
		case "VZEROUPPER":
			for i := 0; i < 16; i++ {
				for j := 2; j < 8; j++ {
					m.v[i][j] = 0
				}
			}
		case "VMOVQ":
			src, dst := a[0], a[1]
			switch {
			case dst.kind == opGPR:
				m.gpr[dst.reg] = m.v[src.vec][0]
			case src.kind == opGPR:
				m.setVec(dst, [8]uint64{m.gpr[src.reg]})
			default:
				m.setVec(dst, [8]uint64{m.v[src.vec][0]})
			}
		case "VPEXTRQ":
			m.gpr[a[2].reg] = m.v[a[1].vec][a[0].imm&1]
		case "VMOVDQU", "VMOVDQU64", "VMOVDQA":
			if last().kind == opMem {
				n := a[0].width
				b := bytesOf(m.vecVal(a[0], n))
				copy(m.load(m.addr(last()), n), b[:n])
				break
			}
			m.setVec(last(), m.vecVal(a[0], w))
		case "PREFETCHT0":
			// A hint: no architectural effect, and it never faults.
		case "VBROADCASTI128", "VBROADCASTI32X4":
			s := m.vecVal(a[0], 16)
			var r [8]uint64
			for i := 0; i < w/8; i += 2 {
				r[i], r[i+1] = s[0], s[1]
			}
			m.setVec(last(), r)
		case "VPXOR", "VPXORQ", "VPAND":
			x, y := m.vecVal(a[0], w), m.vecVal(a[1], w)
			for i := range x {
				if in.op == "VPAND" {
					x[i] &= y[i]
				} else {
					x[i] ^= y[i]
				}
			}
			m.setVec(last(), x)
		case "VPTERNLOGD":
			// Intel: VPTERNLOGD dst(A), B, C/m, imm; Go: imm, C, B, A.
			imm := uint64(a[0].imm)
			c, b, av := m.vecVal(a[1], w), m.vecVal(a[2], w), m.vecVal(a[3], w)
			var r [8]uint64
			for i := 0; i < w/8; i++ {
				for bit := uint(0); bit < 64; bit++ {
					idx := (av[i]>>bit&1)<<2 | (b[i]>>bit&1)<<1 | c[i]>>bit&1
					r[i] |= (imm >> idx & 1) << bit
				}
			}
			m.setVec(last(), r)
		case "VPCLMULQDQ":
			// Intel: dst, src1, src2, imm (imm[0] picks src1's quadword,
			// imm[4] src2's); Go: imm, src2, src1, dst.
			imm := a[0].imm
			s2, s1 := m.vecVal(a[1], w), m.vecVal(a[2], w)
			var r [8]uint64
			for l := 0; l < w/16; l++ {
				r[2*l], r[2*l+1] = clmul(s1[2*l+int(imm&1)], s2[2*l+int(imm>>4&1)])
			}
			m.setVec(last(), r)
		case "VPSHUFB":
			// Go: ctrl, src, dst. Per 128-bit lane.
			ctl, src := bytesOf(m.vecVal(a[0], w)), bytesOf(m.vecVal(a[1], w))
			var r [64]byte
			for i := 0; i < w; i++ {
				if ctl[i]&0x80 == 0 {
					r[i] = src[i&^15+int(ctl[i]&15)]
				}
			}
			m.setVec(last(), fromBytes(r))
		case "VPSRLDQ", "VPSLLDQ":
			n := int(a[0].imm)
			src := bytesOf(m.vecVal(a[1], w))
			var r [64]byte
			for l := 0; l < w; l += 16 {
				for i := 0; i < 16; i++ {
					j := i + n
					if in.op == "VPSLLDQ" {
						j = i - n
					}
					if j >= 0 && j < 16 {
						r[l+i] = src[l+j]
					}
				}
			}
			m.setVec(last(), fromBytes(r))
		case "VPSLLQ", "VPSRLQ":
			n := uint(a[0].imm)
			x := m.vecVal(a[1], w)
			for i := range x {
				if in.op == "VPSLLQ" {
					x[i] <<= n
				} else {
					x[i] >>= n
				}
			}
			m.setVec(last(), x)
		case "VEXTRACTI128", "VEXTRACTI32X4", "VEXTRACTI64X4":
			n := 16
			if in.op == "VEXTRACTI64X4" {
				n = 32
			}
			src := m.v[a[1].vec]
			var r [8]uint64
			off := int(a[0].imm) * n / 8
			copy(r[:n/8], src[off:off+n/8])
			m.setVec(last(), r)
		case "VSHUFI64X2":
			// Intel: dst, src1, src2, imm: lanes 0,1 from src1, 2,3 from
			// src2, each chosen by two bits of imm. Go: imm, src2, src1, dst.
			imm := a[0].imm
			s2, s1 := m.vecVal(a[1], 64), m.vecVal(a[2], 64)
			var r [8]uint64
			for l := 0; l < 4; l++ {
				src := s1
				if l >= 2 {
					src = s2
				}
				k := int(imm >> (2 * l) & 3)
				r[2*l], r[2*l+1] = src[2*k], src[2*k+1]
			}
			m.setVec(last(), r)
		default:
			if !m.extra(in, w) { // emu_poly1305_test.go
				panic("unimplemented: " + in.line)
			}
		}
	}
}

// Reference math, as in crcmath (which this module cannot import).

type params struct {
	spec crcSpec
	poly uint64
}

var refParams = map[string]uint64{"t10dif": 0x8BB7, "crc32c": 0x1EDC6F41, "crc64nvme": 0xAD93D23594C93659}

func mask(w int) uint64 {
	if w == 64 {
		return ^uint64(0)
	}
	return 1<<w - 1
}

func reflect(v uint64, n int) uint64 { return bits.Reverse64(v) >> (64 - n) }

// bitwise is the reference CRC (finalised in, finalised out).
func bitwise(s crcSpec, poly, crc uint64, data []byte) uint64 {
	w := s.width
	var xo uint64
	if s.onesXor {
		xo = mask(w)
	}
	reg := (crc ^ xo) & mask(w)
	if s.reflected {
		reg = reflect(reg, w)
	}
	top := uint64(1) << (w - 1)
	for _, b := range data {
		for i := 0; i < 8; i++ {
			bit := uint64(b>>(7-i)) & 1
			if s.reflected {
				bit = uint64(b>>i) & 1
			}
			fb := (reg&top != 0) != (bit != 0)
			reg = (reg << 1) & mask(w)
			if fb {
				reg ^= poly
			}
		}
	}
	if s.reflected {
		reg = reflect(reg, w)
	}
	return (reg ^ xo) & mask(w)
}

func modP(w int, poly, hi, lo uint64) uint64 {
	for d := 127; d >= w; d-- {
		var set bool
		if d >= 64 {
			set = hi>>(d-64)&1 != 0
		} else {
			set = lo>>d&1 != 0
		}
		if !set {
			continue
		}
		sh := uint(d - w)
		if d >= 64 {
			hi ^= 1 << (d - 64)
		} else {
			lo ^= 1 << d
		}
		if sh < 64 {
			lo ^= poly << sh
			if sh > 0 {
				hi ^= poly >> (64 - sh)
			}
		} else {
			hi ^= poly << (sh - 64)
		}
	}
	return lo & mask(w)
}

func xpow(w int, poly, n uint64) uint64 {
	r, base := uint64(1), modP(w, poly, 0, 2)
	for ; n > 0; n >>= 1 {
		if n&1 != 0 {
			lo, hi := clmul(r, base)
			r = modP(w, poly, hi, lo)
		}
		lo, hi := clmul(base, base)
		base = modP(w, poly, hi, lo)
	}
	return r
}

// table returns the crcmath.FoldTable of s as bytes.
func table(s crcSpec, poly uint64) []byte {
	w := s.width
	c := func(k uint64) uint64 {
		if s.reflected {
			return reflect(xpow(w, poly, k-1), 64)
		}
		return xpow(w, poly, k)
	}
	var q []uint64
	q = append(q, 0, 0)
	for i := uint64(1); i <= maxFold; i++ {
		q = append(q, c(128*i+64), c(128*i))
	}
	q = append(q, c(64+uint64(w)), 0)
	// mu = floor(x^(64+w) / P), low 64 bits.
	var mu uint64
	r := poly & mask(w)
	top := uint64(1) << (w - 1)
	for i := 63; i >= 0; i-- {
		if r&top != 0 {
			mu |= 1 << i
			r = ((r << 1) ^ poly) & mask(w)
		} else {
			r = (r << 1) & mask(w)
		}
	}
	p := poly
	if s.reflected {
		mu, p = reflect(mu, 64), reflect(p, 64)
	}
	q = append(q, mu, p)
	// crcmath.RevFoldTable: Rev[i] = Fold[64-i].
	for i := maxFold; i >= 0; i-- {
		q = append(q, q[2*i], q[2*i+1])
	}
	b := make([]byte, 8*len(q))
	for i, v := range q {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	if len(b) != tableSize {
		panic("table size")
	}
	return b
}

const (
	addrSP    = 0x80 // the frame's locals, below the arguments
	addrFP    = 0x100
	addrMask  = 0x200
	addrTail  = 0x300
	addrTable = 0x1000
	addrDst   = 0x2000
	addrData  = 0x4000
)

func newMachine(tab []byte, data []byte) *machine {
	m := &machine{gpr: map[string]uint64{"SP": addrSP}, fp: addrFP,
		syms: map[string]uint64{"bswapMask<>": addrMask, "tailShuf<>": addrTail}}
	// The data ends the address space: an over-read panics.
	m.mem = make([]byte, addrData+len(data))
	copy(m.mem[addrTable:], tab)
	copy(m.mem[addrTail:], tailShufData)
	binary.LittleEndian.PutUint64(m.mem[addrMask:], 0x08090a0b0c0d0e0f)
	binary.LittleEndian.PutUint64(m.mem[addrMask+8:], 0x0001020304050607)
	copy(m.mem[addrData:], data)
	return m
}

// newCopyMachine is newMachine with a destination of qLen bytes after the
// data, filled with gap bytes; the destination ends the address space, so
// an over-write panics. It returns the destination's address.
func newCopyMachine(tab []byte, data []byte, qLen int) (*machine, uint64) {
	m := newMachine(tab, data)
	q := uint64(len(m.mem)+63) &^ 63
	m.mem = append(m.mem, make([]byte, int(q)-len(m.mem)+qLen)...)
	for i := q; i < uint64(len(m.mem)); i++ {
		m.mem[i] = gapByte
	}
	return m, q
}

const gapByte = 0xa5

func (m *machine) put64(off int, v uint64) { binary.LittleEndian.PutUint64(m.mem[addrFP+off:], v) }

func TestEmulatedKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range crcs {
		poly := refParams[s.flag]
		tab := table(s, poly)
		asm, _, err := generate(s, "x.s", "x.go")
		if err != nil {
			t.Fatal(err)
		}
		prog, err := parse(string(asm))
		if err != nil {
			t.Fatal(err)
		}
		wb := s.width / 8
		for _, v := range []string{"AVX2", "AVX512"} {
			t.Run(fmt.Sprintf("crc=%s/kernel=%s", s.flag, v), func(t *testing.T) {
				var lens []int
				for n := 16; n <= 1200; n++ {
					lens = append(lens, n)
				}
				lens = append(lens, 4096, 4096+16*7, 4096+16*7+9, 8192+48, 8192+63)
				for _, n := range lens {
					data := make([]byte, n)
					for i := range data {
						data[i] = byte(r.Uint32())
					}
					crc := r.Uint64() & mask(s.width)
					m := newMachine(tab, data)
					m.put64(0, crc)
					m.put64(8, addrData)
					m.put64(16, uint64(n))
					m.put64(24, uint64(n))
					m.put64(32, addrTable)
					m.run(prog, "foldUpdate"+v)
					got := binary.LittleEndian.Uint64(m.mem[addrFP+40:]) & mask(s.width)
					if want := bitwise(s, poly, crc, data); got != want {
						t.Fatalf("update len=%d: %#x, want %#x", n, got, want)
					}
				}
				for _, c := range [][3]int{{512, 512, 8}, {512, 520, 16}, {64, 64, 8}, {80, 96, 8}, {4096, 4104, 8}, {1024 + 48, 1200, 8}, {32, 48, 8}, {512, 512, 4}, {2048, 2048, 12}} {
					blockLen, stride, cnt := c[0], c[1], c[2]
					if blockLen < map[string]int{"AVX2": 32, "AVX512": 64}[v] {
						continue
					}
					data := make([]byte, (cnt-1)*stride+blockLen)
					for i := range data {
						data[i] = byte(r.Uint32())
					}
					m := newMachine(tab, data)
					m.put64(0, addrDst)
					m.put64(8, uint64(cnt))
					m.put64(16, uint64(cnt))
					m.put64(24, addrData)
					m.put64(32, uint64(len(data)))
					m.put64(40, uint64(len(data)))
					m.put64(48, uint64(blockLen))
					m.put64(56, uint64(stride))
					m.put64(64, addrTable)
					sentinel := byte(0x5a)
					m.mem[addrDst+cnt*wb] = sentinel
					m.run(prog, "foldBlocks"+v)
					var start uint64
					if s.onesXor {
						start = 0 // init = xorout: the finalised empty CRC is 0
					}
					for i := 0; i < cnt; i++ {
						var buf [8]byte
						copy(buf[:], m.mem[addrDst+i*wb:addrDst+(i+1)*wb])
						got := binary.LittleEndian.Uint64(buf[:])
						want := bitwise(s, poly, start, data[i*stride:i*stride+blockLen])
						if got != want {
							t.Fatalf("blocks %d/%d: dst[%d] = %#x, want %#x", blockLen, stride, i, got, want)
						}
					}
					if m.mem[addrDst+cnt*wb] != sentinel {
						t.Fatalf("blocks %d/%d: wrote past dst", blockLen, stride)
					}

					// The copying kernel: the same CRCs, the blocks in q,
					// nothing else of q written.
					m, q := newCopyMachine(tab, data, len(data))
					m.put64(0, addrDst)
					m.put64(8, uint64(cnt))
					m.put64(16, uint64(cnt))
					m.put64(24, q)
					m.put64(32, uint64(len(data)))
					m.put64(40, uint64(len(data)))
					m.put64(48, addrData)
					m.put64(56, uint64(len(data)))
					m.put64(64, uint64(len(data)))
					m.put64(72, uint64(blockLen))
					m.put64(80, uint64(stride))
					m.put64(88, addrTable)
					m.run(prog, "foldBlocksCopy"+v)
					for i := 0; i < cnt; i++ {
						var buf [8]byte
						copy(buf[:], m.mem[addrDst+i*wb:addrDst+(i+1)*wb])
						got := binary.LittleEndian.Uint64(buf[:])
						want := bitwise(s, poly, 0, data[i*stride:i*stride+blockLen])
						if got != want {
							t.Fatalf("blocks copy %d/%d: dst[%d] = %#x, want %#x", blockLen, stride, i, got, want)
						}
					}
					qm := m.mem[q:]
					for i := range qm {
						inBlock := i%stride < blockLen
						if inBlock && qm[i] != data[i] || !inBlock && qm[i] != gapByte {
							t.Fatalf("blocks copy %d/%d: q[%d] = %#x, data %#x", blockLen, stride, i, qm[i], data[i])
						}
					}
				}
			})
		}
	}
}
