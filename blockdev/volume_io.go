package blockdev

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/store"
)

var _ CheckSource = (*Volume)(nil)

// subChunk is the span, in bytes, of one dif call of the read and write
// paths (guards and sector checksums computed in one pass, see classify).
// Each call has fixed costs (dif's checks and set-up, the kernel's first
// groups, which its prefetch does not cover): a verified 1 MiB read of
// 512-byte blocks with guard and sums ran at 63-67% of pread with 64 KiB,
// 67-69% with 256 KiB, and 66-72% with 1 MiB (alternating runs).
const subChunk = 256 << 10

// scratch is the per-request working memory of the read and write paths,
// sized for one chunk (v.chunk blocks) and pooled.
type scratch struct {
	tuples     []byte
	sums       []uint32
	crcs       []uint32
	written    store.Bitmap
	ovMask     []uint64 // blocks whose tuple comes from staging or the overlay
	ovTuples   []byte
	ovSums     []uint32
	ioBad      []uint64 // blocks that could not be read
	dirty      []uint64 // unwritten blocks holding data (see unwritten.go)
	states     []dif.State
	head       []byte // partial blocks of reads and writes
	tail       []byte
	reread     []byte
	probs      []Problem
	k          *keyedScratch  // keyed volumes (keyed.go)
	wg         sync.WaitGroup // parts of a split read (readClassify)
	jobErr     atomic.Pointer[error]
	partFailed atomic.Uint64 // parts whose read failed, redone serially

	// unwritten: every block of the loaded run is unwritten (see
	// verifyRun's hole check).
	unwritten bool

	// inPlace: blocks read from the device's mapping are verified where
	// they are, and only the failing ones copied to data (CheckRun, which
	// returns no data).
	inPlace bool

	// The serial mapped read's callback (see readMapped), made once so
	// that a read allocates nothing, and its arguments.
	mapFn   func([]byte) error
	mapLBA  int64
	mapI    int
	mapK    int
	mapData []byte
}

func (v *Volume) newScratch() any {
	n := v.chunk
	w := (n + 63) / 64
	sc := &scratch{
		tuples:   make([]byte, n*v.ts),
		crcs:     make([]uint32, n),
		written:  store.NewBitmap(n),
		ovMask:   make([]uint64, w),
		ovTuples: make([]byte, n*v.ts),
		ioBad:    make([]uint64, w),
		dirty:    make([]uint64, w),
		states:   make([]dif.State, n),
		head:     AlignedBuffer(v.bs),
		tail:     AlignedBuffer(v.bs),
		reread:   AlignedBuffer(v.bs),
	}
	if v.sums {
		sc.sums = make([]uint32, n)
		sc.ovSums = make([]uint32, n)
	}
	sc.mapFn = func(src []byte) error { return v.classify(sc.mapLBA, sc.mapI, sc.mapK, sc.mapData, src, sc) }
	return sc
}

func (v *Volume) getScratch() *scratch { return v.scratch.Get().(*scratch) }

func (v *Volume) putScratch(sc *scratch) {
	clear(sc.probs) // drop references to errors
	sc.probs = sc.probs[:0]
	v.scratch.Put(sc)
}

func hasBit(m []uint64, i int) bool { return m[i/64]>>(i%64)&1 != 0 }
func setBit(m []uint64, i int)      { m[i/64] |= 1 << (i % 64) }

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

// readDev reads whole blocks from the device.
func (v *Volume) readDev(p []byte, lba int64, uncached bool) error {
	var err error
	if uncached {
		_, err = ReadUncached(v.dev, p, lba*int64(v.bs))
	} else {
		_, err = v.dev.ReadAt(p, lba*int64(v.bs))
	}
	return err
}

// copyStaged copies the blocks of b inside [lba, lba+n) into data and the
// override buffers. Caller holds stMu.
func (v *Volume) copyStaged(b *batch, lba int64, n int, data []byte, sc *scratch) {
	if !b.overlaps(lba, lba+int64(n)) {
		return
	}
	end := lba + int64(n)
	bs, ts := v.bs, v.ts
	for _, e := range b.ents {
		s, t := max(e.lba, lba), min(e.lba+int64(e.n), end)
		if s >= t {
			continue
		}
		i, j := int(s-lba), int(t-lba)
		slot := e.slot + int(s-e.lba)
		copy(data[i*bs:j*bs], b.data[slot*bs:])
		copy(sc.ovTuples[i*ts:j*ts], b.tuples[slot*ts:])
		if v.sums {
			copy(sc.ovSums[i:j], b.sums[slot:])
		}
		if v.kd != nil {
			v.copyStagedTags(b, i, j, slot, sc)
		}
		setBits(sc.ovMask, i, j-i)
	}
}

