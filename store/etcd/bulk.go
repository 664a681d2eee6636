package etcd

import (
	"bytes"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/difctl/difctl/store"
)

// NewBulkWriter implements store.BulkLoader: keys stream into staged keys
// of a new transaction id as they come (Options.InFlight transactions in
// flight, each within etcd's limits), so memory stays bounded whatever the
// load; Finish writes the commit record, which makes the whole load visible
// at once, then applies and retires it like a large commit.
func (k *kv) NewBulkWriter() (store.BulkWriter, error) {
	if k.closed.Load() {
		return nil, store.ErrClosed
	}
	if k.o.ReadOnly {
		return nil, fmt.Errorf("%w: %s: bulk load", store.ErrReadOnly, k.t)
	}
	txid := k.newTxid()
	return &bulk{k: k, txid: txid, sp: k.stageTxPrefix(txid), st: k.newStager("bulk-stage")}, nil
}

type bulk struct {
	k     *kv
	txid  string
	sp    string
	st    *stager
	last  []byte
	count int
	err   error
	done  bool
}

func (b *bulk) Set(key, value []byte) error {
	if b.done {
		return store.ErrClosed
	}
	if b.err != nil {
		return b.err
	}
	l := b.k.limits
	switch {
	case b.count > 0 && bytes.Compare(key, b.last) <= 0:
		b.err = fmt.Errorf("%w: bulk key %x not after %x", store.ErrInvalid, key, b.last)
	case len(key) > l.MaxKeyBytes:
		b.err = fmt.Errorf("%w: key of %d bytes exceeds %d", store.ErrTooLarge, len(key), l.MaxKeyBytes)
	case len(value) > l.MaxValueBytes:
		b.err = fmt.Errorf("%w: value of %d bytes exceeds %d", store.ErrTooLarge, len(value), l.MaxValueBytes)
	}
	if b.err != nil {
		return b.err
	}
	if err := b.st.put(b.sp+string(key), stagedValue(bop{value: value})); err != nil {
		b.err = err
		return err
	}
	b.last = append(b.last[:0], key...)
	b.count++
	return nil
}

func (b *bulk) Finish(sync bool) error {
	if b.done {
		return store.ErrClosed
	}
	if b.err != nil {
		b.Abort()
		return b.err
	}
	b.done = true
	k := b.k
	if err := b.st.wait(); err != nil {
		k.dropStaged(b.txid)
		return err
	}
	if k.closed.Load() {
		return store.ErrClosed
	}
	if b.count == 0 {
		return nil
	}
	k.commitMu.Lock()
	defer k.commitMu.Unlock()
	if err := k.settle(); err != nil {
		k.dropStaged(b.txid)
		return err
	}
	if err := k.write("commit-record", []clientv3.Op{clientv3.OpPut(k.commitPrefix()+b.txid, fmt.Sprint(b.count))}); err != nil {
		k.dirty.Store(true)
		return err
	}
	k.dirty.Store(true)
	if err := k.applyStaged(b.txid); err != nil {
		return fmt.Errorf("store: etcd: %s: bulk load is in (its record is durable) but applying it failed; it is finished before the next commit or at the next open: %w", k.t, err)
	}
	if err := k.retire(b.txid); err != nil {
		return err
	}
	k.dirty.Store(false)
	return nil
}

// Abort drops what was staged (best effort: the next Open removes staged
// keys without a commit record).
func (b *bulk) Abort() error {
	if b.done {
		return nil
	}
	b.done = true
	b.st.wait()
	if !b.k.closed.Load() {
		b.k.dropStaged(b.txid)
	}
	return nil
}

// Sent returns the bytes of staged keys and values the cluster has
// acknowledged so far, for progress.
func (b *bulk) Sent() int64 {
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	return b.st.sent
}
