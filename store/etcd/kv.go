package etcd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/difctl/difctl/store"
)

// Sentinel errors of this backend, beside the store package's own (which it
// returns where they apply: ErrNotFound, ErrClosed, ErrTooLarge, ErrInvalid).
var (
	// ErrLocked is matched by every *LockedError: another opener holds the
	// store's writer lock.
	ErrLocked = errors.New("store: etcd: locked by another writer")
	// ErrFenced reports a write refused because this store lost its lock
	// (its lease expired or was revoked): another host may own the store
	// now. Nothing of the refused write was applied; the store must be
	// closed and opened again.
	ErrFenced = errors.New("store: etcd: writer lock lost (fenced)")
	// ErrUnavailable reports that the cluster did not answer in time (no
	// quorum, no connection). A write that fails with it was not
	// acknowledged; it may or may not have been applied.
	ErrUnavailable = errors.New("store: etcd: cluster unavailable")
	// ErrNoSpace reports that the cluster is at its storage quota
	// (--quota-backend-bytes); see the package documentation.
	ErrNoSpace = errors.New("store: etcd: database space exceeded")
	// ErrCompacted reports that an iterator's snapshot was compacted away
	// by the server before the iterator finished.
	ErrCompacted = errors.New("store: etcd: snapshot compacted")
	// ErrAuth reports a refused user name, password or permission.
	ErrAuth = errors.New("store: etcd: authentication or permission refused")
)

// LockedError reports a store whose writer lock another opener holds.
type LockedError struct {
	URL    string // the store, as etcd://HOSTS/PREFIX
	Holder string // the holder's description (Options.Holder) and lease
	Reader bool   // the holder is a reader (and the opener a writer)
}

func (e *LockedError) Error() string {
	if e.Reader {
		return fmt.Sprintf("store: etcd: %s is open for reading by another process: %s", e.URL, e.Holder)
	}
	return fmt.Sprintf("store: etcd: %s is locked by another writer: %s", e.URL, e.Holder)
}

// Is makes a *LockedError match ErrLocked.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// Physical key layout under the URL's PREFIX (see the package doc).
const (
	tagData   = 'd'
	tagStage  = 's'
	tagCommit = 'c'
	tagLock   = 'l'
	tagReader = 'r' // r LEASE: a reader (Options.ReadOnly), under its lease

	stagedSet = 'S'
	stagedDel = 'D'

	txidLen = 16

	// maxKeyBytes is the largest logical key. reqSlack is the part of a
	// request kept for the fence comparison and the protocol's framing.
	maxKeyBytes = 4 << 10
	reqSlack    = 8 << 10
)

type revAt struct {
	rev int64
	at  time.Time
}

// kv is the etcd backend.
type kv struct {
	cli     *clientv3.Client
	sess    *concurrency.Session
	t       target
	o       Options
	base    string // PREFIX + "/"
	lockKey string
	lockRev int64 // create revision of our lock key: the fence
	limits  store.Limits
	reqMax  int // bytes of keys and values per transaction

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc

	mu     sync.Mutex // guards iters and closed transitions
	closed atomic.Bool
	iters  map[*iter]int64 // open iterators and their snapshot revisions

	commitMu sync.Mutex    // serializes commits (see the package doc)
	txSeq    atomic.Uint64 // numbers large commits and bulk loads
	dirty    atomic.Bool   // a large commit's record may be left unapplied

	cmu         sync.Mutex // guards the compaction state below
	revs        []revAt    // revisions seen, at most one a second
	lastCompact int64
	compacting  bool

	// Test hooks: hook is called before every write transaction with its
	// kind; an error stops the transaction (as a crash would). noLocalFence
	// skips the local lease check so tests reach the server's fence.
	hook         func(kind string) error
	noLocalFence bool
}

