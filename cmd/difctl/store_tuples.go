package main

import (
	"fmt"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// storeTuples is the store of a protected image opened for its tuples
// alone, without a Volume: inject, inspect and remap read or edit the
// tuples and the manifest directly.
type storeTuples struct {
	url string
	kv  store.KV
	t   *store.Tuples
	m   store.Manifest
	f   dif.Format // the manifest's format
	// borrowed: the store of a volume difctl serve serves, lent to an
	// inspect its control socket runs (control.go); Close leaves it open.
	borrowed bool
}

// openStoreTuples opens the store of image at url in mode, checks that it
// protects an image, opens its tuples with open (store.OpenTuples when nil)
// and parses the manifest's format. The caller closes the store.
func openStoreTuples(image, url string, mode storeMode, open func(store.KV) (*store.Tuples, error)) (*storeTuples, error) {
	if open == nil {
		open = func(kv store.KV) (*store.Tuples, error) {
			return store.OpenTuples(kv, blockdev.DefaultVolumeName, nil)
		}
	}
	kv, err := openStore(image, url, mode)
	if err != nil {
		return nil, err
	}
	st, err := func() (*storeTuples, error) {
		if err := checkProtected(kv, image, url); err != nil {
			return nil, err
		}
		t, err := open(kv)
		if err != nil {
			return nil, volumeError(image, url, err)
		}
		return newStoreTuples(url, kv, t)
	}()
	if err != nil {
		kv.Close()
		return nil, err
	}
	return st, nil
}

// newStoreTuples is the storeTuples of the volume t of the store kv at
// url: its manifest, and the manifest's format parsed.
func newStoreTuples(url string, kv store.KV, t *store.Tuples) (*storeTuples, error) {
	m := t.Manifest()
	f, err := dif.Parse(m.Format)
	if err != nil {
		return nil, fmt.Errorf("store %s is corrupt: manifest format %q: %w", url, m.Format, err)
	}
	return &storeTuples{url: url, kv: kv, t: t, m: m, f: f}, nil
}

// Close closes the store, unless borrowed.
func (s *storeTuples) Close() error {
	if s.borrowed {
		return nil
	}
	return s.kv.Close()
}
