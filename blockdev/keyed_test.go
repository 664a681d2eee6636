package blockdev

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/faultdev"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/blockdev/internal/keyed"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/store"
	"github.com/difctl/difctl/store/pebble"
)

func testKey(t testing.TB, seed byte) *Key {
	t.Helper()
	k, err := ParseKey(bytes.Repeat([]byte{seed, seed ^ 0x5a}, KeySize/2))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// keyedVol is a keyed volume on a memory device and a mem store, closed
// and reopened as the tests need.
type keyedVol struct {
	t   *testing.T
	f   dif.Format
	dev *device.Mem
	kv  store.KV
	key *Key
}

const keyedBlocks = 64

func newKeyedVol(t *testing.T, format string, key *Key, kv store.KV, name string) *keyedVol {
	t.Helper()
	f := dif.MustFormat(format)
	bs := f.BlockSize()
	dev, err := device.NewMem(int64(keyedBlocks*bs), 512)
	if err != nil {
		t.Fatal(err)
	}
	if kv == nil {
		kv = store.NewMem()
		t.Cleanup(func() { kv.Close() })
	}
	dev.WriteAt(blocktest.Pattern(keyedBlocks*bs, 3), 0)
	v, err := Create(context.Background(), dev, kv, CreateOptions{Format: f, Options: Options{Key: key, Name: name}})
	if err != nil {
		t.Fatal(err)
	}
	if !v.Keyed() || !v.KeyedChecked() {
		t.Fatalf("created with a key: keyed %v checked %v", v.Keyed(), v.KeyedChecked())
	}
	// Writes of every kind: whole blocks, a partial block, a discard.
	if _, err := v.WriteAt(blocktest.Pattern(8*bs, 4), int64(4*bs)); err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteAt([]byte("partial"), int64(20*bs+5)); err != nil {
		t.Fatal(err)
	}
	if err := v.Discard(int64(30*bs), int64(2*bs)); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	return &keyedVol{t: t, f: f, dev: dev, kv: kv, key: key}
}

func (k *keyedVol) open(key *Key, name string) (*Volume, error) {
	return Open(context.Background(), k.dev, k.kv, Options{Key: key, Name: name, Rereads: -1})
}

func (k *keyedVol) mustOpen(key *Key) *Volume {
	k.t.Helper()
	v, err := k.open(key, "")
	if err != nil {
		k.t.Fatal(err)
	}
	k.t.Cleanup(func() { v.Close() })
	return v
}

// keyedFailure reads the whole volume and returns the keyed-tag failures
// found by a check (CheckRun), and the error of a ReadAt of block lba.
func keyedFailures(t *testing.T, v *Volume) []Problem {
	t.Helper()
	var probs []Problem
	scratch := make([]byte, v.ScratchSize(int(v.Blocks())))
	if _, err := v.CheckRun(context.Background(), 0, int(v.Blocks()), scratch, CheckOptions{}, func(p Problem) { probs = append(probs, p) }); err != nil {
		t.Fatal(err)
	}
	return probs
}

func TestKeyedVolumeOpen(t *testing.T) {
	kv := newKeyedVol(t, "4096+8", testKey(t, 1), nil, "")
	bs := kv.f.BlockSize()
	v := kv.mustOpen(kv.key)
	if probs := keyedFailures(t, v); len(probs) != 0 {
		t.Fatalf("clean keyed volume: %v", probs)
	}
	buf := make([]byte, keyedBlocks*bs)
	if _, err := v.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	v.Close()
	// A wrong key is refused at open, not reported block by block.
	if _, err := kv.open(testKey(t, 2), ""); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("wrong key: %v", err)
	}
	// Without the key: reads and checks of the tuples, no changes.
	v2 := kv.mustOpen(nil)
	if !v2.Keyed() || v2.KeyedChecked() {
		t.Fatalf("without key: keyed %v checked %v", v2.Keyed(), v2.KeyedChecked())
	}
	if _, err := v2.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := v2.WriteAt(buf[:bs], 0); !errors.Is(err, ErrKeyRequired) {
		t.Fatalf("write without the key: %v", err)
	}
	if err := v2.Discard(0, int64(bs)); !errors.Is(err, ErrKeyRequired) {
		t.Fatalf("discard without the key: %v", err)
	}
	v2.Close()
	if _, err := RemapVolume(context.Background(), kv.dev, kv.kv, 99, RemapOptions{}); !errors.Is(err, ErrKeyRequired) {
		t.Fatalf("remap without the key: %v", err)
	}
	// A key for an unkeyed volume.
	plain := newKeyedVolPlain(t)
	if _, err := Open(context.Background(), plain.dev, plain.kv, Options{Key: testKey(t, 1)}); !errors.Is(err, ErrNotKeyed) {
		t.Fatalf("key for an unkeyed volume: %v", err)
	}
}

