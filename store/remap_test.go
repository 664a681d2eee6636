package store_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/difctl/difctl/store"
	"github.com/difctl/difctl/store/pebble"
)

// journalBackends returns a fresh store of each kind, and a function that
// crashes and reopens it (nil for mem:, which keeps nothing).
func journalBackends(t *testing.T) map[string]func() (store.KV, func(store.KV) store.KV) {
	return map[string]func() (store.KV, func(store.KV) store.KV){
		"mem": func() (store.KV, func(store.KV) store.KV) { return store.NewMem(), nil },
		"pebble": func() (store.KV, func(store.KV) store.KV) {
			fs := vfs.NewCrashableMem()
			kv, err := pebble.OpenOnFS("db", fs)
			if err != nil {
				t.Fatal(err)
			}
			return kv, func(kv store.KV) store.KV {
				clone := fs.CrashClone(vfs.CrashCloneCfg{})
				kv.Close()
				fs = clone
				kv2, err := pebble.OpenOnFS("db", clone)
				if err != nil {
					t.Fatal(err)
				}
				return kv2
			}
		},
	}
}

func TestRemapJournal(t *testing.T) {
	for name, open := range journalBackends(t) {
		t.Run("kv="+name, func(t *testing.T) {
			kv, crash := open()
			defer func() { kv.Close() }()
			const blocks = 1000
			man := store.NewManifest("512+8:dix", 512, 8, blocks*512, "d")
			man.PageTuples = 64
			man.InitialRefTag = 5
			tp, err := store.CreateTuples(kv, "v", man)
			if err != nil {
				t.Fatal(err)
			}
			// Blocks [100, 900) written, the rest unwritten.
			tu := make([]byte, 8*blocks)
			sums := make([]uint32, blocks)
			for i := range tu {
				tu[i] = byte(i)
			}
			for i := range sums {
				sums[i] = uint32(i) * 7
			}
			if err := tp.WriteRange(100, tu[100*8:900*8], sums[100:900], true); err != nil {
				t.Fatal(err)
			}
			if j, err := tp.Journal(); err != nil || j != nil {
				t.Fatalf("journal before: %v, %v", j, err)
			}
			if err := tp.RemapRange(0, tu[:8], false); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("RemapRange without a journal: %v", err)
			}
			if err := tp.BeginJournal(store.Journal{Op: store.OpRemap, From: 4, To: 9}); !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("BeginJournal from the wrong ref tag: %v", err)
			}
			if err := tp.BeginJournal(store.Journal{Op: store.OpRemap, From: 5, To: 9}); err != nil {
				t.Fatal(err)
			}
			var ip *store.InProgressError
			if err := tp.BeginJournal(store.Journal{Op: store.OpRemap, From: 5, To: 10}); !errors.As(err, &ip) {
				t.Fatalf("second BeginJournal: %v", err)
			}
			// Every opener is refused with a clear error.
			_, err = store.OpenTuples(kv, "v", nil)
			if !errors.As(err, &ip) || !errors.Is(err, store.ErrInProgress) || ip.Journal.To != 9 {
				t.Fatalf("OpenTuples during a remap: %v", err)
			}
			if want := `store: volume "v": remap in progress: run difctl remap again to finish`; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
				t.Fatalf("message %q", err)
			}
			if _, err := store.CreateTuples(kv, "v", man); !errors.Is(err, store.ErrExists) {
				t.Fatalf("CreateTuples during a remap: %v", err)
			}
			// New tuples: every byte inverted.
			nu := bytes.Clone(tu)
			for i := range nu {
				nu[i] ^= 0xff
			}
			if err := tp.RemapRange(10, nu[10*8:20*8], false); !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("RemapRange off the journal: %v", err)
			}
			step := 0
			for lba := 0; lba < blocks; lba += 150 {
				n := min(150, blocks-lba)
				if err := tp.RemapRange(int64(lba), nu[lba*8:(lba+n)*8], false); err != nil {
					t.Fatal(err)
				}
				step++
				if crash != nil && step == 3 {
					kv = crash(kv)
					var j *store.Journal
					tp, j, err = store.OpenJournaled(kv, "v", nil)
					if err != nil {
						t.Fatal(err)
					}
					// Unsynced steps may be lost, always with their Next.
					if j == nil || j.Op != store.OpRemap || j.Next%150 != 0 && j.Next != blocks || j.Next > int64(lba+n) {
						t.Fatalf("journal after a crash: %+v", j)
					}
					lba = int(j.Next) - 150
				}
			}
			if err := tp.FinishRemap(); err != nil {
				t.Fatal(err)
			}
			if crash != nil {
				kv = crash(kv)
			}
			tp, err = store.OpenTuples(kv, "v", nil)
			if err != nil {
				t.Fatal(err)
			}
			if m := tp.Manifest(); m.InitialRefTag != 9 {
				t.Fatalf("initial ref tag %d after the remap, want 9", m.InitialRefTag)
			}
			got := make([]byte, 8*blocks)
			gs := make([]uint32, blocks)
			w := store.NewBitmap(blocks)
			if n, err := tp.ReadRange(0, got, gs, w); err != nil || n != 800 {
				t.Fatalf("ReadRange: %d written, %v", n, err)
			}
			for b := 0; b < blocks; b++ {
				want, ws := bytes.Repeat([]byte{0xff}, 8), uint32(0)
				if b >= 100 && b < 900 {
					want, ws = nu[b*8:(b+1)*8], sums[b]
				}
				if w.Has(b) != (b >= 100 && b < 900) || !bytes.Equal(got[b*8:(b+1)*8], want) || gs[b] != ws {
					t.Fatalf("block %d: written %v tuple %x sum %d, want %x %d", b, w.Has(b), got[b*8:(b+1)*8], gs[b], want, ws)
				}
			}
		})
	}
}

