package blockdev

import (
	"errors"
	"runtime"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/check"
	"github.com/difctl/difctl/blockdev/internal/keyed"
	"github.com/difctl/difctl/blockdev/internal/split"
)

// Stage 2 of a verified read (verifyRun): read. The run's data comes from
// the device's read-only mapping of the page cache where it has one
// (readMapped: stage 3 classifies each piece straight from the mapping,
// copying it to the caller's buffer in the verifying pass), otherwise with
// the device's ReadAt, and a large run is split across the verification
// workers (or, for a keyed volume, the split helper). Each piece is
// classified (stage 3, read_classify.go) as soon as it is read, while the
// CPU cache still holds it. A read that fails is retried block by block;
// blocks that still cannot be read are marked in sc.ioBad and reported.

// readDevice reads p at off from dev, around the page cache if uncached.
func readDevice(dev device.Device, p []byte, off int64, uncached bool) error {
	var err error
	if uncached {
		_, err = device.ReadUncached(dev, p, off)
	} else {
		_, err = dev.ReadAt(p, off)
	}
	return err
}

// readDev reads whole blocks from the device.
func (v *Volume) readDev(p []byte, lba int64, uncached bool) error {
	return readDevice(v.dev, p, lba*int64(v.bs), uncached)
}

// readDev reads whole blocks (of bs bytes) of the request's run from where
// it is read (readReq.dev).
func (sc *scratch) readDev(p []byte, lba int64, bs int, uncached bool) error {
	return readDevice(sc.req.dev, p, lba*int64(bs), uncached)
}

// readRun reads blocks [0, n) of the loaded run at lba into data and
// classifies them, piece by piece: serially on the caller's goroutine, or
// in parts across the verification workers (or the split helper) when the
// run is large. loaded: the load stage read the run already (staging
// serves staged blocks with the rest of the run read under its lock), so
// it is only classified.
func (v *Volume) readRun(lba int64, n int, data []byte, sc *scratch, loaded bool) error {
	if loaded {
		return v.classify(lba, 0, n, data, nil, sc, 0)
	}
	if v.splitRead(n) {
		return v.readParallel(lba, n, data, sc)
	}
	return v.readSerial(lba, 0, n, data, sc)
}

// readSerial reads and classifies blocks [i, i+k) of a run piece by piece
// on the caller's goroutine, retrying failing reads block by block.
func (v *Volume) readSerial(lba int64, i, k int, data []byte, sc *scratch) error {
	piece := max(1, pipePiece/v.bs)
	uncached := sc.req.uncached
	if !uncached && sc.req.mapper != nil && !v.noMap.Load() {
		// From the mapping the kernels copy and verify in one pass (or, in
		// place, nothing is copied), so no read has to stay in the cache
		// until it is verified: the mapping is read in one go, classify
		// making a dif call per sub-chunk. (Per 128 KiB piece, the calls'
		// set-up was 2-3% of a 512+8 read.) A piece whose mapped read
		// faults is read the ordinary way below, whole.
		piece = k
	}
	for end := i + k; i < end; i += piece {
		k := min(piece, end-i)
		if !uncached {
			done, err := v.readMapped(lba, i, k, data, sc, 0)
			if err != nil {
				return err
			}
			if done {
				continue
			}
		}
		if err := v.readData(lba, i, i+k, data, sc); err != nil {
			return err
		}
		if err := v.classify(lba, i, k, data, nil, sc, 0); err != nil {
			return err
		}
	}
	return nil
}

// readData reads blocks [from, to) of the run at lba into data.
func (v *Volume) readData(lba int64, from, to int, data []byte, sc *scratch) error {
	err := sc.readDev(data[from*v.bs:to*v.bs], lba+int64(from), v.bs, sc.req.uncached)
	if err == nil {
		return nil
	}
	return v.readFallback(lba, from, to, data, sc, err, nil)
}

// readFallback reads block by block the blocks [from, to) of a run whose
// read failed with err, re-reading each up to sc.req.rereads times; blocks
// that still cannot be read are zeroed, marked in sc.ioBad and reported.
// Blocks marked in skip (served from staging) are left alone. An error
// that check.Fatal accepts fails the run.
func (v *Volume) readFallback(lba int64, from, to int, data []byte, sc *scratch, err error, skip []uint64) error {
	if check.Fatal(err) {
		return err
	}
	for i := from; i < to; i++ {
		if skip != nil && hasBit(skip, i) {
			continue
		}
		blk := data[i*v.bs : (i+1)*v.bs]
		var err error
		for r := 0; r <= sc.req.rereads; r++ {
			if err = sc.readDev(blk, lba+int64(i), v.bs, r > 0 || sc.req.uncached); err == nil || check.Fatal(err) {
				break
			}
		}
		if err != nil && check.Fatal(err) {
			return err
		}
		if err != nil {
			clear(blk)
			setBit(sc.ioBad, i)
			sc.probs = append(sc.probs, Problem{LBA: lba + int64(i), Kind: KindIO, Err: err})
		}
	}
	return nil
}

// readMapped verifies blocks [i, i+k) of the run at lba straight from the
// device's mapping of the page cache when it has one (see Mapper), copying
// them to data in the verifying pass: one pass over the bytes instead of
// the kernel's copy and then the checksums. done is false when the piece
// must be read the ordinary way: the device has no mapping, or reading it
// faulted (ReadAt then reports the I/O error properly).
// Worker w (0 the request's goroutine, 1 the split helper, which classify
// disjoint pieces of one run concurrently) classifies through its own
// callback, sc.maps[w], made once per scratch so that a read allocates
// nothing.
func (v *Volume) readMapped(lba int64, i, k int, data []byte, sc *scratch, w int) (done bool, err error) {
	mapper := sc.req.mapper
	if mapper == nil || v.noMap.Load() {
		return false, nil
	}
	off := (lba + int64(i)) * int64(v.bs)
	m := &sc.maps[w]
	m.lba, m.i, m.k, m.data = lba, i, k, data
	err = mapper.ReadMapped(off, k*v.bs, m.fn)
	m.data = nil
	return v.mappedDone(mapper, err)
}

