package store

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Every error returned by this package is prefixed "store: "
// and matches one of these with errors.Is where a condition applies.
var (
	// ErrNotFound reports a missing key, volume, cursor or finding.
	ErrNotFound = errors.New("store: not found")
	// ErrClosed reports use of a closed store, iterator or batch.
	ErrClosed = errors.New("store: closed")
	// ErrTooLarge reports a value or batch beyond the backend's Limits.
	ErrTooLarge = errors.New("store: too large")
	// ErrCorrupt is matched by every error about a stored value that fails to
	// decode: a bad length, version, checksum or field. See *CorruptError.
	ErrCorrupt = errors.New("store: corrupt value")
	// ErrExists reports an attempt to create a volume that already exists.
	ErrExists = errors.New("store: already exists")
	// ErrOutOfRange reports a block range beyond the volume's device size.
	ErrOutOfRange = errors.New("store: block range out of range")
	// ErrMismatch is matched by every *ManifestMismatchError.
	ErrMismatch = errors.New("store: manifest mismatch")
	// ErrUnsupported reports a URL scheme, schema version or option this
	// build does not know.
	ErrUnsupported = errors.New("store: unsupported")
	// ErrInvalid reports a bad argument (length, alignment, name).
	ErrInvalid = errors.New("store: invalid argument")
	// ErrConflict reports a bulk load refused because something else
	// changed or holds its range: an open intent, or a commit to a page the
	// load shares with blocks outside it.
	ErrConflict = errors.New("store: conflict")
	// ErrNotStore reports a path that exists but is not a store: a regular
	// file, a symbolic link, or a directory holding files no store made.
	// Open never writes to it.
	ErrNotStore = errors.New("store: not a store")
	// ErrBusy is matched by every *BusyError: another process (or another
	// open in this one) holds the store.
	ErrBusy = errors.New("store: in use")
	// ErrReadOnly reports a write to a store opened ReadOnly.
	ErrReadOnly = errors.New("store: opened read-only")
	// ErrFailed reports a store whose engine hit a fatal error (a failed
	// write of its own log or manifest): every later call fails with it.
	ErrFailed = errors.New("store: engine failed")
)

// KV is the small key-value interface every storage engine implements. Keys
// are ordered bytewise. Implementations are safe for concurrent use; a single
// Iterator or Batch is not.
//
// Backends translate their own errors: nothing they return wraps an engine's
// types.
type KV interface {
	// Get returns a copy of the value stored under key, or an error matching
	// ErrNotFound.
	Get(key []byte) ([]byte, error)
	// NewIter returns an iterator over the keys in [lo, hi) in ascending
	// order, reading a consistent snapshot taken when NewIter returns. A nil
	// lo starts at the first key; a nil hi runs to the last.
	NewIter(lo, hi []byte) (Iterator, error)
	// NewBatch returns an empty write batch.
	NewBatch() Batch
	// Limits describes the largest value and batch the backend accepts.
	Limits() Limits
	// Close releases the store. Open iterators are closed with it; every
	// later call fails with ErrClosed.
	Close() error
}

// Iterator walks a snapshot of a key range. Call Next before the first Key.
// Key and Value return slices that stay valid only until the next call to
// Next or Close; copy them to keep them.
type Iterator interface {
	Next() bool
	Key() []byte
	Value() []byte
	// Err returns the error that stopped iteration, if any.
	Err() error
	Close() error
}

// Batch accumulates writes that Commit applies atomically: after a crash
// either all of a committed batch is visible or none of it. Set and Delete
// copy their arguments. A batch cannot be reused after Commit.
type Batch interface {
	Set(key, value []byte) error
	Delete(key []byte) error
	// Len is the approximate encoded size of the batch in bytes.
	Len() int
	// Count is the number of operations in the batch.
	Count() int
	// Commit applies the batch. With sync, Commit returns only once the
	// batch (and every batch committed before it) is durable.
	Commit(sync bool) error
	// Close discards an uncommitted batch; it is a no-op after Commit.
	Close() error
}

// Limits describes what a backend accepts, so upper layers can chunk.
type Limits struct {
	MaxKeyBytes   int // largest key
	MaxValueBytes int // largest value
	MaxBatchBytes int // largest Batch.Len at Commit
}

// BatchSizer is an optional capability of a KV: a batch with room for
// about size bytes, sparing the repeated growth (and copying) of a large
// batch's buffer. Tuples uses it where it knows a commit's size.
type BatchSizer interface {
	NewBatchWithSize(size int) Batch
}

func newBatch(kv KV, size int) Batch {
	if s, ok := kv.(BatchSizer); ok {
		return s.NewBatchWithSize(size)
	}
	return kv.NewBatch()
}

// Limits of the mem backend.
const (
	memMaxKey   = 64 << 10
	memMaxValue = 64 << 20
	memMaxBatch = 1 << 30
)