func init() {
	// Options come from the environment (OptionsFromEnv); the
	// store.OpenOptions of store.OpenWith are ignored.
	store.Register("etcd", func(url string, so store.OpenOptions) (store.KV, error) {
		o, err := OptionsFromEnv()
		if err != nil {
			return nil, err
		}
		o.ReadOnly = so.ReadOnly
		return Open(url, o)
	})
}

// Open connects to the cluster of url (etcd://host1:2379,host2:2379/PREFIX),
// takes the store's writer lock, finishes any large commit a crashed writer
// left half applied, and returns the store. A store locked by a live holder
// fails with a *LockedError naming it (after Options.LockWait).
func Open(url string, o Options) (store.KV, error) {
	t, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	if err := o.normalize(); err != nil {
		return nil, err
	}
	cli, err := dial(t, o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &kv{
		cli: cli, t: t, o: o,
		base:   t.prefix + "/",
		ctx:    ctx,
		cancel: cancel,
		iters:  make(map[*iter]int64),
		reqMax: o.MaxRequestBytes - reqSlack,
	}
	k.lockKey = k.base + string(tagLock)
	// A value must fit one transaction with its staged key (prefix, tag,
	// transaction id, key) and tag byte.
	k.limits = store.Limits{
		MaxKeyBytes:   maxKeyBytes,
		MaxValueBytes: k.reqMax - (len(k.base) + 1 + txidLen + maxKeyBytes + 1 + opOverhead),
		MaxBatchBytes: o.MaxBatchBytes,
	}
	if err := k.lock(); err != nil {
		cancel()
		cli.Close()
		return nil, err
	}
	if o.ReadOnly {
		// A reader resolves the commit records itself (see the package
		// documentation): it needs no recovery, and may not write one.
		return k, nil
	}
	if err := k.recover(); err != nil {
		k.Close()
		return nil, err
	}
	if err := k.dropAllStaged(); err != nil {
		k.Close()
		return nil, err
	}
	return k, nil
}

// dial connects a client to the cluster of t with the connection fields
// of o (normalized): credentials, TLS, DialTimeout. The stores and the
// witnesses (witness.go) connect through it.
func dial(t target, o Options) (*clientv3.Client, error) {
	tc, err := o.tlsConfig()
	if err != nil {
		return nil, err
	}
	eps := make([]string, len(t.hosts))
	for i, h := range t.hosts {
		if tc != nil {
			eps[i] = "https://" + h
		} else {
			eps[i] = "http://" + h
		}
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:          eps,
		DialTimeout:        o.DialTimeout,
		TLS:                tc,
		Username:           o.Username,
		Password:           o.Password,
		Logger:             zap.NewNop(),
		MaxCallSendMsgSize: o.MaxRequestBytes + 256<<10,
		MaxCallRecvMsgSize: math.MaxInt32,
		// Dead connections are noticed within a few seconds.
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
	})
	if err != nil {
		return nil, translate(t, "connect", err)
	}
	return cli, nil
}

