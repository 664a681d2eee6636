// Package emu is a small interpreter of the Go assembly the generators of
// this module write, for the kernels the machine running the tests cannot
// execute (AVX-512 anywhere here, AVX2 with VPCLMULQDQ on CPUs without it)
// and to check the others the same way.
//
// It models the instructions the kernels use, by the Intel SDM definitions,
// and nothing else: Run returns an error for any instruction, operand form
// or symbol it does not model, so a generator change that emits something
// new fails the tests until the interpreter learns it, rather than being
// skipped. Of the flags it keeps CF and ZF, set by every modelled
// instruction the SDM defines them for (ZF is left as it was where the SDM
// leaves it undefined: MULQ, IMULQ). Legacy SSE instructions write the low
// 128 bits of a register and keep the rest; VEX and EVEX ones zero the bits
// beyond their width. The static data of the assembly (DATA/GLOBL) is
// loaded from the assembly itself. Memory is one flat slice laid out by the
// caller (Addr* constants); the message usually ends it, so that an
// over-read is an error. The instructions only the Poly1305 kernels use are
// in poly.go.
package emu

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"maps"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/difctl/difctl/kernels/internal/crcmath"
)

type opKind int

const (
	opImm opKind = iota
	opGPR
	opVec
	opMem
)

type operand struct {
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
	args []operand
	line string
}

// A Program is a parsed assembly file.
type Program struct {
	funcs  map[string][]instr
	labels map[string]map[string]int
	frames map[string]int    // frame sizes, from TEXT
	data   map[string][]byte // static symbols, from DATA and GLOBL
	ran    map[string]bool
}

func parseOperand(s string) (operand, error) {
	s = strings.TrimSpace(s)
	switch {
	case strings.HasPrefix(s, "$"):
		v, err := strconv.ParseInt(s[1:], 0, 64)
		if err != nil {
			u, err2 := strconv.ParseUint(s[1:], 0, 64)
			if err2 != nil {
				return operand{}, err
			}
			v = int64(u)
		}
		return operand{kind: opImm, imm: v}, nil
	case strings.Contains(s, "("):
		o := operand{kind: opMem, scale: 1}
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
			return operand{}, err
		}
		w := map[byte]int{'X': 16, 'Y': 32, 'Z': 64}[s[0]]
		return operand{kind: opVec, vec: n, width: w}, nil
	}
	return operand{kind: opGPR, reg: s}, nil
}

// Parse parses the output of a generator.
func Parse(asm string) (*Program, error) {
	p := &Program{funcs: map[string][]instr{}, labels: map[string]map[string]int{},
		data: map[string][]byte{}, ran: map[string]bool{}}
	var cur string
	for _, line := range strings.Split(asm, "\n") {
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
			continue
		case strings.HasPrefix(line, "DATA"):
			// DATA sym<>+off(SB)/size, $value
			loc, val, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "DATA")), ",")
			at, size, ok2 := strings.Cut(loc, "/")
			o, err := parseOperand(at)
			n, err2 := strconv.Atoi(size)
			v, err3 := parseOperand(val)
			if !ok || !ok2 || err != nil || err2 != nil || err3 != nil || o.kind != opMem || v.kind != opImm || n > 8 {
				return nil, fmt.Errorf("emu: DATA not understood: %q", line)
			}
			d := p.data[o.sym]
			if need := int(o.disp) + n; len(d) < need {
				d = append(d, make([]byte, need-len(d))...)
			}
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], uint64(v.imm))
			copy(d[o.disp:], b[:n])
			p.data[o.sym] = d
			continue
		case strings.HasPrefix(line, "GLOBL"):
			f := strings.Fields(strings.ReplaceAll(strings.TrimPrefix(line, "GLOBL"), ",", " "))
			o, err := parseOperand(f[0])
			size, err2 := strconv.ParseInt(strings.TrimPrefix(f[len(f)-1], "$"), 0, 64)
			if err != nil || err2 != nil || o.kind != opMem {
				return nil, fmt.Errorf("emu: GLOBL not understood: %q", line)
			}
			if d := p.data[o.sym]; int64(len(d)) < size {
				p.data[o.sym] = append(d, make([]byte, int(size)-len(d))...)
			}
			continue
		case strings.HasPrefix(line, "TEXT"):
			name := strings.TrimPrefix(strings.Fields(line)[1], "·")
			cur = strings.TrimSuffix(name, "(SB),")
			p.labels[cur] = map[string]int{}
			// "$frame-args", the last field.
			f := strings.Fields(line)
			fr, _, _ := strings.Cut(strings.TrimPrefix(f[len(f)-1], "$"), "-")
			n, err := strconv.Atoi(fr)
			if err != nil {
				return nil, fmt.Errorf("emu: %q: frame size: %v", line, err)
			}
			if p.frames == nil {
				p.frames = map[string]int{}
			}
			p.frames[cur] = n
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
					return nil, fmt.Errorf("emu: %q: %v", line, err)
				}
				in.args = append(in.args, o)
			}
		}
		p.funcs[cur] = append(p.funcs[cur], in)
	}
	return p, nil
}