// mappedDone is the outcome of a ReadMapped of mapper that returned err:
// done, or to be read the ordinary way (false, nil) when the device cannot
// be mapped (then the volume's mapping is not tried again) or reading the
// mapping faulted (counted; ReadAt then reports the I/O error properly),
// or the error.
func (v *Volume) mappedDone(mapper device.Mapper, err error) (done bool, _ error) {
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errors.ErrUnsupported):
		if mapper == v.mapper {
			v.noMap.Store(true)
		}
		return false, nil
	case errors.Is(err, device.ErrMapFault):
		v.st.mapFaults.Add(1)
		return false, nil
	}
	return false, err
}

// Parallel reads: a run of at least splitMin bytes is cut into pieces
// (split.Pieces: about 128 KiB, the last ones a quarter of that) that the
// caller's goroutine and the split helper take in turn from a shared
// counter (split.Work), each reading and verifying its pieces while the
// CPU cache still holds them. The caller starts at once and does every
// piece the helper did not take, so a helper that starts late costs
// nothing; the helper stays awake for a moment after a request, so that a
// stream of requests finds it running; and the split's gate turns it off
// while the second CPU does not help. (A goroutine per part, woken through
// a channel, is what this replaced: on a two-vCPU virtual machine the
// worker started 30-40 µs after the hand-off, half the time of a whole
// 1 MiB verified read, so the caller finished its part and waited, and the
// split ran slower than one goroutine; docs/performance.md.) A piece
// whose read fails is done again serially, where failing reads are
// retried block by block.
const (
	splitMin  = 256 << 10
	pipePiece = 128 << 10
	// maxPieces bounds the pieces of a split run (a bit each in
	// scratch.partFailed); a run of v.chunk blocks makes at most 19.
	maxPieces = 64
)

type verifyJob struct {
	lba  int64
	i, k int
	part int
	data []byte
	sc   *scratch // with the run's request
}

// runPart reads and classifies piece j of a split run as worker w (0 the
// request's goroutine, 1 the split helper), recording a failed read in
// sc.partFailed (the piece is redone serially) and any other error in
// sc.jobErr. It reports whether the run goes on (no error).
func (v *Volume) runPart(j verifyJob, w int) bool {
	piece := max(1, pipePiece/v.bs)
	for i, end := j.i, j.i+j.k; i < end; i += piece {
		k := min(piece, end-i)
		if !j.sc.req.uncached {
			done, err := v.readMapped(j.lba, i, k, j.data, j.sc, w)
			if err != nil {
				j.sc.fail(err)
				return false
			}
			if done {
				continue
			}
		}
		if err := j.sc.readDev(j.data[i*v.bs:(i+k)*v.bs], j.lba+int64(i), v.bs, j.sc.req.uncached); err != nil {
			j.sc.partFailed.Or(1 << j.part)
			return true
		}
		if err := v.classify(j.lba, i, k, j.data, nil, j.sc, w); err != nil {
			j.sc.fail(err)
			return false
		}
	}
	return true
}

// fail records err as the split run's error unless one was recorded. (A
// copy of err escapes, not the caller's variable, which would be moved to
// the heap for every piece.)
func (sc *scratch) fail(err error) {
	e := err
	sc.jobErr.CompareAndSwap(nil, &e)
}

// splitRead reports whether a run of n blocks is read in pieces shared
// with the split helper: a large run, unless Options.VerifyWorkers is
// negative, or of a keyed volume whose fused kernel computes the partials
// (keyedHelper).
func (v *Volume) splitRead(n int) bool {
	if n*v.bs < splitMin || runtime.GOMAXPROCS(0) < 2 {
		return false
	}
	return v.opts.VerifyWorkers >= 0 || v.keyedHelper()
}

// keyedHelper reports whether a large verified read of a keyed volume
// without verification workers (Options.VerifyWorkers) is split over the
// caller and the split helper: when the fused kernel computes the
// partials and a second CPU may run it.
func (v *Volume) keyedHelper() bool {
	return v.tags != nil && v.sums && keyed.Fused() && runtime.GOMAXPROCS(0) >= 2
}

// readParallel reads the data of a run of n blocks and classifies it in
// pieces that the caller and the split helper take in turn.
//
// While the split is off (its gate closed: the other CPU is busy), the
// pieces would all run on the caller, each with its own mapped read and
// dif call; readSerial reads and classifies the run in fewer calls
// (docs/performance.md, "This tier today", has the figures with the other
// CPU busy).
func (v *Volume) readParallel(lba int64, n int, data []byte, sc *scratch) error {
	bp := split.NewPieces(n, v.bs)
	if bp.Len() > maxPieces || !split.Open() {
		return v.readSerial(lba, 0, n, data, sc)
	}
	v.st.splitRuns.Add(1)
	sc.jobErr.Store(nil)
	sc.partFailed.Store(0)
	sc.partLBA, sc.parts, sc.partBuf = lba, bp, data
	split.Work(bp.Len(), sc.partFn)
	sc.partBuf = nil
	if p := sc.jobErr.Load(); p != nil {
		return *p
	}
	failed := sc.partFailed.Load()
	for p := 0; failed != 0 && p < bp.Len(); p++ {
		if failed&(1<<p) == 0 {
			continue
		}
		i, j := bp.At(p)
		if err := v.readSerial(lba, i, j-i, data, sc); err != nil {
			return err
		}
	}
	return nil
}
