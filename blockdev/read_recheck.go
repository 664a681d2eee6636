package blockdev

import (
	"unsafe"

	"github.com/difctl/difctl/blockdev/internal/check"
	"github.com/difctl/difctl/dif"
)

// Stage 4 of a verified read (verifyRun): recheck. The run's states are
// counted, and each failing block goes to the one block classifier
// (blockCheck.problems, verify.go: its failed checks, as Problems) and the
// one re-read loop (check.Reread), both in package blockdev/internal/check
// and shared with package blockdev/pisource: a block that passes on a
// re-read is transient, and its copy replaces the one read.

// recheckRun counts the states of the n blocks of the classified run at
// lba and rechecks each failing block (recheck): the problems of blocks
// still failing, and of transient ones, are left in sc.probs in LBA order.
// Blocks that could not be read (sc.ioBad) fail without a recheck, and an
// unwritten block is cleared in data when the request asks for zeros
// (readReq.zero). The error is check.Fatal's, or the request's
// context's, from a re-read.
func (v *Volume) recheckRun(lba int64, n int, data []byte, sc *scratch) (RunStats, error) {
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
			st.Count(s)
			if s == dif.StateUnwritten && sc.req.zero && !sc.written.Has(i) {
				clear(data[i*bs : (i+1)*bs])
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
	return st, nil
}

// allOK reports whether every state is dif.StateOK, which is zero (the
// array below fails to compile otherwise), with the runtime's vectorised
// comparison against zeros (a loop over eight states at a time was 0.8%
// of a 512+8 read).
func allOK(states []dif.State) bool {
	var _ [1]struct{} = [1 - dif.StateOK]struct{}{}
	return check.IsZero(unsafe.Slice((*byte)(unsafe.SliceData(states)), len(states)))
}

// recheck handles block i (lba) of the verified run, which failed: its
// problems go to sc.probs, then it is re-read (check.Reread) and, if a copy
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
	passed, err := check.Reread(sc.req.ctx, sc.req.rereads,
		func() error {
			v.st.rereads.Add(1)
			return sc.readDev(sc.reread, lba, v.bs, true)
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
