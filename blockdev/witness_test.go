package blockdev

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/blockdev/internal/keyed"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// memWitness is a Witness in memory: what Store returns is durable.
type memWitness struct {
	rec    WitnessRecord
	ok     bool
	stores int
}

func (w *memWitness) Load(string) (WitnessRecord, bool, error) { return w.rec, w.ok, nil }
func (w *memWitness) Store(rec WitnessRecord) error {
	w.rec, w.ok = rec, true
	w.rec.MAC = bytes.Clone(rec.MAC)
	w.stores++
	return nil
}

// copyKV returns a copy of every record of kv (a snapshot of the store).
func copyKV(t *testing.T, kv store.KV) store.KV {
	t.Helper()
	c := store.NewMem()
	t.Cleanup(func() { c.Close() })
	it, err := kv.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	b := c.NewBatch()
	for it.Next() {
		if err := b.Set(bytes.Clone(it.Key()), bytes.Clone(it.Value())); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	return c
}

func copyDev(t *testing.T, dev *device.Mem) *device.Mem {
	t.Helper()
	c, err := device.NewMem(dev.Size(), 512)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, dev.Size())
	if _, err := dev.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestKeyedSealFindsOneBlockRollback is the replay of issue 44, item 4:
// block 10 is written with the key, then its old data and the two page
// records (tag page and tuple page) of before are put back. Every block
// and page MAC checks; the seal does not.
func TestKeyedSealFindsOneBlockRollback(t *testing.T) {
	kv := newKeyedVol(t, "4096+8", testKey(t, 1), nil, "")
	bs := kv.f.BlockSize()
	name := DefaultVolumeName
	oldData := make([]byte, bs)
	kv.dev.ReadAt(oldData, 10*int64(bs))
	tagRec, _ := kv.kv.Get(tagPageKey(name, 0))
	tupRec, _ := kv.kv.Get(tuplePageKey(name, 0))
	tagRec, tupRec = bytes.Clone(tagRec), bytes.Clone(tupRec)

	v, err := kv.open(kv.key, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteAt(blocktest.Pattern(bs, 99), 10*int64(bs)); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	kv.dev.WriteAt(oldData, 10*int64(bs))
	kvSet(t, kv.kv, tagPageKey(name, 0), tagRec)
	kvSet(t, kv.kv, tuplePageKey(name, 0), tupRec)

	v = kv.mustOpen(kv.key)
	if probs := keyedFailures(t, v); len(probs) != 0 {
		t.Fatalf("the blocks put back fail their checks: %v (the test wants the replay the page MAC cannot see)", probs)
	}
	gen, ok, err := v.CheckSeal()
	var se *SealError
	if !errors.As(err, &se) || !errors.Is(err, ErrSealMismatch) || !errors.Is(err, dif.ErrIntegrity) ||
		!errors.Is(err, store.ErrSealMismatch) || !ok || gen == 0 {
		t.Fatalf("CheckSeal after a one-block rollback = %d, %v, %v; want a *SealError", gen, ok, err)
	}
	if !strings.Contains(err.Error(), "replaced by an older version") {
		t.Errorf("message: %v", err)
	}
	// Without the key there is nothing to check.
	nv, err := kv.open(nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer nv.Close()
	if _, ok, err := nv.CheckSeal(); ok || err != nil {
		t.Errorf("CheckSeal without the key: %v, %v", ok, err)
	}
}

// TestWitnessFindsWholeRollback puts back an older copy of the device and
// the whole store: the seal matches its pages, and only the witness, which
// has a newer generation, finds it. A store of the same generation with
// another history is found too; an older witness is brought up to date.
func TestWitnessFindsWholeRollback(t *testing.T) {
	key := testKey(t, 2)
	f := dif.MustFormat("512+8")
	dev, _ := device.NewMem(64*512, 512)
	kv := store.NewMem()
	defer kv.Close()
	w := &memWitness{}
	opts := Options{Key: key, Witness: w, Rereads: -1}
	v, err := Create(context.Background(), dev, kv, CreateOptions{Format: f, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	gen, mac, ok, err := v.Seal()
	if err != nil || !ok || !w.ok || w.rec.Gen != gen || !bytes.Equal(w.rec.MAC, mac) || w.rec.VolumeUID != v.Manifest().VolumeUID {
		t.Fatalf("after Create: seal %d %x %v %v, witness %+v", gen, mac, ok, err, w.rec)
	}
	if _, err := v.WriteAt(blocktest.Pattern(512, 1), 0); err != nil {
		t.Fatal(err)
	}
	v.Close()
	oldDev, oldKV := copyDev(t, dev), copyKV(t, kv)
	oldW := *w

	v, err = Open(context.Background(), dev, kv, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteAt(blocktest.Pattern(512, 2), 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
	gen, mac, _, _ = v.Seal()
	if w.rec.Gen != gen || !bytes.Equal(w.rec.MAC, mac) || gen <= oldW.rec.Gen {
		t.Fatalf("after Sync: seal %d, witness %d (was %d)", gen, w.rec.Gen, oldW.rec.Gen)
	}
	v.Close()

	// The old copy with the new witness.
	_, err = Open(context.Background(), oldDev, oldKV, opts)
	var re *RollbackError
	if !errors.As(err, &re) || !errors.Is(err, ErrRolledBack) || !errors.Is(err, dif.ErrIntegrity) ||
		re.StoreGen != oldW.rec.Gen || re.WitnessGen != w.rec.Gen {
		t.Fatalf("open of the old copy: %v, want a *RollbackError from %d to %d", err, w.rec.Gen, oldW.rec.Gen)
	}
	want := "rolled back to generation"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("message %q lacks %q", err, want)
	}
	// Read-only opens (verify) find it too.
	ro := opts
	ro.ReadOnly = true
	if _, err := Open(context.Background(), oldDev, oldKV, ro); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("read-only open of the old copy: %v", err)
	}
	// So does an open without the key (the seal's MAC unchecked).
	nk := opts
	nk.Key = nil
	if _, err := Open(context.Background(), oldDev, oldKV, nk); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("open of the old copy without the key: %v", err)
	}

	// The old copy moved on by one other write: the same generation as
	// the witness, another MAC.
	ow := oldW
	v, err = Open(context.Background(), oldDev, oldKV, Options{Key: key, Witness: &ow})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteAt(blocktest.Pattern(512, 3), 0); err != nil {
		t.Fatal(err)
	}
	v.Close()
	if g, _, _, _ := v.Seal(); g != w.rec.Gen {
		t.Fatalf("the other history's generation is %d, want %d", g, w.rec.Gen)
	}
	if _, err := Open(context.Background(), oldDev, oldKV, opts); !errors.As(err, &re) || !re.SameGen {
		t.Fatalf("open of another history of the same generation: %v", err)
	}

	// A witness behind the store is brought up to date.
	w2 := oldW
	v, err = Open(context.Background(), dev, kv, Options{Key: key, Witness: &w2})
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
	if w2.rec.Gen != w.rec.Gen {
		t.Fatalf("witness behind: now %d, want %d", w2.rec.Gen, w.rec.Gen)
	}
	// The witness of another volume is refused.
	w3 := *w
	w3.rec.VolumeUID = strings.Repeat("0", 32)
	if _, err := Open(context.Background(), dev, kv, Options{Key: key, Witness: &w3}); !errors.Is(err, ErrWitnessMismatch) {
		t.Fatalf("witness of another volume: %v", err)
	}
}

// failingWitness is a memWitness whose Load or Store fails with err.
type failingWitness struct {
	memWitness
	loadErr, storeErr error
}

func (w *failingWitness) Load(uid string) (WitnessRecord, bool, error) {
	if w.loadErr != nil {
		return WitnessRecord{}, false, w.loadErr
	}
	return w.memWitness.Load(uid)
}

func (w *failingWitness) Store(rec WitnessRecord) error {
	if w.storeErr != nil {
		return w.storeErr
	}
	return w.memWitness.Store(rec)
}

// TestWitnessFailures: a witness that cannot be read fails Open, one that
// cannot be written fails the Sync that would record the seal (a
// *WitnessError with the cause, exit 8 in the CLI), and one that refuses
// because it holds a newer seal makes the Sync a *RollbackError (exit 4).
// None is skipped.
func TestWitnessFailures(t *testing.T) {
	key := testKey(t, 3)
	dev, _ := device.NewMem(64*512, 512)
	kv := store.NewMem()
	defer kv.Close()
	w := &failingWitness{}
	v, err := Create(context.Background(), dev, kv, CreateOptions{Format: dif.MustFormat("512+8"), Options: Options{Key: key, Witness: w, Rereads: -1}})
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
	down := errors.New("witness down")
	w.loadErr = down
	_, err = Open(context.Background(), dev, kv, Options{Key: key, Witness: w})
	var we *WitnessError
	if !errors.As(err, &we) || !errors.Is(err, down) || we.Op != "read" || errors.Is(err, dif.ErrIntegrity) {
		t.Fatalf("Open with an unreadable witness = %v, want a *WitnessError", err)
	}
	w.loadErr = nil
	for _, tc := range []struct {
		name     string
		err      error
		rollback bool
	}{
		{"down", down, false},
		{"ahead", &store.WitnessAheadError{Witness: "test", VolumeUID: v.Manifest().VolumeUID, Gen: 9, StoredGen: 1 << 20}, true},
	} {
		t.Run("witness="+tc.name, func(t *testing.T) {
			v, err := Open(context.Background(), dev, kv, Options{Key: key, Witness: w})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			w.storeErr = tc.err
			defer func() { w.storeErr = nil }()
			if _, err := v.WriteAt(blocktest.Pattern(512, 5), 0); err != nil {
				t.Fatal(err)
			}
			err = v.Sync()
			var re *RollbackError
			switch {
			case tc.rollback && (!errors.As(err, &re) || re.WitnessGen != 1<<20 || !errors.Is(err, dif.ErrIntegrity) || !errors.Is(err, store.ErrWitnessAhead)):
				t.Fatalf("Sync refused by a witness ahead = %v, want a *RollbackError", err)
			case !tc.rollback && (!errors.As(err, &we) || we.Op != "update" || !errors.Is(err, down) || errors.Is(err, dif.ErrIntegrity)):
				t.Fatalf("Sync with an unwritable witness = %v, want a *WitnessError", err)
			}
		})
	}
}

func TestFileWitness(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w")
	w := &FileWitness{Path: path}
	if _, ok, err := w.Load(""); ok || err != nil {
		t.Fatalf("no file: %v, %v", ok, err)
	}
	rec := WitnessRecord{VolumeUID: strings.Repeat("ab", 16), Gen: 1 << 40, MAC: bytes.Repeat([]byte{7}, 32)}
	for range 2 {
		if err := w.Store(rec); err != nil {
			t.Fatal(err)
		}
		got, ok, err := w.Load("")
		if err != nil || !ok || got.Gen != rec.Gen || got.VolumeUID != rec.VolumeUID || !bytes.Equal(got.MAC, rec.MAC) {
			t.Fatalf("Load = %+v, %v, %v; want %+v", got, ok, err, rec)
		}
		rec.Gen++
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
	b, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(b), "difctl-witness v1 uid=") {
		t.Errorf("content %q", b)
	}
	b[30] ^= 1
	os.WriteFile(path, b, 0o600)
	if _, _, err := w.Load(""); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("damaged witness: %v, want ErrCorrupt", err)
	}
}

// TestWitnessCrashAtEveryStep crashes a keyed volume with a witness at
// every store commit, device write and witness write of a workload:
// reopening with the witness never reports a rollback, the seal matches
// its pages and the volume reads back.
func TestWitnessCrashAtEveryStep(t *testing.T) {
	saved := keyed.GenJump
	keyed.GenJump = func() (uint64, error) { return 0, nil }
	defer func() { keyed.GenJump = saved }()
	key := testKey(t, 12)
	run := func(crashAt int) int {
		w := &memWitness{}
		opts := Options{Key: key, StagingBytes: 2 * crashBlocks * crashBS, Rereads: -1, Witness: w}
		steps, v := crashSessions(t, opts, crashAt, crashHooks{step: func(step func() error) { testHookWitness = step }})
		defer v.Close()
		if gen, ok, err := v.CheckSeal(); err != nil || !ok {
			t.Fatalf("crash at %d: seal: %d %v %v", crashAt, gen, ok, err)
		}
		if gen, _, _, _ := v.Seal(); w.rec.Gen != gen {
			t.Fatalf("crash at %d: witness at %d, store at %d", crashAt, w.rec.Gen, gen)
		}
		return steps
	}
	total := run(0)
	if total < 10 {
		t.Fatalf("the workload took %d steps", total)
	}
	for at := 1; at <= total; at++ {
		run(at)
	}
	t.Logf("%d crash points", total)
}
