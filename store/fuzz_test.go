package store_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/difctl/difctl/store"
)

// Raw keys of volume "v" (see keys.go): "T", 1, "v", record type, suffix.
func rawKey(typ byte, suffix ...byte) []byte { return append([]byte{'T', 1, 'v', typ}, suffix...) }

// FuzzDecode stores arbitrary bytes as a page, an intent, a finding and the
// manifest, and reads them back: decoding must never panic, and must either
// succeed or fail with ErrCorrupt (or ErrUnsupported for a future schema).
func FuzzDecode(f *testing.F) {
	kv := store.NewMem()
	man := store.NewManifest("f", 512, 8, 1024*512, "d")
	man.PageTuples = 64
	tp, err := store.CreateTuples(kv, "v", man)
	if err != nil {
		f.Fatal(err)
	}
	tp.WriteRange(0, make([]byte, 8*64), make([]uint32, 64), false)
	x := tp.NewTxn()
	x.RecordIntent(0, make([]byte, 16), make([]uint32, 2))
	x.Commit(false)
	tp.RecordFinding(store.Finding{LBA: 0, Field: "guard", Expected: []byte{1}}, false)
	for _, typ := range []byte{'P', 'I', 'M', 'F'} {
		it, _ := kv.NewIter(rawKey(typ), rawKey(typ+1))
		for it.Next() {
			f.Add(append([]byte(nil), it.Value()...))
		}
		it.Close()
	}
	kv.Close()
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, v []byte) {
		kv := store.NewMem()
		defer kv.Close()
		tp, err := store.CreateTuples(kv, "v", man)
		if err != nil {
			t.Fatal(err)
		}
		lba0 := binary.BigEndian.AppendUint64(nil, 0)
		b := kv.NewBatch()
		b.Set(rawKey('P', lba0...), v)
		b.Set(rawKey('I', append(lba0, lba0...)...), v)
		b.Set(rawKey('F', append(lba0, "guard"...)...), v)
		if err := b.Commit(false); err != nil {
			t.Fatal(err)
		}
		ok := func(what string, err error) {
			if err != nil && !errors.Is(err, store.ErrCorrupt) && !errors.Is(err, store.ErrUnsupported) {
				t.Fatalf("%s: %v is neither nil nor ErrCorrupt", what, err)
			}
		}
		_, err = tp.ReadRange(0, make([]byte, 8*100), make([]uint32, 100), store.NewBitmap(100))
		ok("ReadRange", err)
		ok("WriteRange", tp.WriteRange(3, make([]byte, 8), make([]uint32, 1), false))
		for _, err := range tp.AllIntents() {
			ok("Intents", err)
		}
		for _, err := range tp.Findings(store.FindingQuery{}) {
			ok("Findings", err)
		}
		_, err = tp.RecordFinding(store.Finding{LBA: 0, Field: "guard"}, false)
		ok("RecordFinding", err)
		b = kv.NewBatch()
		b.Set(rawKey('M'), v)
		b.Commit(false)
		_, err = store.OpenTuples(kv, "v", nil)
		ok("OpenTuples", err)
	})
}
