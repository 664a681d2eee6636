package store

import (
	"errors"
	"strings"
	"testing"
)

// TestOpenUnlinked: without the backend of store/pebble, a plain path and
// pebble: fail with ErrUnsupported, saying what to import. (The test
// binary links store/pebble; the test hides its registration.)
func TestOpenUnlinked(t *testing.T) {
	registry.mu.Lock()
	saved := registry.openers
	registry.openers = nil
	registry.mu.Unlock()
	defer func() {
		registry.mu.Lock()
		registry.openers = saved
		registry.mu.Unlock()
	}()
	for _, url := range []string{"/var/lib/difctl/meta", "pebble:/var/lib/difctl/meta"} {
		kv, err := Open(url)
		if err == nil {
			kv.Close()
			t.Fatalf("Open(%q) opened a store with no backend linked", url)
		}
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "import github.com/difctl/difctl/store/pebble") {
			t.Errorf("Open(%q) = %v, want ErrUnsupported naming store/pebble", url, err)
		}
	}
	if s := Schemes(); len(s) != 1 || s[0] != "mem" {
		t.Errorf("Schemes() = %v, want [mem]", s)
	}
}
