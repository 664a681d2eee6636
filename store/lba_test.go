package store_test

import (
	"errors"
	"testing"

	"github.com/difctl/difctl/store"
)

// TestNegativeLBAs checks that the int64 LBA and block-count arguments of
// the keyed-tag and journal calls refuse negative values with the store's
// typed errors (TestTuplesArgs covers the tuple, intent and load calls).
func TestNegativeLBAs(t *testing.T) {
	kv := store.NewMem()
	defer kv.Close()
	kt := newKeyed(t, kv, "k", keyedManifest(256))
	tp, err := store.CreateTuples(kv, "v", store.NewManifest("f", 512, 8, 64*512, "d"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.BeginJournal(store.Journal{Op: store.OpRemap, Next: -1}); !errors.Is(err, store.ErrOutOfRange) {
		t.Fatalf("BeginJournal at block -1: %v, want ErrOutOfRange", err)
	}
	if err := tp.BeginJournal(store.Journal{Op: store.OpRemap}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
		fn   func() error
	}{
		{"op=read-tags/lba=negative", store.ErrOutOfRange, func() error { return kt.ReadTags(-1, make([]store.KeyedTag, 2)) }},
		{"op=write-tags/lba=negative", store.ErrOutOfRange, func() error { return kt.NewTxn().WriteTags(-1, make([]store.KeyedTag, 2)) }},
		{"op=advance-journal/next=negative", store.ErrInvalid, func() error { return tp.AdvanceJournal(-1, false) }},
		{"op=remap/lba=negative", store.ErrOutOfRange, func() error { return tp.RemapRange(-1, make([]byte, 8), false) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.fn(); !errors.Is(err, tc.err) {
				t.Fatalf("got %v, want %v", err, tc.err)
			}
		})
	}
}
