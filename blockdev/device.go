package blockdev

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"math/bits"
)

// Device is a fixed-size, block-addressed medium.
//
// ReadAt and WriteAt transfer all of p or fail: a request that extends
// beyond Size fails with an error matching [ErrOutOfRange] and transfers
// nothing, and a short transfer inside the device is an *[IOError]. Devices
// are safe for concurrent use; the outcome of concurrent overlapping writes
// is unspecified, as on a disk. After Close every method fails with an error
// matching [ErrClosed].
type Device interface {
	io.ReaderAt
	io.WriterAt
	// Size is the device size in bytes, a multiple of LogicalBlockSize.
	Size() int64
	// LogicalBlockSize is the smallest unit the medium addresses (512 or
	// 4096 on most disks), a power of two.
	LogicalBlockSize() int
	// PhysicalBlockSize is the unit the medium writes natively, a power of
	// two and a multiple of LogicalBlockSize.
	PhysicalBlockSize() int
	// Sync makes every completed write durable.
	Sync() error
	// Close releases the device.
	Close() error
}

// Discarder is implemented by devices that can deallocate a range
// (fallocate PUNCH_HOLE on images and block devices, BLKZEROOUT on block
// devices that cannot unmap). off and n must be multiples of the logical
// block size. A discarded range reads as zeros afterwards: a Volume relies
// on it (an unwritten block must be zeros, see ErrUnwrittenData).
type Discarder interface {
	Discard(off, n int64) error
}

// An Extent is the byte range [Off, Off+Len).
type Extent struct {
	Off, Len int64
}

// End returns Off+Len.
func (e Extent) End() int64 { return e.Off + e.Len }

// DataFinder is implemented by devices that know where their data is
// (SEEK_DATA/SEEK_HOLE on sparse images).
type DataFinder interface {
	// NextData returns the first data extent that ends after off, with its
	// start clamped to off, or io.EOF when only holes follow. Extents may be
	// conservative (a hole may be reported as data), never the reverse.
	NextData(off int64) (Extent, error)
}

// CacheDropper is implemented by devices that can drop cached copies of a
// range, so that the next read comes from the medium (posix_fadvise
// DONTNEED). n == 0 means up to the end of the device.
type CacheDropper interface {
	DropCache(off, n int64) error
}

// A Mapper is implemented by devices that can lend their contents in
// place, from a read-only shared mapping of the page cache, so that a
// reader can verify and copy blocks in one pass instead of having the
// kernel copy them first (see [Volume.ReadAt]).
type Mapper interface {
	// ReadMapped calls fn with the device's bytes [off, off+n) as they are
	// in memory and returns fn's error. The slice is valid only while fn
	// runs and may change under it (the page cache is shared): fn must
	// copy what it keeps and check the copy, never the mapping. A memory
	// fault while fn runs (the file shrank, or the kernel could not read a
	// page, which is how a mapping reports an I/O error) ends fn and
	// returns an *IOError wrapping ErrMapFault. ReadMapped returns an
	// error wrapping errors.ErrUnsupported when the device cannot be
	// mapped (opened with O_DIRECT, or the system refused the mapping);
	// the caller then uses ReadAt.
	//
	// Pages read through a mapping count in the process's resident set;
	// an implementation bounds what it leaves mapped (a File: the last
	// 32 MiB read) and releases the rest, which stays in the page cache.
	ReadMapped(off int64, n int, fn func(m []byte) error) error
}

// DirectReader is implemented by devices that can read a range bypassing
// the page cache (O_DIRECT), whatever the mode the device was opened in. It
// has ReadAt's contract.
type DirectReader interface {
	ReadAtDirect(p []byte, off int64) (int, error)
}

var (
	// ErrOutOfRange reports I/O that does not fit inside the device.
	ErrOutOfRange = errors.New("blockdev: out of range")
	// ErrReadOnly reports a write to a device opened read-only.
	ErrReadOnly = errors.New("blockdev: read-only device")
	// ErrClosed reports use of a closed device.
	ErrClosed = errors.New("blockdev: device closed")
	// ErrUnaligned reports a request that must be, and is not, aligned to
	// the logical block size (discards, and writes in O_DIRECT mode).
	ErrUnaligned = errors.New("blockdev: unaligned request")
	// ErrMapFault reports a memory fault while reading a device's mapping
	// (see [Mapper]).
	ErrMapFault = errors.New("blockdev: fault reading the mapped device")
	// ErrCrashed reports use of a [FaultDevice] after a simulated crash.
	ErrCrashed = errors.New("blockdev: device crashed (simulated)")
)

// An IOError is a failed transfer: Op ("read", "write", "sync", "discard",
// ...) of Len bytes at Off. Err is the cause: the operating system's error
// (for example unix.EIO), or io.ErrUnexpectedEOF for a short transfer.
type IOError struct {
	Op  string
	Off int64
	Len int64
	Err error
}

func (e *IOError) Error() string {
	return fmt.Sprintf("blockdev: %s of %d bytes at offset %d: %v", e.Op, e.Len, e.Off, e.Err)
}

func (e *IOError) Unwrap() error { return e.Err }

// checkRange validates a request of n bytes at off on a device of size.
func checkRange(op string, off, n, size int64) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return fmt.Errorf("blockdev: %s of %d bytes at offset %d on a device of %d bytes: %w", op, n, off, size, ErrOutOfRange)
	}
	return nil
}

// checkAligned validates that off and n are multiples of bs.
func checkAligned(op string, off, n int64, bs int) error {
	if off%int64(bs) != 0 || n%int64(bs) != 0 {
		return fmt.Errorf("blockdev: %s of %d bytes at offset %d: not a multiple of the %d-byte block size: %w", op, n, off, bs, ErrUnaligned)
	}
	return nil
}

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
				yield(Extent{off, end - off}, nil)
			}
			return
		}
		for pos := off; pos < end; {
			e, err := f.NextData(pos)
			if errors.Is(err, io.EOF) {
				return
			}
			if errors.Is(err, errors.ErrUnsupported) {
				yield(Extent{pos, end - pos}, nil)
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
