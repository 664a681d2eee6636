package pebble

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/difctl/difctl/store"
)

// Pebble's fatal errors do not exit the process: the logger records the
// failure, the call and every later one return it, and Close still closes.
func TestFatalfRecorded(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "db"), store.OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	p := s.(*kv)
	p.fault.Fatalf("pebble: fatal commit error: %v", errors.New("disk on fire"))
	if _, err := s.Get([]byte("k")); !errors.Is(err, store.ErrFailed) {
		t.Errorf("Get after Fatalf: %v, want ErrFailed", err)
	}
	b := s.NewBatch()
	b.Set([]byte("k"), []byte("v"))
	if err := b.Commit(true); !errors.Is(err, store.ErrFailed) {
		t.Errorf("Commit after Fatalf: %v, want ErrFailed", err)
	}
	if _, err := s.NewIter(nil, nil); !errors.Is(err, store.ErrFailed) {
		t.Errorf("NewIter after Fatalf: %v", err)
	}
	if _, err := store.NewBulkWriter(s); !errors.Is(err, store.ErrFailed) {
		t.Errorf("NewBulkWriter after Fatalf: %v", err)
	}
	s.Close()

	// A corruption reported through Fatalf (Pebble's MustExist) is typed.
	s, err = Open(filepath.Join(t.TempDir(), "db2"), store.OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.(*kv).fault.Fatalf("open 000005.sst: file does not exist")
	var cf *store.CorruptFileError
	if _, err := s.Get([]byte("k")); !errors.As(err, &cf) {
		t.Errorf("Get after a missing-file Fatalf: %v, want a *store.CorruptFileError", err)
	}
}