// lock takes the writer lock: a key under the store's prefix, created only
// if absent and while no reader's key exists, attached to a session lease
// that the client keeps alive. A reader (Options.ReadOnly) puts its own
// key under its lease instead, only while the writer's is absent: one
// transaction each, so a writer and readers exclude each other.
func (k *kv) lock() error {
	ttl := int((k.o.LeaseTTL + time.Second - 1) / time.Second)
	deadline := time.Now().Add(k.o.LockWait)
	for {
		ctx, cancel := context.WithTimeout(k.ctx, k.o.DialTimeout+k.o.OpTimeout)
		// Grant the lease here, under the timeout (NewSession's own grant
		// would wait as long as its context, the store's lifetime).
		lease, err := k.cli.Grant(ctx, int64(ttl))
		if err != nil {
			cancel()
			return k.tr("lock: grant lease", err)
		}
		sess, err := concurrency.NewSession(k.cli, concurrency.WithLease(lease.ID), concurrency.WithContext(k.ctx))
		if err != nil {
			cancel()
			return k.tr("lock: keep the lease alive", err)
		}
		holder := fmt.Sprintf("%s lease=%x since=%s", k.o.Holder, int64(sess.Lease()), time.Now().UTC().Format(time.RFC3339))
		readers := k.base + string(tagReader)
		noWriter := clientv3.Compare(clientv3.CreateRevision(k.lockKey), "=", 0)
		var txn clientv3.Txn
		if k.o.ReadOnly {
			txn = k.cli.Txn(ctx).If(noWriter).
				Then(clientv3.OpPut(fmt.Sprintf("%s%x", readers, int64(sess.Lease())), holder, clientv3.WithLease(sess.Lease())))
		} else {
			// (A range comparison holds for every key of the range, and
			// for an empty range compares with a key never created.)
			txn = k.cli.Txn(ctx).If(noWriter, clientv3.Compare(clientv3.CreateRevision(readers), "=", 0).WithPrefix()).
				Then(clientv3.OpPut(k.lockKey, holder, clientv3.WithLease(sess.Lease())))
		}
		resp, err := txn.Else(clientv3.OpGet(k.lockKey), clientv3.OpGet(readers, clientv3.WithPrefix(), clientv3.WithLimit(1))).Commit()
		cancel()
		if err != nil {
			sess.Close()
			return k.tr("lock", err)
		}
		if resp.Succeeded {
			k.sess, k.lockRev = sess, resp.Header.Revision
			k.lastCompact = resp.Header.Revision
			return nil
		}
		sess.Close()
		other, reader := "unknown holder", false
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			other = string(kvs[0].Value)
		} else if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
			other, reader = string(kvs[0].Value), true
		}
		if time.Now().After(deadline) {
			return &LockedError{URL: k.t.String(), Holder: other, Reader: reader}
		}
		select {
		case <-time.After(250 * time.Millisecond):
		case <-k.ctx.Done():
			return store.ErrClosed
		}
	}
}

// fence is the comparison every write transaction carries: the lock key
// still exists with the revision at which this store created it. A lease
// that expired deleted the key; a new holder's key has a later revision.
func (k *kv) fence() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(k.lockKey), "=", k.lockRev)
}

func (k *kv) opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(k.ctx, k.o.OpTimeout)
}

// write commits ops in one transaction under the fence.
func (k *kv) write(kind string, ops []clientv3.Op) error {
	if k.closed.Load() {
		return store.ErrClosed
	}
	if k.hook != nil {
		if err := k.hook(kind); err != nil {
			return err
		}
	}
	if !k.noLocalFence {
		select {
		case <-k.sess.Done():
			return fmt.Errorf("%w: %s: the lease was lost; refusing to write", ErrFenced, k.t)
		default:
		}
	}
	ctx, cancel := k.opCtx()
	defer cancel()
	resp, err := k.cli.Txn(ctx).If(k.fence()).Then(ops...).Else(clientv3.OpGet(k.lockKey)).Commit()
	if err != nil {
		return k.tr("commit", err)
	}
	if !resp.Succeeded {
		now := "nobody (the lease expired)"
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			now = string(kvs[0].Value)
		}
		return fmt.Errorf("%w: %s: write refused by the cluster; the lock is now held by %s", ErrFenced, k.t, now)
	}
	k.maybeCompact(resp.Header.Revision)
	return nil
}

// tr translates a client error into one of ours (translate), and any
// error of a closed store into store.ErrClosed.
func (k *kv) tr(op string, err error) error {
	if err == nil {
		return nil
	}
	if k.closed.Load() || errors.Is(err, context.Canceled) && k.ctx.Err() != nil {
		return store.ErrClosed
	}
	return translate(k.t, op, err)
}

