package etcd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/difctl/difctl/store"
)

// opOverhead approximates the encoded cost of one operation in a request
// beyond its key and value (protobuf framing of RequestOp and PutRequest).
const opOverhead = 16

type bop struct {
	key, value []byte
	del        bool
}

type batch struct {
	k     *kv
	ops   []bop
	size  int
	count int
	done  bool
}

func (k *kv) NewBatch() store.Batch { return &batch{k: k} }

func (b *batch) check(key, value int) error {
	l := b.k.limits
	switch {
	case key > l.MaxKeyBytes:
		return fmt.Errorf("%w: key of %d bytes exceeds %d", store.ErrTooLarge, key, l.MaxKeyBytes)
	case value > l.MaxValueBytes:
		return fmt.Errorf("%w: value of %d bytes exceeds %d (etcd request limit)", store.ErrTooLarge, value, l.MaxValueBytes)
	case b.size+key+value+opOverhead > l.MaxBatchBytes:
		return fmt.Errorf("%w: batch would exceed %d bytes", store.ErrTooLarge, l.MaxBatchBytes)
	}
	return nil
}

func (b *batch) Set(key, value []byte) error {
	if b.done {
		return store.ErrClosed
	}
	if err := b.check(len(key), len(value)); err != nil {
		return err
	}
	b.ops = append(b.ops, bop{key: bytes.Clone(key), value: append([]byte{}, value...)})
	b.size += len(key) + len(value) + opOverhead
	b.count++
	return nil
}

func (b *batch) Delete(key []byte) error {
	if b.done {
		return store.ErrClosed
	}
	if err := b.check(len(key), 0); err != nil {
		return err
	}
	b.ops = append(b.ops, bop{key: bytes.Clone(key), del: true})
	b.size += len(key) + opOverhead
	b.count++
	return nil
}

func (b *batch) Len() int   { return b.size }
func (b *batch) Count() int { return b.count }

func (b *batch) Close() error {
	b.done, b.ops = true, nil
	return nil
}

// Commit applies the batch: in one etcd transaction when it fits, else by
// the staged protocol of the package documentation. Every commit is durable
// on a quorum when it returns, whatever sync says.
func (b *batch) Commit(sync bool) error {
	if b.done {
		return store.ErrClosed
	}
	b.done = true
	ops := dedupe(b.ops)
	b.ops = nil
	k := b.k
	if k.closed.Load() {
		return store.ErrClosed
	}
	if len(ops) == 0 {
		return nil
	}
	if k.o.ReadOnly {
		return fmt.Errorf("%w: %s: commit", store.ErrReadOnly, k.t)
	}
	k.commitMu.Lock()
	defer k.commitMu.Unlock()
	if err := k.settle(); err != nil {
		return err
	}
	bytes := 0
	for _, op := range ops {
		bytes += len(k.base) + 1 + len(op.key) + len(op.value) + opOverhead
	}
	if len(ops) <= k.o.MaxTxnOps && bytes <= k.reqMax {
		eops := make([]clientv3.Op, len(ops))
		for i, op := range ops {
			eops[i] = k.dataOp(op)
		}
		return k.write("batch", eops)
	}
	return k.largeCommit(ops)
}

// dedupe keeps the last operation on each key (etcd refuses a transaction
// that names a key twice), in first-seen order.
func dedupe(ops []bop) []bop {
	last := make(map[string]int, len(ops))
	for i, op := range ops {
		last[string(op.key)] = i
	}
	if len(last) == len(ops) {
		return ops
	}
	out := ops[:0:0]
	for i, op := range ops {
		if last[string(op.key)] == i {
			out = append(out, op)
		}
	}
	return out
}

func (k *kv) dataOp(op bop) clientv3.Op {
	if op.del {
		return clientv3.OpDelete(k.dataKey(op.key))
	}
	return clientv3.OpPut(k.dataKey(op.key), string(op.value))
}

func stagedValue(op bop) string {
	if op.del {
		return string([]byte{stagedDel})
	}
	return string(append([]byte{stagedSet}, op.value...))
}

// largeCommit commits ops beyond one transaction, atomically as readers and
// a crash see it: stage, commit record, apply, clean up. Caller holds
// commitMu.
func (k *kv) largeCommit(ops []bop) error {
	txid := k.newTxid()
	sp := k.stageTxPrefix(txid)
	st := k.newStager("stage")
	for _, op := range ops {
		if err := st.put(sp+string(op.key), stagedValue(op)); err != nil {
			break
		}
	}
	if err := st.wait(); err != nil {
		k.dropStaged(txid)
		return err
	}
	// The commit point: one key, written last.
	if err := k.write("commit-record", []clientv3.Op{clientv3.OpPut(k.commitPrefix()+txid, fmt.Sprint(len(ops)))}); err != nil {
		// Not acknowledged: it may still be in. settle resolves it
		// before the next commit either way.
		k.dirty.Store(true)
		return err
	}
	k.dirty.Store(true)
	ap := k.newStager("apply")
	for _, op := range ops {
		var err error
		if op.del {
			err = ap.add(clientv3.OpDelete(k.dataKey(op.key)), len(k.base)+1+len(op.key))
		} else {
			err = ap.add(clientv3.OpPut(k.dataKey(op.key), string(op.value)), len(k.base)+1+len(op.key)+len(op.value))
		}
		if err != nil {
			break
		}
	}
	if err := ap.wait(); err != nil {
		return fmt.Errorf("store: etcd: %s: commit is in (its record is durable) but applying it failed; it is finished before the next commit or at the next open: %w", k.t, err)
	}
	if err := k.retire(txid); err != nil {
		return err
	}
	k.dirty.Store(false)
	return nil
}

