package dif

import (
	"encoding/binary"
	"unsafe"

	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/kernels/crc64nvme"
	"github.com/difctl/difctl/kernels/crct10dif"
	"github.com/difctl/difctl/kernels/piscan"
)

// State classifies a block after verification.
type State uint8

// The block states.
const (
	// StateOK: every enabled check passed (Type0: nothing to check).
	StateOK State = iota
	// StateEscaped: Types 1 and 2, the app tag is 0xFFFF: no check ran.
	StateEscaped
	// StateUnwritten: app, storage and ref tags all ones (never written or
	// discarded): no check ran. Not a failure.
	StateUnwritten
	// StateFailed: at least one enabled check failed.
	StateFailed
)

var stateNames = [...]string{"ok", "escaped", "unwritten", "failed"}

// String returns "ok", "escaped", "unwritten" or "failed".
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "State(?)"
}

// Summary counts the blocks of a verified run by state.
type Summary struct {
	Blocks    int // blocks in the run: OK + Escaped + Unwritten + Failed
	OK        int
	Escaped   int
	Unwritten int
	Failed    int
	Errors    int // failed checks (a block may fail several)
}

// Verify checks every block of a run (buffers as for Generate) against p
// and returns nil if none fails. Escaped and unwritten blocks (see State)
// are not failures. Otherwise it returns a *VerifyError listing the first
// MaxListed failures, in block order, and counting all of them; it matches
// ErrIntegrity. Bad buffers or parameters give other errors (ErrBuffer,
// ErrParams, *FormatError). Verify does not allocate unless it fails.
func (f Format) Verify(data, md []byte, p Params) error {
	r, err := f.run(data, md)
	if err != nil {
		return err
	}
	v, err := f.verify(&r, nil, &p, nil, nil, sumOut{})
	if err != nil {
		return err
	}
	if v.sum.Errors == 0 {
		return nil
	}
	return &VerifyError{Errors: v.list, Total: v.sum.Errors, Blocks: v.sum.Failed}
}

// VerifyFunc checks every block of a run like Verify and calls fn for each
// failed check, in block order (fields of one block in the order guard, app
// tag, ref tag, storage tag). If fn returns an error, VerifyFunc stops and
// returns it with the summary so far. Otherwise the error is nil even if
// checks failed: the summary counts them. fn may keep the *CheckError.
func (f Format) VerifyFunc(data, md []byte, p Params, fn func(*CheckError) error) (Summary, error) {
	if fn == nil {
		return Summary{}, paramErr("nil visitor")
	}
	r, err := f.run(data, md)
	if err != nil {
		return Summary{}, err
	}
	v, err := f.verify(&r, nil, &p, fn, nil, sumOut{})
	return v.sum, err
}

// Classification is what Classify fills in for a run of blocks, and what
// it reads them from. States is required; the other inputs are optional.
// A caller that classifies run after run keeps one Classification and
// sets its slices for each.
type Classification struct {
	// States receives the state of each block of the run; it must have
	// room for the run's blocks (see Blocks).
	States []State

	// Sums, if not nil, receives the CRC-32C (SectorSum) of the data of
	// each block, as GenerateSums computes it, whatever the block's state:
	// the caller compares them with its stored sums. It must have room for
	// the run's blocks; entries past them are left as they are.
	Sums []uint32

	// Src, if not nil, holds the blocks to classify, which Classify copies
	// to data (len(Src) == len(data), not overlapping): the states and sums
	// describe the bytes of data when Classify returns, whatever Src holds
	// by then. Nothing is copied if an error is returned. See copy.go,
	// "Verifying a copy", for when the copy and the checks are one pass.
	Src []byte

	// Copy, if not nil, replaces the loop that copies a chunk of blocks
	// from Src to data and computes their guards and sums in one pass:
	// the separate layout with the 16-bit guard checked (not Type0). The
	// caller passes a fused kernel that computes something of its own of
	// each block in the same pass (see CopyFunc). Copy needs Src and Sums.
	Copy CopyFunc

	// Single is set by Classify: whether one pass over each block of the
	// run computed its guard, with Sums its sum, and with Src its copy
	// (through Copy where it is set), for every block of the run. That is
	// the 16-bit guard checked (not Type0) and, with Src, the separate
	// layout. It is false for an empty run and after an error.
	Single bool
}

