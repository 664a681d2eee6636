// Package blockdev owns the protected [Volume]: a [device.Device] whose every
// write stores protection information (a T10 DIF/NVMe PI tuple and, where
// the manifest says so, a CRC-32C sector sum per block) in a store, whose
// every read is verified against it, and which survives a crash at any
// instant; and the vocabulary of a check ([CheckSource], [CheckOptions],
// [Problem], [Kind], [RunStats]) that a Volume and the other sources of
// blocks speak. Importing it links the embedded Pebble store
// (store/pebble), so that store.Open opens a store by path, its default, in
// every program that uses volumes.
//
// Its neighbours, one job each:
//
//   - blockdev/device, below it: the devices a Volume runs on, their
//     contract (device.Device, its capabilities and errors) and the
//     implementations (files and Linux block devices, memory);
//   - blockdev/pisource, above it: images that carry their own PI
//     (extended-LBA dumps, DIX pairs), verified as a CheckSource and
//     imported by [ImportImage] (an [ImportSource]);
//   - blockdev/internal/check: what every verifier shares, a Volume's and
//     an image's: the block classifier, the re-read loop and the one
//     predicate for a read error that ends a run;
//   - blockdev/scrub, the scrub engine; blockdev/nbd, the NBD server;
//     blockdev/faultdev, the fault-injecting device of the tests.
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
//     read-only mapping of the page cache where it has one, [device.Mapper],
//     copied and verified in one pass, so what is verified is what is
//     returned, otherwise from ReadAt; large runs are read in pieces
//     shared with the split helper where there are two CPUs, unless
//     [Options.VerifyWorkers] is negative), classify (read_classify.go: dif classifies
//     each piece in one pass, guards, tags and sector sums), recheck
//     (read_recheck.go: a failing block goes to the block classifier and
//     re-read loop shared with blockdev/pisource, and a block that passes
//     on a re-read is counted as transient) and, keyed, the keyed check
//     (read_keyed.go). Failures are *[IntegrityError] (matching
//     dif.ErrIntegrity).
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
//     must read as zeros or lie in a hole ([device.DataFinder]); anything
//     else is [KindUnwrittenData].
//   - volume_export.go, volume_import.go, volume_remap.go: a volume to and
//     from a self-contained PI image ([ImportSource]: package
//     blockdev/pisource reads one), and a change of its ref tags;
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
// Keyed volumes: a Volume created with a [Key] (Options.Key; [ParseKey])
// also keeps a Poly1305-AES tag per block over the volume's identity, the
// LBA, the write generation and the data, under the nonce (generation,
// LBA); a block that fails it is a [KindKeyedTag] problem (*[KeyedTagError],
// matching dif.ErrIntegrity). Threat model, against an attacker who can
// write the device and the store but has no key (details in the package
// documentation of blockdev/internal/keyed, the tag engine, and docs/keyed.md,
// point by point against dm-integrity's documented limits):
// altered, moved, copied or fabricated data fails; forged tags and
// generations fail (tag pages carry a MAC, and every tag page is recorded
// from Create on, so a deleted one fails every block of it: "page-missing");
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