func TestImportJournal(t *testing.T) {
	kv := store.NewMem()
	man := store.NewManifest("4096+16:crc64:dix", 4096, 16, 64*4096, "d")
	tp, err := store.CreateJournaled(kv, "v", man, store.Journal{Op: store.OpImport})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.CreateJournaled(kv, "v", man, store.Journal{Op: store.OpImport}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second CreateJournaled: %v", err)
	}
	if _, err := store.OpenTuples(kv, "v", nil); !errors.Is(err, store.ErrInProgress) ||
		err.Error() != `store: volume "v": import in progress: run difctl convert again to finish (done up to block 0)` {
		t.Fatalf("OpenTuples during an import: %v", err)
	}
	if err := tp.AdvanceJournal(32, true); err != nil {
		t.Fatal(err)
	}
	if err := tp.AdvanceJournal(31, true); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("AdvanceJournal backwards: %v", err)
	}
	if err := tp.RemapRange(32, make([]byte, 16), false); !errors.Is(err, store.ErrInProgress) {
		t.Fatalf("RemapRange during an import: %v", err)
	}
	_, j, err := store.OpenJournaled(kv, "v", &man)
	if err != nil || j == nil || j.Op != store.OpImport || j.Next != 32 {
		t.Fatalf("OpenJournaled: %+v, %v", j, err)
	}
	if err := tp.EndJournal(); err != nil {
		t.Fatal(err)
	}
	if _, err := store.OpenTuples(kv, "v", &man); err != nil {
		t.Fatal(err)
	}
	// A damaged journal is reported, not ignored.
	if err := tp.BeginJournal(store.Journal{Op: store.OpImport}); err != nil {
		t.Fatal(err)
	}
	b := kv.NewBatch()
	b.Set([]byte("T\x01vXjournal"), []byte("{"))
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	_, err = store.OpenTuples(kv, "v", nil)
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("damaged journal: %v", err)
	}
}