// CopyFunc is a fused kernel that Classify calls, through
// Classification.Copy, for each chunk of a run whose blocks it copies in
// the guards' pass: it must copy the len(guards) blocks of bs bytes, stride
// bytes apart, from src to dst, and set guards[j] to the CRC-16/T10-DIF and
// sums[j] to the CRC-32C of the bs bytes of block j as copied (the
// contract of t10crc32c.BlocksCopy). first is the index, in the run, of
// the chunk's first block, so that the kernel can place what it computes
// for each block. An error ends the classification and is returned.
type CopyFunc func(guards []uint16, sums []uint32, dst, src []byte, bs, stride, first int) error

// Classify checks every block of a run like Verify and stores each block's
// state in c.States; with c.Sums it also computes each block's sector sum,
// and with c.Src it classifies the blocks of c.Src while copying them to
// data (see Classification). Failures are only counted; use VerifyFunc for
// the details. It does not allocate.
func (f Format) Classify(c *Classification, data, md []byte, p Params) (Summary, error) {
	if c == nil {
		return Summary{}, bufErr("no Classification to fill")
	}
	c.Single = false
	if c.Src != nil {
		if err := checkCopy(data, c.Src); err != nil {
			return Summary{}, err
		}
	}
	if c.Copy != nil && (c.Src == nil || c.Sums == nil) {
		return Summary{}, paramErr("a copy hook without a source and sums")
	}
	r, err := f.run(data, md)
	if err != nil {
		return Summary{}, err
	}
	if len(c.States) < r.n {
		return Summary{}, bufErr("states has room for %d blocks, the run has %d", len(c.States), r.n)
	}
	var so sumOut
	if c.Sums != nil {
		if len(c.Sums) < r.n {
			return Summary{}, bufErr("sums has room for %d blocks, the run has %d", len(c.Sums), r.n)
		}
		so = sumOut{s: c.Sums[:r.n], bs: int(f.bs), copy: c.Copy}
	}
	clear(c.States[:r.n])
	v, err := f.verify(&r, c.Src, &p, func(*CheckError) error { return nil }, c.States, so)
	if err != nil || r.n == 0 {
		return v.sum, err
	}
	// ver16 computed every guard, and the sums with them; with a source,
	// in the copying pass where verify gave it one (the separate layout).
	filled := f.typ != Type0 && f.guard == Guard16 && v.guardOn
	if c.Sums != nil && !filled {
		if err := so.all(&r); err != nil {
			return v.sum, err
		}
	}
	c.Single = filled && (c.Src == nil || f.layout == Separate)
	return v.sum, nil
}

// verifier accumulates the outcome of a verification.
type verifier struct {
	expect
	fn      func(*CheckError) error // nil: collect into list
	list    []*CheckError
	states  []State
	sums    sumOut // Classification.Sums: the sector checksums, with the guards
	sum     Summary
	err     error // from fn
	stopped int   // blocks visited when fn stopped the run
}

// verify checks the run r (from f.run, which checked its buffers; its
// caller computes it once). With src (as long as r.data), the run's blocks
// are read from src and copied to r.data: by the guard loops in the same
// pass as the guards where they can (see copy.go), else all at once first.
func (f Format) verify(r *run, src []byte, p *Params, fn func(*CheckError) error, states []State, so sumOut) (verifier, error) {
	e, err := f.expect(p)
	if err != nil {
		return verifier{}, err
	}
	if src != nil {
		if f.layout == Separate && f.typ != Type0 && e.guardOn {
			r.src = src
		} else {
			copy(r.data, src)
		}
	}
	v := verifier{expect: e, fn: fn, states: states, sums: so}
	if f.typ != Type0 && r.n > 0 {
		s := scratchPool.Get().(*scratch)
		switch f.guard {
		case Guard16:
			err = v.ver16(r, &s.g16)
		case Guard32:
			err = v.ver32(r, &s.g32)
		default:
			err = v.ver64(r, &s.g64)
		}
		scratchPool.Put(s)
		if err == nil {
			err = v.err
		}
	}
	n := r.n
	if v.err != nil {
		n = v.stopped
	}
	v.sum.Blocks = n
	v.sum.OK = n - v.sum.Escaped - v.sum.Unwritten - v.sum.Failed
	return v, err
}