func newKeyedVolPlain(t *testing.T) *keyedVol {
	f := dif.MustFormat("512+8")
	dev, _ := device.NewMem(8*512, 512)
	kv := store.NewMem()
	t.Cleanup(func() { kv.Close() })
	v, err := Create(context.Background(), dev, kv, CreateOptions{Format: f})
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
	return &keyedVol{t: t, f: f, dev: dev, kv: kv}
}

// attackerWrite writes data at block lba of the device and recomputes the
// block's tuple and sector checksum in the store, as someone who can write
// both but has no key would.
func (k *keyedVol) attackerWrite(name string, lba int64, data []byte) {
	t := k.t
	bs := k.f.BlockSize()
	if _, err := k.dev.WriteAt(data, lba*int64(bs)); err != nil {
		t.Fatal(err)
	}
	if name == "" {
		name = DefaultVolumeName
	}
	tp, err := store.OpenTuples(k.kv, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := tp.Manifest()
	tuple := make([]byte, k.f.TupleSize())
	p := dif.Params{RefTag: m.InitialRefTag + uint64(lba), LBA: lba}
	if err := k.f.WithLayout(dif.Separate).Generate(data, tuple, p); err != nil {
		t.Fatal(err)
	}
	var sums []uint32
	if m.SectorSums {
		sums = []uint32{crc32c.Checksum(data)}
	}
	if err := tp.WriteRange(lba, tuple, sums, true); err != nil {
		t.Fatal(err)
	}
}

// tagPageKey is the store key of tag page page of volume name.
func tagPageKey(name string, page uint64) []byte { return pageRecKey(name, 'K', page) }

// tuplePageKey is the store key of tuple page page of volume name.
func tuplePageKey(name string, page uint64) []byte { return pageRecKey(name, 'P', page) }

// pageRecKey is the store key of a per-page record of type typ (store/keys.go).
func pageRecKey(name string, typ byte, page uint64) []byte {
	k := append([]byte{'T', byte(len(name))}, name...)
	k = append(k, typ)
	return binary.BigEndian.AppendUint64(k, page)
}

func kvSet(t *testing.T, kv store.KV, k, v []byte) {
	b := kv.NewBatch()
	if err := b.Set(k, v); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
}

func resealCRC(v []byte) []byte {
	v = bytes.Clone(v)
	binary.BigEndian.PutUint32(v[len(v)-4:], crc32c.Checksum(v[:len(v)-4]))
	return v
}

// TestKeyedTamper edits a keyed volume as an attacker with write access to
// the device and the store but no key: each edit passes the CRC checks
// (without the key the volume reads clean) and fails the keyed check with
// the block's LBA and the keyed-tag kind.
func TestKeyedTamper(t *testing.T) {
	for _, format := range []string{"4096+8", "512+16:crc32"} {
		for _, tc := range []struct {
			name   string
			lba    int64
			reason string
			edit   func(k *keyedVol)
		}{
			{"flipped-bit-crc-recomputed", 6, "mismatch", func(k *keyedVol) {
				bs := k.f.BlockSize()
				b := make([]byte, bs)
				k.dev.ReadAt(b, 6*int64(bs))
				b[100] ^= 0x10
				k.attackerWrite("", 6, b)
			}},
			{"copied-from-other-lba", 9, "mismatch", func(k *keyedVol) {
				bs := k.f.BlockSize()
				b := make([]byte, bs)
				k.dev.ReadAt(b, 5*int64(bs))
				k.attackerWrite("", 9, b)
			}},
			{"copied-from-other-volume", 7, "mismatch", func(k *keyedVol) {
				// Another volume, same key, same LBA, other data.
				other := newKeyedVol(t, k.f.String(), k.key, k.kv, "other")
				bs := k.f.BlockSize()
				ov, err := other.open(k.key, "other")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := ov.WriteAt(blocktest.Pattern(bs, 99), 7*int64(bs)); err != nil {
					t.Fatal(err)
				}
				ov.Close()
				b := make([]byte, bs)
				other.dev.ReadAt(b, 7*int64(bs))
				k.attackerWrite("", 7, b)
				// And its tag page too: a page from another volume fails
				// its MAC, so the block does either way.
			}},
			// The forged tag fails against the data; its page's MAC fails
			// too, reported on the page's first block.
			{"forged-tag", 3, "mismatch", func(k *keyedVol) {
				key := tagPageKey(DefaultVolumeName, 0)
				v, err := k.kv.Get(key)
				if err != nil {
					t.Fatal(err)
				}
				v = bytes.Clone(v)
				v[8+3*24+8] ^= 1 // block 3's tag
				kvSet(t, k.kv, key, resealCRC(v))
			}},
			{"edited-tuple-page-unwritten", 10, "unwritten", func(k *keyedVol) {
				// Mark a written block unwritten and zero its data: without
				// the key it reads as zeros, cleanly.
				bs := k.f.BlockSize()
				k.dev.WriteAt(make([]byte, bs), 10*int64(bs))
				tp, err := store.OpenTuples(k.kv, DefaultVolumeName, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := tp.Discard(10, 1, true); err != nil {
					t.Fatal(err)
				}
			}},
		} {
			t.Run(fmt.Sprintf("format=%s/tamper=%s", format, tc.name), func(t *testing.T) {
				k := newKeyedVol(t, format, testKey(t, 1), nil, "")
				tc.edit(k)
				bs := k.f.BlockSize()
				// Without the key the CRC checks pass.
				nv := k.mustOpen(nil)
				buf := make([]byte, bs)
				if _, err := nv.ReadAt(buf, tc.lba*int64(bs)); err != nil {
					t.Fatalf("without the key, block %d: %v", tc.lba, err)
				}
				nv.Close()
				v := k.mustOpen(k.key)
				_, err := v.ReadAt(buf, tc.lba*int64(bs))
				var ke *KeyedTagError
				if !errors.As(err, &ke) || !errors.Is(err, dif.ErrIntegrity) || !errors.Is(err, ErrKeyedTag) {
					t.Fatalf("read of block %d: %v, want a keyed-tag failure", tc.lba, err)
				}
				if ke.LBA != tc.lba || ke.Reason != tc.reason {
					t.Fatalf("keyed failure at block %d (%s), want %d (%s)", ke.LBA, ke.Reason, tc.lba, tc.reason)
				}
				probs := keyedFailures(t, v)
				found, pageMAC := false, 0
				pageEnd := min(int64(v.man.PageTuples), v.blocks)
				for _, p := range probs {
					var pe *KeyedTagError
					switch {
					case p.Kind == KindKeyedTag && p.LBA == tc.lba && errors.As(p.Err, &pe) && pe.Reason == tc.reason:
						found = true
					case p.LBA != tc.lba && p.LBA < pageEnd && errors.As(p.Err, &pe) && pe.Reason == "page-mac":
						// Every edit of the store changes tag page 0 or the
						// tuple page its MAC seals: every other block of the
						// page fails with it.
						pageMAC++
					default:
						t.Errorf("unexpected problem %+v", p)
					}
				}
				if !found {
					t.Fatalf("check found %v, want block %d as %s", probs, tc.lba, KindKeyedTag)
				}
				if want := int(pageEnd - 1); pageMAC != want {
					t.Fatalf("check found %d page MAC failures, want %d (every other block of page 0)", pageMAC, want)
				}
			})
		}
	}
}

// TestVolumeCrashKeyed runs the crash suite (volume_crash_test.go) on
// keyed volumes: every crash point, then recovery with the key, then every
// block read back with its keyed tag checked.
func TestVolumeCrashKeyed(t *testing.T) {
	key := testKey(t, 7)
	cfgs := []crashCfg{
		{format: "512+8", sector: 512, seed: 11, ops: 40, key: key},
		{format: "4096+8", sector: 512, seed: 12, ops: 30, key: key},
		{format: "512+8", sector: 512, seed: 14, ops: 30, key: key, sparse: true},
	}
	if testing.Short() {
		cfgs = []crashCfg{cfgs[0], cfgs[2]}
		cfgs[0].ops, cfgs[1].ops = 12, 12
	}
	for _, cfg := range cfgs {
		t.Run(fmt.Sprintf("format=%s/sector=%d/seed=%d", cfg.format, cfg.sector, cfg.seed), func(t *testing.T) {
			bs := dif.MustFormat(cfg.format).BlockSize()
			ops := crashWorkload(cfg, bs, 24)
			e := newCrashEnv(t, cfg, -1)
			if e.run(ops) {
				t.Fatal("crashed without a crash point")
			}
			total := e.steps
			e.v.Close()
			e.kv.Close()
			var torn, folded int64
			for k := int64(0); k < total; k++ {
				e := newCrashEnv(t, cfg, k)
				if !e.run(ops) {
					t.Fatalf("crash point %d of %d not reached", k, total)
				}
				rs := e.verify()
				torn += rs.Torn
				folded += rs.Folded
			}
			t.Logf("%d crash points; recovery folded %d blocks, reported %d torn", total, folded, torn)
		})
	}
}

// TestKeyedNoncesNeverRepeat crashes one keyed volume again and again
// (device and store, at a random step of a random workload), reopening it
// after each crash, and records every (generation, LBA) the volume tags
// data under: none may repeat. The random jump of keyed's resumeGeneration is off,
// so the durable reservation alone must keep them apart.
func TestKeyedNoncesNeverRepeat(t *testing.T) {
	rounds := 60
	if testing.Short() {
		rounds = 15
	}
	saved := keyed.GenJump
	keyed.GenJump = func() (uint64, error) { return 0, nil }
	defer func() { keyed.GenJump = saved }()
	type nonce struct {
		uid [16]byte
		gen uint64
		lba int64
	}
	var mu sync.Mutex
	used := map[nonce]int{}
	round := 0
	keyed.TestHookNewTags = func(uid [16]byte, gen uint64, lba int64, n int) {
		mu.Lock()
		defer mu.Unlock()
		for i := range n {
			k := nonce{uid, gen, lba + int64(i)}
			if r, ok := used[k]; ok {
				t.Errorf("nonce (generation %d, LBA %d) used in round %d and again in round %d", gen, lba+int64(i), r, round)
			}
			used[k] = round
		}
	}
	defer func() { keyed.TestHookNewTags = nil }()

	const bs, blocks = 512, 32
	f := dif.MustFormat("512+8")
	mem, err := device.NewMem(blocks*bs, bs)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := faultdev.New(mem, faultdev.Options{Sector: bs})
	if err != nil {
		t.Fatal(err)
	}
	fs := vfs.NewCrashableMem()
	key := testKey(t, 9)
	opts := Options{Key: key, StagingBytes: 4 * bs, Rereads: -1}
	kv, err := pebble.OpenOnFS("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	v, err := Create(context.Background(), fd, kv, CreateOptions{Format: f, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
	kv.Close()
	r := rand.New(rand.NewPCG(5, 5))
	var crashMu sync.Mutex
	for round = 1; round <= rounds; round++ {
		ckv, err := pebble.OpenOnFS("db", fs)
		if err != nil {
			t.Fatalf("round %d: store: %v", round, err)
		}
		var clone *vfs.MemFS
		crashAt := r.IntN(40)
		steps := 0
		crashed := false
		step := func() error {
			crashMu.Lock()
			defer crashMu.Unlock()
			if crashed {
				return errTestCrash
			}
			steps++
			if steps != crashAt {
				return nil
			}
			crashed = true
			clone = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(uint64(round), 1))})
			if err := fd.Crash(faultdev.CrashOptions{Keep: 0.5, Seed: uint64(round)}); err != nil {
				panic(err)
			}
			return errTestCrash
		}
		ck := &countingKV{KV: ckv}
		v, err := Open(context.Background(), fd, ck, opts)
		if err != nil {
			t.Fatalf("round %d: open: %v", round, err)
		}
		// Every block reads back (keyed check on) after the last crash.
		buf := make([]byte, blocks*bs)
		if _, err := v.ReadAt(buf, 0); err != nil {
			t.Fatalf("round %d: read after recovery: %v", round, err)
		}
		fd.SetHook(func(faultdev.Step) error { return step() })
		ck.hook = func(bool) error { return step() }
		isCrashed := func() bool {
			crashMu.Lock()
			defer crashMu.Unlock()
			return crashed
		}
		for i := 0; i < 30 && !isCrashed(); i++ {
			switch x := r.IntN(10); {
			case x == 0:
				v.Sync()
			case x == 1:
				b := r.Int64N(blocks - 2)
				v.Discard(b*bs, bs)
			default:
				n := 1 + r.IntN(5*bs)
				off := r.Int64N(blocks*bs - int64(n))
				v.WriteAt(blocktest.Pattern(n, uint64(round*100+i)), off)
			}
		}
		v.Close()
		fd.SetHook(nil)
		ckv.Close()
		if isCrashed() {
			if fd, err = fd.Reopen(); err != nil {
				t.Fatal(err)
			}
			fs = clone
		}
	}
	if len(used) < 100 {
		t.Fatalf("only %d nonces used", len(used))
	}
	if !t.Failed() {
		t.Logf("%d rounds, %d nonces, none repeated", rounds, len(used))
	}
}