// translate translates a client error of an operation on t into one of
// ours; it never wraps etcd's or gRPC's types.
func translate(t target, op string, err error) error {
	code := codes.Unknown
	var ce interface{ Code() codes.Code }
	if errors.As(err, &ce) {
		code = ce.Code()
	} else if s, ok := status.FromError(err); ok {
		code = s.Code()
	}
	msg := err.Error()
	switch {
	case errors.Is(err, rpctypes.ErrNoSpace):
		return fmt.Errorf("%w: %s: %s: raise --quota-backend-bytes, compact and defragment, or move volumes to another prefix or cluster", ErrNoSpace, t, op)
	case errors.Is(err, rpctypes.ErrRequestTooLarge), errors.Is(err, rpctypes.ErrTooManyOps):
		return fmt.Errorf("%w: %s: %s: %s (the servers' --max-request-bytes or --max-txn-ops is below Options')", store.ErrTooLarge, t, op, msg)
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("%w: %s: %s", ErrCompacted, t, op)
	case errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrPermissionDenied), errors.Is(err, rpctypes.ErrUserEmpty),
		errors.Is(err, rpctypes.ErrInvalidAuthToken), code == codes.Unauthenticated, code == codes.PermissionDenied:
		return fmt.Errorf("%w: %s: %s: %s", ErrAuth, t, op, msg)
	case errors.Is(err, context.DeadlineExceeded), code == codes.Unavailable, code == codes.DeadlineExceeded,
		errors.Is(err, rpctypes.ErrNoLeader), errors.Is(err, rpctypes.ErrTimeout), errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail),
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost), errors.Is(err, rpctypes.ErrLeaderChanged),
		errors.Is(err, rpctypes.ErrStopped), strings.Contains(msg, "raft: stopped"):
		return fmt.Errorf("%w: %s: %s: %s", ErrUnavailable, t, op, msg)
	default:
		return fmt.Errorf("store: etcd: %s: %s: %s", t, op, msg)
	}
}

// Key construction.
func (k *kv) dataKey(key []byte) string { return k.base + string(tagData) + string(key) }
func (k *kv) dataPrefix() string        { return k.base + string(tagData) }
func (k *kv) commitPrefix() string      { return k.base + string(tagCommit) }
func (k *kv) stagePrefix() string       { return k.base + string(tagStage) }
func (k *kv) stageTxPrefix(txid string) string {
	return k.base + string(tagStage) + txid
}

// newTxid names a large commit or bulk load: the lock's revision (larger
// for every later holder) and a counter, so ids sort in commit order.
func (k *kv) newTxid() string {
	var b [txidLen]byte
	binary.BigEndian.PutUint64(b[:8], uint64(k.lockRev))
	binary.BigEndian.PutUint64(b[8:], k.txSeq.Add(1))
	return string(b[:])
}

func (k *kv) Get(key []byte) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		v, err := k.get(key)
		if errors.Is(err, ErrCompacted) && attempt < 3 {
			continue // an overlay read raced a compaction: read again
		}
		return v, err
	}
}

