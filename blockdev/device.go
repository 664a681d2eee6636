package blockdev

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"math/bits"

	"github.com/difctl/difctl/blockdev/device"
)

// The device contract lives in package blockdev/device, below this one, so
// that device wrappers (blockdev/faultdev) need not import blockdev; these
// names re-export it.
type (
	// Device is a fixed-size, block-addressed medium ([device.Device]).
	Device = device.Device
	// Discarder deallocates a range ([device.Discarder]).
	Discarder = device.Discarder
	// An Extent is the byte range [Off, Off+Len) ([device.Extent]).
	Extent = device.Extent
	// DataFinder knows where a device's data is ([device.DataFinder]).
	DataFinder = device.DataFinder
	// CacheDropper drops cached copies of a range ([device.CacheDropper]).
	CacheDropper = device.CacheDropper
	// A Mapper lends a device's contents in place ([device.Mapper]).
	Mapper = device.Mapper
	// DirectReader reads around the page cache ([device.DirectReader]).
	DirectReader = device.DirectReader
	// An IOError is a failed transfer ([device.IOError]).
	IOError = device.IOError
)

// The device errors ([device.ErrOutOfRange] ...).
var (
	ErrOutOfRange = device.ErrOutOfRange
	ErrReadOnly   = device.ErrReadOnly
	ErrClosed     = device.ErrClosed
	ErrUnaligned  = device.ErrUnaligned
	ErrMapFault   = device.ErrMapFault
	ErrCrashed    = device.ErrCrashed
)

func checkRange(op string, off, n, size int64) error { return device.CheckRange(op, off, n, size) }

func checkAligned(op string, off, n int64, bs int) error { return device.CheckAligned(op, off, n, bs) }

// validBlockSize reports whether bs is a power of two in [512, 64 KiB].
func validBlockSize(bs int) bool {
	return bs >= 512 && bs <= 1<<16 && bits.OnesCount(uint(bs)) == 1
}

// DataExtents iterates over the data extents of d that intersect [off, end),
// clipped to it, in ascending order. Devices that are not a [DataFinder], or
// that report [errors.ErrUnsupported], yield [off, end) as one extent. The
// iteration stops at the first error, which it yields with a zero Extent.
func DataExtents(d Device, off, end int64) iter.Seq2[Extent, error] {
	return func(yield func(Extent, error) bool) {
		if err := checkRange("data extents", off, end-off, d.Size()); err != nil {
			yield(Extent{}, err)
			return
		}
		f, ok := d.(DataFinder)
		if !ok {
			if end > off {
				yield(Extent{Off: off, Len: end - off}, nil)
			}
			return
		}
		for pos := off; pos < end; {
			e, err := f.NextData(pos)
			if errors.Is(err, io.EOF) {
				return
			}
			if errors.Is(err, errors.ErrUnsupported) {
				yield(Extent{Off: pos, Len: end - pos}, nil)
				return
			}
			if err != nil {
				yield(Extent{}, err)
				return
			}
			if e.Len <= 0 || e.Off < pos {
				yield(Extent{}, fmt.Errorf("blockdev: data finder returned extent [%d, %d) for offset %d", e.Off, e.End(), pos))
				return
			}
			if e.Off >= end {
				return
			}
			if e.End() > end {
				e.Len = end - e.Off
			}
			if !yield(e, nil) {
				return
			}
			pos = e.End()
		}
	}
}

// ReadUncached reads like d.ReadAt but from the medium rather than a cache
// where the device allows it: through [DirectReader] if possible, otherwise
// after [CacheDropper.DropCache] on the range, otherwise with a plain ReadAt.
// Use it to re-read a block that failed verification.
func ReadUncached(d Device, p []byte, off int64) (int, error) {
	if dr, ok := d.(DirectReader); ok {
		n, err := dr.ReadAtDirect(p, off)
		if !errors.Is(err, errors.ErrUnsupported) {
			return n, err
		}
	}
	if cd, ok := d.(CacheDropper); ok && len(p) > 0 {
		if err := cd.DropCache(off, int64(len(p))); err != nil && !errors.Is(err, errors.ErrUnsupported) {
			return 0, err
		}
	}
	return d.ReadAt(p, off)
}
