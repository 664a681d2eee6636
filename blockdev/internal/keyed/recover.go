package keyed

import (
	"errors"

	"github.com/difctl/difctl/kernels/poly1305"
	"github.com/difctl/difctl/store"
)

// Recovery is the keyed part of crash recovery: the tags of the open
// intents, and the committed tags of the chunk being resolved. A block
// under an intent takes the intent's tuple only if its data matches the
// intent's keyed tag too (Matches), and keeps its committed tuple only if
// it matches its committed tag, or is unwritten, zeros, without a tag
// (CommittedOK). The tags of the blocks resolved to an intent are
// committed with their tuples (NewTags).
type Recovery struct {
	e         *Engine
	intents   map[store.IntentID][]store.KeyedTag
	committed []store.KeyedTag
	pageBad   bool // the chunk's committed tags failed their page MAC
	newTags   []store.KeyedTag
	calc      [1]store.KeyedTag
}

// Recover returns the keyed part of the recovery of the intents ins, in
// chunks of up to the engine's chunk of blocks.
func (e *Engine) Recover(ins []store.Intent) (*Recovery, error) {
	kr := &Recovery{e: e, intents: make(map[store.IntentID][]store.KeyedTag, len(ins)),
		committed: make([]store.KeyedTag, e.chunk), newTags: make([]store.KeyedTag, e.chunk)}
	for _, in := range ins {
		tags, err := e.tup.TagIntent(in.IntentID)
		if err != nil {
			return nil, err
		}
		kr.intents[in.IntentID] = tags
	}
	return kr, nil
}

// Load reads the committed tags of the chunk of n blocks at c0.
func (kr *Recovery) Load(c0 int64, n int) error {
	kr.pageBad = false
	err := kr.e.tup.ReadTags(c0, kr.committed[:n])
	if errors.Is(err, store.ErrPageMAC) {
		kr.pageBad = true
		return nil
	}
	return err
}

// check reports whether data verifies against tag as block lba.
func (kr *Recovery) check(data []byte, lba int64, t store.KeyedTag) bool {
	if kr.e.Tags(kr.calc[:], lba, t.Gen, data, kr.e.bs) != nil {
		return false
	}
	return poly1305.Equal(kr.calc[0].Tag, t.Tag)
}

// Matches reports whether data (block lba, index i of the chunk, index j
// of intent in) matches the intent's keyed tag, and if so keeps it as the
// block's new tag.
func (kr *Recovery) Matches(in *store.Intent, j, i int, data []byte, lba int64) bool {
	t := kr.intents[in.IntentID][j]
	if t.Gen == 0 || !kr.check(data, lba, t) {
		return false
	}
	kr.newTags[i] = t
	return true
}

// CommittedOK reports whether block i of the chunk (lba) matches its
// committed keyed tag: written with a matching tag, or unwritten without
// one.
func (kr *Recovery) CommittedOK(i int, data []byte, lba int64, written bool) bool {
	if kr.pageBad {
		return false
	}
	t := kr.committed[i]
	if !written {
		return t.Gen == 0
	}
	return t.Gen != 0 && kr.check(data, lba, t)
}

// NewTags returns the tags of blocks [i, j) of the chunk that Matches
// kept, to commit with their tuples.
func (kr *Recovery) NewTags(i, j int) []store.KeyedTag { return kr.newTags[i:j] }
