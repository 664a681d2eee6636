package blockdev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/difctl/difctl/blockdev/internal/keyed"
	"github.com/difctl/difctl/blockdev/internal/split"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// The read path of a Volume: ReadAt, the per-request scratch, loading a
// run's tuples and data (staging first, then the store and the device),
// and reading the data, from the device's mapping or with ReadAt, serially
// or split across the verification workers. What is done with the data is
// in volume_verify.go.

// scratch is the per-request working memory of the read and write paths,
// sized for one chunk (v.chunk blocks) and pooled.
type scratch struct {
	tuples   []byte
	sums     []uint32
	crcs     []uint32
	written  store.Bitmap
	ovMask   []uint64 // blocks whose tuple comes from staging or the overlay
	ovTuples []byte
	ovSums   []uint32
	staged   []uint64 // blocks whose data comes from staging
	ioBad    []uint64 // blocks that could not be read
	states   []dif.State
	head     []byte // partial blocks of reads and writes
	tail     []byte
	reread   []byte
	wcopy    []byte // a keyed write's piece (keyedWriteCopy)
	probs    []Problem
	// A keyed volume opened with its key: the tags of staged and overlay
	// blocks (as ovTuples), the keyed scratch, and the keyed read path's
	// mapped read callbacks, per split worker.
	ovTags     []store.KeyedTag
	tags       *keyed.Scratch
	tagMaps    [2]*mappedTags
	wg         sync.WaitGroup // parts of a split read (readParallel)
	jobErr     atomic.Pointer[error]
	partFailed atomic.Uint64 // parts whose read failed, redone serially

	// req is the request of the run being read (see verifyRun).
	req readReq

	// unwritten: every block of the loaded run is unwritten (see
	// verifyRun's hole check).
	unwritten bool

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
		staged:   make([]uint64, w),
		ovTuples: make([]byte, n*v.ts),
		ioBad:    make([]uint64, w),
		states:   make([]dif.State, n),
		head:     AlignedBuffer(v.bs),
		tail:     AlignedBuffer(v.bs),
		reread:   AlignedBuffer(v.bs),
	}
	if v.sums {
		sc.sums = make([]uint32, n)
		sc.ovSums = make([]uint32, n)
	}
	if v.tags != nil {
		// With sector sums, the partials of the fused copy, for each
		// worker that may classify part of a run at once: the request's
		// goroutine and the verification workers, or the split helper.
		sc.ovTags = make([]store.KeyedTag, n)
		sc.tags = v.tags.NewScratch(1+max(1, v.opts.VerifyWorkers), v.sums)
		for w := range sc.tagMaps {
			sc.tagMaps[w] = newMappedTags(sc.tags, w)
		}
	}
	sc.mapFn = func(src []byte) error { return v.classify(sc.mapLBA, sc.mapI, sc.mapK, sc.mapData, src, sc, 0) }
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

// readReq is how one run of a Volume is read and verified (verifyRun):
// the request the read path carries from ReadAt, CheckRun, a write's
// edge blocks, an export or a remap down to the device and dif.
type readReq struct {
	// ctx, if not nil, ends the re-reads of failing blocks (CheckRun).
	ctx context.Context
	// rereads is how many times a failing block is read again, around
	// the page cache.
	rereads int
	// uncached reads the whole run around the page cache.
	uncached bool
	// zero clears the unwritten blocks in the caller's buffer (ReadAt,
	// export): without it they are left as read, zeros by the rule.
	zero bool
	// inPlace verifies blocks in the device's mapping where they are and
	// copies only the failing ones to data (CheckRun, which returns no
	// data).
	inPlace bool
	// storeTuples reads the tuples from the store, which checks each
	// page's checksum, rather than from the tuple cache (checks, exports
	// and remaps; reads take the cache).
	storeTuples bool
	// ref is the ref tag of block 0 the run is verified with (the
	// manifest's, except for a remap's blocks already rewritten).
	ref uint64
}

// request returns the request of a verified read with the volume's
// options: Options.Rereads re-reads, cached, the manifest's ref tag.
func (v *Volume) request() readReq {
	return readReq{rereads: v.opts.Rereads, ref: v.refBase}
}

// readDevice reads p at off from dev, around the page cache if uncached.
func readDevice(dev Device, p []byte, off int64, uncached bool) error {
	var err error
	if uncached {
		_, err = ReadUncached(dev, p, off)
	} else {
		_, err = dev.ReadAt(p, off)
	}
	return err
}

