package store_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/difctl/difctl/store"
)

func checkSeal(t *testing.T, tp *store.Tuples, wantGen uint64) {
	t.Helper()
	gen, ok, err := tp.CheckSeal()
	if err != nil || !ok || gen != wantGen {
		t.Fatalf("CheckSeal = %d, %v, %v; want generation %d, sealed, no error", gen, ok, err, wantGen)
	}
	sg, mac, ok, err := tp.Seal()
	if err != nil || !ok || sg != wantGen || len(mac) != 32 {
		t.Fatalf("Seal = %d, %x, %v, %v; want generation %d", sg, mac, ok, err, wantGen)
	}
}

func kvGet(t *testing.T, kv store.KV, k []byte) []byte {
	t.Helper()
	v, err := kv.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(v)
}

func kvPut(t *testing.T, kv store.KV, k, v []byte) {
	t.Helper()
	b := kv.NewBatch()
	var err error
	if v == nil {
		err = b.Delete(k)
	} else {
		err = b.Set(k, v)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
}

func reopenKeyed(t *testing.T, kv store.KV, name string) *store.Tuples {
	t.Helper()
	tp, err := store.OpenTuples(kv, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.SetPageMACKey(macKey); err != nil {
		t.Fatal(err)
	}
	return tp
}

// TestSealCommits: creation seals the empty tag pages (generation 1) and
// every commit that writes tag pages moves the seal one generation on,
// keeping it equal to the pages as stored, across reopenings.
func TestSealCommits(t *testing.T) {
	kv := store.NewMem()
	defer kv.Close()
	tp := newKeyed(t, kv, "v", keyedManifest(200))
	checkSeal(t, tp, 1)
	writeTags(t, tp, 3, tagsFor(3, 10, 5))   // one page, in part
	writeTags(t, tp, 60, tagsFor(60, 70, 6)) // across pages, one whole
	checkSeal(t, tp, 3)
	x := tp.NewTxn() // tuples only: their tag pages are sealed again
	if err := x.WriteRange(150, make([]byte, 8), make([]uint32, 1)); err != nil {
		t.Fatal(err)
	}
	if err := x.Commit(false); err != nil {
		t.Fatal(err)
	}
	checkSeal(t, tp, 4)
	writeTags(t, tp, 60, make([]store.KeyedTag, 70)) // discarded: sealed empty again
	checkSeal(t, tp, 5)
	checkSeal(t, reopenKeyed(t, kv, "v"), 5)
	// Commits without tag pages leave it alone.
	x = tp.NewTxn()
	if _, err := x.RecordIntent(5, make([]byte, 8), make([]uint32, 1)); err != nil {
		t.Fatal(err)
	}
	if err := x.Commit(true); err != nil {
		t.Fatal(err)
	}
	checkSeal(t, tp, 5)
}

// TestSealFindsPageReplay puts back an older version of a tag page and its
// tuple page (both valid under the page MAC): CheckSeal reports it, and
// goes on reporting it after more commits to the same page.
func TestSealFindsPageReplay(t *testing.T) {
	kv := store.NewMem()
	defer kv.Close()
	tp := newKeyed(t, kv, "v", keyedManifest(200))
	writeTags(t, tp, 0, tagsFor(0, 20, 5))
	kt, kp := volKey("v", 'K', u64(0)...), volKey("v", 'P', u64(0)...)
	oldTag, oldTup := kvGet(t, kv, kt), kvGet(t, kv, kp)
	writeTags(t, tp, 10, tagsFor(10, 1, 6)) // block 10 again
	checkSeal(t, tp, 3)
	kvPut(t, kv, kt, oldTag)
	kvPut(t, kv, kp, oldTup)
	tags := make([]store.KeyedTag, 20)
	if err := tp.ReadTags(0, tags); err != nil || tags[10].Gen != 5 {
		t.Fatalf("the page put back reads as valid: %v, generation %d", err, tags[10].Gen)
	}
	for _, tp := range []*store.Tuples{tp, reopenKeyed(t, kv, "v")} {
		gen, ok, err := tp.CheckSeal()
		var se *store.SealError
		if !errors.As(err, &se) || !errors.Is(err, store.ErrSealMismatch) || !ok || gen != 3 || se.Gen != 3 {
			t.Fatalf("CheckSeal after a page replay = %d, %v, %v; want a *SealError of generation 3", gen, ok, err)
		}
	}
	writeTags(t, tp, 30, tagsFor(30, 1, 7)) // same page, another block
	writeTags(t, tp, 100, tagsFor(100, 1, 8))
	if _, _, err := tp.CheckSeal(); !errors.Is(err, store.ErrSealMismatch) {
		t.Fatalf("CheckSeal after later commits: %v, want ErrSealMismatch", err)
	}
}

// TestSealRecord: a forged seal fails its MAC, a damaged one its CRC; a
// store without a seal (from before it existed) reports none, and gets
// one from its pages as stored at InitSeal or its next commit.
func TestSealRecord(t *testing.T) {
	kv := store.NewMem()
	defer kv.Close()
	// A volume of version 5, as before the empty runs: versions 4 and 5
	// have no runs.
	tp, err := store.CreateLegacy(kv, "v", keyedManifest(200), macKey, store.SealedSchemaVersion)
	if err != nil {
		t.Fatal(err)
	}
	writeTags(t, tp, 0, tagsFor(0, 20, 5))
	ks := volKey("v", 'S')
	sv := kvGet(t, kv, ks)
	if len(sv) != 80 || sv[0] != 'S' || sv[1] != 1 {
		t.Fatalf("seal record %x", sv)
	}
	forged := bytes.Clone(sv)
	forged[11]++ // generation + 1
	kvPut(t, kv, ks, resealCRC(forged))
	if _, _, err := reopenKeyed(t, kv, "v").CheckSeal(); !errors.Is(err, store.ErrPageMAC) {
		t.Fatalf("forged seal: %v, want ErrPageMAC", err)
	}
	forged[11]--
	forged[20] ^= 1
	kvPut(t, kv, ks, forged)
	if _, _, err := reopenKeyed(t, kv, "v").CheckSeal(); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("damaged seal: %v, want ErrCorrupt", err)
	}
	// No seal: a store of the version before it (schema 4). Its first seal
	// moves it to schema 5, so that programs that do not keep the seal
	// refuse it rather than write tag pages it does not cover.
	mk := volKey("v", 'M')
	schema := func() int {
		m, err := store.OpenTuples(kv, "v", nil)
		if err != nil {
			t.Fatal(err)
		}
		return m.Manifest().Schema
	}
	toV4 := func() {
		kvPut(t, kv, ks, nil)
		kvPut(t, kv, mk, bytes.Replace(kvGet(t, kv, mk), []byte(`"schema":5`), []byte(`"schema":4`), 1))
		if s := schema(); s != store.KeyedSchemaVersion {
			t.Fatalf("schema %d, want %d", s, store.KeyedSchemaVersion)
		}
	}
	toV4()
	tp = reopenKeyed(t, kv, "v")
	if gen, ok, err := tp.CheckSeal(); err != nil || ok || gen != 0 {
		t.Fatalf("CheckSeal without a seal = %d, %v, %v; want not sealed", gen, ok, err)
	}
	if err := tp.InitSeal(); err != nil {
		t.Fatal(err)
	}
	checkSeal(t, tp, 1)
	if s := schema(); s != store.SealedSchemaVersion {
		t.Fatalf("after InitSeal: schema %d, want %d", s, store.SealedSchemaVersion)
	}
	toV4()
	tp = reopenKeyed(t, kv, "v")
	writeTags(t, tp, 50, tagsFor(50, 1, 9))
	checkSeal(t, tp, 1)
	checkSeal(t, reopenKeyed(t, kv, "v"), 1)
	if s := schema(); s != store.SealedSchemaVersion {
		t.Fatalf("after the first sealing commit: schema %d, want %d", s, store.SealedSchemaVersion)
	}
	// Without the page key the seal is not checked.
	ro, err := store.OpenTuples(kv, "v", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ro.CheckSeal(); !errors.Is(err, store.ErrKeyed) {
		t.Fatalf("CheckSeal without the key: %v, want ErrKeyed", err)
	}
}

// TestSealDeleted: a sealed keyed volume (schema 5, or 7 and later) whose
// seal record is deleted is not sealed again from its tag pages as stored
// (which would take back a tag page put back beside the deletion): every
// use of the seal fails with a *SealError marked Missing.
func TestSealDeleted(t *testing.T) {
	for _, schema := range []int{store.SealedSchemaVersion, store.RunsSchemaVersion} {
		kv := store.NewMem()
		var tp *store.Tuples
		var err error
		if schema == store.RunsSchemaVersion {
			tp, err = store.CreateKeyedTuples(kv, "v", keyedManifest(200), macKey)
		} else {
			tp, err = store.CreateLegacy(kv, "v", keyedManifest(200), macKey, schema)
		}
		if err != nil {
			t.Fatal(err)
		}
		writeTags(t, tp, 0, tagsFor(0, 20, 5))
		kvPut(t, kv, volKey("v", 'S'), nil)
		tp = reopenKeyed(t, kv, "v")
		var se *store.SealError
		if _, _, err := tp.CheckSeal(); !errors.As(err, &se) || !se.Missing || !errors.Is(err, store.ErrSealMismatch) {
			t.Fatalf("schema %d: CheckSeal of a volume whose seal was deleted: %v", schema, err)
		}
		if err := tp.InitSeal(); !errors.As(err, &se) {
			t.Fatalf("schema %d: InitSeal sealed again: %v", schema, err)
		}
		kv.Close()
	}
}
