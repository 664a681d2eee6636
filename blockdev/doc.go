// Package blockdev owns the protected [Volume]: a [Device] whose every
// write stores protection information (a T10 DIF/NVMe PI tuple and, where
// the manifest says so, a CRC-32C sector sum per block) in a store, whose
// every read is verified against it, and which survives a crash at any
// instant, with the devices it runs on and the images that carry their own
// PI ([PISource]). The scrub engine is package blockdev/scrub, the
// fault-injecting device of the tests blockdev/faultdev (built on
// blockdev/device, the Device contract re-exported here). Importing it
// links the embedded Pebble store (store/pebble), so that store.Open opens
// a store by path, its default, in every program that uses volumes.
//
// # The Volume
//
// [Create] protects an existing image (resumable, sparse-aware, through the
// store's bulk loader); [Open] checks the manifest against the device and
// runs crash recovery. Files by job:
//
//   - volume_read.go: [Volume.ReadAt] and verifyRun, the one verifier of
//     a run, used by ReadAt, [Volume.CheckRun], the edge blocks of
//     [Volume.WriteAt], [ExportVolume] and [RemapVolume]. A request
//     (readReq) says how a run is read: re-reads, around the page cache or
//     not, zeroing unwritten blocks, verifying a mapping in place, tuples
//     from the store or its cache, the initial ref tag. verifyRun takes the
//     run through its stages, a file each: load (read_load.go: tuples from
//     staging and the store), read (read_device.go: from the device's
//     read-only mapping of the page cache where it has one, [Mapper],
//     copied and verified in one pass, so what is verified is what is
//     returned, otherwise from ReadAt; large runs split across
//     [Options.VerifyWorkers]), classify (read_classify.go: dif classifies
//     each piece in one pass, guards, tags and sector sums), recheck
//     (read_recheck.go: a failing block goes to the package's block
//     classifier and re-read loop, verify.go, shared with PISource, and a
//     block that passes on a re-read is counted as transient) and, keyed,
//     the keyed check (read_keyed.go). Failures are *[IntegrityError]
//     (matching dif.ErrIntegrity).
//   - volume_write.go: WriteAt generates tuples and refuses to
//     read-modify-write a block that already fails; Discard marks blocks
//     unwritten under an intent.
//   - staging.go: the staging type the Volume owns. Writes are staged in a
//     bounded batch (served to readers); a full batch or [Volume.Sync]
//     records its tuples as intents in one synced store commit, then writes
//     the data; Sync syncs the device and folds the intents into the
//     committed tuples.
//   - recover.go: recovery checks which tuple the data of each block under
//     an intent matches: the new one is folded in, the old one kept, and a
//     block matching neither is recorded as a torn finding and keeps failing
//     verification. No tuple is ever recomputed from data that failed.
//   - unwritten.go: the rule for blocks never written or discarded: they
//     must read as zeros or lie in a hole ([DataFinder]); anything else is
//     [KindUnwrittenData].
//   - volume_export.go, volume_import.go, volume_remap.go: a volume to and
//     from a self-contained PI image, and a change of its ref tags;
//     import.go: where an import into a new image writes, and what it
//     removes when it fails before keeping anything ([OpenImportTarget]).
//   - volume_prepare.go: what a store holds of a volume before Create, and
//     the rules of protecting over it ([PrepareCreate]: resume, refuse
//     records without a manifest, start over with Reprotect; the key of a
//     reprotect, [ReprotectKey]).
//   - inspect.go, sample.go: a volume's coverage, findings and scrub
//     ([Inspect]) and its blocks' stored tuples beside those their data
//     computes ([InspectStored], [InspectBlock]), read without a Volume; a
//     sample of written blocks that tells whether a store describes a
//     device's data ([SampleData]).
//
// One predicate decides which device errors fail a run as a whole rather
// than the blocks read (a closed, crashed or cancelled device, or a read
// out of range); every other read error is re-read, then reported as
// [KindIO].
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
//
// Optional capabilities are discovered by type assertion and kept small:
// [Discarder], [DataFinder] (SEEK_DATA/SEEK_HOLE; see [DataExtents]),
// [CacheDropper], [DirectReader] (see [ReadUncached]) and [Mapper]. A device may
// implement a capability interface and still report, at run time, an error
// wrapping [errors.ErrUnsupported] when the medium cannot provide it (a block
// device has no holes, tmpfs has no O_DIRECT).
//
// Images that carry their own protection information: [ExtendedImage] reads an extended-LBA dump (data and metadata interleaved
// in sectors of dataSize+metaSize bytes, such as 520, 4104 or 4112) as runs
// of raw extended sectors, and [DIXPair] reads a data image together with a
// separate metadata file. Both only do I/O and size checks ([*SizeError]);
// [NewExtendedSource] and [NewDIXSource] verify them with package dif. A
// Volume and a PISource are both a [CheckSource], what `difctl verify` and
// the scrub engine (package blockdev/scrub) consume.
//
// Keyed volumes: a Volume created with a [Key] (Options.Key; [ParseKey])
// also keeps a Poly1305-AES tag per block over the volume's identity, the
// LBA, the write generation and the data, under the nonce (generation,
// LBA); a block that fails it is a [KindKeyedTag] problem (*[KeyedTagError],
// matching dif.ErrIntegrity). Threat model, against an attacker who can
// write the device and the store but has no key (details in the package
// documentation of blockdev/internal/keyed, the tag engine, and docs/keyed.md,
// point by point against dm-integrity's documented limits):
// altered, moved, copied or fabricated data fails; forged tags and
// generations fail (tag pages carry a MAC, and every tag page exists from
// Create on, so a deleted one fails every block of it: "page-missing");
// putting back one older block
// fails, but putting back a whole tag page (PageTuples blocks) with its
// blocks' old data, or the device and the whole store together, is not
// detected (dm-integrity does not detect replay of a single sector either).
// With the key, a verified read whose blocks all pass their keyed tags and
// tag page MACs does not recompute their guards and sector sums, which the
// tags prove (read_keyed.go; Options.KeyedCRC computes them anyway); any
// failure sends the read through the full check, which reports it as an
// unkeyed volume would, plus the keyed-tag problems. The Poly1305 of a
// large keyed read or protect is cut into pieces that the caller
// and one lingering helper goroutine take in turn (blockdev/internal/split:
// a goroutine started per request begins too late on the machines measured
// to share the work). Without the key a keyed volume is read and checked for its
// tuples only, [Volume.KeyedChecked] reports false, and writes, discards and remaps fail
// with [ErrKeyRequired]; a wrong key fails Open with [ErrWrongKey].
package blockdev