// retire deletes a fully applied commit's record and its staged keys in
// one transaction.
func (k *kv) retire(txid string) error {
	sp := k.stageTxPrefix(txid)
	return k.write("retire", []clientv3.Op{
		clientv3.OpDelete(k.commitPrefix() + txid),
		clientv3.OpDelete(sp, clientv3.WithRange(clientv3.GetPrefixRangeEnd(sp))),
	})
}

// dropStaged removes the staged keys of a commit that never got its record
// (best effort: open removes leftovers anyway).
func (k *kv) dropStaged(txid string) {
	sp := k.stageTxPrefix(txid)
	k.write("drop-staged", []clientv3.Op{clientv3.OpDelete(sp, clientv3.WithRange(clientv3.GetPrefixRangeEnd(sp)))})
}

// settle finishes, before a commit, a large commit that an earlier failure
// left recorded but not applied. Caller holds commitMu.
func (k *kv) settle() error {
	if !k.dirty.Load() {
		return nil
	}
	if err := k.recover(); err != nil {
		return err
	}
	k.dirty.Store(false)
	return nil
}

// recover applies every commit record found (oldest first) from its staged
// keys, retires it, and removes staged keys that have no record (a commit
// or bulk load that never reached its commit point). Run at Open and by
// settle; never while a large commit or bulk Finish of this store runs.
func (k *kv) recover() error {
	var resp *clientv3.GetResponse
	err := k.retryRead("recover: list commits", func(ctx context.Context) (err error) {
		resp, err = k.cli.Get(ctx, k.commitPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
		return err
	})
	if err != nil {
		return err
	}
	for _, c := range resp.Kvs {
		txid := string(c.Key[len(k.commitPrefix()):])
		if err := k.applyStaged(txid); err != nil {
			return err
		}
		if err := k.retire(txid); err != nil {
			return err
		}
	}
	// Leftover staging of loads in progress in this store would be lost
	// here: recover runs under commitMu, and open loads stage outside it,
	// so only remove staging at Open.
	return nil
}

// dropAllStaged removes every staged key: at Open, before any load of this
// store can have begun.
func (k *kv) dropAllStaged() error {
	sp := k.stagePrefix()
	return k.write("drop-staged", []clientv3.Op{clientv3.OpDelete(sp, clientv3.WithRange(clientv3.GetPrefixRangeEnd(sp)))})
}

// applyStaged copies the staged keys of txid to their data keys, in
// transactions of bounded size with bounded transactions in flight.
func (k *kv) applyStaged(txid string) error {
	sp := k.stageTxPrefix(txid)
	s := &stream{k: k, from: sp, end: clientv3.GetPrefixRangeEnd(sp), strip: len(sp)}
	ap := k.newStager("apply")
	for {
		kv, ok := s.peek()
		if !ok {
			break
		}
		key, v := kv.Key[s.strip:], kv.Value
		var err error
		if len(v) == 0 || v[0] == stagedDel {
			err = ap.add(clientv3.OpDelete(k.dataKey(key)), len(k.base)+1+len(key))
		} else {
			err = ap.add(clientv3.OpPut(k.dataKey(key), string(v[1:])), len(k.base)+1+len(key)+len(v))
		}
		if err != nil {
			break
		}
		s.advance()
	}
	if err := errors.Join(ap.wait(), s.err); err != nil {
		return fmt.Errorf("store: etcd: %s: finish an interrupted commit: %w", k.t, err)
	}
	return nil
}

// stager packs operations into transactions of at most MaxTxnOps
// operations and the request budget, and sends them with at most
// Options.InFlight in flight. Operations must be on distinct keys (their
// transactions may apply in any order).
type stager struct {
	k     *kv
	kind  string
	cur   []clientv3.Op
	bytes int
	sem   chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	err   error
	sent  int64 // bytes acknowledged, for progress
}

func (k *kv) newStager(kind string) *stager {
	return &stager{k: k, kind: kind, sem: make(chan struct{}, k.o.InFlight)}
}

func (s *stager) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// put stages a Put of key=value.
func (s *stager) put(key, value string) error {
	return s.add(clientv3.OpPut(key, value), len(key)+len(value))
}

func (s *stager) add(op clientv3.Op, size int) error {
	if err := s.failed(); err != nil {
		return err
	}
	size += opOverhead
	if len(s.cur) > 0 && (len(s.cur) >= s.k.o.MaxTxnOps || s.bytes+size > s.k.reqMax) {
		s.flush()
	}
	s.cur = append(s.cur, op)
	s.bytes += size
	return nil
}

func (s *stager) flush() {
	if len(s.cur) == 0 {
		return
	}
	ops, n := s.cur, s.bytes
	s.cur, s.bytes = nil, 0
	s.sem <- struct{}{}
	s.wg.Go(func() {
		defer func() { <-s.sem }()
		err := s.k.write(s.kind, ops)
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil && s.err == nil {
			s.err = err
		}
		if err == nil {
			s.sent += int64(n)
		}
	})
}

// wait sends what is left and waits for every transaction.
func (s *stager) wait() error {
	if s.failed() == nil {
		s.flush()
	}
	s.wg.Wait()
	return s.failed()
}
