package pebble

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/difctl/difctl/store"
)

func init() {
	store.Register("pebble", func(url string, o store.OpenOptions) (store.KV, error) {
		// url is "pebble:DIR", or DIR itself: a plain path, store.Open's
		// default (a plain path never starts with "pebble:", which is the
		// scheme).
		dir, _ := strings.CutPrefix(url, "pebble:")
		if dir == "" {
			return nil, fmt.Errorf("%w: open %q: empty pebble path", store.ErrInvalid, url)
		}
		return Open(dir, o)
	})
}

// Open opens the store in the directory dir with the options o, as
// store.OpenWith("pebble:"+dir, o) does. See the package documentation for
// what it refuses.
func Open(dir string, o store.OpenOptions) (store.KV, error) { return open(dir, nil, o) }

// OpenOnFS opens (creating if needed) a store in dir on the file system fs,
// with the options of store.Open("pebble:"+dir).
//
// It is meant for crash tests, in this package and in the packages built on
// it: on a vfs.NewCrashableMem file system, fs.CrashClone yields the state a
// crash would leave (only synced data, or a chosen fraction of the rest),
// and a store opened on the clone shows what survived. On such a file
// system the store keeps no state file (lost commits are not detected) and
// takes no lock beyond Pebble's own. Programs use Open.
func OpenOnFS(dir string, fs vfs.FS) (store.KV, error) {
	return open(dir, fs, store.OpenOptions{Create: true})
}

// limits are a Pebble store's. Pebble's hard limit is 4 GiB per batch;
// staying far below it bounds memory.
var limits = store.Limits{MaxKeyBytes: 64 << 10, MaxValueBytes: 64 << 20, MaxBatchBytes: 1 << 30}

// kv is a store.KV on Pebble.
//
// mu guards the handle against Close: every operation holds it for reading,
// Close for writing, so Pebble (which panics on use after close) is never
// reached once closed.
type kv struct {
	mu     sync.RWMutex
	db     *pebble.DB
	path   string
	closed bool
	iters  map[*iter]struct{}
	limits store.Limits

	fs       vfs.FS
	opts     *pebble.Options // as opened, defaults filled in: sstable writer options
	bulkSeq  atomic.Uint64   // names bulk-load temporary directories
	bulkSize int64           // bytes of keys and values per bulk-load sstable

	fault    *faultLog // Pebble's fatal and corruption reports
	readOnly bool
	osFS     bool          // on the operating system's file system: keeps stateFile
	gen      atomic.Uint64 // the commit counter (see state.go)
	loads    atomic.Uint64 // numbers bulk loads (see state.go)
	commitMu sync.Mutex    // orders the counter's values as their commits
	// state records the synced watermark (state.go); nil for read-only
	// stores and those not on the operating system's file system.
	state      *stateWriter
	logsAtOpen []logFile // the newest write-ahead log before Pebble opened the store
}

// engineOptions returns the options used for every Pebble store. The
// workload is unusual for an LSM: values are whole tuple pages of 8-20 KiB
// (1,024 tuples plus sector checksums), keys are few and written in
// ascending runs, and reads are dominated by long range scans.
func engineOptions(fs vfs.FS) *pebble.Options {
	o := &pebble.Options{
		FS: fs,
		// Newest on-disk format: columnar blocks, best scan speed.
		FormatMajorVersion: pebble.FormatNewest,
		// 64 MiB block cache (default 8 MiB): holds ~5,000 pages, the
		// tuples of 20 GiB of 4 KiB blocks, so a verify rereading a recent
		// region is served from memory.
		CacheSize: 64 << 20,
		// 64 MiB memtables (default 4 MiB): a bulk protect writes hundreds of
		// MiB of pages; large memtables mean fewer, larger flushes and fewer
		// L0 files. Four may queue before writes stall.
		MemTableSize:                64 << 20,
		MemTableStopWritesThreshold: 4,
		// Compact L0 at 4 sublevels (the default) but only stall writers at
		// 32 (default 12): bulk sequential loads produce non-overlapping L0
		// files that compaction moves down cheaply, so do not throttle them.
		L0CompactionThreshold: 4,
		L0StopWritesThreshold: 32,
		// Base level 256 MiB (default 64 MiB) with 16 MiB L0 files (default
		// 2 MiB): fewer, larger files for large sequential values.
		LBaseMaxBytes: 256 << 20,
		// Smooth write-back of sstables and of the WAL in 1 MiB steps
		// (defaults 512 KiB and off) so a bulk load does not dump gigabytes
		// of dirty pages at once. Durability still comes only from
		// Commit(sync=true), which syncs the WAL before returning.
		BytesPerSync:    1 << 20,
		WALBytesPerSync: 1 << 20,
		// Up to min(4, GOMAXPROCS) concurrent compactions when behind.
		CompactionConcurrencyRange: func() (int, int) { return 1, min(4, max(1, runtime.GOMAXPROCS(0))) },
	}
	o.TargetFileSizes[0] = 16 << 20
	for i := range o.Levels {
		l := &o.Levels[i]
		// 32 KiB data blocks (default 4 KiB): a page value is larger than
		// 4 KiB, so small blocks would hold one value each and bloat the
		// index; 32 KiB holds 2-4 pages and scans read few, large blocks.
		l.BlockSize = 32 << 10
		l.IndexBlockSize = 256 << 10
		// No bloom filters: point gets are rare (manifest, the edges of a
		// partial page write) and scans cannot use them.
		l.FilterPolicy = pebble.NoFilterPolicy
	}
	// No compression (dbCompression says why).
	o.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return dbCompression })
	return o
}