// Funcs returns the names of the program's functions, sorted.
func (p *Program) Funcs() []string {
	var fs []string
	for f := range p.funcs {
		fs = append(fs, f)
	}
	slices.Sort(fs)
	return fs
}

// NotRun returns the functions no Run of this program has completed, so
// that a test can insist every kernel of a file was checked.
func (p *Program) NotRun() []string {
	var fs []string
	for _, f := range p.Funcs() {
		if !p.ran[f] {
			fs = append(fs, f)
		}
	}
	return fs
}

// The memory layout of a Machine. The frame's arguments are at AddrFP, its
// locals below; the static data from AddrSyms; the rest is the caller's.
const (
	AddrSP    = 0x80
	AddrFP    = 0x100
	AddrSyms  = 0x200
	AddrTable = 0x1000
	AddrDst   = 0x2000
	AddrData  = 0x4000
)

// A Machine is the state of one run.
type Machine struct {
	gpr    map[string]uint64
	v      [32][8]uint64
	Mem    []byte
	syms   map[string]uint64
	cf, zf bool
}

// New returns a machine whose memory holds p's static data and ends with
// data at AddrData.
func New(p *Program, data []byte) (*Machine, error) {
	m := &Machine{gpr: map[string]uint64{"SP": AddrSP}, syms: map[string]uint64{}}
	m.Mem = make([]byte, AddrData+len(data))
	a := uint64(AddrSyms)
	for _, name := range slices.Sorted(maps.Keys(p.data)) {
		d := p.data[name]
		if a+uint64(len(d)) > AddrTable {
			return nil, fmt.Errorf("emu: static data does not fit below AddrTable")
		}
		m.syms[name] = a
		copy(m.Mem[a:], d)
		a = (a + uint64(len(d)) + 63) &^ 63
	}
	copy(m.Mem[AddrData:], data)
	return m, nil
}

// Append extends the memory by n bytes filled with fill, from the next
// 64-byte boundary, and returns the address of the first.
func (m *Machine) Append(n int, fill byte) uint64 {
	q := uint64(len(m.Mem)+63) &^ 63
	m.Mem = append(m.Mem, make([]byte, int(q)-len(m.Mem)+n)...)
	for i := q; i < uint64(len(m.Mem)); i++ {
		m.Mem[i] = fill
	}
	return q
}

// Put64 stores v at the frame offset off (an argument or a result).
func (m *Machine) Put64(off int, v uint64) { binary.LittleEndian.PutUint64(m.Mem[AddrFP+off:], v) }

// Get64 loads the frame's quadword at offset off.
func (m *Machine) Get64(off int) uint64 { return binary.LittleEndian.Uint64(m.Mem[AddrFP+off:]) }

type fault string

func (m *Machine) addr(o operand) uint64 {
	if o.sym == "FP" {
		return AddrFP + uint64(o.disp)
	}
	if o.sym != "" {
		a, ok := m.syms[o.sym]
		if !ok {
			panic(fault("unknown symbol " + o.sym))
		}
		return a + uint64(o.disp)
	}
	a := m.gpr[o.base] + uint64(o.disp)
	if o.index != "" {
		a += m.gpr[o.index] * uint64(o.scale)
	}
	return a
}

