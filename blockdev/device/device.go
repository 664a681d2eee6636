// Package device holds the block devices a protected volume runs on: the
// contract every device meets (the [Device] interface, its optional
// capabilities, the [Extent] they speak in and the errors every
// implementation reports) and the implementations, files and block devices
// ([File]) and memory ([Mem]).
//
// A [Device] is a fixed-size array of bytes addressed like a disk: an
// [io.ReaderAt] and [io.WriterAt] that never grows, with a logical block size
// (the smallest unit the medium reads and writes), a physical block size (the
// unit it writes atomically and efficiently), Sync and Close. I/O beyond
// Size fails with [ErrOutOfRange] and transfers nothing; a short read or
// write that the operating system reports inside the device is an error
// (*[IOError] wrapping [io.ErrUnexpectedEOF]), never a silent partial
// transfer.
//
// Implementations:
//
//   - [OpenFile] opens an image file or a Linux block device. Block devices
//     report their size and logical and physical block sizes from the kernel
//     (BLKGETSIZE64, BLKSSZGET, BLKPBSZGET); images take the logical block
//     size from [FileOptions.BlockSize]. With [FileOptions.Direct] the file is
//     opened with O_DIRECT when the filesystem accepts it (probed at open,
//     falling back to buffered I/O otherwise; see [File.DirectIO]); unaligned
//     caller buffers then go through aligned bounce buffers ([AlignedBuffer]
//     allocates buffers that need none). [CreateImage] makes a sparse image.
//   - [NewMem] is a sparse in-memory device.
//
// Optional capabilities are discovered by type assertion and kept small:
// [Discarder], [DataFinder] (SEEK_DATA/SEEK_HOLE; see [DataExtents]),
// [CacheDropper], [DirectReader] (see [ReadUncached]), [Mapper] and
// [PIWriter]. A device may
// implement a capability interface and still report, at run time, an error
// wrapping [errors.ErrUnsupported] when the medium cannot provide it (a block
// device has no holes, tmpfs has no O_DIRECT).
//
// A [Reader] reads, with the same error contract, a file of any size that is
// not a Device (the images of package blockdev/pisource, whose sectors are
// 520 or 4104 bytes), and lends a file's contents through a mapping as a
// File does.
//
// The package sits below blockdev, so that device wrappers, such as the
// fault-injecting device of blockdev/faultdev that blockdev's own tests use,
// build on it without an import cycle (the arrangement of Pebble's vfs and
// vfs/errorfs). Messages keep the "blockdev: " prefix: these are the errors
// of blockdev's devices.
package device

import (
	"errors"
	"fmt"
	"io"
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

// A WritebackStarter is implemented by devices that can start writing a
// range's cached writes to the medium without waiting for it
// (sync_file_range SYNC_FILE_RANGE_WRITE), so that a later Sync has less
// left to wait for. It promises no durability: only Sync does.
type WritebackStarter interface {
	StartWriteback(off, n int64) error
}

// A Mapper is implemented by devices that can lend their contents in
// place, from a read-only shared mapping of the page cache, so that a
// reader can verify and copy blocks in one pass instead of having the
// kernel copy them first (see blockdev.Volume.ReadAt).
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

// A PIWriter is implemented by devices that store a protection
// information tuple with each block and check it as they store it (an NVMe
// namespace formatted with PI: blockdev/nvme.VolumeDevice). A protected
// volume whose device is one writes its staged blocks through WriteWithPI
// with the tuples it generated and records in its store, so that the
// device checks them end to end; its other writes use WriteAt, with PI the
// device generates.
type PIWriter interface {
	// WriteWithPI writes data, whole logical blocks at off (a multiple of
	// the logical block size), with tuples, one per block of the volume's
	// tuple size, as the blocks' PI. A tuple the device refuses fails the
	// write with an error matching dif.ErrIntegrity; the blocks before the
	// refused one may have been written, those after it were not.
	WriteWithPI(data, tuples []byte, off int64) error
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
	// ErrCrashed reports use of a fault-injecting device (package blockdev/faultdev) after a simulated crash.
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

// CheckRange validates a request of n bytes at off on a device of size,
// for implementations of Device: the error wraps [ErrOutOfRange].
func CheckRange(op string, off, n, size int64) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return fmt.Errorf("blockdev: %s of %d bytes at offset %d on a device of %d bytes: %w", op, n, off, size, ErrOutOfRange)
	}
	return nil
}

// CheckAligned validates that off and n are multiples of bs, for
// implementations of Device: the error wraps [ErrUnaligned].
func CheckAligned(op string, off, n int64, bs int) error {
	if off%int64(bs) != 0 || n%int64(bs) != 0 {
		return fmt.Errorf("blockdev: %s of %d bytes at offset %d: not a multiple of the %d-byte block size: %w", op, n, off, bs, ErrUnaligned)
	}
	return nil
}
