package blockdev

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// TestOpenHostileManifest: a stored manifest that no volume could have
// written (a format dif does not know or that is not a DIX format, an
// initial ref tag wider than the format's ref tag) is a damaged store:
// Open fails with an error matching store.ErrCorrupt that names the
// record, never with a volume whose every block fails.
func TestOpenHostileManifest(t *testing.T) {
	for _, tc := range []struct {
		name, format string
		field        string
		value        any
		want         string
	}{
		{"format=banana", "512+8", "format", "banana", `format "banana"`},
		{"format=interleaved", "512+8", "format", "512+8:crc16:type1:pi-last:interleaved", "not a DIX format"},
		{"ref=2^64-1", "512+8", "initial_ref_tag", uint64(1<<64 - 1), "does not fit the format's 32-bit ref tag"},
		{"ref=2^48, 64-bit guard", "4096+16:crc64", "initial_ref_tag", uint64(1 << 48), "does not fit the format's 48-bit ref tag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := dif.MustFormat(tc.format)
			dev, err := device.NewMem(int64(64*f.BlockSize()), f.BlockSize())
			if err != nil {
				t.Fatal(err)
			}
			kv := store.NewMem()
			v, err := Create(context.Background(), dev, kv, CreateOptions{Format: f})
			if err != nil {
				t.Fatal(err)
			}
			v.Close()
			key := append([]byte{'T', byte(len(DefaultVolumeName))}, DefaultVolumeName...)
			key = append(key, 'M')
			raw, err := kv.Get(key)
			if err != nil {
				t.Fatalf("the manifest record: %v", err)
			}
			var m map[string]any
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			m[tc.field] = tc.value
			raw, _ = json.Marshal(m)
			b := kv.NewBatch()
			b.Set(key, raw)
			if err := b.Commit(true); err != nil {
				t.Fatal(err)
			}
			_, err = Open(context.Background(), dev, kv, Options{})
			if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "manifest") {
				t.Fatalf("open: %v, want store.ErrCorrupt naming the manifest and %q", err, tc.want)
			}
		})
	}
}