func (m *Machine) load(a uint64, n int) []byte {
	if a+uint64(n) > uint64(len(m.Mem)) || a+uint64(n) < a {
		panic(fault(fmt.Sprintf("access of %d bytes at %#x beyond the memory (%#x bytes)", n, a, len(m.Mem))))
	}
	return m.Mem[a : a+uint64(n) : a+uint64(n)]
}

// vecVal reads n bytes of a vector operand (register or memory) as quadwords.
func (m *Machine) vecVal(o operand, n int) [8]uint64 {
	var r [8]uint64
	switch o.kind {
	case opVec:
		copy(r[:n/8], m.v[o.vec][:n/8])
		return r
	case opMem:
		b := m.load(m.addr(o), n)
		for i := 0; i < n/8; i++ {
			r[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
		return r
	}
	panic(fault("not a vector operand"))
}

// setVec writes a VEX/EVEX destination: bits beyond its width are zeroed.
func (m *Machine) setVec(o operand, v [8]uint64) {
	if o.kind != opVec {
		panic(fault("destination is not a vector register"))
	}
	for i := range m.v[o.vec] {
		if i < o.width/8 {
			m.v[o.vec][i] = v[i]
		} else {
			m.v[o.vec][i] = 0
		}
	}
}

// setLegacy writes a legacy SSE destination: the low 128 bits, the rest
// kept.
func (m *Machine) setLegacy(o operand, v [8]uint64) {
	if o.kind != opVec || o.width != 16 {
		panic(fault("legacy SSE destination is not an XMM register"))
	}
	m.v[o.vec][0], m.v[o.vec][1] = v[0], v[1]
}

func (m *Machine) gval(o operand) uint64 {
	switch o.kind {
	case opImm:
		return uint64(o.imm)
	case opGPR:
		v, ok := m.gpr[o.reg]
		if !ok && !knownGPR[o.reg] {
			panic(fault("unknown register " + o.reg))
		}
		return v
	case opMem:
		return binary.LittleEndian.Uint64(m.load(m.addr(o), 8))
	}
	panic(fault("bad operand"))
}

var knownGPR = map[string]bool{"AX": true, "BX": true, "CX": true, "DX": true, "SI": true, "DI": true,
	"BP": true, "SP": true, "R8": true, "R9": true, "R10": true, "R11": true, "R12": true, "R13": true,
	"R14": true, "R15": true}

// setGPR writes a general register (Go names the 64-bit register in every
// operand size).
func (m *Machine) setGPR(o operand, v uint64) {
	if o.kind != opGPR || !knownGPR[o.reg] {
		panic(fault("destination is not a general register"))
	}
	m.gpr[o.reg] = v
}

// clmul is PCLMULQDQ's 64x64 carry-less product, low and high quadwords
// (crcmath.Clmul returns them high first).
func clmul(a, b uint64) (lo, hi uint64) {
	hi, lo = crcmath.Clmul(a, b)
	return lo, hi
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

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crc32Raw is what the CRC32 instruction computes: the CRC-32C register
// (not inverted) updated with b.
func crc32Raw(reg uint32, b []byte) uint32 { return ^crc32.Update(^reg, castagnoli, b) }

// Run executes fn to its RET. It returns an error, and the machine's state
// is then undefined, on an instruction it does not model, an access beyond
// the memory, an unknown label or symbol, or a runaway loop.
func (m *Machine) Run(p *Program, fn string) (steps int, err error) {
	code := p.funcs[fn]
	if code == nil {
		return 0, fmt.Errorf("emu: no function %s", fn)
	}
	// A frame of more than 1 KiB (the AVX-512 CRC-32C blocks kernels')
	// goes to fresh memory at the end, filled with garbage; smaller ones
	// stay at AddrSP, where a kernel whose locals reached AddrFP would
	// overwrite its arguments, which its test would see.
	if n := p.frames[fn]; n > 1024 {
		m.gpr["SP"] = m.Append(n, 0xa5)
	}
	pc := 0
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fault)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("emu: %s: %q: %s", fn, code[pc-1].line, string(f))
		}
	}()
	for {
		steps++
		if steps > 20_000_000 {
			return steps, fmt.Errorf("emu: %s: runaway", fn)
		}
		if pc >= len(code) {
			return steps, fmt.Errorf("emu: %s: ran off the end", fn)
		}
		in := code[pc]
		pc++
		if ok := m.step(p, fn, in, &pc); !ok {
			p.ran[fn] = true
			return steps, nil
		}
	}
}