// open opens a Pebble store in dir with the options o (see Open). fs nil
// means the operating system's file system; tests pass a crashable
// vfs.MemFS.
func open(dir string, fs vfs.FS, o store.OpenOptions) (store.KV, error) {
	if o.MemTableBytes > 0 && (o.MemTableBytes < 1<<20 || o.MemTableBytes >= 4<<30) {
		return nil, fmt.Errorf("%w: open %q: memtable size %d, want 1 MiB to less than 4 GiB", store.ErrInvalid, dir, o.MemTableBytes)
	}
	osFS := fs == nil
	if osFS {
		fs = storeFS{FS: vfs.Default, dir: dir, readOnly: o.ReadOnly}
	}
	exists, err := checkStoreDir(fs, osFS, dir, o)
	if err != nil {
		return nil, err
	}
	var logs []logFile
	if osFS && exists {
		if err := checkLogTail(dir); err != nil {
			return nil, err
		}
		logs = newestLogFile(dir)
	}
	fault := &faultLog{dir: dir}
	opts := engineOptions(fs)
	if o.CacheBytes > 0 {
		opts.CacheSize = o.CacheBytes
	}
	if o.MemTableBytes > 0 {
		opts.MemTableSize = uint64(o.MemTableBytes)
	}
	opts.Logger = fault
	opts.EventListener = fault.listener()
	opts.ErrorIfNotExists = exists
	opts.ReadOnly = o.ReadOnly
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, openError(dir, fault, err)
	}
	opts = opts.Clone()
	opts.EnsureDefaults()
	p := &kv{
		db:       db,
		path:     dir,
		iters:    make(map[*iter]struct{}),
		limits:   limits,
		fs:       fs,
		opts:     opts,
		bulkSize: bulkFileBytes,
		fault:    fault,
		readOnly: o.ReadOnly,
		osFS:     osFS,

		logsAtOpen: logs,
	}
	if err := p.checkState(); err != nil {
		p.closeDB()
		return nil, err
	}
	if o.ReadOnly {
		return p, nil
	}
	// Bulk loads that never finished (a crash, a killed process) left their
	// sstables here; they were never ingested, so nothing refers to them.
	if err := removeStaleBulk(fs, dir); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open pebble:%s: remove stale bulk-load files: %v", dir, err)
	}
	return p, nil
}

// removeStaleBulk removes what unfinished bulk loads left in the store:
// only the tables they name N/NNNNNN.sst and their directories, never a
// file the store did not make.
func removeStaleBulk(fs vfs.FS, dir string) error {
	tmp := fs.PathJoin(dir, bulkTempDir)
	subs, err := fs.List(tmp)
	if err != nil {
		return nil // none
	}
	for _, sub := range subs {
		if !allDigits(sub) {
			continue
		}
		sd := fs.PathJoin(tmp, sub)
		files, err := fs.List(sd)
		if err != nil {
			continue
		}
		for _, f := range files {
			if strings.HasSuffix(f, ".sst") && allDigits(strings.TrimSuffix(f, ".sst")) {
				if err := fs.Remove(fs.PathJoin(sd, f)); err != nil {
					return err
				}
			}
		}
		_ = fs.Remove(sd) // fails, harmlessly, if anything else is in it
	}
	_ = fs.Remove(tmp)
	return nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// translate turns a Pebble error into one of ours, never wrapping Pebble's.
// A fatal error Pebble reported meanwhile wins: it is returned even when the
// call itself seemed to succeed (Pebble goes on after its logger's Fatalf).
func (p *kv) translate(op string, err error) error {
	if ferr := p.fault.fatal(); ferr != nil {
		return ferr
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pebble.ErrNotFound):
		return store.ErrNotFound
	case errors.Is(err, pebble.ErrClosed):
		return store.ErrClosed
	case errors.Is(err, pebble.ErrReadOnly):
		return fmt.Errorf("%w: pebble:%s: %s", store.ErrReadOnly, p.path, op)
	case pebble.IsCorruptionError(err):
		return &store.CorruptFileError{Path: p.fault.corruptPath(), Reason: op + ": " + engineText(err)}
	case errors.Is(err, fs.ErrNotExist):
		return &store.CorruptFileError{Path: p.fault.corruptPath(), Reason: op + ": missing file: " + oneLineText(err.Error())}
	default:
		return fmt.Errorf("store: pebble:%s: %s: %s", p.path, op, err.Error())
	}
}

