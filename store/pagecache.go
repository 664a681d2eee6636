package store

import (
	"sync"
	"sync/atomic"
)

// pageCache keeps decoded tuple pages of one volume for ReadRangeCached, so
// that re-reading a range costs a copy instead of a KV iterator, a page
// checksum and the decoding of every sector checksum. It is bounded by a
// number of pages and evicts by CLOCK (a hit sets a page's reference bit;
// the hand clears bits until it finds a page without one).
//
// Coherence. Every write of pages through the Tuples (Txn.Commit, and so
// WriteRange and Discard; RemapRange; a bulk load) is bracketed by
// beginWrite and endWrite: reads bypass the cache while one runs, and its
// pages are dropped at its end. A reader that missed records the generation
// (bumped at both ends of every write) before it opens its KV iterator and
// fills the cache only if it is unchanged and no write runs, so a page read
// from a snapshot older than a commit is never cached after it. Writes
// that bypass this Tuples (another Tuples of the same volume, raw KV
// writes, DeleteVolume) are not seen: the cache is for the sole writer of a
// volume, which is how a blockdev.Volume owns it.
type pageCache struct {
	mu    sync.RWMutex
	max   int // pages
	gen   uint64
	pages map[int64]*cachedPage
	ring  []*cachedPage // resident pages, in CLOCK order
	hand  int
	spare []*cachedPage // evicted pages, for the next misses

	hits, misses atomic.Int64
}

// cachedPage is one decoded page. An empty page (no stored value: every
// block unwritten) does not use its arrays, which it may not have.
type cachedPage struct {
	page   int64
	empty  bool
	ref    atomic.Bool
	slot   int
	bits   []uint64
	tuples []byte
	sums   []uint32
}

// CacheStats counts the pages ReadRangeCached served from the page cache and
// those it read from the KV.
type CacheStats struct {
	Hits, Misses int64
	Pages        int // resident
}

// SetPageCache gives ReadRangeCached a cache of decoded pages of at most
// maxBytes (counting the decoded tuples, checksums and bitmap of each page);
// 0 removes it. The cache assumes this Tuples is the only writer of the
// volume while it is set (see ReadRangeCached). A cache too small for one
// page is no cache. Beyond maxBytes it keeps up to maxSpare evicted pages
// for reuse.
func (t *Tuples) SetPageCache(maxBytes int) {
	per := t.l.p*t.l.ts + t.l.bitsLen*8
	if t.l.sums {
		per += 4 * t.l.p
	}
	n := 0
	if maxBytes > 0 {
		n = maxBytes / per
	}
	t.cmu.Lock()
	defer t.cmu.Unlock()
	if n == 0 {
		t.cache.Store(nil)
		return
	}
	c := &pageCache{max: n, pages: make(map[int64]*cachedPage, n)}
	t.cache.Store(c)
}

// PageCacheStats returns the counts of the page cache (zero without one).
func (t *Tuples) PageCacheStats() CacheStats {
	c := t.cache.Load()
	if c == nil {
		return CacheStats{}
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Pages: len(c.pages)}
}

// generation returns the invalidation count, read before a miss's KV
// iterator is opened.
func (c *pageCache) generation() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.gen
}

// invalidate drops the given pages, or with all every page.
func (c *pageCache) invalidate(pages []int64, all bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if all {
		clear(c.pages)
		clear(c.ring)
		c.ring, c.hand = c.ring[:0], 0
		return
	}
	for _, p := range pages {
		if cp, ok := c.pages[p]; ok {
			c.remove(cp)
		}
	}
}

// remove drops cp from the map and the ring. Caller holds mu.
func (c *pageCache) remove(cp *cachedPage) {
	delete(c.pages, cp.page)
	last := len(c.ring) - 1
	c.ring[cp.slot] = c.ring[last]
	c.ring[cp.slot].slot = cp.slot
	c.ring[last] = nil
	c.ring = c.ring[:last]
	if c.hand >= len(c.ring) {
		c.hand = 0
	}
}

// beginWrite and endWrite bracket every write of pages through t: a
// commit, from before its batch is applied to after, and a bulk load, from
// NewLoader to Finish or Abort. While one runs, reads bypass the cache and
// misses fill nothing; endWrite then drops the pages written (all of them
// with all), before reads may use the cache again. So a read never mixes
// pages cached before a commit with pages read after it, and never goes
// back to an older version than one a finished read saw.
func (t *Tuples) beginWrite() {
	t.writers.Add(1)
	if c := t.cache.Load(); c != nil {
		c.mu.Lock()
		c.gen++
		c.mu.Unlock()
	}
}

func (t *Tuples) endWrite(pages []int64, all bool) {
	if c := t.cache.Load(); c != nil {
		c.invalidate(pages, all)
	}
	t.writers.Add(-1)
}

// fill adds the decoded pages of a miss, read at generation gen, unless a
// write began or ended since or is running (writers). It returns the pages
// it did not keep (for reuse) appended to spare.
func (c *pageCache) fill(gen uint64, writers *atomic.Int32, pages []*cachedPage, spare []*cachedPage) []*cachedPage {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen || writers.Load() > 0 {
		return append(spare, pages...)
	}
	for _, cp := range pages {
		if old, ok := c.pages[cp.page]; ok {
			c.remove(old)
			spare = append(spare, old)
		}
		for len(c.ring) >= c.max {
			v := c.ring[c.hand]
			if v.ref.Swap(false) {
				c.hand = (c.hand + 1) % len(c.ring)
				continue
			}
			c.remove(v)
			spare = append(spare, v)
		}
		cp.ref.Store(true) // a second chance: remove may move it under the hand
		cp.slot = len(c.ring)
		c.ring = append(c.ring, cp)
		c.pages[cp.page] = cp
	}
	return spare
}

// testHookCacheMiss, when set by a test, runs in ReadRangeCached between
// reading a miss's pages and filling the cache with them.
var testHookCacheMiss func()

// maxSpare bounds the evicted pages kept for reuse: a 1 MiB read needs
// two pages at 512-byte blocks, one at 4 KiB.
const maxSpare = 4

// takeSpare returns up to n evicted pages for a miss to decode into.
func (c *pageCache) takeSpare(n int) []*cachedPage {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := max(0, len(c.spare)-n)
	s := append([]*cachedPage(nil), c.spare[k:]...)
	clear(c.spare[k:])
	c.spare = c.spare[:k]
	return s
}

// putSpare keeps some of the pages a fill did not keep or evicted.
func (c *pageCache) putSpare(s []*cachedPage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cp := range s {
		if len(c.spare) >= maxSpare {
			break
		}
		c.spare = append(c.spare, cp)
	}
}
