package store

import (
	"bytes"
	"errors"
	"fmt"
)

// BulkLoader is an optional capability of a KV: loading a large run of
// ascending keys without the write-ahead log and memtable of the normal
// write path. Pebble (store/pebble) implements it by building sstables
// and ingesting them. Callers use NewBulkWriter, which falls back to
// batched commits for backends without it.
type BulkLoader interface {
	NewBulkWriter() (BulkWriter, error)
}

// BulkWriter loads a run of keys in strictly increasing order. Nothing it
// writes is visible until Finish, which makes all of it visible at once: a
// crash or an Abort before Finish leaves the store as it was. Keys it writes
// replace any stored values (the loaded value is newer than every earlier
// commit); keys it does not write are untouched.
//
// A BulkWriter is not safe for concurrent use. After Finish or Abort it
// refuses use with ErrClosed. An error from Set leaves the writer failed:
// Finish returns that error and writes nothing; call Abort to release it.
type BulkWriter interface {
	// Set adds key=value. Keys must be strictly increasing (bytewise) across
	// the writer's life; a key not greater than the previous one fails with
	// ErrInvalid. Set copies its arguments.
	Set(key, value []byte) error
	// Finish makes everything set visible atomically. With sync, Finish
	// returns only once it, and every batch committed before it, is
	// durable. (Pebble's ingestion is always durable; sync=false may still
	// sync.)
	Finish(sync bool) error
	// Abort discards everything set and releases temporary files. It is a
	// no-op after Finish or a previous Abort.
	Abort() error
}

// NewBulkWriter returns a bulk writer on kv: the backend's own if kv
// implements BulkLoader, else an emulation that stages the keys in memory
// and commits them at Finish in batches sized to kv's Limits (atomic only
// when they fit one batch; memory proportional to the load).
func NewBulkWriter(kv KV) (BulkWriter, error) {
	if bl, ok := kv.(BulkLoader); ok {
		return bl.NewBulkWriter()
	}
	// Probe for a closed store now rather than at Finish.
	if _, err := kv.Get(nil); err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	return &batchBulkWriter{kv: kv, limits: kv.Limits()}, nil
}

// CheckBulkSet returns the error of a BulkWriter's Set of key and value
// after the key last (none when first): one matching ErrInvalid unless key
// sorts after last, one matching ErrTooLarge for a key or value beyond l,
// nil otherwise. NewBulkWriter's batched emulation and store/pebble's bulk
// writer check every Set with it.
func (l Limits) CheckBulkSet(last, key, value []byte, first bool) error {
	if !first && bytes.Compare(key, last) <= 0 {
		return fmt.Errorf("%w: bulk key %x not after %x", ErrInvalid, key, last)
	}
	if len(key) > l.MaxKeyBytes {
		return fmt.Errorf("%w: key of %d bytes exceeds %d", ErrTooLarge, len(key), l.MaxKeyBytes)
	}
	if len(value) > l.MaxValueBytes {
		return fmt.Errorf("%w: value of %d bytes exceeds %d", ErrTooLarge, len(value), l.MaxValueBytes)
	}
	return nil
}

// batchBulkWriter emulates BulkWriter with ordinary batches.
type batchBulkWriter struct {
	kv     KV
	limits Limits
	ops    []memEntry // staged copies
	last   []byte
	err    error // sticky Set failure
	done   bool
}

func (w *batchBulkWriter) Set(key, value []byte) error {
	if w.done {
		return ErrClosed
	}
	if w.err != nil {
		return w.err
	}
	if err := w.limits.CheckBulkSet(w.last, key, value, len(w.ops) == 0); err != nil {
		w.err = err
		return err
	}
	e := memEntry{key: bytes.Clone(key), value: append([]byte{}, value...)}
	w.ops = append(w.ops, e)
	w.last = e.key
	return nil
}

func (w *batchBulkWriter) Finish(sync bool) error {
	if w.done {
		return ErrClosed
	}
	w.done = true
	ops := w.ops
	w.ops = nil
	if w.err != nil {
		return w.err
	}
	budget := w.limits.MaxBatchBytes / 2
	for len(ops) > 0 {
		b := w.kv.NewBatch()
		n := 0
		for n < len(ops) && (n == 0 || b.Len()+len(ops[n].key)+len(ops[n].value)+batchOverhead <= budget) {
			if err := b.Set(ops[n].key, ops[n].value); err != nil {
				b.Close()
				return err
			}
			n++
		}
		ops = ops[n:]
		if err := b.Commit(sync && len(ops) == 0); err != nil {
			return err
		}
	}
	return nil
}

func (w *batchBulkWriter) Abort() error {
	w.done, w.ops = true, nil
	return nil
}