// TestKeyedNoncesCrashAtEveryStep crashes a keyed session at each step of
// a fixed workload in turn (every store commit and device write; no
// background flush, so the steps come in one order), reopens the volume
// with no random jump and runs the same workload again: no (generation,
// LBA) nonce may be computed twice, whatever the step of the crash. It is
// the deterministic form of TestKeyedNoncesNeverRepeat. When a batch's
// intent commit carried the reservation of the generations its writes
// had taken, a crash at that commit left them handed out (their tags
// computed) and not reserved, and the next session handed them out again
// to the same LBAs.
func TestKeyedNoncesCrashAtEveryStep(t *testing.T) {
	saved := keyed.GenJump
	keyed.GenJump = func() (uint64, error) { return 0, nil }
	defer func() { keyed.GenJump = saved }()
	type nonce struct {
		gen uint64
		lba int64
	}
	opts := Options{Key: testKey(t, 11), StagingBytes: 2 * crashBlocks * crashBS, Rereads: -1}
	// run returns the steps the crashed session took and the nonces used
	// twice.
	run := func(crashAt int) (steps int, repeats []string) {
		used := map[nonce]int{}
		session := 0
		keyed.TestHookNewTags = func(_ [16]byte, gen uint64, lba int64, n int) {
			for i := range n {
				k := nonce{gen, lba + int64(i)}
				if s, ok := used[k]; ok {
					repeats = append(repeats, fmt.Sprintf("(generation %d, LBA %d) in sessions %d and %d", gen, k.lba, s, session))
				}
				used[k] = session
			}
		}
		defer func() { keyed.TestHookNewTags = nil }()
		steps, v := crashSessions(t, opts, crashAt, crashHooks{session: func(s int) { session = s }})
		v.Close()
		return steps, repeats
	}
	total, repeats := run(0)
	if len(repeats) > 0 {
		t.Fatalf("no crash: nonces used twice: %v", repeats)
	}
	if total < 10 {
		t.Fatalf("the workload took %d steps", total)
	}
	for at := 1; at <= total; at++ {
		if _, repeats := run(at); len(repeats) > 0 {
			t.Errorf("crash at step %d of %d: nonces used twice: %s", at, total, strings.Join(repeats, "; "))
		}
	}
}