// readDev reads whole blocks from the device.
func (v *Volume) readDev(p []byte, lba int64, uncached bool) error {
	return readDevice(v.dev, p, lba*int64(v.bs), uncached)
}

// loadRun reads blocks [lba, lba+n) (n <= v.chunk) into data and their
// current tuples, sums and written bits into sc, from staging (the staged
// batches and the overlay), the committed pages and the device, in the
// order that makes each block's data and tuple consistent (see
// staging.go). Blocks that could not be read are marked in sc.ioBad.
// Caller holds a lock on the range.
func (v *Volume) loadRun(lba int64, n int, data []byte, sc *scratch) (loaded bool, err error) {
	w := (n + 63) / 64
	clear(sc.ioBad[:w])
	loaded, over, devErr := v.stg.load(lba, n, data, sc, sc.req.uncached)
	if loaded && devErr != nil {
		if err := v.readFallback(lba, 0, n, data, sc, devErr, sc.staged); err != nil {
			return true, err
		}
	}
	tuples := sc.tuples[:n*v.ts]
	var sums []uint32
	if v.sums {
		sums = sc.sums[:n]
	}
	read := v.tup.ReadRangeCached
	if sc.req.storeTuples {
		read = v.tup.ReadRange
	}
	cnt, err := read(lba, tuples, sums, sc.written)
	if err != nil {
		return false, fmt.Errorf("blockdev: reading the tuples of blocks [%d, %d): %w", lba, lba+int64(n), err)
	}
	sc.unwritten = cnt == 0 && !over
	if over {
		mask := sc.ovMask
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
	return loaded, nil
}

// readData reads blocks [from, to) of the run at lba into data.
func (v *Volume) readData(lba int64, from, to int, data []byte, sc *scratch) error {
	err := v.readDev(data[from*v.bs:to*v.bs], lba+int64(from), sc.req.uncached)
	if err == nil {
		return nil
	}
	return v.readFallback(lba, from, to, data, sc, err, nil)
}

// readFallback reads block by block the blocks [from, to) of a run whose
// read failed with err, re-reading each up to sc.req.rereads times; blocks
// that still cannot be read are zeroed, marked in sc.ioBad and reported.
// Blocks marked in skip (served from staging) are left alone. An error
// that fatalReadError accepts fails the run.
func (v *Volume) readFallback(lba int64, from, to int, data []byte, sc *scratch, err error, skip []uint64) error {
	if fatalReadError(err) {
		return err
	}
	for i := from; i < to; i++ {
		if skip != nil && hasBit(skip, i) {
			continue
		}
		blk := data[i*v.bs : (i+1)*v.bs]
		var err error
		for r := 0; r <= sc.req.rereads; r++ {
			if err = v.readDev(blk, lba+int64(i), r > 0 || sc.req.uncached); err == nil || fatalReadError(err) {
				break
			}
		}
		if err != nil && fatalReadError(err) {
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
// The serial path (w 0) classifies through sc.mapFn, made once per scratch
// so that a read allocates nothing; parts of one run classified
// concurrently share sc and pass a callback of their own, with their
// worker w.
func (v *Volume) readMapped(lba int64, i, k int, data []byte, sc *scratch, w int) (done bool, err error) {
	if v.mapper == nil || v.noMap.Load() {
		return false, nil
	}
	off := (lba + int64(i)) * int64(v.bs)
	if w != 0 {
		err = v.mapper.ReadMapped(off, k*v.bs, func(src []byte) error {
			return v.classify(lba, i, k, data, src, sc, w)
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
	lba  int64
	i, k int
	part int
	data []byte
	sc   *scratch // with the run's request
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
		for w := range n {
			go func(jobs <-chan verifyJob, w int) {
				for j := range jobs {
					v.runPart(j, w)
				}
			}(v.jobs, w+1)
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

// runPart reads and classifies part j of a split run as worker w (0 the
// request's goroutine, 1 on the verification workers or the split helper),
// recording a failed read in sc.partFailed (the part is redone serially)
// and any other error in sc.jobErr.
func (v *Volume) runPart(j verifyJob, w int) {
	defer j.sc.wg.Done()
	piece := max(1, pipePiece/v.bs)
	for i, end := j.i, j.i+j.k; i < end; i += piece {
		k := min(piece, end-i)
		if !j.sc.req.uncached {
			done, err := v.readMapped(j.lba, i, k, j.data, j.sc, w)
			if err != nil {
				j.sc.jobErr.CompareAndSwap(nil, &err)
				return
			}
			if done {
				continue
			}
		}
		if err := v.readDev(j.data[i*v.bs:(i+k)*v.bs], j.lba+int64(i), j.sc.req.uncached); err != nil {
			j.sc.partFailed.Or(1 << j.part)
			return
		}
		if err := v.classify(j.lba, i, k, j.data, nil, j.sc, w); err != nil {
			j.sc.jobErr.CompareAndSwap(nil, &err)
			return
		}
	}
}

// readSerial reads and classifies blocks [i, i+k) of a run piece by piece
// on the caller's goroutine, retrying failing reads block by block.
func (v *Volume) readSerial(lba int64, i, k int, data []byte, sc *scratch) error {
	piece := max(1, pipePiece/v.bs)
	uncached := sc.req.uncached
	if sc.req.inPlace && !uncached && v.mapper != nil {
		// Nothing is copied, so nothing to keep in the cache: the mapping
		// is read in one go.
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

// splitParts returns into how many parts a run of n blocks is cut for the
// verification workers: 1 (read serially) unless the run is large and
// there are workers.
func (v *Volume) splitParts(n int) int {
	if n*v.bs < splitMin {
		return 1
	}
	if w := v.startWorkers(); w > 0 || !v.keyedHelper() {
		return min(1+w, n*v.bs/(splitMin/2), 64)
	}
	// No workers, but a keyed volume's read is worth a second CPU: pieces
	// that the caller and the split helper take in turn (split.Work).
	return min(n*v.bs/split.Piece, 64)
}

// keyedHelper reports whether a large verified read of a keyed volume
// without verification workers (Options.VerifyWorkers) is split over the
// caller and the split helper: when the fused kernel computes the
// partials and a second CPU may run it. The run's parts are then pieces
// that the caller and the split helper take in turn (readParallel,
// split.Work).
func (v *Volume) keyedHelper() bool {
	return v.tags != nil && v.sums && keyed.Fused() && runtime.GOMAXPROCS(0) >= 2
}

// readParallel reads the data of a run of n blocks and classifies it in
// parts, one on the caller's goroutine and one per worker.
func (v *Volume) readParallel(lba int64, n, parts int, data []byte, sc *scratch) error {
	sc.jobErr.Store(nil)
	sc.partFailed.Store(0)
	per := (n + parts - 1) / parts
	sc.wg.Add(parts)
	if v.jobs == nil {
		// keyedHelper: the parts are pieces for split.Work.
		split.Work(parts, func(w, p int) bool {
			i := min(p*per, n)
			v.runPart(verifyJob{lba: lba, i: i, k: min(per, n-i), part: p, data: data, sc: sc}, w)
			return true
		})
	} else {
		for p := 1; p < parts; p++ {
			i := min(p*per, n)
			v.jobs <- verifyJob{lba: lba, i: i, k: min(per, n-i), part: p, data: data, sc: sc}
		}
		v.runPart(verifyJob{lba: lba, i: 0, k: min(per, n), part: 0, data: data, sc: sc}, 0)
	}
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
		if err := v.readSerial(lba, i, min(per, n-i), data, sc); err != nil {
			return err
		}
	}
	return nil
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
func (v *Volume) ReadAt(p []byte, off int64) (int, error) {
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
	req := v.request()
	req.zero = true
	for i := 0; i < len(p); {
		pos := off + int64(i)
		lba, inb := pos/bs, int(pos%bs)
		if inb != 0 || len(p)-i < v.bs {
			// A partial block: verified whole in sc.head.
			_, err := v.verifyRun(lba, 1, sc.head, sc, req)
			if err == nil {
				_, err = runError("read", sc.probs)
			}
			if err != nil {
				clear(p[i:])
				return i, err
			}
			i += copy(p[i:], sc.head[inb:])
			continue
		}
		k := min((len(p)-i)/v.bs, v.chunk)
		bad := lba
		_, err := v.verifyRun(lba, k, p[i:i+k*v.bs], sc, req)
		if err == nil {
			bad, err = runError("read", sc.probs)
		}
		if err != nil {
			i += int(bad-lba) * v.bs
			clear(p[i:])
			return i, err
		}
		i += k * v.bs
	}
	return len(p), eof
}
