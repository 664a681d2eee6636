package pebble_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/difctl/difctl/store"
	"github.com/difctl/difctl/store/pebble"
)

// TestLoadAbort: an aborted or failed load (store.Tuples's loader on the
// store's bulk writer) leaves no record and no file.
func TestLoadAbort(t *testing.T) {
	dir := t.TempDir()
	kv, err := pebble.Open(dir, store.OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	pebble.SetBulkFileBytes(kv, 64<<10)
	man := store.NewManifest("f", 512, 8, 100000*512, "d")
	tp, err := store.CreateTuples(kv, "v", man)
	if err != nil {
		t.Fatal(err)
	}
	tu, su := randomTuples(8, 50000, 8)
	if err := tp.WriteRange(3, tu[:8*5000], su[:5000], true); err != nil {
		t.Fatal(err)
	}
	before := digest(t, kv)
	tmp := filepath.Join(dir, pebble.BulkTempDir)
	noTemp := func(when string) {
		t.Helper()
		ents, err := os.ReadDir(tmp)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if len(ents) != 0 {
			t.Fatalf("%s: %d entries left in %s", when, len(ents), tmp)
		}
	}
	l, err := tp.NewLoader(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Write(tu, su); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) == 0 {
		t.Fatal("no temporary tables while loading")
	}
	if err := l.Abort(); err != nil {
		t.Fatal(err)
	}
	if digest(t, kv) != before {
		t.Fatal("aborted load changed the store")
	}
	noTemp("after Abort")
	// A refused Finish cleans up too.
	x := tp.NewTxn()
	x.RecordIntent(40000, tu[:8], su[:1])
	if err := x.Commit(true); err != nil {
		t.Fatal(err)
	}
	before = digest(t, kv)
	if err := tp.LoadRange(1, tu, su, true); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("LoadRange over an intent = %v", err)
	}
	if digest(t, kv) != before {
		t.Fatal("refused load changed the store")
	}
	noTemp("after a refused Finish")
	if err := tp.LoadRange(1, tu[:8*30000], su[:30000], true); err != nil {
		t.Fatal(err)
	}
	noTemp("after Finish")
}

// TestLoadCrash crashes a store on a crashable file system before a load's
// Finish (the volume is as before, no temporary file survives the reopen)
// and after Finish(true) (the load is durable).
func TestLoadCrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	open := func(fs *vfs.MemFS) store.KV {
		kv, err := pebble.OpenOnFS("db", fs)
		if err != nil {
			t.Fatal(err)
		}
		pebble.SetBulkFileBytes(kv, 64<<10)
		return kv
	}
	crash := func(kv store.KV) (store.KV, *vfs.MemFS) {
		clone := fs.CrashClone(vfs.CrashCloneCfg{})
		kv.Close()
		fs = clone
		return open(clone), clone
	}
	kv := open(fs)
	defer func() { kv.Close() }()
	const blocks = 40000
	man := store.NewManifest("f", 512, 16, blocks*512, "d")
	man.PageTuples, man.SectorSums = 256, true
	tp, err := store.CreateTuples(kv, "v", man)
	if err != nil {
		t.Fatal(err)
	}
	reopened := func(want volumeState) {
		t.Helper()
		if tp, err = store.OpenTuples(kv, "v", &man); err != nil {
			t.Fatal(err)
		}
		if got, err := readVolume(tp); err != nil || !got.equal(want) {
			t.Fatalf("after the crash the volume differs from before it (%v)", err)
		}
	}
	tu, su := randomTuples(10, 10000, 16)
	if err := tp.WriteRange(5000, tu, su, true); err != nil {
		t.Fatal(err)
	}
	before, err := readVolume(tp)
	if err != nil {
		t.Fatal(err)
	}

	tu, su = randomTuples(11, 30000, 16)
	l, err := tp.NewLoader(1234)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30000; i += 7000 {
		n := min(7000, 30000-i)
		if err := l.Write(tu[i*16:(i+n)*16], su[i:i+n]); err != nil {
			t.Fatal(err)
		}
	}
	// The load's directory: the store's first bulk load (CreateTuples
	// writes one empty run, in a batch).
	if ents, _ := fs.List("db/" + pebble.BulkTempDir + "/1"); len(ents) < 2 {
		t.Fatalf("%d temporary tables, want several", len(ents))
	}
	kv, fs = crash(kv)
	if ents, err := fs.List("db/" + pebble.BulkTempDir); err == nil && len(ents) > 0 {
		t.Fatalf("temporary tables survive the reopen: %v", ents)
	}
	reopened(before)

	if err := tp.LoadRange(1234, tu, su, true); err != nil {
		t.Fatal(err)
	}
	loaded, err := readVolume(tp)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(loaded.tuples[1234*16:(1234+30000)*16], tu) || loaded.equal(before) {
		t.Fatal("the volume does not read back the load")
	}
	kv, _ = crash(kv)
	reopened(loaded)
}
