// Package etcd is a store.KV on etcd (go.etcd.io/etcd/client/v3), so that a
// volume's tuples live on a replicated, linearizable engine and survive the
// loss of the host the volume is attached to (SAN LUNs, NVMe-oF
// namespaces, cloud volumes that are re-attached elsewhere).
//
// Importing the package registers the etcd scheme with store.Open:
//
//	etcd://host1:2379,host2:2379,host3:2379/PREFIX
//
// A host without a port gets 2379. Every key of the store lives under
// PREFIX, so one cluster holds many stores (one per volume, say). TLS and
// credentials come from Options or, through store.Open (and so every
// difctl --store flag), from the environment: DIFCTL_ETCD_USER,
// DIFCTL_ETCD_PASSWORD, DIFCTL_ETCD_CACERT, DIFCTL_ETCD_CERT and
// DIFCTL_ETCD_KEY (any of the last three selects TLS). A URL with user
// information is refused, and no error quotes one: credentials in URLs end
// up in process lists, shell histories and logs.
//
// # Keys
//
// Under PREFIX + "/":
//
//	d KEY            the store's key KEY and its value
//	s TXID KEY       a staged operation of a large commit or bulk load:
//	                 'S' value (set) or 'D' (delete)
//	c TXID           the commit record of TXID
//	l                the writer lock (attached to the holder's lease)
//
// TXID is 16 bytes: the revision of the lock key of the store that made it
// (larger for every later holder) and a counter, so records sort in commit
// order.
//
// # The witness of keyed volumes
//
// Witness (OpenWitness) keeps the seals of keyed volumes
// (blockdev.Witness) in etcd, under a PREFIX and with Options of its own
// (difctl: the DIFCTL_WITNESS_ETCD_* variables, WitnessOptionsFromEnv;
// never the store's), so that whoever holds a volume's store and its
// credentials cannot put back an older witness:
//
//	w/UID            the witness record of the volume UID (32 hex
//	                 digits): store.MarshalWitness's line
//
// Store compares and swaps: it reads the record and replaces it in a
// transaction conditioned on the key's mod revision (or on its absence),
// reading again after a lost race, and refuses a lower generation, or the
// same with another MAC, with a *store.WitnessAheadError. So the
// generation a witness holds only goes up, whatever the writers' order.
//
// # Commits and etcd's limits
//
// etcd applies one transaction atomically, but a transaction is limited to
// --max-txn-ops operations (128 by default) and a request to
// --max-request-bytes (1.5 MiB). A Batch that fits (after dropping all but
// the last operation on each key, which etcd requires) is one transaction.
// A larger one keeps the KV contract, all or nothing for readers and after
// a crash, with a commit record as its single commit point:
//
//  1. stage: every operation is written under s TXID KEY, in transactions
//     within the limits, Options.InFlight at a time. Nothing reads them yet.
//  2. commit: one transaction writes c TXID. This is the instant the batch
//     takes effect.
//  3. apply: the operations are written to their d keys, in transactions.
//  4. retire: one transaction deletes c TXID and the staged range.
//
// Readers resolve a key at one etcd revision: a Get reads d KEY and the
// list of commit records in one transaction; for every record present at
// that revision (newest first) the staged operation on the key, if any,
// wins over d KEY. An iterator merges, at its snapshot revision, the d range
// with the staged range of each record in force. So a reader sees the old
// state until step 2 and the new one from step 2 on, whatever steps 3 and 4
// have done: the partial application of step 3 is never visible.
//
// A crash before step 2 leaves staged keys no reader looks at; Open
// deletes them. A crash after it leaves a record in force; Open (or, in a
// live store whose apply failed, the next commit) applies it again from
// its staged keys and retires it. Commits of one store are serialized, so
// an application never overwrites a later commit. TestCrashBetweenTransactions
// crashes after each transaction of a large commit and checks that readers
// during the crash and the store after it hold exactly the old or exactly
// the new batch.
//
// etcd makes every acknowledged transaction durable on a quorum, so every
// Commit is synced whatever its sync argument says; the volume's group
// commit (one intent transaction per staged batch of writes, see
// store.Tuples and blockdev) is what amortizes etcd's latency.
//
// Bulk loads (store.BulkLoader, used by protect through store.Loader)
// stream their keys to staged keys as they come, with Options.InFlight
// transactions in flight, so memory is bounded whatever the load; Finish
// is steps 2 to 4. Protect's checkpoints finish a loader and move its
// cursor, so an interrupted protect resumes as on Pebble.
//
// Limits reports what etcd accepts: keys up to 4 KiB, values up to the
// request limit less a staged key (about 1.49 MiB by default), batches up
// to Options.MaxBatchBytes (64 MiB; a batch is held in memory until
// Commit). The tuple store's values are pages of 8-17 KiB.
//
// # One writer per store
//
// Open takes a lock: it creates the l key, only if absent, attached to the
// lease of a concurrency.Session that the client keeps alive. A second
// opener, on any host, fails with a *LockedError (errors.Is ErrLocked)
// that names the holder (Options.Holder: host and pid, its lease and since
// when), or waits Options.LockWait for it. When the holder dies, its lease
// expires after Options.LeaseTTL and the lock key goes with it; the next
// opener takes the store and runs recovery (and blockdev.Open resolves the
// volume's intents).
//
// Every write transaction carries a comparison: the lock key's create
// revision must still be the one this store created. A writer whose lease
// expired (a long pause, a partition) is therefore refused by the cluster
// itself, with ErrFenced, even if it has not noticed yet; a new holder's
// lock key has a later revision. A writer that knows its session ended
// refuses to write before asking.
//
// # Failures
//
// A request that gets no answer in Options.OpTimeout fails with
// ErrUnavailable: a write is then not acknowledged (it may or may not have
// been applied, as with any lost reply; a large commit's record decides
// which). Reads are retried on another member within the timeout. A full
// cluster fails writes with ErrNoSpace. The tests run a real in-process
// cluster (go.etcd.io/etcd/server/v3/embed): the conformance suite, a
// leader stopped and restarted and a follower lost under a write-and-Sync
// loop, a partition through loopback proxies, and a writer process
// SIGKILLed and replaced by another after its lease expired.
//
// # History and quota
//
// etcd keeps every revision of every key until compacted, and its quota
// (--quota-backend-bytes, 2 GiB by default, 8 GiB the suggested maximum)
// counts the database file, history and free pages included. The writer
// compacts, keeping Options.CompactRetention (2 minutes) of history and
// every open iterator's snapshot (compaction is cluster-wide); freed pages are reused by etcd but given back to the
// file system only by defragmentation (etcdctl defrag). SIZING.md derives
// the bytes per protected TiB of each format from the store's encodings,
// the quota they imply, what to do beyond it, and the next engine (TiKV's
// RawKV) for when a cluster's ceiling is reached.
package etcd
