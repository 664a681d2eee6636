package blockdev

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unsafe"

	"github.com/difctl/difctl/dif"
)

// The verifier of a Volume's runs: every path that checks blocks of a
// volume (ReadAt, CheckRun, the edge blocks of WriteAt, ExportVolume and
// RemapVolume) calls verifyRun with a readReq. It classifies the run with
// dif in one pass (guards, tags and sector sums together), applies the
// unwritten-block rule, and sends each failing block through the
// package's block classifier and re-read loop (verify.go).

var _ CheckSource = (*Volume)(nil)

// subChunk is the span, in bytes, of one dif call of the read and write
// paths (guards and sector checksums computed in one pass, see classify).
// Each call has fixed costs (dif's checks and set-up, the kernel's first
// groups, which its prefetch does not cover): a verified 1 MiB read of
// 512-byte blocks with guard and sums ran at 63-67% of pread with 64 KiB,
// 67-69% with 256 KiB, and 66-72% with 1 MiB (alternating runs).
const subChunk = 256 << 10

// allOK reports whether every state is dif.StateOK, which is zero (the
// array below fails to compile otherwise), eight states at a time.
func allOK(states []dif.State) bool {
	var _ [1]struct{} = [1 - dif.StateOK]struct{}{}
	b := unsafe.Slice((*byte)(unsafe.SliceData(states)), len(states))
	var or uint64
	i := 0
	for ; i+8 <= len(b); i += 8 {
		or |= binary.LittleEndian.Uint64(b[i:])
	}
	for ; i < len(b); i++ {
		or |= uint64(b[i])
	}
	return or == 0
}

// u32Bytes is the memory of s as bytes (for a vectorised comparison).
func u32Bytes(s []uint32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 4*len(s))
}

// classify verifies blocks [i, i+k) of the loaded run at lba, one
// sub-chunk after the other, leaving each block's state in sc.states, with
// one dif call per sub-chunk: with sector checksums, dif computes them in
// the same pass as the PI guards (one pass over the data for 16-bit
// guards). With src (the k blocks in a device mapping, see readMapped), the
// blocks are copied from src to data in that same pass and the copy is
// what is verified; with sc.req.inPlace, src itself is verified and only
// its failing blocks copied. Disjoint ranges of one run may be classified
// concurrently, each by its own worker w (0 the request's goroutine; see
// keyed.Scratch.Hook).
func (v *Volume) classify(lba int64, i, k int, data, src []byte, sc *scratch, w int) error {
	bs, ts := v.bs, v.ts
	sub := max(1, subChunk/bs)
	first := i
	for end := i + k; i < end; i += sub {
		k := min(sub, end-i)
		sc.tags.Unmark(i, k)
		states, blocks, tuples := sc.states[i:i+k], data[i*bs:(i+k)*bs], sc.tuples[i*ts:(i+k)*ts]
		var from, keep []byte
		if src != nil {
			from = src[(i-first)*bs : (i-first+k)*bs]
			if sc.req.inPlace {
				// Verify the mapping itself; keep the failing blocks.
				keep, blocks, from = blocks, from, nil
			}
		}
		c := dif.Classification{States: states, Src: from}
		if v.sums {
			c.Sums = sc.crcs[i : i+k]
			if from != nil {
				// The keyed partials in the copying pass (keyed.Scratch.Hook).
				c.Copy = sc.tags.Hook(w, i)
			}
		}
		sum, err := v.f.Classify(&c, blocks, tuples, v.paramsFrom(sc.req.ref, lba+int64(i)))
		if err != nil {
			return fmt.Errorf("blockdev: verify: %w", err)
		}
		if c.Copy != nil && c.Single {
			sc.tags.Mark(i, k)
		}
		if v.sums {
			crcs, sums := c.Sums, sc.sums[i:i+k]
			if !bytes.Equal(u32Bytes(crcs), u32Bytes(sums)) {
				for j := range crcs {
					if crcs[j] != sums[j] && sc.written.Has(i+j) {
						sc.states[i+j] = dif.StateFailed
					}
				}
			}
		}
		if sum.Unwritten > 0 {
			v.checkUnwritten(i, states, blocks, sc)
		}
		if keep != nil {
			copyFailed(keep, blocks, states, bs)
		}
	}
	return nil
}