// recoverPanic turns a panic of Pebble's inside a call into the store's
// sticky failure, returned in *err: a damaged file can reach code that
// panics, and a library must return an error instead.
func (p *kv) recoverPanic(op string, err *error) {
	if r := recover(); r != nil {
		p.fault.setFatal(&store.CorruptFileError{Path: p.fault.corruptPath(), Reason: fmt.Sprintf("%s: engine panic: %v", op, r)})
		*err = p.fault.fatal()
	}
}

func (p *kv) Get(key []byte) (_ []byte, err error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return nil, store.ErrClosed
	}
	if err := p.fault.fatal(); err != nil {
		return nil, err
	}
	if reserved(key) {
		return nil, store.ErrNotFound
	}
	defer p.recoverPanic("get", &err)
	v, closer, err := p.db.Get(key)
	if err != nil {
		return nil, p.translate("get", err)
	}
	out := bytes.Clone(v)
	if out == nil {
		out = []byte{}
	}
	return out, p.translate("get", closer.Close())
}

func (p *kv) NewIter(lo, hi []byte) (_ store.Iterator, err error) {
	p.mu.Lock() // exclusive: registers the iterator
	defer p.mu.Unlock()
	if p.closed {
		return nil, store.ErrClosed
	}
	if err := p.fault.fatal(); err != nil {
		return nil, err
	}
	defer p.recoverPanic("iterate", &err)
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: bytes.Clone(lo), UpperBound: bytes.Clone(clampHi(hi))})
	if err != nil {
		return nil, p.translate("iterate", err)
	}
	pi := &iter{kv: p, it: it}
	p.iters[pi] = struct{}{}
	return pi, nil
}

func (p *kv) NewBatch() store.Batch { return p.NewBatchWithSize(0) }

// NewBatchWithSize implements store.BatchSizer: a batch with room for
// about size bytes, sparing the repeated growth (and copying) of a large
// batch's buffer.
func (p *kv) NewBatchWithSize(size int) store.Batch {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return &batch{kv: p}
	}
	return &batch{kv: p, b: p.db.NewBatchWithSize(min(size, p.limits.MaxBatchBytes))}
}

func (p *kv) Limits() store.Limits { return p.limits }

func (p *kv) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return store.ErrClosed
	}
	p.closed = true
	iters := p.iters
	p.iters = nil
	p.mu.Unlock()
	for it := range iters {
		it.closeLocked(false)
	}
	var flushErr error
	// (With Pebble's invariant checks on, as under the race detector, a
	// flush whose first key is the empty key trips a false assertion in a
	// background goroutine; difctl's own keys are never empty, and a store
	// holding one keeps it in the log there.)
	if !p.readOnly && p.fault.fatal() == nil && !(invariants && p.hasEmptyKey()) {
		// Leave nothing in the write-ahead log: Pebble cannot tell a damaged
		// last record of its log from a write torn by a crash and drops it
		// silently, whereas a table's blocks are checksummed and its size is
		// recorded, so damage there is reported.
		flushErr = p.flush()
		if flushErr == nil {
			flushErr = p.closeState()
		}
	}
	if p.state != nil {
		p.state.stop() // after a failed flush: the store stays marked open
	}
	err := p.closeDB()
	if flushErr != nil {
		return p.translate("flush", flushErr)
	}
	return err
}

func (p *kv) hasEmptyKey() bool {
	_, closer, err := p.db.Get([]byte{})
	if err == nil {
		closer.Close()
	}
	return err == nil
}

func (p *kv) flush() (err error) {
	defer p.recoverPanic("flush", &err)
	return p.db.Flush()
}

func (p *kv) closeDB() (err error) {
	defer p.recoverPanic("close", &err)
	return p.translate("close", p.db.Close())
}

type iter struct {
	mu      sync.Mutex // against a concurrent store Close
	kv      *kv
	it      *pebble.Iterator
	started bool
	valid   bool
	err     error
}