// The hot loops compare each stored tuple, as one or two big-endian words,
// with the expected one under a mask of the enabled checks, fold in the
// escape test (app tag 0xFFFF: (app+1)>>16 == 1) and OR everything into
// one word per chunk. Only a chunk with a non-zero word, or whose ref tags
// wrap, goes block by block through slow, the exact general check that
// classifies and reports.

func (v *verifier) refStep() uint64 {
	if v.refOn {
		return v.step
	}
	return 0
}

func (v *verifier) ver16(r *run, g *[chunk]uint16) error {
	var gm uint64
	if v.guardOn {
		gm = 0xFFFF
	}
	mask := gm<<48 | uint64(v.appMask)<<32 | v.spaceMask.lo
	c := uint64(v.app)<<32 | v.stor.lo
	step, noEsc := v.refStep(), v.escapeFlagged()
	ts := r.tstride
	for base := 0; base < r.n; base += r.chunk {
		gs := g[:min(r.chunk, r.n-base)]
		if v.guardOn {
			if err := v.sums.guards16(gs, r, base); err != nil {
				return err
			}
			if r.extra > 0 {
				m := r.md[base*ts:]
				for j := range gs {
					gs[j] = crct10dif.Update(gs[j], m[j*ts:][:r.extra])
				}
			}
		}
		t := r.tb[base*ts+r.toff:]
		lo, _, wrap := v.chunkRef(base, len(gs), step)
		var bad uint64
		switch {
		case ts == 8 && noEsc:
			bad = piscan.Scan16NoEscape(tuples8(t, len(gs)), gs, c|lo, step, mask)
		case ts == 8:
			bad = piscan.Scan16(tuples8(t, len(gs)), gs, c|lo, step, mask)
		case noEsc:
			bad = scan16n(t, ts, gs, c|lo, step, mask)
		default:
			bad = scan16(t, ts, gs, c|lo, step, mask)
		}
		if bad != 0 || wrap {
			for j, gv := range gs {
				if v.slow(base+j, uint64(gv), t[j*ts:]) {
					return nil
				}
			}
		}
	}
	return nil
}

func (v *verifier) ver32(r *run, g *[chunk]uint32) error {
	var gm uint64
	if v.guardOn {
		gm = 0xFFFFFFFF
	}
	mask0 := gm<<32 | uint64(v.appMask)<<16 | v.spaceMask.hi
	mask1 := v.spaceMask.lo
	c0 := uint64(v.app)<<16 | v.stor.hi
	c1 := v.stor.lo
	step, noEsc := v.refStep(), v.escapeFlagged()
	ts := r.tstride
	for base := 0; base < r.n; base += r.chunk {
		gs := g[:min(r.chunk, r.n-base)]
		if v.guardOn {
			if err := guards(gs, r, base, crc32c.Blocks, crc32c.BlocksCopy); err != nil {
				return err
			}
			if r.extra > 0 {
				m := r.md[base*ts:]
				for j := range gs {
					gs[j] = crc32c.Update(gs[j], m[j*ts:][:r.extra])
				}
			}
		}
		t := r.tb[base*ts+r.toff:]
		lo, hi, wrap := v.chunkRef(base, len(gs), step)
		var bad uint64
		if noEsc {
			bad = scan32n(t, ts, gs, c0|hi, c1|lo, step, mask0, mask1)
		} else {
			bad = scan32(t, ts, gs, c0|hi, c1|lo, step, mask0, mask1)
		}
		if bad != 0 || wrap {
			for j, gv := range gs {
				if v.slow(base+j, uint64(gv), t[j*ts:]) {
					return nil
				}
			}
		}
	}
	return nil
}

func (v *verifier) ver64(r *run, g *[chunk]uint64) error {
	var gm uint64
	if v.guardOn {
		gm = ^uint64(0)
	}
	mask1 := uint64(v.appMask)<<48 | v.spaceMask.lo
	c := uint64(v.app)<<48 | v.stor.lo
	step, noEsc := v.refStep(), v.escapeFlagged()
	ts := r.tstride
	for base := 0; base < r.n; base += r.chunk {
		gs := g[:min(r.chunk, r.n-base)]
		if v.guardOn {
			if err := guards(gs, r, base, crc64nvme.Blocks, crc64nvme.BlocksCopy); err != nil {
				return err
			}
			if r.extra > 0 {
				m := r.md[base*ts:]
				for j := range gs {
					gs[j] = crc64nvme.Update(gs[j], m[j*ts:][:r.extra])
				}
			}
		}
		t := r.tb[base*ts+r.toff:]
		lo, _, wrap := v.chunkRef(base, len(gs), step)
		var bad uint64
		switch {
		case ts == 16 && noEsc:
			bad = piscan.Scan64NoEscape(tuples16(t, len(gs)), gs, c|lo, step, gm, mask1)
		case ts == 16:
			bad = piscan.Scan64(tuples16(t, len(gs)), gs, c|lo, step, gm, mask1)
		case noEsc:
			bad = scan64n(t, ts, gs, c|lo, step, gm, mask1)
		default:
			bad = scan64(t, ts, gs, c|lo, step, gm, mask1)
		}
		if bad != 0 || wrap {
			for j, gv := range gs {
				if v.slow(base+j, gv, t[j*ts:]) {
					return nil
				}
			}
		}
	}
	return nil
}