// The crash sessions of the tests that crash at every step in turn: a
// 512+8 volume of crashBlocks blocks and a fixed workload.
const crashBS, crashBlocks = 512, 32

// keyedCrashWorkload is the workload of crashSessions: writes, a sync, a
// discard (which syncs), and writes again; session varies the data.
func keyedCrashWorkload(v *Volume, session int) error {
	const bs = crashBS
	for i, lba := range []int64{0, 1, 2, 7, 8} {
		if _, err := v.WriteAt(blocktest.Pattern(bs, uint64(session*100+i)), lba*bs); err != nil {
			return err
		}
	}
	if err := v.Sync(); err != nil {
		return err
	}
	if _, err := v.WriteAt(blocktest.Pattern(3*bs, uint64(session*100+10)), 20*bs); err != nil {
		return err
	}
	if err := v.Discard(1*bs, bs); err != nil {
		return err
	}
	if _, err := v.WriteAt(blocktest.Pattern(bs, uint64(session*100+11)), 0); err != nil {
		return err
	}
	return v.Sync()
}

// crashHooks are what a test of crashSessions adds: session is told the
// session about to run (1, then 2); step, if not nil, is given the step
// function for a step of the test's own (e.g. the witness's write) in the
// first session and nil after it.
type crashHooks struct {
	session func(int)
	step    func(func() error)
}

