package keyed

import (
	"errors"
	"sync"

	"github.com/difctl/difctl/store"
)

// tagCache keeps the committed tag pages that reads verified (their MAC
// checked), so that a read costs a copy of its tags rather than a store
// read and a page MAC. Entries are valid only while no tag page has been
// written since they were read (store.Tuples.TagWriteSeq); the volume
// writes tag pages at each fold and discard.
type tagCache struct {
	mu    sync.RWMutex
	pages map[int64]*tagCachePage // never changed once cached
}

type tagCachePage struct {
	seq  uint64
	tags []store.KeyedTag
	// reads is store.Tuples.TupleReads before the page was read and its
	// MAC checked: every tuple page read before then was read before the
	// check (see readCommitted).
	reads uint64
}

// maxTagCachePages bounds the cache: 256 pages of 1,024 tags, 6 MiB.
const maxTagCachePages = 256

// cachedTags returns the cached tag page page if it serves a caller whose
// tuple reads were counted by minReads (see readCommitted), else nil. The
// page is shared: its tags must not be changed.
func (e *Engine) cachedTags(page int64, minReads uint64) *tagCachePage {
	seq := e.tup.TagWriteSeq()
	e.cache.mu.RLock()
	cp := e.cache.pages[page]
	e.cache.mu.RUnlock()
	if cp != nil && cp.seq == seq && seq%2 == 0 && cp.reads >= minReads {
		return cp
	}
	return nil
}

// committedView is readCommitted without the copy where it can: the
// committed tags of blocks [lba, lba+n), a slice of the cached page when
// they lie in one (which the caller must not change), otherwise read into
// buf (of n tags at least), as readCommitted reads them.
func (e *Engine) committedView(lba int64, n int, buf []store.KeyedTag, minReads uint64) ([]store.KeyedTag, error) {
	P := e.pageTuples
	if page := lba / P; (lba+int64(n)-1)/P == page {
		if cp := e.cachedTags(page, minReads); cp != nil {
			s := lba - page*P
			return cp.tags[s : s+int64(n) : s+int64(n)], nil
		}
	}
	return buf[:n], e.readCommitted(lba, buf[:n], minReads)
}

// readCommitted reads the committed tags of blocks [lba, lba+len(dst)),
// from the cache where it can. It returns the store's *PageMACError, with
// dst filled, as ReadTags does.
//
// A cached page serves only a caller whose tuples were read from the
// store before the page's MAC was checked: minReads is the
// store.Tuples.TupleReads value the caller saw after reading its tuples,
// and a page cached with a smaller count is read and checked again. The
// keyed read path (blockdev's read_keyed.go) needs this: it trusts the
// tuples it read because the MAC sealed them, and a tuple page read from
// the store after the check might not be the one the MAC sealed (edited in
// the store files under a running volume, and reloaded by the tuple
// cache). The ordinary path (Scratch.LoadTags) follows the same rule, so
// that such a page fails its MAC there too (every block of it) rather than
// only the guards edited.
func (e *Engine) readCommitted(lba int64, dst []store.KeyedTag, minReads uint64) error {
	P := e.pageTuples
	n := int64(len(dst))
	var macErr *store.PageMACError
	for page := lba / P; page*P < lba+n; page++ {
		ps := page * P
		s, t := max(ps, lba), min(ps+P, lba+n)
		if cp := e.cachedTags(page, minReads); cp != nil {
			copy(dst[s-lba:t-lba], cp.tags[s-ps:t-ps])
			continue
		}
		seq := e.tup.TagWriteSeq()
		pn := min(P, e.blocks-ps)
		tags := make([]store.KeyedTag, pn)
		reads := e.tup.TupleReads()
		err := e.tup.ReadTags(ps, tags)
		var me *store.PageMACError
		switch {
		case errors.As(err, &me):
			if macErr == nil {
				macErr = me
			} else {
				macErr.Pages = append(macErr.Pages, me.Pages...)
				macErr.Missing = append(macErr.Missing, me.Missing...)
			}
		case err != nil:
			return err
		default:
			if seq%2 == 0 && e.tup.TagWriteSeq() == seq {
				e.cache.mu.Lock()
				if len(e.cache.pages) >= maxTagCachePages {
					clear(e.cache.pages)
				}
				e.cache.pages[page] = &tagCachePage{seq: seq, tags: tags, reads: reads}
				e.cache.mu.Unlock()
			}
		}
		copy(dst[s-lba:t-lba], tags[s-ps:t-ps])
	}
	if macErr != nil {
		return macErr
	}
	return nil
}
