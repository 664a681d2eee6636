// Package blockdev owns the devices that difctl protects and verifies, the
// protected [Volume] built on them, and the sources of protection
// information that need no store.
//
// # Volumes
//
// A [Volume] wraps a [Device] and a store (package store; Pebble by default)
// so that every write stores protection information and every read is
// verified. [Create] protects an existing image (resumable, sparse-aware,
// through the store's bulk loader) and [Open] checks the manifest against
// the device and recovers from a crash. ReadAt verifies every block it
// returns against its PI tuple and, where the manifest keeps them, its
// CRC-32C sector checksum, re-reading a failing block around the page cache
// before reporting it (*[IntegrityError], which matches dif.ErrIntegrity).
// WriteAt generates tuples, refusing to read-modify-write a block that
// already fails; Discard marks blocks unwritten; Sync makes data and tuples
// durable together.
//
// Unwritten blocks (holes adopted by Create, discarded blocks) have no
// tuple to check, so they are held to a rule: an unwritten block must read
// back from the device as zeros, or lie in a hole. Anything else is a
// finding of its own kind, [KindUnwrittenData] ([ErrUnwrittenData]),
// reported by ReadAt, CheckRun and so by scrubs; crash recovery treats an
// intent over an unwritten block like any other (data that is neither the
// new version nor zeros is torn), and Discard zeroes the device under an
// intent. Runs of unwritten blocks that the device reports as a hole
// ([DataFinder]) are not read at all.
//
// Reading from the page cache. When the device is a [Mapper] (a [File]
// not opened with O_DIRECT maps itself read-only), ReadAt takes the blocks
// from the mapping and copies and verifies them in one pass: the kernels'
// BlocksCopy calls store every loaded vector to the caller's buffer and
// fold the same register, so what is verified is exactly what is returned,
// even if the page cache changes meanwhile, and the bytes are read once
// instead of being copied by the kernel and then read again for the
// checksums. A fault on the mapping (the image shrank, or the kernel could
// not read a page: SIGBUS, recovered) sends that piece through ReadAt,
// which reports the I/O error as usual; [Options.NoMap] turns the mapping
// off. CheckRun, which returns no data, verifies the mapping in place and
// copies only the failing blocks; so does [PISource] for extended images
// and DIX pairs.
//
// Crash consistency: before any byte of a write can reach the device, its
// new tuples are durable in the store as an intent beside the committed
// ones; intents are group-committed, one store sync per staged batch of
// writes. Sync flushes the batch, syncs the device and folds the intents.
// Recovery checks which tuple the on-disk data of each block under an intent
// matches: the new one is folded in, the old one kept, and a block matching
// neither is recorded as a torn finding and keeps failing verification. No
// tuple is ever recomputed from data that failed verification. When the
// device writes blocks atomically, a crash therefore leaves no block failing
// verification because of the crash; a block torn inside itself (4 KiB blocks
// over 512-byte sectors) is reported as torn, never silently fixed.
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
//   - [NewMemDevice] is a sparse in-memory device. The fault-injecting
//     device of the tests is package blockdev/faultdev; it builds on
//     package blockdev/device, which holds the Device contract that this
//     package re-exports.
//
// Optional capabilities are discovered by type assertion and kept small:
// [Discarder], [DataFinder] (SEEK_DATA/SEEK_HOLE; see [DataExtents]),
// [CacheDropper], [DirectReader] (see [ReadUncached]) and [Mapper]. A device may
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
// [NewExtendedSource] and [NewDIXSource] verify them with package dif.
//
// A [CheckSource] is anything whose blocks can be verified in runs: a
// Volume, or a [PISource] over either kind of image. The scrub engine that
// streams over one, with its state, findings and rate limiter, is package
// blockdev/scrub.
package blockdev
