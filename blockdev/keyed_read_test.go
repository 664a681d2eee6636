package blockdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/store"
)

// readOutcome is what a ReadAt gave: the data, or the error with every
// problem it lists.
func readOutcome(v *Volume, buf []byte, off int64) string {
	_, err := v.ReadAt(buf, off)
	if err == nil {
		return fmt.Sprintf("ok %x", crc32c.Checksum(buf))
	}
	var ie *IntegrityError
	if !errors.As(err, &ie) {
		return "error " + err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "integrity %s [%d,+%d) failed %d:", ie.Op, ie.LBA, ie.N, ie.Failed)
	for _, p := range ie.Problems {
		fmt.Fprintf(&b, "\n  %d %s %#x %#x %v %v", p.LBA, p.Kind, p.Expected, p.Actual, p.Transient, p.Err)
	}
	return b.String()
}

// keyedFileVolume creates a keyed volume of format f over an image file of
// blocks blocks (a mapped device) in a memory store, and returns it open
// with its device, store and key, all closed when t ends.
func keyedFileVolume(t *testing.T, f dif.Format, blocks int) (*Volume, *device.File, store.KV, *Key) {
	t.Helper()
	bs := f.BlockSize()
	path := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(path, blocktest.Pattern(blocks*bs, 5), 0o644); err != nil {
		t.Fatal(err)
	}
	dev, err := device.OpenFile(path, device.FileOptions{BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	kv := store.NewMem()
	t.Cleanup(func() { kv.Close() })
	key := testKey(t, 4)
	v, err := Create(context.Background(), dev, kv, CreateOptions{Format: f, Options: Options{Key: key}})
	if err != nil {
		t.Fatal(err)
	}
	return v, dev, kv, key
}

// openKeyedRO opens the keyed volume read-only with key, without re-reads,
// closed when t ends; crc sets Options.KeyedCRC.
func openKeyedRO(t *testing.T, dev *device.File, kv store.KV, key *Key, crc bool) *Volume {
	t.Helper()
	v, err := Open(context.Background(), dev, kv, Options{Key: key, Rereads: -1, ReadOnly: true, KeyedCRC: crc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

// The keyed read path (read_keyed.go) against the ordinary one
// (Options.KeyedCRC): on a clean volume reads take the keyed path and give
// the same data; after each kind of damage or attack, and on unwritten
// blocks, every read gives exactly what the ordinary path gives (the same
// data, or the same error with the same problems), because the keyed path
// passes any run it cannot vouch for to the ordinary one.
func TestKeyedReadPath(t *testing.T) {
	for _, format := range []string{"512+8", "4096+8", "4096+16:crc64"} {
		t.Run("format="+format, func(t *testing.T) {
			f := dif.MustFormat(format)
			bs := f.BlockSize()
			const blocks = 1024
			cases := []struct {
				name   string
				change func(t *testing.T, dev *device.File, kv store.KV, v *Volume)
				keyed  bool // every read takes the keyed path
			}{
				{"clean", nil, true},
				{"device-bit-flip", func(t *testing.T, dev *device.File, kv store.KV, v *Volume) {
					b := make([]byte, bs)
					dev.ReadAt(b, 7*int64(bs))
					b[100] ^= 0x10
					if _, err := dev.WriteAt(b, 7*int64(bs)); err != nil {
						t.Fatal(err)
					}
				}, false},
				{"attacker-recomputed-crc", func(t *testing.T, dev *device.File, kv store.KV, v *Volume) {
					b := make([]byte, bs)
					dev.ReadAt(b, 7*int64(bs))
					b[100] ^= 0x10
					tamper(t, dev, kv, f, 7, b)
				}, false},
				{"moved-block", func(t *testing.T, dev *device.File, kv store.KV, v *Volume) {
					b := make([]byte, bs)
					dev.ReadAt(b, 301*int64(bs))
					tamper(t, dev, kv, f, 300, b)
				}, false},
				{"tag-page-deleted", func(t *testing.T, dev *device.File, kv store.KV, v *Volume) {
					kvDelete(t, kv, tagPageKey(DefaultVolumeName, 0))
				}, false},
				{"tag-page-damaged", func(t *testing.T, dev *device.File, kv store.KV, v *Volume) {
					// A bit flipped in a record, its CRC not fixed: a damaged store.
					val, err := kv.Get(tagPageKey(DefaultVolumeName, 0))
					if err != nil {
						t.Fatal(err)
					}
					val = bytes.Clone(val)
					val[20] ^= 1
					kvSet(t, kv, tagPageKey(DefaultVolumeName, 0), val)
				}, false},
				{"tuple-page-damaged", func(t *testing.T, dev *device.File, kv store.KV, v *Volume) {
					// A damaged store: the part's own tuple read fails,
					// and the ordinary path reports the corruption.
					val, err := kv.Get(tuplePageKey(DefaultVolumeName, 0))
					if err != nil {
						t.Fatal(err)
					}
					val = bytes.Clone(val)
					val[len(val)/2] ^= 1
					kvSet(t, kv, tuplePageKey(DefaultVolumeName, 0), val)
				}, false},
				{"discarded", func(t *testing.T, dev *device.File, kv store.KV, v *Volume) {
					if err := v.Discard(64*int64(bs), 16*int64(bs)); err != nil {
						t.Fatal(err)
					}
				}, false},
			}
			for _, c := range cases {
				t.Run("case="+c.name, func(t *testing.T) {
					v, dev, kv, _ := keyedFileVolume(t, f, blocks)
					// Runs of two generations.
					if _, err := v.WriteAt(blocktest.Pattern(40*bs, 6), 100*int64(bs)); err != nil {
						t.Fatal(err)
					}
					if c.name == "discarded" {
						c.change(t, dev, kv, v)
					}
					if err := v.Close(); err != nil {
						t.Fatal(err)
					}
					if c.change != nil && c.name != "discarded" {
						c.change(t, dev, kv, nil)
					}
					key := testKey(t, 4)
					fast, slow := openKeyedRO(t, dev, kv, key, false), openKeyedRO(t, dev, kv, key, true)
					buf := device.AlignedBuffer(blocks * bs)
					for _, r := range [][2]int{{0, blocks}, {0, 256}, {256, 256}, {60, 24}, {98, 8}, {7, 1}, {299, 3}} {
						runs, falls := keyedReadRuns.Load(), keyedReadFallbacks.Load()
						got := readOutcome(fast, buf[:r[1]*bs], int64(r[0]*bs))
						took := keyedReadRuns.Load() > runs
						fell := keyedReadFallbacks.Load() > falls
						runs = keyedReadRuns.Load()
						want := readOutcome(slow, buf[:r[1]*bs], int64(r[0]*bs))
						if keyedReadRuns.Load() != runs {
							t.Fatal("a KeyedCRC volume took the keyed read path")
						}
						if c.name == "tuple-page-damaged" && r[0] < int(fast.Manifest().PageTuples) && !strings.Contains(want, "corrupt") {
							t.Fatalf("read [%d,+%d) over a damaged tuple page: %s, want a store corruption error", r[0], r[1], want)
						}
						if got != want {
							t.Fatalf("read [%d,+%d):\nkeyed path: %s\nordinary:   %s", r[0], r[1], got, want)
						}
						if c.keyed && (!took || fell) {
							t.Fatalf("read [%d,+%d) of a clean volume: keyed path taken %v, fell back %v", r[0], r[1], took, fell)
						}
						if !c.keyed && !strings.HasPrefix(want, "ok") && !fell {
							t.Fatalf("read [%d,+%d) failed without falling back: %s", r[0], r[1], got)
						}
					}
				})
			}
		})
	}
}

// tamper puts data at lba on the device with its tuple and sector sum
// recomputed in the store, as an attacker without the key can.
func tamper(t *testing.T, dev *device.File, kv store.KV, f dif.Format, lba int64, data []byte) {
	t.Helper()
	if _, err := dev.WriteAt(data, lba*int64(len(data))); err != nil {
		t.Fatal(err)
	}
	tp, err := store.OpenTuples(kv, DefaultVolumeName, nil)
	if err != nil {
		t.Fatal(err)
	}
	fixTuple(t, tp, f, lba, data)
}

// What the keyed read path gives up, and what still sees it: a tuple the
// volume itself committed, under its key, that does not match the data
// (a bug of its own; no attacker without the key can seal one) is not
// seen by a read on the keyed path, whose tag and page MAC verify; it is
// seen by a read with Options.KeyedCRC and by CheckRun, which compute the
// guard.
func TestKeyedReadPathTrustsSealedTuples(t *testing.T) {
	f := dif.MustFormat("4096+8")
	bs := f.BlockSize()
	v, dev, kv, key := keyedFileVolume(t, f, 64)
	// The volume's own store, with the page key: a wrong guard for block 5,
	// its tag page sealed again by the commit.
	tuples := make([]byte, f.TupleSize())
	sums := make([]uint32, 1)
	w := store.NewBitmap(1)
	if _, err := v.tup.ReadRange(5, tuples, sums, w); err != nil {
		t.Fatal(err)
	}
	tuples[0] ^= 0xff
	x := v.tup.NewTxn()
	if err := x.WriteRange(5, tuples, sums); err != nil {
		t.Fatal(err)
	}
	if err := x.Commit(true); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	fast, slow := openKeyedRO(t, dev, kv, key, false), openKeyedRO(t, dev, kv, key, true)
	buf := device.AlignedBuffer(8 * bs)
	if _, err := fast.ReadAt(buf, 0); err != nil {
		t.Fatalf("keyed read path: %v, want the read to pass (tag and page MAC verify)", err)
	}
	want := make([]byte, 8*bs)
	dev.ReadAt(want, 0)
	if !bytes.Equal(buf, want) {
		t.Fatal("keyed read path returned other bytes than the device's")
	}
	if _, err := slow.ReadAt(buf, 0); !errors.Is(err, dif.ErrIntegrity) || errors.Is(err, ErrKeyedTag) {
		t.Fatalf("KeyedCRC read: %v, want a guard failure only", err)
	}
	var probs []Problem
	if _, err := fast.CheckRun(context.Background(), 0, 8, make([]byte, 8*bs), CheckOptions{}, func(p Problem) { probs = append(probs, p) }); err != nil {
		t.Fatal(err)
	}
	if len(probs) == 0 || probs[0].LBA != 5 || probs[0].Kind == KindKeyedTag {
		t.Fatalf("CheckRun problems %v, want block 5's guard", probs)
	}
}

// A keyed WriteAt computes the tuples and the tags of a piece from one
// private copy: a caller that changes its buffer during the call (here
// between the tuples and the tags) leaves a volume whose every check
// passes, with the bytes as they were when the piece was copied.
func TestKeyedWriteCopiesFirst(t *testing.T) {
	f := dif.MustFormat("512+8")
	bs := f.BlockSize()
	dev, err := device.NewMem(int64(256*bs), bs)
	if err != nil {
		t.Fatal(err)
	}
	kv := store.NewMem()
	defer kv.Close()
	key := testKey(t, 4)
	v, err := Create(context.Background(), dev, kv, CreateOptions{Format: f, Options: Options{Key: key}})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	p := blocktest.Pattern(32*bs, 7)
	orig := bytes.Clone(p)
	testHookKeyedWrite = func(b []byte) { b[3] ^= 1 }
	defer func() { testHookKeyedWrite = nil }()
	if _, err := v.WriteAt(p, 16*int64(bs)); err != nil {
		t.Fatal(err)
	}
	testHookKeyedWrite = nil
	if bytes.Equal(p, orig) {
		t.Fatal("the hook did not change the caller's buffer")
	}
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
	var probs []Problem
	if _, err := v.CheckRun(context.Background(), 0, 256, make([]byte, 256*bs), CheckOptions{}, func(p Problem) { probs = append(probs, p) }); err != nil {
		t.Fatal(err)
	}
	if len(probs) > 0 {
		t.Fatalf("CheckRun after a write whose buffer changed: %v", probs)
	}
	buf := make([]byte, 32*bs)
	if _, err := v.ReadAt(buf, 16*int64(bs)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, orig) {
		t.Fatal("read back other bytes than the buffer's when WriteAt copied it")
	}
}

// A tuple page edited in the store while a volume is open, after the
// volume cached the tag page that seals it, and then read again by the
// volume (here: no tuple cache, so every read reads the store), is not
// trusted by the keyed read path on the strength of the cached check: the
// tag page is checked again against the tuple page as read, its MAC
// fails, and the read reports it.
func TestKeyedReadPathRechecksRereadTuples(t *testing.T) {
	f := dif.MustFormat("4096+8")
	bs := f.BlockSize()
	v, dev, kv, key := keyedFileVolume(t, f, 64)
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	v, err := Open(context.Background(), dev, kv, Options{Key: key, Rereads: -1, ReadOnly: true, TupleCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	buf := device.AlignedBuffer(16 * bs)
	runs := keyedReadRuns.Load()
	if _, err := v.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	if keyedReadRuns.Load() == runs {
		t.Fatal("the clean read did not take the keyed read path")
	}
	// The attacker edits block 5's guard in the store (data untouched).
	tp, err := store.OpenTuples(kv, DefaultVolumeName, nil)
	if err != nil {
		t.Fatal(err)
	}
	tuple := make([]byte, f.TupleSize())
	sums := make([]uint32, 1)
	if _, err := tp.ReadRange(5, tuple, sums, store.NewBitmap(1)); err != nil {
		t.Fatal(err)
	}
	tuple[0] ^= 0x40
	if err := tp.WriteRange(5, tuple, sums, true); err != nil {
		t.Fatal(err)
	}
	_, err = v.ReadAt(buf, 0)
	var ke *KeyedTagError
	if !errors.As(err, &ke) || ke.Reason != "page-mac" {
		t.Fatalf("read after the tuple page was edited: %v, want a page-mac keyed-tag failure", err)
	}
}

// TestKeyedReadPathExport: an export of a clean keyed volume takes the
// keyed read path and writes every block's stored tuple, as written
// (export reads the tuples and written bits the path leaves in the
// scratch, as loadRun leaves them).
func TestKeyedReadPathExport(t *testing.T) {
	f := dif.MustFormat("512+8")
	const blocks = 1500
	v, dev, kv, key := keyedFileVolume(t, f, blocks)
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	v = openKeyedRO(t, dev, kv, key, false)
	data, meta := &memFile{}, &memFile{}
	runs := keyedReadRuns.Load()
	rep, err := ExportVolume(context.Background(), v, ExportDest{Data: data, Meta: meta}, ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if keyedReadRuns.Load() == runs {
		t.Fatal("the export did not take the keyed read path")
	}
	if rep.Blocks != blocks || rep.Unwritten != 0 || rep.Failed != 0 {
		t.Fatalf("export report %+v", rep)
	}
	tuples, _ := storedTuples(t, v.Tuples())
	if !bytes.Equal(meta.b, tuples) {
		t.Fatal("the exported tuples are not the stored ones")
	}
	checkImage(t, f, dif.Params{RefTag: v.Manifest().InitialRefTag}, data.b, meta.b, 0, 0)
}