func (k *kv) get(key []byte) ([]byte, error) {
	if k.closed.Load() {
		return nil, store.ErrClosed
	}
	var resp *clientv3.TxnResponse
	err := k.retryRead("get", func(ctx context.Context) (err error) {
		resp, err = k.cli.Txn(ctx).Then(
			clientv3.OpGet(k.dataKey(key)),
			clientv3.OpGet(k.commitPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		).Commit()
		return err
	})
	if err != nil {
		return nil, err
	}
	rev := resp.Header.Revision
	commits := resp.Responses[1].GetResponseRange().Kvs
	// A large commit whose record exists at this revision is in force:
	// its staged value, newest commit first, wins over the data key.
	for i := len(commits) - 1; i >= 0; i-- {
		txid := string(commits[i].Key[len(k.commitPrefix()):])
		var r *clientv3.GetResponse
		err := k.retryRead("get", func(ctx context.Context) (err error) {
			r, err = k.cli.Get(ctx, k.stageTxPrefix(txid)+string(key), clientv3.WithRev(rev))
			return err
		})
		if err != nil {
			return nil, err
		}
		if len(r.Kvs) > 0 {
			v := r.Kvs[0].Value
			if len(v) == 0 || v[0] == stagedDel {
				return nil, store.ErrNotFound
			}
			return append([]byte{}, v[1:]...), nil
		}
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return nil, store.ErrNotFound
	}
	if kvs[0].Value == nil {
		return []byte{}, nil
	}
	return kvs[0].Value, nil
}

func (k *kv) Limits() store.Limits { return k.limits }

// Close releases the lock (revoking its lease) and the connection. Open
// iterators fail with ErrClosed.
func (k *kv) Close() error {
	k.mu.Lock()
	if k.closed.Swap(true) {
		k.mu.Unlock()
		return store.ErrClosed
	}
	k.iters = nil
	k.mu.Unlock()
	var err error
	if k.sess != nil {
		if e := k.sess.Close(); e != nil && !errors.Is(e, rpctypes.ErrLeaseNotFound) {
			err = fmt.Errorf("store: etcd: %s: release lock: %v", k.t, e)
		}
	}
	k.cancel()
	k.cli.Close()
	return err
}

// abandon drops the store as a crashed process would: no lease revoke, no
// cleanup. The lock lives until its lease expires. For tests.
func (k *kv) abandon() {
	k.mu.Lock()
	k.closed.Store(true)
	k.iters = nil
	k.mu.Unlock()
	if k.sess != nil {
		k.sess.Orphan()
	}
	k.cancel()
	k.cli.Close()
}

// maybeCompact compacts etcd's history. Compaction is cluster-wide (it
// drops old revisions of every store on the cluster), so it keeps
// Options.CompactRetention of history, not a number of revisions, and never
// passes an open iterator of this store: it compacts to the newest revision
// seen at least CompactRetention ago, once that is CompactEvery revisions
// past the last compaction.
func (k *kv) maybeCompact(rev int64) {
	every := int64(k.o.CompactEvery)
	if every < 0 {
		return
	}
	now := time.Now()
	k.cmu.Lock()
	if n := len(k.revs); n == 0 || now.Sub(k.revs[n-1].at) >= time.Second {
		k.revs = append(k.revs, revAt{rev, now})
	}
	target := int64(0)
	i := 0
	for i < len(k.revs) && now.Sub(k.revs[i].at) >= k.o.CompactRetention {
		target = k.revs[i].rev
		i++
	}
	if target-k.lastCompact < every || k.compacting {
		k.cmu.Unlock()
		return
	}
	k.revs = k.revs[i:]
	k.mu.Lock()
	for _, r := range k.iters {
		target = min(target, r)
	}
	k.mu.Unlock()
	if target <= k.lastCompact {
		k.cmu.Unlock()
		return
	}
	k.lastCompact, k.compacting = target, true
	k.cmu.Unlock()
	go func() {
		defer func() {
			k.cmu.Lock()
			k.compacting = false
			k.cmu.Unlock()
		}()
		ctx, cancel := k.opCtx()
		defer cancel()
		// An error (a server that compacted further by itself, a lost
		// connection) only delays the next compaction.
		k.cli.Compact(ctx, target)
	}()
}

// retryRead runs a read until it succeeds, fails with something other than
// ErrUnavailable, or OpTimeout passes: reads are idempotent, so a member
// stopping under one (a leader change, a restart) costs a retry on
// another, not an error. Writes are never retried: a write that timed out
// may still apply, and only a fresh Commit by the caller may follow it.
func (k *kv) retryRead(op string, read func(ctx context.Context) error) error {
	deadline := time.Now().Add(k.o.OpTimeout)
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		ctx, cancel := context.WithDeadline(k.ctx, deadline)
		err := read(ctx)
		cancel()
		if err == nil {
			return nil
		}
		err = k.tr(op, err)
		if !errors.Is(err, ErrUnavailable) || time.Now().Add(wait).After(deadline) {
			return err
		}
		select {
		case <-time.After(wait):
		case <-k.ctx.Done():
			return store.ErrClosed
		}
	}
}