// crashSessions protects a fresh volume (crashBlocks blocks of 512+8, on a
// faultdev device and a crashable Pebble store) with opts, runs
// keyedCrashWorkload in a session that crashes at step crashAt (never if 0; a
// step is a store commit, a device write or a step of h.step) and again in
// a second session, then opens the volume, reads it all back and returns
// it open, with the steps the first session took. After a crash the store
// keeps only what was synced and the device what was synced.
func crashSessions(t *testing.T, opts Options, crashAt int, h crashHooks) (steps int, v *Volume) {
	t.Helper()
	mem, err := device.NewMem(crashBlocks*crashBS, crashBS)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := faultdev.New(mem, faultdev.Options{Sector: crashBS})
	if err != nil {
		t.Fatal(err)
	}
	fs := vfs.NewCrashableMem()
	kv, err := pebble.OpenOnFS("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	if v, err = Create(context.Background(), fd, kv, CreateOptions{Format: dif.MustFormat("512+8"), Options: opts}); err != nil {
		t.Fatal(err)
	}
	v.Close()
	kv.Close()
	for session := 1; session <= 2; session++ {
		if h.session != nil {
			h.session(session)
		}
		kv, err := pebble.OpenOnFS("db", fs)
		if err != nil {
			t.Fatalf("crash at %d, session %d: store: %v", crashAt, session, err)
		}
		ck := &countingKV{KV: kv}
		v, err := Open(context.Background(), fd, ck, opts)
		if err != nil {
			t.Fatalf("crash at %d, session %d: open: %v", crashAt, session, err)
		}
		var clone *vfs.MemFS
		if session == 1 {
			crashed := false
			step := func() error {
				if crashed {
					return errTestCrash
				}
				steps++
				if steps != crashAt {
					return nil
				}
				crashed = true
				clone = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
				if err := fd.Crash(faultdev.CrashOptions{}); err != nil {
					t.Fatal(err)
				}
				return errTestCrash
			}
			fd.SetHook(func(faultdev.Step) error { return step() })
			ck.hook = func(bool) error { return step() }
			if h.step != nil {
				h.step(step)
			}
		}
		err = keyedCrashWorkload(v, session)
		v.Close()
		fd.SetHook(nil)
		if h.step != nil {
			h.step(nil)
		}
		kv.Close()
		if clone != nil {
			if fd, err = fd.Reopen(); err != nil {
				t.Fatal(err)
			}
			fs = clone
		} else if err != nil {
			t.Fatalf("crash at %d, session %d: %v", crashAt, session, err)
		}
	}
	kv, err = pebble.OpenOnFS("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kv.Close() })
	if v, err = Open(context.Background(), fd, kv, opts); err != nil {
		t.Fatalf("crash at %d: final open: %v", crashAt, err)
	}
	if _, err := v.ReadAt(make([]byte, crashBlocks*crashBS), 0); err != nil {
		v.Close()
		t.Fatalf("crash at %d: read: %v", crashAt, err)
	}
	return steps, v
}

// TestKeyedRecoveryForgedIntent plants an intent, as an attacker without
// the key would, whose tuple matches data the attacker wrote and whose
// keyed tag is made up: recovery must not commit it (the block is reported
// torn and fails its keyed check), where an unkeyed recovery would fold it.
func TestKeyedRecoveryForgedIntent(t *testing.T) {
	k := newKeyedVol(t, "4096+8", testKey(t, 1), nil, "")
	bs := k.f.BlockSize()
	const lba = 12
	data := blocktest.Pattern(bs, 1234)
	if _, err := k.dev.WriteAt(data, lba*int64(bs)); err != nil {
		t.Fatal(err)
	}
	tp, err := store.OpenTuples(k.kv, DefaultVolumeName, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.SetPageMACKey(bytes.Repeat([]byte{1}, store.PageMACKeySize)); err != nil { // not the volume's
		t.Fatal(err)
	}
	tuple := make([]byte, 8)
	if err := k.f.WithLayout(dif.Separate).Generate(data, tuple, dif.Params{RefTag: lba, LBA: lba}); err != nil {
		t.Fatal(err)
	}
	x := tp.NewTxn()
	id, err := x.RecordIntent(lba, tuple, []uint32{crc32c.Checksum(data)})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.RecordTagIntent(id, []store.KeyedTag{{Gen: 5, Tag: [16]byte{1, 2, 3}}}); err != nil {
		t.Fatal(err)
	}
	if err := x.Commit(true); err != nil {
		t.Fatal(err)
	}
	v := k.mustOpen(k.key)
	if rs := v.Stats().Recovery; rs.Torn != 1 || rs.Folded != 0 {
		t.Fatalf("recovery of a forged intent: %+v, want it torn, not folded", rs)
	}
	buf := make([]byte, bs)
	if _, err := v.ReadAt(buf, lba*int64(bs)); !errors.Is(err, dif.ErrIntegrity) {
		t.Fatalf("block under a forged intent reads: %v", err)
	}
}

// TestKeyedProtectInterrupted crashes Create of a keyed volume (the store
// keeps what was synced and a random part of the rest) again and again,
// resuming it each time, and records every nonce it tags under: none
// repeats (with the random jump off), blocks past the last checkpoint are
// protected again under new generations, and the volume verifies.
func TestKeyedProtectInterrupted(t *testing.T) {
	saved := keyed.GenJump
	keyed.GenJump = func() (uint64, error) { return 0, nil }
	defer func() { keyed.GenJump = saved }()
	type nonce struct {
		gen uint64
		lba int64
	}
	used := map[nonce]bool{}
	var mu sync.Mutex
	keyed.TestHookNewTags = func(uid [16]byte, gen uint64, lba int64, n int) {
		mu.Lock()
		defer mu.Unlock()
		for i := range n {
			k := nonce{gen, lba + int64(i)}
			if used[k] {
				t.Errorf("nonce (generation %d, LBA %d) used twice", gen, k.lba)
			}
			used[k] = true
		}
	}
	defer func() { keyed.TestHookNewTags = nil }()
	const bs, blocks = 512, 256
	dev, err := device.NewMem(blocks*bs, bs)
	if err != nil {
		t.Fatal(err)
	}
	dev.WriteAt(blocktest.Pattern(blocks*bs, 8), 0)
	fs := vfs.NewCrashableMem()
	key := testKey(t, 4)
	tries := 0
	for ; ; tries++ {
		kv, err := pebble.OpenOnFS("db", fs)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		chunks := 0
		var clone *vfs.MemFS
		opts := CreateOptions{Format: dif.MustFormat("512+8"), Options: Options{Key: key}, ChunkBytes: 8 * bs, CheckpointBytes: 24 * bs,
			Progress: func(done, total int64) {
				// Every other crash comes before the first checkpoint,
				// so that the resumed Create starts over from block 0.
				crashAt := 5 - 3*(tries%2)
				if chunks++; chunks == crashAt && done < total {
					clone = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(uint64(tries), 3))})
					cancel()
				}
			}}
		v, err := Create(ctx, dev, kv, opts)
		cancel()
		if err == nil {
			buf := make([]byte, blocks*bs)
			if _, err := v.ReadAt(buf, 0); err != nil {
				t.Fatal(err)
			}
			v.Close()
			kv.Close()
			break
		}
		kv.Close()
		if !errors.Is(err, context.Canceled) || clone == nil || tries > 100 {
			t.Fatalf("try %d: %v", tries, err)
		}
		fs = clone
	}
	if tries < 3 || len(used) <= blocks+16 {
		t.Fatalf("%d tries, %d nonces for %d blocks: protect was not interrupted and redone", tries, len(used), blocks)
	}
	t.Logf("%d interruptions, %d nonces for %d blocks, none repeated", tries, len(used), blocks)
}