// guards computes the guards of the len(gs) blocks from block base of r
// with blocks, or with blocksCopy when r reads its blocks from r.src.
func guards[T uint32 | uint64](gs []T, r *run, base int,
	blocks func([]T, []byte, int, int) error,
	blocksCopy func([]T, []byte, []byte, int, int) error) error {
	off := base * r.dstride
	if r.src != nil {
		return blocksCopy(gs, r.data[off:], r.src[off:], r.dcov, r.dstride)
	}
	return blocks(gs, r.data[off:], r.dcov, r.dstride)
}

// The scan functions are small leaves so that every value lives in a
// register. They return the OR over the chunk of the masked differences
// and escape bits: zero means every block passes.

// scan16: tuple = guard<<48 | e (e = app<<32 | space, +step per block).
//
//go:noinline
func scan16(t []byte, ts int, gs []uint16, e, step, mask uint64) uint64 {
	var bad uint64
	off := 0
	for _, gv := range gs {
		w := binary.BigEndian.Uint64(t[off:])
		bad |= (w^(uint64(gv)<<48|e))&mask | (w>>32&0xFFFF+1)>>16
		e += step
		off += ts
	}
	return bad
}

// The scans of tuples packed one after the other (the separate layout with
// metadata of the tuple's size: 512+8, 4096+8, 512+16, ...) take them as
// arrays, so that their loops hold no bounds check: with a check per
// block the compiler ran out of registers and kept the offset in memory,
// and the scan of a 512+8 read was 5% of its time. Those of 8-byte tuples
// and of the 64-bit guard's 16-byte ones are kernels/piscan's (vector
// kernels, the generic Go scans elsewhere).

// tuples8 is the first n tuples of t, 8 bytes apart, as arrays.
func tuples8(t []byte, n int) [][8]byte {
	t = t[:8*n]
	return unsafe.Slice((*[8]byte)(unsafe.Pointer(unsafe.SliceData(t))), n)
}

// tuples16 is the first n tuples of t, 16 bytes apart, as arrays.
func tuples16(t []byte, n int) [][16]byte {
	t = t[:16*n]
	return unsafe.Slice((*[16]byte)(unsafe.Pointer(unsafe.SliceData(t))), n)
}

// scan16n is scan16 without the escape term, for when the app tag check
// already flags a stored 0xFFFF (see escapeFlagged).
//
//go:noinline
func scan16n(t []byte, ts int, gs []uint16, e, step, mask uint64) uint64 {
	var bad uint64
	off := 0
	for _, gv := range gs {
		w := binary.BigEndian.Uint64(t[off:])
		bad |= (w ^ (uint64(gv)<<48 | e)) & mask
		e += step
		off += ts
	}
	return bad
}

// scan32: words guard<<32 | e0 (app<<16 | space bits 64-79) and e1
// (space bits 0-63, +step per block).
//
//go:noinline
func scan32(t []byte, ts int, gs []uint32, e0, e1, step, mask0, mask1 uint64) uint64 {
	var bad uint64
	off := 0
	for _, gv := range gs {
		tt := t[off : off+16]
		w0 := binary.BigEndian.Uint64(tt)
		w1 := binary.BigEndian.Uint64(tt[8:])
		bad |= (w0^(uint64(gv)<<32|e0))&mask0 | (w1^e1)&mask1 | (w0>>16&0xFFFF+1)>>16
		e1 += step
		off += ts
	}
	return bad
}