// step executes one instruction; it returns false at RET.
func (m *Machine) step(p *Program, fn string, in instr, pc *int) bool {
	a := in.args
	last := func() operand { return a[len(a)-1] }
	w := 0
	if len(a) > 0 && last().kind == opVec {
		w = last().width
	}
	switch in.op {
	case "RET":
		return false
	case "MOVQ", "MOVL", "MOVW", "MOVWQZX", "MOVLQZX":
		src, dst := a[0], a[1]
		if in.op == "MOVQ" && (src.kind == opVec || dst.kind == opVec) {
			// Legacy MOVQ between an XMM register and a GPR or another
			// XMM register: the low quadword, the destination's bits
			// 64..127 cleared.
			var v uint64
			if src.kind == opVec {
				v = m.v[src.vec][0]
			} else {
				v = m.gval(src)
			}
			if dst.kind == opVec {
				m.setLegacy(dst, [8]uint64{v})
			} else {
				m.setGPR(dst, v)
			}
			break
		}
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
			if in.op == "MOVW" {
				// A 16-bit write keeps the register's upper bits.
				m.setGPR(dst, m.gval(dst)&^0xffff|v)
				break
			}
			m.setGPR(dst, v)
		case opMem:
			var buf [8]byte
			binary.LittleEndian.PutUint64(buf[:], v)
			copy(m.load(m.addr(dst), size), buf[:size])
		default:
			panic(fault("bad destination"))
		}
	case "ADDQ":
		// CF the carry out (ADCQ reads it), ZF by the result.
		r, c := bits.Add64(m.gval(a[1]), m.gval(a[0]), 0)
		m.setGPR(a[1], r)
		m.cf, m.zf = c != 0, r == 0
	case "ANDQ":
		r := m.gval(a[1]) & m.gval(a[0])
		m.setGPR(a[1], r)
		m.cf, m.zf = false, r == 0
	case "TESTQ":
		m.cf, m.zf = false, m.gval(a[0])&m.gval(a[1]) == 0
	case "NEGQ":
		x := m.gval(a[0])
		m.setGPR(a[0], -x)
		m.cf, m.zf = x != 0, x == 0
	case "INCQ", "DECQ":
		// ZF set, CF kept.
		d := uint64(1)
		if in.op == "DECQ" {
			d = ^uint64(0)
		}
		r := m.gval(a[0]) + d
		if a[0].kind == opMem {
			binary.LittleEndian.PutUint64(m.load(m.addr(a[0]), 8), r)
		} else {
			m.setGPR(a[0], r)
		}
		m.zf = r == 0
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
			m.setGPR(a[1], r)
		}
	case "JB", "JAE", "JNZ", "JZ", "JMP":
		take := map[string]bool{"JB": m.cf, "JAE": !m.cf, "JNZ": !m.zf, "JZ": m.zf, "JMP": true}[in.op]
		if take {
			t, ok := p.labels[fn][a[0].reg]
			if !ok {
				panic(fault("no label " + a[0].reg))
			}
			*pc = t
		}
	case "LEAQ":
		m.setGPR(a[1], m.addr(a[0]))
	case "SHLQ", "SHRQ":
		if in.op == "SHRQ" && len(a) == 3 {
			m.shrd(a) // poly.go
			break
		}
		if len(a) != 2 {
			panic(fault("operand form not modelled"))
		}
		// A count of 0 (mod 64) changes nothing, flags included;
		// otherwise CF is the last bit shifted out, ZF set by the result.
		n, x := uint(m.gval(a[0])&63), m.gval(a[1])
		if n == 0 {
			break
		}
		r, out := x<<n, x>>(64-n)&1
		if in.op == "SHRQ" {
			r, out = x>>n, x>>(n-1)&1
		}
		m.setGPR(a[1], r)
		m.cf, m.zf = out != 0, r == 0
	case "XORQ", "XORL":
		r := m.gval(a[1]) ^ m.gval(a[0])
		if in.op == "XORL" {
			r = uint64(uint32(r))
		}
		m.setGPR(a[1], r)
		m.cf, m.zf = false, r == 0
	case "NOTQ":
		m.setGPR(a[0], ^m.gval(a[0]))
	case "NOTL":
		m.setGPR(a[0], uint64(^uint32(m.gval(a[0]))))
	case "CRC32B", "CRC32W", "CRC32L", "CRC32Q":
		n := map[string]int{"CRC32B": 1, "CRC32W": 2, "CRC32L": 4, "CRC32Q": 8}[in.op]
		var b []byte
		if a[0].kind == opMem {
			b = m.load(m.addr(a[0]), n)
		} else {
			var buf [8]byte
			binary.LittleEndian.PutUint64(buf[:], m.gval(a[0]))
			b = buf[:n]
		}
		m.setGPR(a[1], uint64(crc32Raw(uint32(m.gval(a[1])), b)))
	case "PREFETCHT0", "PREFETCHT1":
		// A hint: no architectural effect, and it never faults.
	case "VZEROUPPER":
		for i := 0; i < 16; i++ {
			for j := 2; j < 8; j++ {
				m.v[i][j] = 0
			}
		}
	case "VMOVQ", "VMOVD":
		src, dst := a[0], a[1]
		msk := ^uint64(0)
		if in.op == "VMOVD" {
			msk = 0xffffffff
		}
		switch {
		case dst.kind == opGPR:
			m.setGPR(dst, m.v[src.vec][0]&msk)
		case src.kind == opGPR:
			m.setVec(dst, [8]uint64{m.gval(src) & msk})
		case src.kind == opVec && dst.kind == opVec:
			m.setVec(dst, [8]uint64{m.v[src.vec][0] & msk})
		case src.kind == opMem && dst.kind == opVec:
			n := 8
			if in.op == "VMOVD" {
				n = 4
			}
			var b [8]byte
			copy(b[:], m.load(m.addr(src), n))
			m.setVec(dst, [8]uint64{binary.LittleEndian.Uint64(b[:])})
		default:
			panic(fault("operand form not modelled"))
		}
	case "VGF2P8AFFINEQB":
		// Intel: dst, x, A/m, imm; Go: imm, A/m, x, dst. Byte i of dst is
		// the affine transform of byte i of x by the 8x8 bit matrix of the
		// quadword of A holding it: bit j is the parity of x AND byte 7-j
		// of that quadword, XOR bit j of imm.
		imm := byte(a[0].imm)
		mat, x := m.vecVal(a[1], w), bytesOf(m.vecVal(a[2], w))
		var r [64]byte
		for i := 0; i < w; i++ {
			q := mat[i/8]
			for j := 0; j < 8; j++ {
				row := byte(q >> (8 * (7 - j)))
				r[i] |= byte(bits.OnesCount8(row&x[i])&1) << j
			}
			r[i] ^= imm
		}
		m.setVec(last(), fromBytes(r))
	case "ROLW":
		// A 16-bit rotate of a register; its upper bits kept. (CF and OF
		// are not modelled: nothing here reads them after a rotate.)
		n, x := uint(m.gval(a[0])&15), m.gval(a[1])
		lo := uint16(x)
		lo = lo<<n | lo>>(16-n)
		m.setGPR(a[1], x&^0xffff|uint64(lo))
	case "VPEXTRQ", "PEXTRQ":
		m.setGPR(a[2], m.v[a[1].vec][a[0].imm&1])
	case "VPINSRQ":
		// Go: imm, r/m64, src, dst.
		v := m.vecVal(a[2], 16)
		v[a[0].imm&1] = m.gval(a[1])
		m.setVec(a[3], v)
	case "PINSRQ":
		v := m.vecVal(a[2], 16)
		v[a[0].imm&1] = m.gval(a[1])
		m.setLegacy(a[2], v)
	case "VMOVDQU", "VMOVDQU64", "VMOVDQA":
		if last().kind == opMem {
			n := a[0].width
			b := bytesOf(m.vecVal(a[0], n))
			copy(m.load(m.addr(last()), n), b[:n])
			break
		}
		m.setVec(last(), m.vecVal(a[0], w))
	case "MOVOU", "MOVO":
		if last().kind == opMem {
			b := bytesOf(m.vecVal(a[0], 16))
			copy(m.load(m.addr(last()), 16), b[:16])
			break
		}
		m.setLegacy(last(), m.vecVal(a[0], 16))
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
	case "PXOR", "PAND":
		x, y := m.vecVal(a[0], 16), m.vecVal(a[1], 16)
		for i := range x {
			if in.op == "PAND" {
				x[i] &= y[i]
			} else {
				x[i] ^= y[i]
			}
		}
		m.setLegacy(a[1], x)
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
	case "VPCLMULQDQ", "PCLMULQDQ":
		// Intel: dst, src1, src2, imm (imm[0] picks src1's quadword,
		// imm[4] src2's); Go: imm, src2, src1, dst, and the legacy form
		// imm, src2, dst (= src1).
		imm := a[0].imm
		if in.op == "PCLMULQDQ" {
			w = 16
		}
		s2, s1 := m.vecVal(a[1], w), m.vecVal(a[len(a)-2], w)
		if in.op == "PCLMULQDQ" {
			s1 = m.vecVal(last(), 16)
		}
		var r [8]uint64
		for l := 0; l < w/16; l++ {
			r[2*l], r[2*l+1] = clmul(s1[2*l+int(imm&1)], s2[2*l+int(imm>>4&1)])
		}
		if in.op == "PCLMULQDQ" {
			m.setLegacy(last(), r)
		} else {
			m.setVec(last(), r)
		}
	case "VPSHUFB", "PSHUFB":
		// Go: ctrl, src, dst (legacy: ctrl, dst). Per 128-bit lane.
		src := a[len(a)-2]
		if in.op == "PSHUFB" {
			w, src = 16, last()
		}
		ctl, s := bytesOf(m.vecVal(a[0], w)), bytesOf(m.vecVal(src, w))
		var r [64]byte
		for i := 0; i < w; i++ {
			if ctl[i]&0x80 == 0 {
				r[i] = s[i&^15+int(ctl[i]&15)]
			}
		}
		if in.op == "PSHUFB" {
			m.setLegacy(last(), fromBytes(r))
		} else {
			m.setVec(last(), fromBytes(r))
		}
	case "VPSRLDQ", "VPSLLDQ", "PSRLDQ", "PSLLDQ":
		n := int(a[0].imm)
		legacy := in.op[0] == 'P'
		src := a[len(a)-2]
		if legacy {
			w, src = 16, last()
		}
		s := bytesOf(m.vecVal(src, w))
		var r [64]byte
		for l := 0; l < w; l += 16 {
			for i := 0; i < 16; i++ {
				j := i + n
				if strings.HasSuffix(in.op, "SLLDQ") {
					j = i - n
				}
				if j >= 0 && j < 16 {
					r[l+i] = s[l+j]
				}
			}
		}
		if legacy {
			m.setLegacy(last(), fromBytes(r))
		} else {
			m.setVec(last(), fromBytes(r))
		}
	case "VPSLLQ", "VPSRLQ", "PSLLQ", "PSRLQ":
		n := uint(a[0].imm)
		legacy := in.op[0] == 'P'
		src := a[len(a)-2]
		if legacy {
			w, src = 16, last()
		}
		x := m.vecVal(src, w)
		for i := range x {
			if strings.HasSuffix(in.op, "SLLQ") {
				x[i] <<= n
			} else {
				x[i] >>= n
			}
		}
		if legacy {
			m.setLegacy(last(), x)
		} else {
			m.setVec(last(), x)
		}
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
	case "VPMOVZXDQ":
		// Zero-extends w/8 doublewords of the source (memory or a vector's
		// low half) to quadwords.
		src := m.vecVal(a[0], w/2)
		var r [8]uint64
		for i := 0; i < w/8; i++ {
			r[i] = src[i/2] >> (32 * (i % 2)) & 0xffffffff
		}
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
	case "VPERM2I128":
		// Intel: dst, src1, src2/m256, imm: each 128-bit half of dst is
		// the lane imm[1:0] (low half) or imm[5:4] (high half) of
		// {src1.lo, src1.hi, src2.lo, src2.hi}, or zero where imm[3]
		// (imm[7]) is set. Go: imm, src2/m256, src1, dst.
		if len(a) != 4 || a[0].kind != opImm || a[2].kind != opVec || w != 32 {
			panic(fault("operand form not modelled"))
		}
		imm := a[0].imm
		s2, s1 := m.vecVal(a[1], 32), m.vecVal(a[2], 32)
		src := [4][2]uint64{{s1[0], s1[1]}, {s1[2], s1[3]}, {s2[0], s2[1]}, {s2[2], s2[3]}}
		var r [8]uint64
		for h := 0; h < 2; h++ {
			sel := imm >> (4 * h)
			if sel&8 == 0 {
				r[2*h], r[2*h+1] = src[sel&3][0], src[sel&3][1]
			}
		}
		m.setVec(last(), r)
	case "VPBLENDD":
		// Intel: dst, src1, src2/m, imm: doubleword i of dst is src2's
		// where imm bit i is set, else src1's. Go: imm, src2/m, src1, dst.
		if len(a) != 4 || a[0].kind != opImm || a[2].kind != opVec || w > 32 {
			panic(fault("operand form not modelled"))
		}
		imm := a[0].imm
		s2, s1 := m.vecVal(a[1], w), m.vecVal(a[2], w)
		var r [8]uint64
		for i := 0; i < w/4; i++ {
			d := s1[i/2] >> (32 * (i % 2)) & 0xffffffff
			if imm>>i&1 != 0 {
				d = s2[i/2] >> (32 * (i % 2)) & 0xffffffff
			}
			r[i/2] |= d << (32 * (i % 2))
		}
		m.setVec(last(), r)
	case "VPMOVZXWQ":
		// Intel: zero-extends the w/8 low words of xmm/m (w/4 bytes of
		// memory, or the low w/4 bytes of an XMM register) to the w/8
		// quadwords of dst. Go: src, dst.
		if len(a) != 2 || a[0].kind == opVec && a[0].width != 16 {
			panic(fault("operand form not modelled"))
		}
		var src []byte
		if a[0].kind == opMem {
			src = m.load(m.addr(a[0]), w/4)
		} else {
			b := bytesOf(m.v[a[0].vec])
			src = b[:w/4]
		}
		var r [8]uint64
		for i := 0; i < w/8; i++ {
			r[i] = uint64(binary.LittleEndian.Uint16(src[2*i:]))
		}
		m.setVec(last(), r)
	case "VPERMQ":
		// The index form on ZMM registers (Intel: VPERMQ dst, idx,
		// src/m512): quadword i of dst is quadword idx[i] & 7 of src. Go:
		// src/m, idx, dst. The immediate form is not modelled.
		if len(a) != 3 || a[0].kind == opImm || a[1].kind != opVec || w != 64 {
			panic(fault("operand form not modelled"))
		}
		src, idx := m.vecVal(a[0], 64), m.vecVal(a[1], 64)
		var r [8]uint64
		for i := range r {
			r[i] = src[idx[i]&7]
		}
		m.setVec(last(), r)
	default:
		if !m.stepPoly(in, w) { // poly.go
			panic(fault("instruction not modelled"))
		}
	}
	return true
}