// loadRun reads blocks [lba, lba+n) (n <= v.chunk) into data and their
// current tuples, sums and written bits into sc, from the staging batches,
// the overlay, the committed pages and the device, in the order that makes
// each block's data and tuple consistent (see intent.go). Blocks that could
// not be read are marked in sc.ioBad. Caller holds a lock on the range.
func (v *Volume) loadRun(lba int64, n int, data []byte, sc *scratch, rereads int, uncached bool) (loaded bool, err error) {
	end := lba + int64(n)
	w := (n + 63) / 64
	mask := sc.ovMask[:w]
	clear(mask)
	clear(sc.ioBad[:w])
	clear(sc.dirty[:w])
	over := false
	var devErr error

	v.stMu.RLock()
	if v.flushing.overlaps(lba, end) || v.active.overlaps(lba, end) {
		devErr = v.readDev(data[:n*v.bs], lba, uncached)
		loaded = true
		v.copyStaged(v.flushing, lba, n, data, sc)
		v.copyStaged(v.active, lba, n, data, sc)
		over = true
	}
	v.stMu.RUnlock()

	v.ovMu.RLock()
	if len(v.overlay) > 0 {
		for p := lba >> ovShift; p <= (end-1)>>ovShift; p++ {
			pg := v.overlay[p]
			if pg == nil {
				continue
			}
			s, t := max(p<<ovShift, lba), min((p+1)<<ovShift, end)
			for b := s; b < t; b++ {
				o, i := int(b&(ovP-1)), int(b-lba)
				if !hasBit(pg.mask[:], o) || hasBit(mask, i) {
					continue
				}
				copy(sc.ovTuples[i*v.ts:(i+1)*v.ts], pg.tuples[o*v.ts:])
				if v.sums {
					sc.ovSums[i] = pg.sums[o]
				}
				setBit(mask, i)
				over = true
			}
		}
	}
	v.ovMu.RUnlock()

	tuples := sc.tuples[:n*v.ts]
	var sums []uint32
	if v.sums {
		sums = sc.sums[:n]
	}
	// Checks read the store itself (and its page checksums); reads may
	// take the tuples from the cache.
	read := v.tup.ReadRangeCached
	if sc.inPlace {
		read = v.tup.ReadRange
	}
	cnt, err := read(uint64(lba), tuples, sums, sc.written)
	if err != nil {
		return false, fmt.Errorf("blockdev: reading the tuples of blocks [%d, %d): %w", lba, end, err)
	}
	sc.unwritten = cnt == 0 && !over
	if over {
		for i := range n {
			if !hasBit(mask, i) {
				continue
			}
			copy(tuples[i*v.ts:(i+1)*v.ts], sc.ovTuples[i*v.ts:])
			if v.sums {
				sums[i] = sc.ovSums[i]
			}
			sc.written.Set(i)
		}
	}
	if loaded && devErr != nil {
		return true, v.readFallback(lba, 0, n, data, sc, rereads, uncached, devErr, true)
	}
	return loaded, nil
}

// readData reads blocks [from, to) of the run at lba into data.
func (v *Volume) readData(lba int64, from, to int, data []byte, sc *scratch, rereads int, uncached bool) error {
	err := v.readDev(data[from*v.bs:to*v.bs], lba+int64(from), uncached)
	if err == nil {
		return nil
	}
	return v.readFallback(lba, from, to, data, sc, rereads, uncached, err, false)
}

// readFallback reads block by block the blocks [from, to) of a run whose
// read failed with err, re-reading each up to rereads times; blocks that
// still cannot be read are marked in sc.ioBad and reported. With
// skipStaged, blocks served from staging are left alone. A closed or
// crashed device fails the run.
func (v *Volume) readFallback(lba int64, from, to int, data []byte, sc *scratch, rereads int, uncached bool, err error, skipStaged bool) error {
	if errors.Is(err, ErrClosed) || errors.Is(err, ErrCrashed) {
		return err
	}
	for i := from; i < to; i++ {
		if skipStaged && hasBit(sc.ovMask, i) {
			continue
		}
		blk := data[i*v.bs : (i+1)*v.bs]
		var err error
		for r := 0; r <= rereads; r++ {
			if err = v.readDev(blk, lba+int64(i), r > 0 || uncached); err == nil {
				break
			}
		}
		if err != nil {
			setBit(sc.ioBad, i)
			sc.probs = append(sc.probs, Problem{LBA: lba + int64(i), Kind: KindIO, Err: err})
		}
	}
	return nil
}