// batchOverhead approximates the per-operation encoding cost in a batch.
const batchOverhead = 16

// AddOp returns the Len of a batch of Len size after a Set of a key and a
// value of these lengths (value 0 for a Delete): size, both lengths and a
// per-operation overhead of 16 bytes. An operation beyond l (its key, its
// value, or the batch with it) is refused with an error matching
// ErrTooLarge. It is the accounting of the mem and pebble backends.
func (l Limits) AddOp(size, key, value int) (int, error) {
	if key > l.MaxKeyBytes {
		return size, fmt.Errorf("%w: key of %d bytes exceeds %d", ErrTooLarge, key, l.MaxKeyBytes)
	}
	if value > l.MaxValueBytes {
		return size, fmt.Errorf("%w: value of %d bytes exceeds %d", ErrTooLarge, value, l.MaxValueBytes)
	}
	if size+key+value+batchOverhead > l.MaxBatchBytes {
		return size, fmt.Errorf("%w: batch would exceed %d bytes", ErrTooLarge, l.MaxBatchBytes)
	}
	return size + key + value + batchOverhead, nil
}

// OpenOptions say how OpenWith treats a store that does not exist yet and
// whether it may write. Each backend documents what it makes of them; mem:
// and etcd:// ignore them.
type OpenOptions struct {
	// Create makes a new, empty store where there is none: for pebble, a
	// missing directory (created with mode 0700; its files get 0600) or an
	// empty one. Without it a missing store fails with an error matching
	// ErrNotFound and nothing is created. Default false. (mem: always
	// creates.)
	Create bool
	// ReadOnly opens the store for reading only: every write fails with
	// ErrReadOnly and no file of the store changes (Pebble replays its log
	// in memory). Its lock is taken shared, so readers can open a store
	// together, and a user who may only read the store's files can open
	// it; a writer excludes them (ErrBusy). Default false.
	ReadOnly bool
	// CacheBytes, if positive, sizes Pebble's block cache (the store's
	// pages as read from its tables) instead of the 64 MiB default; other
	// backends ignore it. A long-running server that should stay small
	// (difctl serve) gives a few MiB: the operating system's page cache
	// still holds the tables.
	CacheBytes int64
	// MemTableBytes, if positive, sizes Pebble's memtables (the writes not
	// yet flushed to a table, held in memory until then) instead of the
	// 64 MiB default, 1 MiB to less than 4 GiB; other backends ignore it. The
	// resident set of a process that writes grows by up to this much
	// (twice, while one memtable is flushed).
	MemTableBytes int64
	// OnCommit, if not nil, is called after every batch commit of the
	// store, whatever its backend (see ObserveCommits). Default nil.
	OnCommit func(CommitEvent)
}

// defaultScheme is the scheme of a URL that has none: a plain path is a
// Pebble store, opened by the backend store/pebble registers.
const defaultScheme = "pebble"

// Open opens a store by URL, creating it if it does not exist (OpenWith
// with Create):
//
//	pebble:PATH   Pebble database in directory PATH (store/pebble)
//	mem:          a new, empty in-memory store
//	PATH          same as pebble:PATH when PATH has no scheme
//	SCHEME:...    a backend registered with Register (etcd:// with store/etcd)
//
// The pebble backend is in package store/pebble, which registers it when a
// program imports it (package blockdev does, so every program that uses
// volumes has it). Without it, pebble: URLs and plain paths fail with an
// error matching ErrUnsupported, as unknown schemes do.
func Open(url string) (KV, error) { return OpenWith(url, OpenOptions{Create: true}) }

// OpenWith opens a store by URL (see Open) with the options o. The backend
// of the URL's scheme gets the URL as given (a plain path, for pebble) and
// o.
func OpenWith(url string, o OpenOptions) (KV, error) {
	kv, err := openWith(url, o)
	if err != nil || o.OnCommit == nil {
		return kv, err
	}
	return ObserveCommits(kv, o.OnCommit), nil
}

func openWith(url string, o OpenOptions) (KV, error) {
	scheme, rest, ok := strings.Cut(url, ":")
	if !ok || strings.ContainsAny(scheme, `/\.`) || len(scheme) < 2 {
		// No scheme (or a Windows drive letter): a plain path.
		scheme, rest = defaultScheme, url
	}
	if scheme == "mem" {
		if rest != "" {
			return nil, fmt.Errorf("%w: open %q: mem: takes no path", ErrInvalid, url)
		}
		return NewMem(), nil
	}
	if open, ok := registered(scheme); ok {
		return open(url, o)
	}
	if scheme == defaultScheme {
		return nil, fmt.Errorf("%w: open %q: the pebble backend is not linked (import github.com/difctl/difctl/store/pebble)", ErrUnsupported, url)
	}
	return nil, fmt.Errorf("%w: open %q: unknown scheme %q (want pebble: or mem:)", ErrUnsupported, url, scheme)
}
