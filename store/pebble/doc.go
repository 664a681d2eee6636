// Package pebble is a store.KV on Pebble (github.com/cockroachdb/pebble/v2),
// embedded in the process: a store is a directory of Pebble's files (for
// difctl, by default, IMAGE.difdb beside the image it protects).
//
// Importing the package registers the pebble scheme with store.Open, and
// with it store.Open's default, a plain path:
//
//	pebble:PATH   the store in directory PATH
//	PATH          the same, when PATH has no scheme
//
// Package blockdev imports it, so every program that uses volumes can open
// stores by path; a program that uses package store alone imports it
// itself. Open opens a store by directory with
// store.OpenOptions (store.OpenWith's), and OpenOnFS opens one on a Pebble
// file system, for crash tests.
//
// # The KV contract on Pebble
//
// A Batch is one Pebble batch: atomic, and with Commit(true) durable when
// Commit returns, with every batch committed before it (Pebble syncs its
// write-ahead log). Iterators read a Pebble snapshot. Keys go up to 64 KiB,
// values to 64 MiB and batches to 1 GiB (store.Limits), far below Pebble's
// 4 GiB per batch. Keys from "\xff\xff\xffdifctl/" on are the store's own
// (see below): iterators stop before them, Get misses them, and Set,
// Delete and bulk loads refuse them with an error matching
// store.ErrInvalid.
//
// Bulk loads (store.BulkLoader, used by store.Tuples.NewLoader) build
// sstables in the directory bulk-tmp/N/ inside the store and ingest them
// all at Finish in one edit of Pebble's manifest, skipping the write-ahead
// log and the memtable flush. Nothing is visible, and nothing survives a
// crash, before that edit; Finish first syncs the log, so a crash never
// keeps a load and loses a commit made before it, and it is durable
// whatever its sync argument says. The tables of a load that never
// finished are removed at the next read-write open.
//
// # Opening
//
// An open (store.OpenWith, Open) creates no store unless asked
// (store.OpenOptions.Create: a missing or empty directory; otherwise a
// missing store fails with an error matching store.ErrNotFound), opens
// read-only if asked (writes fail with store.ErrReadOnly and no file
// changes: Pebble replays its log in memory; readers share the store, a
// writer holds it alone, and a *store.BusyError names the holder's pid and
// command), and never reinitialises an existing directory. It refuses,
// and leaves exactly as it is, a path that is not a store
// (store.ErrNotStore: a regular file, a symbolic link, to a directory or
// not, or a directory holding other files) and a store directory whose
// manifest marker is gone (a *store.CorruptFileError matching
// store.ErrCorrupt): Pebble would take the latter for an empty directory,
// create a new database and delete the old tables. A creation interrupted
// before Pebble wrote that marker, with nothing committed, is created
// again. Directories are created 0700 and files 0600.
// store.OpenOptions.CacheBytes and MemTableBytes size Pebble's block cache
// and memtables (64 MiB each by default).
//
// # The store's own files
//
// Pebble's tables, logs, manifest, options and markers are held to the
// standard of the values package store keeps. Damage Pebble detects comes
// back as a *store.CorruptFileError naming the file. Pebble's fatal errors
// (and its panics over a damaged file) are recorded as the store's failure,
// an error matching store.ErrFailed or a *store.CorruptFileError that every
// later call returns, and never exit the process.
//
// Pebble drops a damaged last record of its manifest or log as if a crash
// had torn it, and would open an earlier state without a word. So the store
// counts its commits and bulk loads under hidden keys
// ("\xff\xff\xffdifctl/commit-generation" and ".../last-load") and keeps
// the counts in a state file, difctl-state, beside Pebble's, at every clean
// Close and bulk load; an open that finds fewer than the file records (or,
// after a clean Close, any other count) fails with a
// *store.CorruptFileError. Close flushes, so that nothing rests in the
// write-ahead log, whose records only their checksum protects. The log of a
// store killed while open is read first for a damaged record that a later
// intact one proves was synced. While the store is open, the state file
// also follows, in the background, the count of the last synced commit
// (state.go, "The synced watermark"), so an open after an unclean stop
// that finds fewer commits than that (a deleted, truncated or damaged
// log) fails, naming the log. Damage to the records of the last moments
// before the stop, which the file had not caught up with, cannot be told
// from a torn write, and Pebble then opens at the last intact commit
// before it.
//
// Errors are package store's: prefixed "store: ", naming the store as
// pebble:DIR, matching store's sentinels with errors.Is; none wraps a
// Pebble type.
package pebble