// classify verifies blocks [i, i+k) of the loaded run at lba, one
// sub-chunk after the other, leaving each block's state in sc.states. With
// sector checksums, dif's ClassifySums computes them in the same pass as
// the PI guards (one pass over the data for 16-bit guards). With src (the
// k blocks in a device mapping, see readMapped), the blocks are copied from
// src to data in that same pass and the copy is what is verified; with
// sc.inPlace, src itself is verified and only its failing blocks copied.
// Disjoint ranges of one run may be classified concurrently.
func (v *Volume) classify(lba int64, i, k int, data, src []byte, sc *scratch) error {
	bs, ts := v.bs, v.ts
	sub := max(1, subChunk/bs)
	first := i
	for end := i + k; i < end; i += sub {
		k := min(sub, end-i)
		states, blocks, tuples := sc.states[i:i+k], data[i*bs:(i+k)*bs], sc.tuples[i*ts:(i+k)*ts]
		var from, keep []byte
		if src != nil {
			from = src[(i-first)*bs : (i-first+k)*bs]
			if sc.inPlace {
				// Verify the mapping itself; keep the failing blocks.
				keep, blocks, from = blocks, from, nil
			}
		}
		p := v.params(lba + int64(i))
		var sum dif.Summary
		var err error
		if !v.sums {
			if from != nil {
				sum, err = v.f.ClassifyCopy(states, blocks, from, tuples, p)
			} else {
				sum, err = v.f.Classify(states, blocks, tuples, p)
			}
			if err != nil {
				return fmt.Errorf("blockdev: verify: %w", err)
			}
		} else {
			crcs := sc.crcs[i : i+k]
			if from != nil {
				sum, err = v.f.ClassifySumsCopy(states, crcs, blocks, from, tuples, p)
			} else {
				sum, err = v.f.ClassifySums(states, crcs, blocks, tuples, p)
			}
			if err != nil {
				return fmt.Errorf("blockdev: verify: %w", err)
			}
			sums := sc.sums[i : i+k]
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
// data is not zeros fails and is marked in sc.dirty.
func (v *Volume) checkUnwritten(i int, states []dif.State, blocks []byte, sc *scratch) {
	bs := v.bs
	for j, st := range states {
		if st != dif.StateUnwritten || sc.written.Has(i+j) {
			continue
		}
		if !isZero(blocks[j*bs : (j+1)*bs]) {
			states[j] = dif.StateFailed
			setBit(sc.dirty, i+j)
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

// readMapped verifies blocks [i, i+k) of the run at lba straight from the
// device's mapping of the page cache when it has one (see Mapper), copying
// them to data in the verifying pass: one pass over the bytes instead of
// the kernel's copy and then the checksums. done is false when the piece
// must be read the ordinary way: the device has no mapping, or reading it
// faulted (ReadAt then reports the I/O error properly).
// Parts of one run classified concurrently share sc and pass shared.
func (v *Volume) readMapped(lba int64, i, k int, data []byte, sc *scratch, shared bool) (done bool, err error) {
	if v.mapper == nil || v.noMap.Load() {
		return false, nil
	}
	off := (lba + int64(i)) * int64(v.bs)
	if shared {
		err = v.mapper.ReadMapped(off, k*v.bs, func(src []byte) error {
			return v.classify(lba, i, k, data, src, sc)
		})
	} else {
		sc.mapLBA, sc.mapI, sc.mapK, sc.mapData = lba, i, k, data
		err = v.mapper.ReadMapped(off, k*v.bs, sc.mapFn)
		sc.mapData = nil
	}
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errors.ErrUnsupported):
		v.noMap.Store(true)
		return false, nil
	case errors.Is(err, ErrMapFault):
		v.st.mapFaults.Add(1)
		return false, nil
	}
	return false, err
}

// Parallel reads: a run of at least splitMin bytes is cut into parts, one
// for the caller's goroutine and one for each verification worker, and
// every goroutine reads and verifies its own part piece by piece (pieces of
// pipePiece bytes, verified while the CPU cache still holds them). A large
// request thus costs one hand-off per part, not per piece, and its reads and
// checksums proceed on every core. A part whose read fails is done again
// serially, where failing reads are retried block by block.
const (
	splitMin  = 256 << 10
	pipePiece = 128 << 10
)

type verifyJob struct {
	lba      int64
	i, k     int
	part     int
	data     []byte
	sc       *scratch
	uncached bool
}

// startWorkers starts the verification workers once and returns how many
// there are.
func (v *Volume) startWorkers() int {
	v.workersOnce.Do(func() {
		n := v.opts.VerifyWorkers
		if n < 1 {
			return
		}
		v.jobs = make(chan verifyJob, n)
		for range n {
			go func(jobs <-chan verifyJob) {
				for j := range jobs {
					v.runPart(j)
				}
			}(v.jobs)
		}
	})
	if v.jobs == nil {
		return 0
	}
	return v.opts.VerifyWorkers
}

// stopWorkers ends the workers. Caller holds closeMu exclusively.
func (v *Volume) stopWorkers() {
	v.workersOnce.Do(func() {})
	if v.jobs != nil {
		close(v.jobs)
	}
}

// runPart reads and classifies part j of a split run, recording a failed
// read in sc.partFailed (the part is redone serially) and any other error
// in sc.jobErr.
func (v *Volume) runPart(j verifyJob) {
	defer j.sc.wg.Done()
	piece := max(1, pipePiece/v.bs)
	for i, end := j.i, j.i+j.k; i < end; i += piece {
		k := min(piece, end-i)
		if !j.uncached {
			done, err := v.readMapped(j.lba, i, k, j.data, j.sc, true)
			if err != nil {
				j.sc.jobErr.CompareAndSwap(nil, &err)
				return
			}
			if done {
				continue
			}
		}
		if err := v.readDev(j.data[i*v.bs:(i+k)*v.bs], j.lba+int64(i), j.uncached); err != nil {
			j.sc.partFailed.Or(1 << j.part)
			return
		}
		if err := v.classify(j.lba, i, k, j.data, nil, j.sc); err != nil {
			j.sc.jobErr.CompareAndSwap(nil, &err)
			return
		}
	}
}

// readSerial reads and classifies blocks [i, i+k) of a run piece by piece
// on the caller's goroutine, retrying failing reads block by block.
func (v *Volume) readSerial(lba int64, i, k int, data []byte, sc *scratch, rereads int, uncached bool) error {
	piece := max(1, pipePiece/v.bs)
	if sc.inPlace && !uncached && v.mapper != nil {
		// Nothing is copied, so nothing to keep in the cache: the mapping
		// is read in one go.
		piece = k
	}
	for end := i + k; i < end; i += piece {
		k := min(piece, end-i)
		if !uncached {
			done, err := v.readMapped(lba, i, k, data, sc, false)
			if err != nil {
				return err
			}
			if done {
				continue
			}
		}
		if err := v.readData(lba, i, i+k, data, sc, rereads, uncached); err != nil {
			return err
		}
		if err := v.classify(lba, i, k, data, nil, sc); err != nil {
			return err
		}
	}
	return nil
}

// readClassify reads the data of a loaded run and classifies it, split
// across the verification workers when the run is large.
func (v *Volume) readClassify(lba int64, n int, data []byte, sc *scratch, rereads int, uncached bool) error {
	parts := 1
	if n*v.bs >= splitMin {
		parts = min(1+v.startWorkers(), n*v.bs/(splitMin/2), 64)
	}
	if parts <= 1 {
		return v.readSerial(lba, 0, n, data, sc, rereads, uncached)
	}
	sc.jobErr.Store(nil)
	sc.partFailed.Store(0)
	per := (n + parts - 1) / parts
	sc.wg.Add(parts)
	for p := 1; p < parts; p++ {
		i := min(p*per, n)
		v.jobs <- verifyJob{lba: lba, i: i, k: min(per, n-i), part: p, data: data, sc: sc, uncached: uncached}
	}
	v.runPart(verifyJob{lba: lba, i: 0, k: min(per, n), part: 0, data: data, sc: sc, uncached: uncached})
	sc.wg.Wait()
	if p := sc.jobErr.Load(); p != nil {
		return *p
	}
	failed := sc.partFailed.Load()
	for p := 0; failed != 0 && p < parts; p++ {
		if failed&(1<<p) == 0 {
			continue
		}
		i := min(p*per, n)
		if err := v.readSerial(lba, i, min(per, n-i), data, sc, rereads, uncached); err != nil {
			return err
		}
	}
	return nil
}

// verifyRun reads and verifies blocks [lba, lba+n) (n <= v.chunk) into
// data. Failing blocks are re-read up to rereads times (around the page
// cache); the problems of blocks still failing, and of transient ones
// (Transient set), are appended to sc.probs in LBA order. With zero,
// unwritten blocks are zeroed in data. The error is for the run as a whole
// (the store could not be read, the device is closed). Caller holds a lock
// on the range.
func (v *Volume) verifyRun(lba int64, n int, data []byte, sc *scratch, rereads int, uncached, zero bool) (RunStats, error) {
	sc.probs = sc.probs[:0]
	if sc.k != nil {
		clear(sc.k.staged)
	}
	loaded, err := v.loadRun(lba, n, data, sc, rereads, uncached)
	if err != nil {
		return RunStats{}, err
	}
	if !loaded && sc.unwritten && v.kd == nil {
		// (A keyed volume reads and checks them: their tags must say
		// unwritten too, since the tuple pages carry no MAC.)
		hole, err := v.isHole(lba, n)
		if err != nil {
			return RunStats{}, err
		}
		if hole {
			// Unwritten blocks in a hole: zeros, by the rule, without a
			// read.
			if zero {
				clear(data[:n*v.bs])
			}
			v.st.read.Add(int64(n))
			return RunStats{Blocks: int64(n), Unwritten: int64(n)}, nil
		}
	}
	if loaded {
		err = v.classify(lba, 0, n, data, nil, sc)
	} else {
		err = v.readClassify(lba, n, data, sc, rereads, uncached)
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
				if zero && !sc.written.Has(i) {
					clear(data[i*bs : (i+1)*bs])
				}
			}
			continue
		}
		// A failing block: note its problems, then re-read it.
		b := lba + int64(i)
		first := len(sc.probs)
		v.blockProblems(data[i*bs:(i+1)*bs], i, b, sc)
		ok := false
		for r := 0; r < rereads && !ok; r++ {
			v.st.rereads.Add(1)
			if err := v.readDev(sc.reread, b, true); err != nil {
				continue
			}
			ok = v.blockOK(sc.reread, i, b, sc)
		}
		if ok {
			copy(data[i*bs:(i+1)*bs], sc.reread)
			for k := first; k < len(sc.probs); k++ {
				sc.probs[k].Transient = true
			}
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
	if v.kd != nil {
		if err := v.keyedCheck(lba, n, data, sc, &st, sc.inPlace && !loaded && v.mapper != nil); err != nil {
			return RunStats{}, err
		}
	}
	v.st.read.Add(int64(n))
	v.st.transient.Add(st.Transient)
	v.st.failed.Add(st.Failed)
	return st, nil
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
		if errors.Is(err, ErrClosed) || errors.Is(err, ErrCrashed) {
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

// blockOK verifies one block (index i of the loaded run) against its tuple
// and sum; an unwritten block must be zeros.
func (v *Volume) blockOK(data []byte, i int, lba int64, sc *scratch) bool {
	if !sc.written.Has(i) {
		return isZero(data)
	}
	if v.f.Verify(data, sc.tuples[i*v.ts:(i+1)*v.ts], v.params(lba)) != nil {
		return false
	}
	return !v.sums || !sc.written.Has(i) || crc32c.Checksum(data) == sc.sums[i]
}

// blockProblems appends the failed checks of one block to sc.probs.
func (v *Volume) blockProblems(data []byte, i int, lba int64, sc *scratch) {
	if hasBit(sc.dirty, i) {
		sc.probs = append(sc.probs, unwrittenProblem(lba, data))
		return
	}
	v.f.VerifyFunc(data, sc.tuples[i*v.ts:(i+1)*v.ts], v.params(lba), func(ce *dif.CheckError) error {
		sc.probs = append(sc.probs, Problem{LBA: lba, Kind: KindOf(ce.Field), Expected: ce.Expected, Actual: ce.Actual, Err: ce})
		return nil
	})
	if v.sums && sc.written.Has(i) {
		if c := crc32c.Checksum(data); c != sc.sums[i] {
			sc.probs = append(sc.probs, Problem{LBA: lba, Kind: KindSectorSum, Expected: uint64(c), Actual: uint64(sc.sums[i]),
				Err: &SumError{LBA: lba, Expected: c, Actual: sc.sums[i]}})
		}
	}
}

// runError turns the problems of a verified run into ReadAt's error: the
// device's error for a block that could not be read, otherwise an
// *IntegrityError, with the first bad block. It returns nil if every
// problem was transient.
func runError(op string, probs []Problem) (int64, error) {
	var ie *IntegrityError
	var last int64 = -1
	for _, p := range probs {
		if p.Transient {
			continue
		}
		if p.Kind == KindIO {
			return p.LBA, fmt.Errorf("blockdev: %s of block %d: %w", op, p.LBA, p.Err)
		}
		if ie == nil {
			ie = &IntegrityError{Op: op, LBA: p.LBA}
		}
		if p.LBA != last {
			ie.Failed++
			last = p.LBA
		}
		ie.N = p.LBA - ie.LBA + 1
		if len(ie.Problems) < MaxListedProblems {
			ie.Problems = append(ie.Problems, p)
		}
	}
	if ie == nil {
		return -1, nil
	}
	return ie.LBA, ie
}

// ReadAt reads len(p) bytes at off, verifying every block it returns
// against its tuple and sector checksum; a partial block at either end is
// read and verified whole. A failing block is re-read (Options.Rereads
// times, around the page cache where the device allows it) before it is
// reported; one that passes on a re-read is returned and counted in
// Stats.Transient. Blocks never written, or discarded, read as zeros
// without error when they are zeros (or a hole) on the device; one holding
// anything else fails with an *IntegrityError wrapping
// *UnwrittenDataError, and is never returned as zeros.
//
// On failure ReadAt returns the bytes before the first bad block and an
// *IntegrityError (matching dif.ErrIntegrity) listing the failing blocks of
// the 1 MiB chunk where it stopped, or the device's error wrapped with the
// block that could not be read; the rest of p is zeroed, so that no
// unverified byte is left in it.
//
// As io.ReaderAt requires, a read reaching past the end returns the bytes
// before the end and io.EOF (and 0, io.EOF at or past the end); a negative
// offset fails with ErrOutOfRange.
func (v *Volume) ReadAt(p []byte, off int64) (n int, err error) {
	done, err := v.enter()
	if err != nil {
		return 0, err
	}
	defer done()
	if off < 0 {
		return 0, checkRange("read", off, int64(len(p)), v.Size())
	}
	if len(p) == 0 {
		return 0, nil
	}
	var eof error
	if size := v.Size(); int64(len(p)) > size-off {
		if off >= size {
			return 0, io.EOF
		}
		p, eof = p[:size-off], io.EOF
	}
	bs := int64(v.bs)
	id := v.locks.lock(off/bs, (off+int64(len(p))+bs-1)/bs, false)
	defer v.locks.unlock(id)
	sc := v.getScratch()
	defer v.putScratch(sc)
	n, err = v.readLocked(p, off, sc)
	if err != nil {
		clear(p[n:])
		return n, err
	}
	return n, eof
}

// readLocked is ReadAt with the range locked.
func (v *Volume) readLocked(p []byte, off int64, sc *scratch) (int, error) {
	bs := int64(v.bs)
	rereads := v.opts.Rereads
	for i := 0; i < len(p); {
		pos := off + int64(i)
		lba, inb := pos/bs, int(pos%bs)
		if inb != 0 || len(p)-i < v.bs {
			if _, err := v.verifyRun(lba, 1, sc.head, sc, rereads, false, true); err != nil {
				return i, err
			}
			if _, err := runError("read", sc.probs); err != nil {
				return i, err
			}
			i += copy(p[i:], sc.head[inb:])
			continue
		}
		n := min((len(p)-i)/v.bs, v.chunk)
		if _, err := v.verifyRun(lba, n, p[i:i+n*v.bs], sc, rereads, false, true); err != nil {
			return i, err
		}
		if bad, err := runError("read", sc.probs); err != nil {
			return i + int(bad-lba)*v.bs, err
		}
		i += n * v.bs
	}
	return len(p), nil
}

// generate computes the tuples (and sums) of n blocks of data starting at
// block lba, one sub-chunk at a time; dif's GenerateSums computes the sums
// in the same pass as the guards.
func (v *Volume) generate(data []byte, lba int64, n int, tuples []byte, sums []uint32) error {
	bs, ts := v.bs, v.ts
	sub := max(1, subChunk/bs)
	for i := 0; i < n; i += sub {
		k := min(sub, n-i)
		blocks, tups, p := data[i*bs:(i+k)*bs], tuples[i*ts:(i+k)*ts], v.params(lba+int64(i))
		var err error
		if v.sums {
			err = v.f.GenerateSums(blocks, tups, sums[i:i+k], p)
		} else {
			err = v.f.Generate(blocks, tups, p)
		}
		if err != nil {
			return fmt.Errorf("blockdev: generate: %w", err)
		}
	}
	return nil
}

// readEdge reads and verifies the block lba into buf for a partial write.
// It refuses (with the integrity error) a block that fails verification,
// unless Options.RewriteBadBlocks.
func (v *Volume) readEdge(buf []byte, lba int64, sc *scratch) error {
	if _, err := v.verifyRun(lba, 1, buf, sc, v.opts.Rereads, false, true); err != nil {
		return err
	}
	_, err := runError("write", sc.probs)
	var ie *IntegrityError
	if err != nil && v.opts.RewriteBadBlocks && errors.As(err, &ie) {
		return nil
	}
	return err
}

// WriteAt writes len(p) bytes at off, generating the tuples and sector
// checksums of every block it touches. A partial block at either end is
// read and verified first, then modified and written whole; if it fails
// verification the write is refused with an *IntegrityError and nothing is
// written (see Options.RewriteBadBlocks). Whole blocks are always replaced.
//
// WriteAt returns once the data is staged; it is durable after Sync (see
// the package documentation for what a crash before then may leave).
func (v *Volume) WriteAt(p []byte, off int64) (int, error) {
	done, err := v.enter()
	if err != nil {
		return 0, err
	}
	defer done()
	if v.opts.ReadOnly {
		return 0, fmt.Errorf("blockdev: write to volume %q: %w", v.opts.Name, ErrReadOnly)
	}
	if err := v.keyedWritable("write"); err != nil {
		return 0, err
	}
	if err := checkRange("write", off, int64(len(p)), v.Size()); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	bs := int64(v.bs)
	b0, b1 := off/bs, (off+int64(len(p))+bs-1)/bs
	id := v.locks.lock(b0, b1, true)
	defer v.locks.unlock(id)
	sc := v.getScratch()
	defer v.putScratch(sc)

	end := off + int64(len(p))
	headPartial := off%bs != 0 || (b1-b0 == 1 && end%bs != 0)
	tailPartial := b1-b0 > 1 && end%bs != 0
	// Read and verify the partial blocks before anything is staged.
	if headPartial {
		if err := v.readEdge(sc.head, b0, sc); err != nil {
			return 0, err
		}
	}
	if tailPartial {
		if err := v.readEdge(sc.tail, b1-1, sc); err != nil {
			return 0, err
		}
	}
	tuples := sc.ovTuples // free for use: loadRun is done
	sums := sc.ovSums
	var tags []store.KeyedTag
	if v.kd != nil {
		tags = v.keyedScratchFor(sc).calc
	}
	stageOne := func(buf []byte, lba int64) error {
		if err := v.generate(buf, lba, 1, tuples, sums); err != nil {
			return err
		}
		if v.kd != nil {
			if err := v.stageTags(tags, lba, 1, buf); err != nil {
				return err
			}
		}
		return v.stage(lba, 1, buf, tuples, sums, tags)
	}
	i := 0 // bytes of p consumed
	lba := b0
	if headPartial {
		inb := int(off % bs)
		i = copy(sc.head[inb:], p)
		if err := stageOne(sc.head, lba); err != nil {
			return 0, err
		}
		lba++
	}
	piece := min(v.chunk, v.batchBlocks())
	for len(p)-i >= v.bs {
		n := min((len(p)-i)/v.bs, piece)
		data := p[i : i+n*v.bs]
		if err := v.generate(data, lba, n, tuples, sums); err != nil {
			return i, err
		}
		if v.kd != nil {
			if err := v.stageTags(tags, lba, n, data); err != nil {
				return i, err
			}
		}
		if err := v.stage(lba, n, data, tuples, sums, tags); err != nil {
			return i, err
		}
		i += n * v.bs
		lba += int64(n)
	}
	if i < len(p) {
		copy(sc.tail, p[i:])
		if err := stageOne(sc.tail, lba); err != nil {
			return i, err
		}
	}
	v.st.written.Add(b1 - b0)
	return len(p), nil
}

// Discard marks the blocks of [off, off+n) discarded: they read as zeros
// afterwards, without error. off and n must be multiples of the block size
// (ErrUnaligned). Since an unwritten block must be zeros on the device (see
// ErrUnwrittenData), the range is discarded on the device when it is a
// Discarder (a hole punched in an image, zeroes written on a block device
// that can unmap them) and written with zeros otherwise. Discard syncs the
// volume first and makes the discard durable before it returns.
//
// Crash consistency: each piece of the range is first recorded as an
// intent whose tuples are those of zero blocks, then zeroed on the device
// and synced, then marked unwritten in the store with the intent dropped,
// in one synced commit. A crash in between leaves each block with its old
// data (recovery keeps its tuple) or zeros (recovery commits the zero
// block's tuple), never failing verification.
func (v *Volume) Discard(off, n int64) error {
	done, err := v.enter()
	if err != nil {
		return err
	}
	defer done()
	if v.opts.ReadOnly {
		return fmt.Errorf("blockdev: discard on volume %q: %w", v.opts.Name, ErrReadOnly)
	}
	if err := v.keyedWritable("discard"); err != nil {
		return err
	}
	if err := checkRange("discard", off, n, v.Size()); err != nil {
		return err
	}
	if err := checkAligned("discard", off, n, v.bs); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	bs := int64(v.bs)
	id := v.locks.lock(off/bs, (off+n)/bs, true)
	defer v.locks.unlock(id)
	v.flushMu.Lock()
	defer v.flushMu.Unlock()
	if err := v.syncLocked(); err != nil {
		return err
	}
	return v.discardLocked(off/bs, n/bs)
}

// discardPiece is the most blocks one step of a discard covers (its intent
// holds their tuples: 16 MiB of 16-byte tuples).
const discardPiece = 1 << 20

// discardLocked discards blocks [lba, lba+n) piece by piece (see Discard).
// Caller holds flushMu and the range's lock, and has synced the volume.
func (v *Volume) discardLocked(lba, n int64) error {
	bs, ts := v.bs, v.ts
	piece := min(n, discardPiece)
	tuples := make([]byte, piece*int64(ts))
	var sums []uint32
	if v.sums {
		sums = make([]uint32, piece)
	}
	written := store.NewBitmap(int(piece))
	zb := max(1, len(zeroBuf)/bs) // blocks of zeroBuf
	for b := lba; b < lba+n; b += piece {
		k := min(piece, lba+n-b)
		kt := tuples[:k*int64(ts)]
		var ks []uint32
		if sums != nil {
			ks = sums[:k]
		}
		cnt, err := v.tup.ReadRange(uint64(b), kt, ks, written)
		if err != nil {
			return v.fail(err)
		}
		var iid store.IntentID
		if cnt > 0 {
			// The tuples of zero blocks, as the intent.
			for i := int64(0); i < k; i += int64(zb) {
				j := min(k, i+int64(zb))
				var s []uint32
				if ks != nil {
					s = ks[i:j]
				}
				if err := v.generate(zeroBuf[:(j-i)*int64(bs)], b+i, int(j-i), kt[i*int64(ts):j*int64(ts)], s); err != nil {
					return err
				}
			}
			x := v.tup.NewTxn()
			if iid, err = x.RecordIntent(uint64(b), kt, ks); err != nil {
				x.Abort()
				return v.fail(err)
			}
			if v.kd != nil {
				if err := v.keyedDiscardIntent(x, iid, b, int(k)); err != nil {
					x.Abort()
					return v.fail(err)
				}
			}
			if err := x.Commit(true); err != nil {
				return v.fail(err)
			}
		}
		if err := v.zeroDevice(b*int64(bs), k*int64(bs)); err != nil {
			return v.fail(err)
		}
		if err := v.dev.Sync(); err != nil {
			return v.fail(err)
		}
		x := v.tup.NewTxn()
		err = x.Discard(uint64(b), uint64(k))
		if err == nil && v.kd != nil {
			err = x.WriteTags(uint64(b), make([]store.KeyedTag, k))
		}
		if err == nil && cnt > 0 {
			err = x.DropIntent(iid)
		}
		if err != nil {
			x.Abort()
			return v.fail(err)
		}
		if err := x.Commit(true); err != nil {
			return v.fail(err)
		}
	}
	return nil
}

// zeroDevice makes the device's bytes [off, off+n) read as zeros: a
// discard where the device can (a Discarder guarantees zeros), otherwise
// writes of zeros.
func (v *Volume) zeroDevice(off, n int64) error {
	if d, ok := v.dev.(Discarder); ok {
		err := d.Discard(off, n)
		if err == nil || !errors.Is(err, errors.ErrUnsupported) {
			return err
		}
	}
	buf := AlignedBuffer(min(int(n), 1<<20))
	for pos := off; pos < off+n; {
		k := min(int64(len(buf)), off+n-pos)
		if _, err := v.dev.WriteAt(buf[:k], pos); err != nil {
			return err
		}
		pos += k
	}
	return nil
}

// ScratchSize implements CheckSource: CheckRun works in chunks of at most
// 1 MiB (or one block), so it needs at most that much.
func (v *Volume) ScratchSize(n int) int { return min(max(n, 0), v.chunk) * v.bs }

// CheckRun implements CheckSource with the verification core of ReadAt,
// one chunk at a time, each under a shared lock of its blocks so that
// concurrent writes through the volume never show as failures. Problems
// are reported after the chunk's lock is released.
func (v *Volume) CheckRun(ctx context.Context, lba int64, n int, scratch []byte, opt CheckOptions, report func(Problem)) (RunStats, error) {
	done, err := v.enter()
	if err != nil {
		return RunStats{}, err
	}
	defer done()
	if lba < 0 || n < 0 || lba > v.blocks || int64(n) > v.blocks-lba {
		return RunStats{}, fmt.Errorf("blockdev: check of blocks [%d, +%d) on a volume of %d blocks: %w", lba, n, v.blocks, ErrOutOfRange)
	}
	if len(scratch) < v.ScratchSize(n) {
		return RunStats{}, fmt.Errorf("blockdev: check: scratch of %d bytes, need %d", len(scratch), v.ScratchSize(n))
	}
	if opt.Rereads < 0 {
		opt.Rereads = 0
	}
	sc := v.getScratch()
	defer v.putScratch(sc)
	var total RunStats
	for i := 0; i < n; {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		k := min(v.chunk, n-i)
		b := lba + int64(i)
		id := v.locks.lock(b, b+int64(k), false)
		sc.inPlace = true // a check returns no data: see classify
		st, err := v.verifyRun(b, k, scratch[:k*v.bs], sc, opt.Rereads, opt.Uncached, false)
		sc.inPlace = false
		v.locks.unlock(id)
		if err != nil {
			return total, err
		}
		total.Add(st)
		if report != nil {
			for _, p := range sc.probs {
				report(p)
			}
		}
		i += k
	}
	return total, nil
}
