package blockdev

import (
	"errors"
	"fmt"
	"io"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/check"
)

// Stage 1 of a verified read (verifyRun): load. The run's current tuples,
// sums and written bits come from staging (the staged batches, whose data
// is copied under staging's lock, and the overlay of flushed blocks) and
// the store's committed pages, in the order that makes each block's data
// and tuple consistent (see staging.go). A run that is unwritten and a
// hole on the device needs no read.

// loadRun loads blocks [lba, lba+n) (n <= v.chunk): their current
// tuples, sums and written bits into sc, from staging (the staged batches
// and the overlay) and the committed pages, and when a batch holds any of
// them their data into data, read from the device and the batch in the
// order that makes each block's data and tuple consistent (see
// staging.go); loaded reports that. Blocks that could not be read are
// marked in sc.ioBad. hole reports a run of an unkeyed volume that is
// unwritten and a hole on the device: zeros, by the rule, without a read.
// Caller holds a lock on the range.
func (v *Volume) loadRun(lba int64, n int, data []byte, sc *scratch) (loaded, hole bool, err error) {
	w := (n + 63) / 64
	clear(sc.ioBad[:w])
	loaded, over, devErr := v.stg.load(lba, n, data, sc, sc.req.uncached)
	if loaded && devErr != nil {
		if err := v.readFallback(lba, 0, n, data, sc, devErr, sc.staged); err != nil {
			return true, false, err
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
		return false, false, fmt.Errorf("blockdev: reading the tuples of blocks [%d, %d): %w", lba, lba+int64(n), err)
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
	if !loaded && sc.unwritten && v.tags == nil {
		// (A keyed volume reads and checks them: their tags must say
		// unwritten too, since the tuple pages carry no MAC.)
		hole, err := v.isHole(sc.req.dev, lba, n)
		return false, hole, err
	}
	return loaded, false, nil
}

// isHole reports whether the device knows blocks [lba, lba+n) to be a hole
// (SEEK_DATA finds no data in them): they read as zeros without a read.
func (v *Volume) isHole(dev device.Device, lba int64, n int) (bool, error) {
	f, ok := dev.(device.DataFinder)
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
		if check.Fatal(err) {
			return false, err
		}
		return false, nil // read the blocks: the read reports the device's trouble
	}
	return e.Off >= end, nil
}