// TestKeyedTupleEdits edits single fields of one block's tuple in the
// store without the key (guard, app tag, ref tag, sector sum), leaving its
// data alone: the tag page's MAC seals the tuple page, so every edit is a
// keyed-tag failure with reason page-mac on the page, even the app tag
// edit that no other check sees (the volume has no app tag mask).
func TestKeyedTupleEdits(t *testing.T) {
	for _, format := range []string{"512+8", "4096+16:crc64"} {
		for _, field := range []string{"guard", "app", "ref", "sum"} {
			t.Run(fmt.Sprintf("format=%s/field=%s", format, field), func(t *testing.T) {
				k := newKeyedVol(t, format, testKey(t, 1), nil, "")
				tp, err := store.OpenTuples(k.kv, DefaultVolumeName, nil)
				if err != nil {
					t.Fatal(err)
				}
				const blk = 5
				ts := tp.TupleSize()
				tuple := make([]byte, ts)
				sums := make([]uint32, 1)
				if !tp.Manifest().SectorSums {
					if field == "sum" {
						t.Skip("no sector sums at " + format)
					}
					sums = nil
				}
				if _, err := tp.ReadRange(blk, tuple, sums, nil); err != nil {
					t.Fatal(err)
				}
				switch field {
				case "guard":
					tuple[0] ^= 1
				case "app":
					// After the guard: 2 bytes (8-byte tuples), 8 (16-byte).
					if ts == 8 {
						tuple[2] ^= 1
					} else {
						tuple[8] ^= 1
					}
				case "ref":
					tuple[ts-1] ^= 1
				case "sum":
					sums[0] ^= 1
				}
				if err := tp.WriteRange(blk, tuple, sums, true); err != nil {
					t.Fatal(err)
				}
				v := k.mustOpen(k.key)
				probs := keyedFailures(t, v)
				pageMAC := 0
				pageEnd := min(int64(v.man.PageTuples), v.blocks)
				for _, p := range probs {
					var pe *KeyedTagError
					switch {
					case p.Kind == KindKeyedTag && errors.As(p.Err, &pe) && pe.Reason == "page-mac" && p.LBA < pageEnd:
						pageMAC++
					case p.Kind == KindKeyedTag:
						t.Errorf("unexpected keyed problem %+v", p)
					case field == "app":
						t.Errorf("an app tag edit is seen by another check: %+v", p)
					case p.LBA != blk:
						t.Errorf("unexpected problem %+v", p)
					}
				}
				// Every block of the page fails: the edited one by the
				// check that sees the edit (none for the app tag: not
				// checked), the others as page-mac.
				want := int(pageEnd)
				if field != "app" {
					want--
				}
				if pageMAC != want {
					t.Fatalf("check found %d page-mac failures (%v), want %d: every block of the page", pageMAC, probs, want)
				}
				// A write of the whole page with the key seals it again.
				bs := k.f.BlockSize()
				if _, err := v.WriteAt(blocktest.Pattern(keyedBlocks*bs, 8), 0); err != nil {
					t.Fatal(err)
				}
				if err := v.Sync(); err != nil {
					t.Fatal(err)
				}
				if probs := keyedFailures(t, v); len(probs) != 0 {
					t.Fatalf("after rewriting every block: %v", probs)
				}
			})
		}
	}
}
