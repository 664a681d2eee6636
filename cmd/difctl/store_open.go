package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/scrub"
	"github.com/difctl/difctl/store"
)

// Opening the store of an image: its URL, the mode (read-only, read-write,
// create) and the engine's sizes, and the refusal of a store that
// protects nothing.

// Store-backed images: a plain image (or block device) whose tuples live in
// a store, by default the Pebble database IMAGE.difdb beside it. The
// volume of a protected image is blockdev.DefaultVolumeName; the store of
// an image with its own PI (scrub --interleaved, --dix) keeps only scrub
// state, as a tuple-less volume (scrub.ImageStateVolume).
const (
	storeSuffix = ".difdb"
	scrubName   = "difctl"
	toolName    = "difctl"
)

// storeURL returns the store URL of image: given, or the default
// pebble:IMAGE.difdb.
func storeURL(image, given string) string {
	if given != "" {
		return given
	}
	return "pebble:" + image + storeSuffix
}

// storePath returns the directory of a Pebble store URL, or "" for other
// schemes.
func storePath(url string) string {
	scheme, rest, ok := strings.Cut(url, ":")
	switch {
	case !ok || strings.ContainsAny(scheme, `/\.`) || len(scheme) < 2:
		return url
	case scheme == "pebble":
		return rest
	}
	return ""
}

// errNotProtected reports an image without a store.
type notProtectedError struct {
	image, url string
	dir        bool // the image is a directory
}

// notProtected returns the error of an image without a store (or of a
// directory named as an image).
func notProtected(image, url string) error {
	fi, err := os.Stat(image)
	return &notProtectedError{image: image, url: url, dir: err == nil && fi.IsDir()}
}

func (e *notProtectedError) Error() string {
	if e.dir {
		return fmt.Sprintf("%s is a directory, not an image or a block device", e.image)
	}
	return fmt.Sprintf("%s is not protected: no store at %s (run difctl protect %s first, or name the store with --store)", e.image, e.url, e.image)
}

// storeMode is how a command opens its store.
type storeMode int

const (
	// storeRead opens an existing store read-only: verify, inspect and
	// convert's export read the store and never change it, and may run
	// together and as a user who may only read the store.
	storeRead storeMode = iota
	// storeWrite opens an existing store read-write (scrub, write, discard,
	// remap, inject, and a read whose volume needs crash recovery).
	storeWrite
	// storeCreate opens a store read-write, creating it if there is none:
	// only protect, convert's import and scrub of an image with its own PI.
	storeCreate
)

// openStore opens the store at url. Only storeCreate may create one: an
// existing store is never reinitialised, and a directory that is not a
// store is refused untouched.
func openStore(image, url string, mode storeMode) (store.KV, error) {
	return openStoreSized(image, url, mode, store.OpenOptions{})
}

// openStoreSized is openStore with the engine's memory sizes of sizes
// (CacheBytes, MemTableBytes; difctl serve).
func openStoreSized(image, url string, mode storeMode, sizes store.OpenOptions) (store.KV, error) {
	var kv store.KV
	var err error
	if storePath(url) != "" {
		sizes.Create, sizes.ReadOnly = mode == storeCreate, mode == storeRead
		if sizes.MemTableBytes == 0 && mode != storeRead {
			sizes.MemTableBytes = memTableFor(image)
		}
		kv, err = store.OpenWith(url, sizes)
	} else {
		// Other backends as registered; a reader does not take etcd's
		// writer lock, so verifies and inspects run together.
		kv, err = store.OpenWith(url, store.OpenOptions{Create: true, ReadOnly: mode == storeRead, OnCommit: sizes.OnCommit})
	}
	if err != nil {
		return nil, storeOpenError(image, url, err)
	}
	return kv, nil
}

// memTableFor sizes the Pebble memtable of a store opened to write the
// tuples of image: the engine preallocates each write-ahead log at 110% of
// the memtable, on disk, so its 64 MiB default made even the store of a
// 1 MiB image take 71 MiB. The tuples of an image of n bytes are at most
// 12n/512 bytes (512-byte blocks, 8-byte tuples and 4-byte sums), a 43rd
// of the image; the memtable gets an eighth of that (a write fills it with
// the pages it rewrites, and a flush of a few MiB is cheap), rounded up to
// a power of two, from 1 MiB (the least the store takes) to 64 MiB, so the
// log's preallocation stays within a fifth of the volume's full tuples.
// 0 (the backend's default) where the size is unknown (a block device:
// stat reports 0).
func memTableFor(image string) int64 {
	fi, err := os.Stat(image)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() <= 0 {
		return 0
	}
	want := fi.Size() / 512 * 12 / 8
	m := int64(1 << 20)
	for m < want && m < 64<<20 {
		m <<= 1
	}
	return m
}

// checkProtected explains a store that holds no protected volume.
func checkProtected(kv store.KV, image, url string) error {
	vols, err := store.Volumes(kv)
	if err != nil {
		return storeErr(url, err)
	}
	has := map[string]bool{}
	for _, v := range vols {
		has[v] = true
	}
	switch {
	case has[blockdev.DefaultVolumeName]:
		return nil
	case has[scrub.ImageStateVolume]:
		t, err := store.OpenTuples(kv, scrub.ImageStateVolume, nil)
		if err == nil {
			f := t.Manifest().Format
			return usageErrorf("%s keeps the scrub state of %s as an image with its own PI (%s), not its tuples: add --interleaved %s or --dix",
				url, image, f, strings.TrimSuffix(f, ":dix"))
		}
	}
	return notProtected(image, url)
}

// newStore is a store opened, and created if need be, for a command that
// may have to remove it again when it kept nothing.
type newStore struct {
	kv      store.KV
	dir     string // the store's directory; "" for other backends
	existed bool   // the directory was there before
	open    bool
}

func openNewStore(image, url string) (*newStore, error) {
	ns := &newStore{dir: storePath(url)}
	if ns.dir != "" {
		_, err := os.Stat(ns.dir)
		ns.existed = err == nil
	}
	kv, err := openStore(image, url, storeCreate)
	if err != nil {
		return nil, err
	}
	ns.kv, ns.open = kv, true
	return ns, nil
}

// remove closes the store and removes its directory if this command
// created it.
func (ns *newStore) remove() {
	if !ns.existed && ns.dir != "" {
		ns.close()
		os.RemoveAll(ns.dir)
	}
}

func (ns *newStore) close() {
	if ns.open {
		ns.kv.Close()
		ns.open = false
	}
}
