package store

import (
	"bytes"
	"slices"
	"sync"
	"sync/atomic"
)

// memKV is the in-memory backend: a sorted slice of entries under a
// read-write lock. Values are immutable once stored, so iterators take their
// snapshot by copying entry headers (not values) for their range.
type memKV struct {
	mu      sync.RWMutex
	entries []memEntry
	closed  atomic.Bool
	limits  Limits
}

type memEntry struct {
	key, value []byte
}

// NewMem returns a new, empty in-memory store (the "mem:" URL). It keeps
// nothing across processes; an iterator's snapshot costs memory proportional
// to the number of keys in its range.
func NewMem() KV {
	return &memKV{limits: Limits{MaxKeyBytes: memMaxKey, MaxValueBytes: memMaxValue, MaxBatchBytes: memMaxBatch}}
}

func (m *memKV) search(key []byte) (int, bool) {
	return slices.BinarySearchFunc(m.entries, key, func(e memEntry, k []byte) int { return bytes.Compare(e.key, k) })
}

func (m *memKV) Get(key []byte) ([]byte, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed.Load() {
		return nil, ErrClosed
	}
	i, ok := m.search(key)
	if !ok {
		return nil, ErrNotFound
	}
	return bytes.Clone(m.entries[i].value), nil
}

func (m *memKV) NewIter(lo, hi []byte) (Iterator, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed.Load() {
		return nil, ErrClosed
	}
	i := 0
	if lo != nil {
		i, _ = m.search(lo)
	}
	j := len(m.entries)
	if hi != nil {
		j, _ = m.search(hi)
	}
	if j < i {
		j = i
	}
	return &memIter{kv: m, snap: slices.Clone(m.entries[i:j]), pos: -1}, nil
}

func (m *memKV) NewBatch() Batch { return &memBatch{kv: m} }

func (m *memKV) Limits() Limits { return m.limits }

func (m *memKV) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Swap(true) {
		return ErrClosed
	}
	m.entries = nil
	return nil
}

func (m *memKV) apply(ops []memOp) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return ErrClosed
	}
	for _, op := range ops {
		// Sequential appends (the common bulk case) skip the search.
		if n := len(m.entries); !op.del && (n == 0 || bytes.Compare(m.entries[n-1].key, op.key) < 0) {
			m.entries = append(m.entries, memEntry{op.key, op.value})
			continue
		}
		i, ok := m.search(op.key)
		switch {
		case op.del && ok:
			m.entries = slices.Delete(m.entries, i, i+1)
		case op.del:
		case ok:
			m.entries[i].value = op.value
		default:
			m.entries = slices.Insert(m.entries, i, memEntry{op.key, op.value})
		}
	}
	return nil
}

type memIter struct {
	kv   *memKV
	snap []memEntry
	pos  int
	err  error
	done bool
}

func (it *memIter) Next() bool {
	if it.done {
		return false
	}
	if it.kv.closed.Load() {
		it.err, it.done = ErrClosed, true
		return false
	}
	it.pos++
	if it.pos >= len(it.snap) {
		it.done = true
		return false
	}
	return true
}

func (it *memIter) Key() []byte {
	if it.done || it.pos < 0 {
		return nil
	}
	return it.snap[it.pos].key
}

func (it *memIter) Value() []byte {
	if it.done || it.pos < 0 {
		return nil
	}
	return it.snap[it.pos].value
}

func (it *memIter) Err() error { return it.err }

// Close releases the snapshot; closing twice is harmless.
func (it *memIter) Close() error {
	it.snap, it.done = nil, true
	return nil
}

type memOp struct {
	key, value []byte
	del        bool
}

type memBatch struct {
	kv   *memKV
	ops  []memOp
	size int
	done bool
}

func (b *memBatch) Set(key, value []byte) error {
	if b.done {
		return ErrClosed
	}
	size, err := b.kv.limits.AddOp(b.size, len(key), len(value))
	if err != nil {
		return err
	}
	b.ops = append(b.ops, memOp{key: bytes.Clone(key), value: append([]byte{}, value...)})
	b.size = size
	return nil
}

func (b *memBatch) Delete(key []byte) error {
	if b.done {
		return ErrClosed
	}
	size, err := b.kv.limits.AddOp(b.size, len(key), 0)
	if err != nil {
		return err
	}
	b.ops = append(b.ops, memOp{key: bytes.Clone(key), del: true})
	b.size = size
	return nil
}

func (b *memBatch) Len() int   { return b.size }
func (b *memBatch) Count() int { return len(b.ops) }

func (b *memBatch) Commit(sync bool) error {
	if b.done {
		return ErrClosed
	}
	b.done = true
	ops := b.ops
	b.ops = nil
	return b.kv.apply(ops)
}

func (b *memBatch) Close() error {
	b.done, b.ops = true, nil
	return nil
}
