// Package blockdev provides the devices that difctl protects and verifies:
// image files, Linux block devices, memory, and a fault-injection device for
// tests, behind one small [Device] interface.
//
// # Devices
//
// A [Device] is a fixed-size array of bytes addressed like a disk: an
// [io.ReaderAt] and [io.WriterAt] that never grows, with a logical block size
// (the smallest unit the medium reads and writes), a physical block size (the
// unit it writes atomically and efficiently), Sync and Close. I/O beyond
// Size fails with [ErrOutOfRange] and transfers nothing; a short read or
// write that the operating system reports inside the device is an error
// (*[IOError] wrapping [io.ErrUnexpectedEOF]), never a silent partial
// transfer. All errors are prefixed "blockdev: ".
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
//   - [NewMemDevice] is a sparse in-memory device.
//   - [NewFaultDevice] wraps any device for tests: it flips bits, tears,
//     drops and misdirects writes, fails chosen ranges with EIO transiently or
//     permanently, counts steps, and simulates a crash that loses every write
//     not covered by a completed Sync (optionally keeping a seeded random
//     subset of unsynced sectors, which models page-cache writeback and torn
//     writes). [FaultDevice.Reopen] then yields the device as found after the
//     crash.
//
// Optional capabilities are discovered by type assertion and kept small:
// [Discarder], [DataFinder] (SEEK_DATA/SEEK_HOLE; see [DataExtents]),
// [CacheDropper] and [DirectReader] (see [ReadUncached]). A device may
// implement a capability interface and still report, at run time, an error
// wrapping [errors.ErrUnsupported] when the medium cannot provide it (a block
// device has no holes, tmpfs has no O_DIRECT).
//
// # Images that carry their own protection information
//
// [ExtendedImage] reads an extended-LBA dump (data and metadata interleaved
// in sectors of dataSize+metaSize bytes, such as 520, 4104 or 4112) as runs
// of raw extended sectors, and [DIXPair] reads a data image together with a
// separate metadata file. Both only do I/O and size checks ([*SizeError]);
// generating and checking the protection information is package dif's job.
package blockdev