func (it *iter) Next() (ok bool) {
	it.mu.Lock()
	defer it.mu.Unlock()
	defer func() {
		var err error
		it.kv.recoverPanic("iterate", &err)
		if err != nil {
			it.err, it.valid, ok = err, false, false
		}
	}()
	if it.it == nil {
		if it.err == nil {
			it.err = store.ErrClosed
		}
		it.valid = false
		return false
	}
	if !it.started {
		it.started = true
		it.valid = it.it.First()
	} else {
		it.valid = it.it.Next()
	}
	if !it.valid {
		if err := it.it.Error(); err != nil {
			it.err = it.kv.translate("iterate", err)
		}
	}
	return it.valid
}

func (it *iter) Key() []byte {
	if !it.valid {
		return nil
	}
	return it.it.Key()
}

func (it *iter) Value() (v []byte) {
	if !it.valid {
		return nil
	}
	defer func() {
		var err error
		it.kv.recoverPanic("read value", &err)
		if err != nil {
			it.err, v = err, nil
		}
	}()
	v, err := it.it.ValueAndErr()
	if err != nil {
		it.err = it.kv.translate("read value", err)
		return nil
	}
	return v
}

func (it *iter) Err() error {
	it.mu.Lock()
	defer it.mu.Unlock()
	return it.err
}

// Close closes the iterator; closing twice is harmless.
func (it *iter) Close() error {
	return it.closeLocked(true)
}

func (it *iter) closeLocked(unregister bool) error {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.it == nil {
		return nil
	}
	err := it.it.Close()
	it.it, it.valid = nil, false
	if !unregister {
		// The store is closing underneath us.
		if it.err == nil {
			it.err = store.ErrClosed
		}
		return nil
	}
	it.kv.mu.Lock()
	delete(it.kv.iters, it)
	it.kv.mu.Unlock()
	return it.kv.translate("close iterator", err)
}

type batch struct {
	kv   *kv
	b    *pebble.Batch // nil once committed or closed
	size int
}

func (b *batch) Set(key, value []byte) error {
	if b.b == nil {
		return store.ErrClosed
	}
	size, err := b.kv.limits.AddOp(b.size, len(key), len(value))
	if err != nil {
		return err
	}
	if reserved(key) {
		return fmt.Errorf("%w: key %q is reserved by the store", store.ErrInvalid, key)
	}
	b.size = size
	return b.kv.translate("batch set", b.b.Set(key, value, nil))
}

func (b *batch) Delete(key []byte) error {
	if b.b == nil {
		return store.ErrClosed
	}
	size, err := b.kv.limits.AddOp(b.size, len(key), 0)
	if err != nil {
		return err
	}
	if reserved(key) {
		return fmt.Errorf("%w: key %q is reserved by the store", store.ErrInvalid, key)
	}
	b.size = size
	return b.kv.translate("batch delete", b.b.Delete(key, nil))
}

func (b *batch) Len() int { return b.size }

func (b *batch) Count() int {
	if b.b == nil {
		return 0
	}
	return int(b.b.Count())
}

func (b *batch) Commit(sync bool) (err error) {
	if b.b == nil {
		return store.ErrClosed
	}
	raw := b.b
	b.b = nil
	b.kv.mu.RLock()
	defer b.kv.mu.RUnlock()
	if b.kv.closed {
		raw.Close()
		return store.ErrClosed
	}
	if b.kv.readOnly {
		raw.Close()
		return fmt.Errorf("%w: pebble:%s: commit", store.ErrReadOnly, b.kv.path)
	}
	if err := b.kv.fault.fatal(); err != nil {
		raw.Close()
		return err
	}
	defer b.kv.recoverPanic("commit", &err)
	b.kv.commitMu.Lock()
	defer b.kv.commitMu.Unlock()
	if err := raw.Set(genKey, b.kv.genValue(), nil); err != nil {
		raw.Close()
		return b.kv.translate("commit", err)
	}
	g := b.kv.gen.Load()
	wo := pebble.NoSync
	if sync {
		wo = pebble.Sync
	}
	err = raw.Commit(wo)
	raw.Close()
	if err == nil && sync && b.kv.state != nil {
		b.kv.state.note(g)
	}
	return b.kv.translate("commit", err)
}

func (b *batch) Close() error {
	if b.b == nil {
		return nil
	}
	err := b.b.Close()
	b.b = nil
	return b.kv.translate("close batch", err)
}

// dbCompression is the block compression of tables Pebble flushes and
// compacts: none. Tuple pages are half random (16-bit guards, CRC-32C sums)
// and half predictable (app and ref tags, the written bitmap): zstd keeps
// two thirds of their bytes, slower than the disk writes them, and every
// scan would pay decompression; writes and reads gained nothing measurable
// (docs/performance.md, "Constants measured").
var dbCompression = pebble.DBCompressionNone