// checkUnwritten applies the rule of unwritten blocks (see unwritten.go)
// to the blocks of a classified piece starting at index i of the run: an
// unwritten block (not merely one whose stored tuple is all ones) whose
// data is not zeros fails (recheck reports it as KindUnwrittenData).
func (v *Volume) checkUnwritten(i int, states []dif.State, blocks []byte, sc *scratch) {
	bs := v.bs
	for j, st := range states {
		if st != dif.StateUnwritten || sc.written.Has(i+j) {
			continue
		}
		if !isZero(blocks[j*bs : (j+1)*bs]) {
			states[j] = dif.StateFailed
		}
	}
}

// copyFailed copies the failing blocks of src (their states in states) to
// the same places in dst.
func copyFailed(dst, src []byte, states []dif.State, bs int) {
	for j, st := range states {
		if st == dif.StateFailed {
			copy(dst[j*bs:(j+1)*bs], src[j*bs:])
		}
	}
}

// verifyRun reads and verifies blocks [lba, lba+n) (n <= v.chunk) into
// data as req says: it loads the run (loadRun), reads and classifies it
// with dif (readSerial or readParallel, classify), and hands every failing block to the
// package's block classifier and re-read loop (see verify.go). The
// problems of blocks still failing, and of transient ones (Transient set),
// are left in sc.probs in LBA order; sc.tuples and sc.written keep the
// run's tuples and written bits. The error is for the run as a whole (the
// store could not be read, fatalReadError). Caller holds a lock on the
// range.
func (v *Volume) verifyRun(lba int64, n int, data []byte, sc *scratch, req readReq) (RunStats, error) {
	sc.probs = sc.probs[:0]
	sc.req = req
	if req.ctx == nil {
		sc.req.ctx = context.Background()
	}
	if v.keyedReadable(req) {
		st, ok, err := v.verifyRunKeyed(lba, n, data, sc)
		if err != nil {
			return RunStats{}, err
		}
		if ok {
			keyedReadRuns.Add(1)
			v.st.read.Add(int64(n))
			return st, nil
		}
		// The ordinary path, from the start.
		keyedReadFallbacks.Add(1)
		sc.probs = sc.probs[:0]
	}
	loaded, err := v.loadRun(lba, n, data, sc)
	if err != nil {
		return RunStats{}, err
	}
	if !loaded && sc.unwritten && v.tags == nil {
		// (A keyed volume reads and checks them: their tags must say
		// unwritten too, since the tuple pages carry no MAC.)
		hole, err := v.isHole(lba, n)
		if err != nil {
			return RunStats{}, err
		}
		if hole {
			// Unwritten blocks in a hole: zeros, by the rule, without a
			// read.
			if req.zero {
				clear(data[:n*v.bs])
			}
			v.st.read.Add(int64(n))
			return RunStats{Blocks: int64(n), Unwritten: int64(n)}, nil
		}
	}
	if loaded {
		err = v.classify(lba, 0, n, data, nil, sc, 0)
	} else if parts := v.splitParts(n); parts > 1 {
		err = v.readParallel(lba, n, parts, data, sc)
	} else {
		err = v.readSerial(lba, 0, n, data, sc)
	}
	if err != nil {
		return RunStats{}, err
	}
	bs := v.bs
	states := sc.states[:n]
	st := RunStats{Blocks: int64(n)}
	ioProbs := len(sc.probs)
	ioBad := false // any block unreadable: most runs have none
	for _, w := range sc.ioBad[:(n+63)/64] {
		ioBad = ioBad || w != 0
	}
	if !ioBad && allOK(states) {
		// The common case, checked eight states at a time.
		st.OK = int64(n)
		states = nil
	}
	for i, s := range states {
		if ioBad && hasBit(sc.ioBad, i) {
			st.Failed++
			continue
		}
		if s != dif.StateFailed {
			switch s {
			case dif.StateOK:
				st.OK++
			case dif.StateEscaped:
				st.Escaped++
			case dif.StateUnwritten:
				st.Unwritten++
				if req.zero && !sc.written.Has(i) {
					clear(data[i*bs : (i+1)*bs])
				}
			}
			continue
		}
		// A failing block: note its problems, then re-read it.
		passed, err := v.recheck(data[i*bs:(i+1)*bs], i, lba+int64(i), sc)
		if err != nil {
			return RunStats{}, err
		}
		if passed {
			st.OK++
			st.Transient++
			continue
		}
		st.Failed++
	}
	if ioProbs > 0 {
		// Merge the I/O problems (found first) into LBA order.
		sortProblems(sc.probs)
	}
	if v.tags != nil {
		if err := v.checkTags(lba, n, data, sc, &st, req.inPlace && !loaded && v.mapper != nil); err != nil {
			return RunStats{}, err
		}
	}
	v.st.read.Add(int64(n))
	v.st.transient.Add(st.Transient)
	v.st.failed.Add(st.Failed)
	return st, nil
}

