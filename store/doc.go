// Package store keeps difctl's integrity metadata: PI tuples, sector
// checksums, crash-consistency intents, scrub cursors and findings.
//
// Two layers:
//
//   - KV is a deliberately small key-value interface (Get, ordered snapshot
//     iteration, atomic batches committed with or without sync, Close) that
//     any engine can implement. Open selects one by URL: "mem:", built in,
//     or the scheme of a backend package the program links, which registers
//     it (Register): "pebble:PATH" or a plain path, the default, with
//     store/pebble (embedded Pebble; package blockdev links it), and
//     "etcd://..." with store/etcd. The storetest package is the
//     conformance suite every backend runs.
//
//   - Tuples is one volume on a KV: a versioned manifest that Open checks
//     against the caller's (refusing a different format or device with a
//     *ManifestMismatchError), tuple pages of Manifest.PageTuples tuples
//     (1,024 by default) keyed by volume and big-endian page number, intents,
//     scrub cursors and the findings log. Many volumes share one KV.
//
// The store never interprets PI: a tuple is TupleSize opaque bytes and the
// format is the dif package's canonical string, kept verbatim.
//
// Blocks never written (or discarded) are a state of their own: ReadRange
// reports them with a clear bit in a Bitmap and reads their tuple as all ones
// (the PI escape), so they are never confused with mismatches. Unwritten is
// something the store records, not the absence of a record: from schema
// version 2 every page of a volume has a record, and from version 7 the
// pages never written are recorded as ranges instead, empty runs (runs.go):
// CreateTuples writes one run of every page, in the batch of the manifest,
// so creating a volume costs one record whatever its size, and a commit
// that writes into a page of a run replaces the run by the runs of its
// other pages in the batch that writes the page. A page with neither a
// record nor a run is missing, a *CorruptError, never unwritten blocks. A
// page that was written and emptied again keeps an empty-page record.
// Volumes of versions 2 to 6 have a record of every page and no run, and
// are read and written as before; volumes of schema version 1 recorded
// empty pages by their absence and are still read and written that way
// (Tuples.Dense). The manifest's schema version (SchemaVersion) keeps
// programs that do not know the runs from opening such a volume.
//
// A backend with files of its own holds them to the same standard and
// says how in its package documentation (store/pebble): damage to them
// gives a *CorruptFileError naming the file, an engine's fatal failure
// ErrFailed, never an exit of the process. OpenWith hands the backend its
// OpenOptions: create a store only when asked, open it read-only (writes
// fail with ErrReadOnly; a *BusyError names another holder), the engine's
// memory sizes; mem: and etcd:// ignore them.
//
// Crash consistency (ARCHITECTURE.md, "The crash contract"): record the
// new tuples of a group of writes as intents in one synced Txn, write the
// data, then fold the intents into the committed pages. After a crash, AllIntents lists what
// recovery must resolve.
//
// Bulk loads: protect writes every tuple of an image once.
// Tuples.NewLoader (or LoadRange) streams pages to the backend's
// BulkWriter (see BulkLoader and NewBulkWriter; store/pebble builds
// sstables and ingests them, skipping the write-ahead log and the memtable
// flush) and makes the whole range visible at Finish, all or nothing, with
// the empty runs that replace those its pages leave. It must not race with
// intents or other writes on its range; Finish refuses with ErrConflict
// when it detects that.
//
// Page cache: Tuples.SetPageCache gives ReadRangeCached a bounded cache of
// decoded pages, so re-reading a range costs a copy instead of a KV
// iteration, a page checksum and the decoding of every sector checksum.
// Every page write through the Tuples (commits, bulk loads, remaps) is seen
// by it: reads bypass it while one runs and its pages are dropped after. It
// assumes the Tuples is the volume's only writer, as a blockdev.Volume is;
// ReadRange always reads the KV (a scrub of the store should use it).
//
// Keyed volumes (Manifest.KeyCheck set, created with CreateKeyedTuples,
// which seals the empty run of every page with the page key) also keep a
// keyed tag and write generation per block, opaque to the store like a
// tuple, in tag pages sealed with a page MAC (Tuples.SetPageMACKey,
// ReadTags, Txn.WriteTags), tag intents beside the intents
// (Txn.RecordTagIntent, TagIntent) and the reserved generation
// (Txn.ReserveGeneration); see keyed.go. A page or run whose MAC fails, or
// a tag page that is missing (PageMACError.Missing), gives a *PageMACError
// (ErrPageMAC). The seal (seal.go) commits to every tag page and run.
//
// Errors are prefixed "store: " and match the sentinels (ErrNotFound,
// ErrClosed, ErrCorrupt, ...) with errors.Is. A damaged stored value gives a
// *CorruptError, a damaged store file a *CorruptFileError, never a panic.
//
// A short example (with store/pebble imported, or package blockdev):
//
//	kv, err := store.Open("pebble:/var/lib/difctl/meta")
//	if err != nil { ... }
//	defer kv.Close()
//	m := store.NewManifest("4096+8:crc16:type1:pi-last", 4096, 8, devSize, serial)
//	tp, err := store.OpenTuples(kv, "sda", &m)
//	if errors.Is(err, store.ErrNotFound) {
//		tp, err = store.CreateTuples(kv, "sda", m)
//	}
//	...
//	err = tp.WriteRange(lba, tuples, sums, true)
//	n, err := tp.ReadRange(lba, tuples, sums, written)
package store
