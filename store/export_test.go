package store

import "time"

// SetCacheMissHook sets a function ReadRangeCached runs between reading the
// pages of a miss and filling the cache with them (nil: none).
func SetCacheMissHook(f func()) { testHookCacheMiss = f }

// CreateLegacy creates volume as the versions before schema 7 did, with
// a record of every page (the empty-page record; a keyed volume's tag
// pages sealed empty, with pageKey) and the manifest of version schema:
// 2 unkeyed; 4 keyed, or 5 with the seal (InitSeal).
func CreateLegacy(kv KV, volume string, m Manifest, pageKey []byte, schema int) (*Tuples, error) {
	prefix, err := volumePrefix(volume)
	if err != nil {
		return nil, err
	}
	m.normalize()
	m.Schema = min(schema, KeyedSchemaVersion)
	if m.Created.IsZero() {
		m.Created = time.Now().UTC()
	}
	t, err := newTuples(kv, volume, prefix, m)
	if err != nil {
		return nil, err
	}
	b := kv.NewBatch()
	defer b.Close()
	for page := range t.pages {
		if t.k != nil {
			if err := b.Set(t.tagPageKey(page), t.encodeTagPage(nil, pageKey, page, nil, emptyPageValue)); err != nil {
				return nil, err
			}
		}
		if err := b.Set(t.pageKey(page), emptyPageValue); err != nil {
			return nil, err
		}
	}
	v, err := encodeManifest(m)
	if err != nil {
		return nil, err
	}
	if err := b.Set(recKey(prefix, recManifest), v); err != nil {
		return nil, err
	}
	if err := b.Commit(true); err != nil {
		return nil, err
	}
	if t.k != nil {
		if err := t.SetPageMACKey(pageKey); err != nil {
			return nil, err
		}
		if schema >= SealedSchemaVersion {
			if err := t.InitSeal(); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}

// SetWalkHooks sets functions a walk of page records and empty runs runs
// when it opens its run iterator (gap) and before it is made again
// (retry); nil: none.
func SetWalkHooks(gap, retry func()) { testHookWalkGap, testHookWalkRetry = gap, retry }
