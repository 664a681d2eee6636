package store

import (
	"errors"
	"path/filepath"
	"testing"
)

// Pebble's fatal errors do not exit the process: the logger records the
// failure, the call and every later one return it, and Close still closes.
func TestPebbleFatalfRecorded(t *testing.T) {
	kv, err := Open("pebble:" + filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	p := kv.(*pebbleKV)
	p.fault.Fatalf("pebble: fatal commit error: %v", errors.New("disk on fire"))
	if _, err := kv.Get([]byte("k")); !errors.Is(err, ErrFailed) {
		t.Errorf("Get after Fatalf: %v, want ErrFailed", err)
	}
	b := kv.NewBatch()
	b.Set([]byte("k"), []byte("v"))
	if err := b.Commit(true); !errors.Is(err, ErrFailed) {
		t.Errorf("Commit after Fatalf: %v, want ErrFailed", err)
	}
	if _, err := kv.NewIter(nil, nil); !errors.Is(err, ErrFailed) {
		t.Errorf("NewIter after Fatalf: %v", err)
	}
	if _, err := NewBulkWriter(kv); !errors.Is(err, ErrFailed) {
		t.Errorf("NewBulkWriter after Fatalf: %v", err)
	}
	kv.Close()

	// A corruption reported through Fatalf (Pebble's MustExist) is typed.
	kv, err = Open("pebble:" + filepath.Join(t.TempDir(), "db2"))
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	kv.(*pebbleKV).fault.Fatalf("open 000005.sst: file does not exist")
	var cf *CorruptFileError
	if _, err := kv.Get([]byte("k")); !errors.As(err, &cf) {
		t.Errorf("Get after a missing-file Fatalf: %v, want a *CorruptFileError", err)
	}
}
