package device

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"math/bits"
)

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
		if err := CheckRange("data extents", off, end-off, d.Size()); err != nil {
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
