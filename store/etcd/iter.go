package etcd

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/difctl/difctl/store"
)

// Range pages: an iterator fetches keys in pages of at most pageMax keys and
// about pageBytes of values, so memory stays bounded whatever the range.
const (
	pageMin   = 1
	pageMax   = 512
	pageBytes = 4 << 20
)

// stream walks the physical keys [from, end) at revision rev (0: the
// latest) in pages.
type stream struct {
	k     *kv
	from  string
	end   string
	rev   int64
	strip int // bytes of prefix before the logical key

	buf   []*mvccpb.KeyValue
	pos   int
	more  bool // the server has keys after buf
	fetch bool // buf was filled at least once
	limit int64
	err   error
}

// fill sets the stream's first page from a range response.
func (s *stream) fill(r *clientv3.GetResponse) {
	s.buf, s.pos, s.more, s.fetch = r.Kvs, 0, r.More, true
	if n := len(r.Kvs); n > 0 {
		s.from = string(r.Kvs[n-1].Key) + "\x00"
		s.adapt()
	}
}

// adapt sizes the next page from the values seen in this one.
func (s *stream) adapt() {
	total := 0
	for _, kv := range s.buf {
		total += len(kv.Key) + len(kv.Value)
	}
	avg := max(1, total/max(1, len(s.buf)))
	s.limit = int64(min(pageMax, max(pageMin, pageBytes/avg)))
}

func (s *stream) peek() (*mvccpb.KeyValue, bool) {
	for s.pos >= len(s.buf) {
		if s.err != nil || s.fetch && !s.more {
			return nil, false
		}
		if s.k.closed.Load() {
			s.err = store.ErrClosed
			return nil, false
		}
		if s.limit == 0 {
			s.limit = 64
		}
		opts := []clientv3.OpOption{clientv3.WithRange(s.end), clientv3.WithLimit(s.limit)}
		if s.rev > 0 {
			opts = append(opts, clientv3.WithRev(s.rev))
		}
		var r *clientv3.GetResponse
		err := s.k.retryRead("iterate", func(ctx context.Context) (err error) {
			r, err = s.k.cli.Get(ctx, s.from, opts...)
			return err
		})
		if err != nil {
			s.err = err
			return nil, false
		}
		s.fill(r)
	}
	return s.buf[s.pos], true
}

func (s *stream) advance() { s.pos++ }

// iter merges the data keys with the staged keys of every commit record in
// force at its snapshot revision; the newest commit's staged value wins.
type iter struct {
	k       *kv
	streams []*stream // newest commit first, the data keys last
	key     []byte
	value   []byte
	valid   bool
	done    bool
	err     error
}

func (k *kv) NewIter(lo, hi []byte) (store.Iterator, error) {
	if k.closed.Load() {
		return nil, store.ErrClosed
	}
	dlo, dhi := k.dataPrefix()+string(lo), clientv3.GetPrefixRangeEnd(k.dataPrefix())
	if hi != nil {
		dhi = k.dataPrefix() + string(hi)
	}
	it := &iter{k: k}
	if dlo >= dhi {
		it.done = true
		return it, nil
	}
	var resp *clientv3.TxnResponse
	err := k.retryRead("iterate", func(ctx context.Context) (err error) {
		resp, err = k.cli.Txn(ctx).Then(
			clientv3.OpGet(dlo, clientv3.WithRange(dhi), clientv3.WithLimit(64)),
			clientv3.OpGet(k.commitPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		).Commit()
		return err
	})
	if err != nil {
		return nil, err
	}
	rev := resp.Header.Revision
	commits := resp.Responses[1].GetResponseRange().Kvs
	for i := len(commits) - 1; i >= 0; i-- {
		sp := k.stageTxPrefix(string(commits[i].Key[len(k.commitPrefix()):]))
		end := clientv3.GetPrefixRangeEnd(sp)
		if hi != nil {
			end = sp + string(hi)
		}
		it.streams = append(it.streams, &stream{k: k, from: sp + string(lo), end: end, rev: rev, strip: len(sp)})
	}
	ds := &stream{k: k, from: dlo, end: dhi, rev: rev, strip: len(k.dataPrefix())}
	ds.fill((*clientv3.GetResponse)(resp.Responses[0].GetResponseRange()))
	it.streams = append(it.streams, ds)
	k.mu.Lock()
	if k.closed.Load() {
		k.mu.Unlock()
		return nil, store.ErrClosed
	}
	k.iters[it] = rev
	k.mu.Unlock()
	return it, nil
}

func (it *iter) Next() bool {
	it.valid = false
	if it.done {
		return false
	}
	for {
		if it.k.closed.Load() {
			return it.stop(store.ErrClosed)
		}
		var min []byte
		for _, s := range it.streams {
			kv, ok := s.peek()
			if s.err != nil {
				return it.stop(s.err)
			}
			if ok && (min == nil || string(kv.Key[s.strip:]) < string(min)) {
				min = kv.Key[s.strip:]
			}
		}
		if min == nil {
			return it.stop(nil)
		}
		var winner *mvccpb.KeyValue
		overlay := false
		for i, s := range it.streams {
			kv, ok := s.peek()
			if !ok || string(kv.Key[s.strip:]) != string(min) {
				continue
			}
			if winner == nil {
				winner, overlay = kv, i < len(it.streams)-1
			}
			s.advance()
		}
		v := winner.Value
		if overlay {
			if len(v) == 0 || v[0] == stagedDel {
				continue // deleted by the commit in force
			}
			v = v[1:]
		}
		it.key, it.value, it.valid = min, v, true
		return true
	}
}

func (it *iter) stop(err error) bool {
	if err != nil && it.err == nil {
		if errors.Is(err, ErrCompacted) {
			err = errors.Join(err, errors.New("store: etcd: the iterator outlived the server's compaction retention"))
		}
		it.err = err
	}
	it.done, it.valid = true, false
	it.release()
	return false
}

func (it *iter) Key() []byte {
	if !it.valid {
		return nil
	}
	return it.key
}

func (it *iter) Value() []byte {
	if !it.valid {
		return nil
	}
	return it.value
}

func (it *iter) Err() error { return it.err }

// Close closes the iterator; closing twice is harmless.
func (it *iter) Close() error {
	it.done, it.valid = true, false
	it.release()
	return nil
}

func (it *iter) release() {
	it.streams = nil
	it.k.mu.Lock()
	if it.k.iters != nil {
		delete(it.k.iters, it)
	}
	it.k.mu.Unlock()
}
