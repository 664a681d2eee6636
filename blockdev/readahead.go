package blockdev

import (
	"sync"

	"github.com/difctl/difctl/store"
)

// Tuple read-ahead. Reading the committed tuples of a 1 MiB chunk from the
// store costs 10-30 µs (an iterator, page checks, decoding; the pages are
// cold after a megabyte of data went through the caches), against about
// 80 µs for copying and verifying the chunk's data. When reads are
// sequential, the volume reads the next chunk's tuples on another
// goroutine while the caller copies and verifies the current chunk, and
// the next chunk's loadRun takes them instead of asking the store.
//
// Correctness rests on pageGen, a sequence counter around every change to
// the committed pages (foldLocked and Discard, both under flushMu): odd
// while a change is under way, bumped again when it is done. A read-ahead
// records pageGen before it reads; loadRun uses the result only if pageGen
// still has that even value at the point where it would read the store
// itself (after the staging and overlay reads, in loadRun's order): no
// change can have happened since the read-ahead began, so the committed
// pages are what the read-ahead saw. Staged and overlay tuples are always
// taken live, as before.

// readAhead is the state of the volume's one tuple read-ahead.
type readAhead struct {
	mu      sync.Mutex
	next    int64 // block after the last chunk loaded: the next chunk of a sequential reader
	lba     int64 // range read ahead (n == 0: none)
	n       int
	gen     uint64
	running bool
	done    *sync.Cond // on mu: running became false
	err     error
	tuples  []byte
	sums    []uint32
	written store.Bitmap
	wg      sync.WaitGroup // the goroutine, for Close
}

// pageChange brackets a change to the committed pages. Caller holds flushMu.
func (v *Volume) pageChange() (end func()) {
	v.pageGen.Add(1)
	return func() { v.pageGen.Add(1) }
}

// takeReadAhead copies the read-ahead tuples of blocks [lba, lba+n) into sc
// if there are any and they are still valid, waiting for a read-ahead of
// that range that is under way. It reports whether it did. Caller is
// loadRun at the point where it would read the store.
func (v *Volume) takeReadAhead(lba int64, n int, sc *scratch) bool {
	ra := &v.ra
	ra.mu.Lock()
	defer ra.mu.Unlock()
	for {
		if ra.n == 0 || lba < ra.lba || lba+int64(n) > ra.lba+int64(ra.n) {
			return false
		}
		if !ra.running {
			break
		}
		ra.done.Wait() // the range may change meanwhile: check again
	}
	if ra.err != nil || v.pageGen.Load() != ra.gen {
		ra.n = 0
		return false
	}
	i := int(lba - ra.lba)
	copy(sc.tuples[:n*v.ts], ra.tuples[i*v.ts:])
	if v.sums {
		copy(sc.sums[:n], ra.sums[i:])
	}
	copyBitmap(sc.written, ra.written, i, n)
	if i+n == ra.n {
		ra.n = 0 // used up
	}
	return true
}

// copyBitmap sets dst's bits [0, n) to src's bits [from, from+n).
func copyBitmap(dst, src store.Bitmap, from, n int) {
	i := 0
	if from%64 == 0 {
		i = n &^ 63
		copy(dst[:i/64], src[from/64:])
	}
	for ; i < n; i++ {
		if src.Has(from + i) {
			dst.Set(i)
		} else {
			dst.Clear(i)
		}
	}
}

// noteLoaded records that blocks [lba, lba+n) were loaded and, if that
// continues the previous load, starts reading the next chunk's tuples.
func (v *Volume) noteLoaded(lba int64, n int) {
	ra := &v.ra
	end := lba + int64(n)
	ra.mu.Lock()
	seq := ra.next == lba
	ra.next = end
	if !seq || ra.running || end >= v.blocks || ra.n != 0 && ra.lba == end {
		ra.mu.Unlock()
		return
	}
	gen := v.pageGen.Load()
	if gen&1 != 0 {
		ra.mu.Unlock()
		return
	}
	if ra.tuples == nil {
		ra.tuples = make([]byte, v.chunk*v.ts)
		if v.sums {
			ra.sums = make([]uint32, v.chunk)
		}
		ra.written = store.NewBitmap(v.chunk)
	}
	ra.lba, ra.n, ra.gen, ra.running, ra.err = end, int(min(int64(v.chunk), v.blocks-end)), gen, true, nil
	ra.wg.Add(1)
	ra.mu.Unlock()
	go v.runReadAhead()
}

func (v *Volume) runReadAhead() {
	ra := &v.ra
	defer ra.wg.Done()
	// The range and buffers are ours while running is set.
	var sums []uint32
	if v.sums {
		sums = ra.sums[:ra.n]
	}
	_, err := v.tup.ReadRange(uint64(ra.lba), ra.tuples[:ra.n*v.ts], sums, ra.written)
	ra.mu.Lock()
	ra.err, ra.running = err, false
	ra.done.Broadcast()
	ra.mu.Unlock()
}
