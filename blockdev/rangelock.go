package blockdev

import "sync"

// rangeLock is a reader/writer lock over ranges of blocks: holders of
// overlapping ranges exclude each other unless both are shared, and
// disjoint ranges never wait for each other. It allocates nothing once its
// table has grown to the number of concurrent holders.
//
// Waiters sleep on one condition variable, woken by every unlock; with the
// handful of concurrent requests a volume sees this is cheaper than a queue
// per range. A waiting exclusive holder does not block later shared ones,
// so a writer can be delayed by a stream of overlapping readers (as with
// any range lock without queueing); it is never delayed by disjoint ones.
type rangeLock struct {
	mu   sync.Mutex
	cond sync.Cond
	held []heldRange
	next uint64
}

type heldRange struct {
	lo, hi int64 // [lo, hi)
	excl   bool
	id     uint64
}

func (l *rangeLock) init() { l.cond.L = &l.mu }

// conflicts reports whether a request conflicts with a held range.
// Caller holds l.mu.
func (l *rangeLock) conflicts(lo, hi int64, excl bool) bool {
	for i := range l.held {
		h := &l.held[i]
		if h.lo < hi && lo < h.hi && (excl || h.excl) {
			return true
		}
	}
	return false
}

// lock acquires [lo, hi) (shared unless excl) and returns a token for
// unlock.
func (l *rangeLock) lock(lo, hi int64, excl bool) uint64 {
	l.mu.Lock()
	for l.conflicts(lo, hi, excl) {
		l.cond.Wait()
	}
	l.next++
	id := l.next
	l.held = append(l.held, heldRange{lo: lo, hi: hi, excl: excl, id: id})
	l.mu.Unlock()
	return id
}

// unlock releases the range acquired with token id.
func (l *rangeLock) unlock(id uint64) {
	l.mu.Lock()
	for i := range l.held {
		if l.held[i].id == id {
			last := len(l.held) - 1
			l.held[i] = l.held[last]
			l.held = l.held[:last]
			break
		}
	}
	l.mu.Unlock()
	l.cond.Broadcast()
}