// scan32n is scan32 without the escape term.
//
//go:noinline
func scan32n(t []byte, ts int, gs []uint32, e0, e1, step, mask0, mask1 uint64) uint64 {
	var bad uint64
	off := 0
	for _, gv := range gs {
		tt := t[off : off+16]
		w0 := binary.BigEndian.Uint64(tt)
		w1 := binary.BigEndian.Uint64(tt[8:])
		bad |= (w0^(uint64(gv)<<32|e0))&mask0 | (w1^e1)&mask1
		e1 += step
		off += ts
	}
	return bad
}

// scan64: words guard and e1 (app<<48 | space, +step per block).
//
//go:noinline
func scan64(t []byte, ts int, gs []uint64, e1, step, gm, mask1 uint64) uint64 {
	var bad uint64
	off := 0
	for _, gv := range gs {
		tt := t[off : off+16]
		w0 := binary.BigEndian.Uint64(tt)
		w1 := binary.BigEndian.Uint64(tt[8:])
		bad |= (w0^gv)&gm | (w1^e1)&mask1 | (w1>>48+1)>>16
		e1 += step
		off += ts
	}
	return bad
}

// scan64n is scan64 without the escape term.
//
//go:noinline
func scan64n(t []byte, ts int, gs []uint64, e1, step, gm, mask1 uint64) uint64 {
	var bad uint64
	off := 0
	for _, gv := range gs {
		tt := t[off : off+16]
		w0 := binary.BigEndian.Uint64(tt)
		w1 := binary.BigEndian.Uint64(tt[8:])
		bad |= (w0^gv)&gm | (w1^e1)&mask1
		e1 += step
		off += ts
	}
	return bad
}

// escapeFlagged reports whether the scans can leave out the escape term.
// They can when the app tag check alone flags a stored app tag of 0xFFFF
// (it is compared and differs from the expected tag under the mask): an
// escaped block then fails the app tag comparison and reaches slow anyway.
// They can also for a plain Verify, which reports failures and nothing
// else: an escaped block whose checks all pass has the same outcome as one
// skipped, and one whose checks fail reaches slow, which honours the
// escape. Classify and VerifyFunc count escaped blocks, so they keep it.
func (v *verifier) escapeFlagged() bool {
	return (v.fn == nil && v.states == nil) || (0xFFFF^v.app)&v.appMask != 0
}

// slow classifies block i, whose tuple is t and computed guard g, and
// reports its failures. It returns true to stop the verification.
func (v *verifier) slow(i int, g uint64, t []byte) bool {
	tu := decodeTuple(v.guard, t)
	if tu.app == 0xFFFF {
		if tu.space == v.allOnes {
			v.sum.Unwritten++
			v.setState(i, StateUnwritten)
			return false
		}
		if v.typ != Type3 {
			v.sum.Escaped++
			v.setState(i, StateEscaped)
			return false
		}
	}
	errs := v.sum.Errors
	stop := false
	if v.guardOn && tu.guard != g {
		stop = v.report(i, FieldGuard, u80{0, g}, u80{0, tu.guard})
	}
	if !stop && (tu.app^v.app)&v.appMask != 0 {
		stop = v.report(i, FieldAppTag, u80{0, uint64(v.app)}, u80{0, uint64(tu.app)})
	}
	if !stop && v.refOn {
		if want, got := v.refAt(i), tu.space.and(v.refMask); got != want {
			stop = v.report(i, FieldRefTag, want, got)
		}
	}
	if !stop && v.storOn {
		if got := tu.space.and(v.storMask); got != v.stor {
			stop = v.report(i, FieldStorageTag, v.stor.shr(v.refBits), got.shr(v.refBits))
		}
	}
	if v.sum.Errors != errs {
		v.sum.Failed++
		v.setState(i, StateFailed)
	}
	if stop {
		v.stopped = i + 1
	}
	return stop
}

func (v *verifier) setState(i int, s State) {
	if v.states != nil {
		v.states[i] = s
	}
}

func (v *verifier) report(i int, field Field, want, got u80) bool {
	v.sum.Errors++
	ce := &CheckError{
		Block: i, LBA: v.lba + int64(i), Field: field,
		Expected: want.lo, Actual: got.lo,
		ExpectedHigh: uint16(want.hi), ActualHigh: uint16(got.hi),
	}
	if v.fn == nil {
		if len(v.list) < MaxListed {
			v.list = append(v.list, ce)
		}
		return false
	}
	if err := v.fn(ce); err != nil {
		v.err = err
		return true
	}
	return false
}