// recheck handles block i (lba) of the verified run, which failed: its
// problems go to sc.probs, then it is re-read (reread) and, if a copy
// passes, that copy replaces data and the problems are marked transient.
func (v *Volume) recheck(data []byte, i int, lba int64, sc *scratch) (bool, error) {
	tuple := sc.tuples[i*v.ts : (i+1)*v.ts]
	p := v.paramsFrom(sc.req.ref, lba)
	written := sc.written.Has(i)
	var sum uint32
	if v.sums {
		sum = sc.sums[i]
	}
	first := len(sc.probs)
	sc.probs = v.problems(sc.probs, lba, data, tuple, p, written, sum)
	passed, err := reread(sc.req.ctx, sc.req.rereads,
		func() error {
			v.st.rereads.Add(1)
			return v.readDev(sc.reread, lba, true)
		},
		func() bool { return v.ok(sc.reread, tuple, p, written, sum) })
	if err != nil || !passed {
		return false, err
	}
	copy(data, sc.reread)
	for k := first; k < len(sc.probs); k++ {
		sc.probs[k].Transient = true
	}
	return true, nil
}

// isHole reports whether the device knows blocks [lba, lba+n) to be a hole
// (SEEK_DATA finds no data in them): they read as zeros without a read.
func (v *Volume) isHole(lba int64, n int) (bool, error) {
	f, ok := v.dev.(DataFinder)
	if !ok || v.noHoles.Load() {
		return false, nil
	}
	off, end := lba*int64(v.bs), (lba+int64(n))*int64(v.bs)
	e, err := f.NextData(off)
	switch {
	case errors.Is(err, io.EOF):
		return true, nil
	case errors.Is(err, errors.ErrUnsupported):
		v.noHoles.Store(true)
		return false, nil
	case err != nil:
		if fatalReadError(err) {
			return false, err
		}
		return false, nil // read the blocks: the read reports the device's trouble
	}
	return e.Off >= end, nil
}

// sortProblems sorts by LBA, stably (insertion sort: few problems).
func sortProblems(p []Problem) {
	for i := 1; i < len(p); i++ {
		for j := i; j > 0 && p[j].LBA < p[j-1].LBA; j-- {
			p[j], p[j-1] = p[j-1], p[j]
		}
	}
}

// problemList collects the problems of a conversion for its
// *IntegrityError and passes them on.
type problemList struct {
	ie   *IntegrityError
	last int64
	fn   func(Problem)
}

func (l *problemList) add(op string, p Problem) {
	if l.fn != nil {
		l.fn(p)
	}
	if p.Transient {
		return
	}
	if l.ie == nil {
		l.ie = &IntegrityError{Op: op, LBA: p.LBA}
		l.last = -1
	}
	if p.LBA != l.last {
		l.ie.Failed++
		l.last = p.LBA
	}
	l.ie.N = p.LBA - l.ie.LBA + 1
	if len(l.ie.Problems) < MaxListedProblems {
		l.ie.Problems = append(l.ie.Problems, p)
	}
}

// runError turns the problems of a verified run into ReadAt's error: the
// device's error for a block that could not be read, otherwise an
// *IntegrityError, with the first bad block. It returns nil if every
// problem was transient.
func runError(op string, probs []Problem) (int64, error) {
	var l problemList
	for _, p := range probs {
		if p.Transient {
			continue
		}
		if p.Kind == KindIO {
			return p.LBA, fmt.Errorf("blockdev: %s of block %d: %w", op, p.LBA, p.Err)
		}
		l.add(op, p)
	}
	if l.ie == nil {
		return -1, nil
	}
	return l.ie.LBA, l.ie
}
