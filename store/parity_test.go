package store_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/difctl/difctl/store"
)

// TestParityRecords: the parity configuration is kept with the feature
// "parity" (a volume with the feature and no record, or a record without
// the feature, is corrupt); checksum pages and parity intents are kept,
// listed in order, and deleted with the configuration; a configuration
// that does not fit the volume is refused; a volume of an older schema
// refuses parity.
func TestParityRecords(t *testing.T) {
	kv := store.NewMem()
	defer kv.Close()
	man := store.NewManifest("f", 512, 8, 64*512, "d")
	tp, err := store.CreateTuples(kv, "v", man)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := tp.Parity(); ok || err != nil {
		t.Fatalf("new volume: parity %v, %v", ok, err)
	}
	cfg := store.ParityConfig{Data: 4, Parity: 2, Depth: 2, Path: "img.difpar", ID: "0123456789abcdef0123456789abcdef", Added: time.Unix(1, 0).UTC()}
	for _, bad := range []func(c *store.ParityConfig){
		func(c *store.ParityConfig) { c.Parity = 5 },
		func(c *store.ParityConfig) { c.Data = 0 },
		func(c *store.ParityConfig) { c.Data, c.Parity = 200, 57 },
		func(c *store.ParityConfig) { c.Depth = 0 },
		func(c *store.ParityConfig) { c.Depth = 65 },
		func(c *store.ParityConfig) { c.Path = "" },
		func(c *store.ParityConfig) { c.ID = "xyz" },
	} {
		c := cfg
		bad(&c)
		if err := tp.SetParity(c, true); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("SetParity(%+v) = %v, want ErrInvalid", c, err)
		}
	}
	if err := tp.SetParity(cfg, true); err != nil {
		t.Fatal(err)
	}
	x := tp.NewTxn()
	for _, s := range []int64{9, 2, 5} {
		if err := x.MarkParityDirty(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.SetParitySums(0, []byte("page0")); err != nil {
		t.Fatal(err)
	}
	if err := x.Commit(true); err != nil {
		t.Fatal(err)
	}
	tp2, err := store.OpenTuples(kv, "v", nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := tp2.Manifest(); !m.HasFeature(store.FeatureParity) {
		t.Fatalf("features %q", tp2.Manifest().Features)
	}
	got, ok, err := tp2.Parity()
	if err != nil || !ok || got != cfg {
		t.Fatalf("Parity = %+v, %v, %v; want %+v", got, ok, err, cfg)
	}
	if d, err := tp2.ParityDirty(); err != nil || !slices.Equal(d, []int64{2, 5, 9}) {
		t.Fatalf("ParityDirty = %v, %v", d, err)
	}
	if v, err := tp2.ParitySums(0); err != nil || string(v) != "page0" {
		t.Fatalf("ParitySums(0) = %q, %v", v, err)
	}
	if _, err := tp2.ParitySums(1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ParitySums(1) = %v, want ErrNotFound", err)
	}
	x = tp2.NewTxn()
	if err := x.ClearParityDirty(5); err != nil {
		t.Fatal(err)
	}
	if err := x.Commit(true); err != nil {
		t.Fatal(err)
	}
	if d, err := tp2.ParityDirty(); err != nil || !slices.Equal(d, []int64{2, 9}) {
		t.Fatalf("ParityDirty after a clear = %v, %v", d, err)
	}
	// A damaged parity intent and a damaged or missing configuration are
	// corruption.
	dk := volKey("v", 'D', u64(2)...)
	kvPut(t, kv, dk, []byte("??"))
	if _, err := tp2.ParityDirty(); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("damaged parity intent: %v", err)
	}
	kvPut(t, kv, dk, []byte("pd1"))
	pk := volKey("v", 'X', []byte("parity")...)
	saved := kvGet(t, kv, pk)
	kvPut(t, kv, pk, bytes.Replace(saved, []byte(`"k":4`), []byte(`"k":1`), 1))
	if _, _, err := tp2.Parity(); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("2 parity blocks for 1 data block: %v", err)
	}
	kvPut(t, kv, pk, nil)
	if _, _, err := tp2.Parity(); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("missing record: %v", err)
	}
	kvPut(t, kv, pk, saved)
	// Removal drops everything.
	if err := tp2.RemoveParity(true); err != nil {
		t.Fatal(err)
	}
	if m := tp2.Manifest(); m.HasFeature(store.FeatureParity) {
		t.Fatal("feature kept")
	}
	if _, ok, err := tp2.Parity(); ok || err != nil {
		t.Fatalf("after removal: %v, %v", ok, err)
	}
	if d, err := tp2.ParityDirty(); err != nil || len(d) != 0 {
		t.Fatalf("after removal: dirty %v, %v", d, err)
	}
	if _, err := tp2.ParitySums(0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after removal: sums %v", err)
	}
	kvPut(t, kv, pk, saved)
	if _, _, err := tp2.Parity(); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("record without the feature: %v", err)
	}
	kvPut(t, kv, pk, nil)

	// Older schemas refuse parity.
	old, err := store.CreateLegacy(kv, "old", man, nil, store.DenseSchemaVersion)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.SetParity(cfg, true); !errors.Is(err, store.ErrUnsupported) {
		t.Fatalf("schema 2: %v, want ErrUnsupported", err)
	}
}

// FuzzParityRecords stores arbitrary bytes as the parity configuration
// and as a parity intent of a volume with the feature parity: reading them
// back never panics, and either succeeds with a configuration that fits
// the volume or fails with ErrCorrupt.
func FuzzParityRecords(f *testing.F) {
	man := store.NewManifest("f", 512, 8, 64*512, "d")
	f.Add([]byte(`{"kind":"difctl.store.parity","k":4,"m":2,"depth":2,"path":"p","id":"0123456789abcdef0123456789abcdef","added":"2026-01-01T00:00:00Z"}`), []byte("pd1"))
	f.Add([]byte(`{"kind":"difctl.store.parity","k":300,"m":2}`), []byte{})
	f.Add([]byte("{"), []byte("pd2"))
	f.Fuzz(func(t *testing.T, cfg, dirty []byte) {
		kv := store.NewMem()
		defer kv.Close()
		tp, err := store.CreateTuples(kv, "v", man)
		if err != nil {
			t.Fatal(err)
		}
		good := store.ParityConfig{Data: 4, Parity: 2, Depth: 2, Path: "p", ID: "0123456789abcdef0123456789abcdef"}
		if err := tp.SetParity(good, false); err != nil {
			t.Fatal(err)
		}
		b := kv.NewBatch()
		b.Set(volKey("v", 'X', []byte("parity")...), cfg)
		b.Set(volKey("v", 'D', u64(3)...), dirty)
		if err := b.Commit(false); err != nil {
			t.Fatal(err)
		}
		c, ok, err := tp.Parity()
		switch {
		case err != nil && !errors.Is(err, store.ErrCorrupt):
			t.Fatalf("Parity: %v is neither nil nor ErrCorrupt", err)
		case err == nil && (!ok || c.Parity < 1 || c.Parity > c.Data || c.Data+c.Parity > 256 || c.Depth < 1 || c.Depth > 64):
			t.Fatalf("Parity accepted %+v", c)
		}
		if _, err := tp.ParityDirty(); err != nil && !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("ParityDirty: %v is neither nil nor ErrCorrupt", err)
		}
	})
}
