package blockdev

import (
	"context"
	"fmt"
	"io"

	"github.com/difctl/difctl/blockdev/device"
)

// The verified read of a Volume: ReadAt and the other callers of
// verifyRun (CheckRun, the edge blocks of WriteAt, ExportVolume and
// RemapVolume), and verifyRun, which takes a run through the stages of a
// verified read, each in a file of its own:
//
//  1. load (read_load.go): the run's tuples, sums and written bits from
//     staging (the staged batches, whose data it copies, and the overlay
//     of flushed blocks) and the store's committed pages;
//  2. read (read_device.go): the data, from the device's mapping or with
//     pread, split across the verification workers when the run is large;
//  3. classify (read_classify.go): one dif call per sub-chunk, as each
//     piece is read: guards, tags, sector sums and the copy from the
//     mapping in one pass (and a keyed volume's Poly1305 partials through
//     the keyed engine's copy hook), then the rule of unwritten blocks;
//  4. recheck (read_recheck.go): the run's states counted, each failing
//     block through the package's block classifier and re-read loop
//     (verify.go);
//  5. check the keyed tags (read_keyed.go, a keyed volume opened with its
//     key): the tags of the blocks that passed, through the keyed engine.
//
// A keyed volume opened with its key first tries the keyed read path
// (read_keyed.go), which loads, reads, classifies and checks a run whose
// blocks all verify their keyed tags in its own way; any other run takes
// the stages above from the start.

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
		return 0, device.CheckRange("read", off, int64(len(p)), v.Size())
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
	// repair is how failing blocks are repaired (read_repair.go), from
	// the volume's sources and these.
	repair  repairMode
	sources []RepairSource
	// record: the repair stage records its findings itself (a read, or
	// Repair; a scrub records what CheckRun reports).
	record bool
	// dev and mapper are where the run is read from: the volume's device
	// (nil: v.dev and v.mapper), or one leg of a mirrored volume (a check
	// of every leg, CheckRun).
	dev    device.Device
	mapper device.Mapper
}

// request returns the request of a verified read with the volume's
// options: Options.Rereads re-reads, cached, the manifest's ref tag.
func (v *Volume) request() readReq {
	m := v.readRepairMode()
	return readReq{rereads: v.opts.Rereads, ref: v.refBase, repair: m, record: m == repairWrite}
}

// verifyRun reads and verifies blocks [lba, lba+n) (n <= v.chunk) into
// data as req says, through the stages above. The problems of blocks
// still failing, and of transient ones (Transient set), are left in
// sc.probs in LBA order; sc.tuples and sc.written keep the run's tuples and
// written bits. The error is for the run as a whole (the store could not
// be read, check.Fatal). Caller holds a lock on the range.
func (v *Volume) verifyRun(lba int64, n int, data []byte, sc *scratch, req readReq) (RunStats, error) {
	sc.probs = sc.probs[:0]
	sc.req = req
	if req.ctx == nil {
		sc.req.ctx = context.Background()
	}
	if req.dev == nil {
		sc.req.dev, sc.req.mapper = v.dev, v.mapper
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
	// 1. Load.
	loaded, hole, err := v.loadRun(lba, n, data, sc)
	if err != nil {
		return RunStats{}, err
	}
	if hole {
		// Unwritten blocks in a hole: zeros, by the rule, without a read.
		if req.zero {
			clear(data[:n*v.bs])
		}
		v.st.read.Add(int64(n))
		return RunStats{Blocks: int64(n), Unwritten: int64(n)}, nil
	}
	// 2 and 3. Read, and classify each piece as it is read.
	if err := v.readRun(lba, n, data, sc, loaded); err != nil {
		return RunStats{}, err
	}
	// 4. Recheck the failing blocks.
	st, err := v.recheckRun(lba, n, data, sc)
	if err != nil {
		return RunStats{}, err
	}
	// 5. Check the keyed tags.
	if v.tags != nil {
		if err := v.checkTags(lba, n, data, sc, &st, req.inPlace && !loaded && sc.req.mapper != nil); err != nil {
			return RunStats{}, err
		}
	}
	// 6. Repair the blocks still failing.
	if req.repair != repairOff && st.Failed > 0 {
		if err := v.repairRun(lba, n, data, sc, &st); err != nil {
			return RunStats{}, err
		}
	}
	v.st.read.Add(int64(n))
	v.st.transient.Add(st.Transient)
	v.st.failed.Add(st.Failed)
	return st, nil
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
	if p.Passes() {
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
		if p.Passes() {
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
