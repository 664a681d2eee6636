package store

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestManifestMaxPages: a device larger than MaxPages pages is refused at
// once, at creation (ErrInvalid) and in a stored manifest (ErrCorrupt),
// before any page is written; the largest allowed size passes.
func TestManifestMaxPages(t *testing.T) {
	limit := int64(MaxPages) * DefaultPageTuples * 512
	ok := NewManifest("512+8", 512, 8, limit, "")
	ok.normalize()
	if err := ok.validate(); err != nil {
		t.Fatalf("%d bytes: %v", limit, err)
	}
	for _, size := range []int64{limit + 512, 1 << 62} {
		m := NewManifest("512+8", 512, 8, size, "")
		t0 := time.Now()
		_, err := CreateTuples(NewMem(), "v", m)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "at most 268435456 pages") {
			t.Errorf("create, %d bytes: %v, want ErrInvalid naming the limit", size, err)
		}
		if d := time.Since(t0); d > time.Second {
			t.Errorf("create, %d bytes: refused after %v", size, d)
		}
		m.normalize()
		m.Schema = 2
		m.Created = time.Now()
		raw, err := encodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeManifest("v", raw); !errors.Is(err, ErrCorrupt) {
			t.Errorf("stored manifest, %d bytes: %v, want ErrCorrupt", size, err)
		}
	}
}
