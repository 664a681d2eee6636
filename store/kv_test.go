package store_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/difctl/difctl/store"
	_ "github.com/difctl/difctl/store/pebble" // pebble:PATH and plain paths
	"github.com/difctl/difctl/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Run("backend=mem", func(t *testing.T) {
		storetest.RunConformance(t, storetest.Backend{
			Open: func(t *testing.T) store.KV { return store.NewMem() },
		})
	})
}

// TestOpenURL: Open by URL, with the default backend (store/pebble) linked.
func TestOpenURL(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, url string
		wantErr   error  // nil: must open
		wantText  string // substring of the error
	}{
		{name: "scheme=mem", url: "mem:"},
		{name: "scheme=pebble", url: "pebble:" + filepath.Join(dir, "db1")},
		{name: "scheme=none", url: filepath.Join(dir, "db2")},
		{name: "scheme=unknown", url: "redis://localhost", wantErr: store.ErrUnsupported, wantText: `unknown scheme "redis"`},
		{name: "scheme=pebble/path=empty", url: "pebble:", wantErr: store.ErrInvalid, wantText: `open "pebble:": empty pebble path`},
		{name: "scheme=none/path=empty", url: "", wantErr: store.ErrInvalid, wantText: `open "": empty pebble path`},
		{name: "scheme=mem/path=given", url: "mem:foo", wantErr: store.ErrInvalid, wantText: "mem: takes no path"},
		{name: "scheme=pebble/path=under-file", url: "pebble:" + filepath.Join(file, "db"), wantText: "store: open pebble:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv, err := store.Open(tc.url)
			if tc.wantErr == nil && tc.wantText == "" {
				if err != nil {
					t.Fatalf("Open(%q): %v", tc.url, err)
				}
				if err := kv.Close(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				kv.Close()
				t.Fatalf("Open(%q) succeeded, want error", tc.url)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("Open(%q) = %v, want %v", tc.url, err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantText) || !strings.HasPrefix(err.Error(), "store: ") {
				t.Errorf("Open(%q) error %q, want prefix \"store: \" and %q", tc.url, err, tc.wantText)
			}
		})
	}
	// A plain path names the store pebble:PATH names.
	kv, err := store.OpenWith(filepath.Join(dir, "db1"), store.OpenOptions{})
	if err != nil {
		t.Fatalf("plain path of an existing store: %v", err)
	}
	kv.Close()
	if s := store.Schemes(); !slices.Contains(s, "pebble") || !slices.Contains(s, "mem") {
		t.Errorf("Schemes() = %v, want mem and pebble", s)
	}
}
