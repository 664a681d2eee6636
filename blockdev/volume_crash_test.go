package blockdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/faultdev"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/store"
	"github.com/difctl/difctl/store/pebble"
)

// The crash test of the volume (ARCHITECTURE.md, "The crash contract").
//
// A seeded random workload of writes (aligned and not, from one byte to
// more than a staging batch), syncs and discards runs on a volume over a
// faultdev.Device and a Pebble store on a crashable in-memory file system. Every
// state-changing step of either side is numbered: each device write, sync
// and discard, and each store batch commit. The workload is replayed from
// scratch once per step, crashing instead of that step: the device loses
// what was not synced (keeping a seeded random subset of unsynced sectors),
// the store keeps what was synced (and a random part of the rest). Then the
// device is reopened, the store reopened on the crash clone, the volume
// opened (running recovery), and every block read back:
//
//   - a block that reads without error holds the contents of the last
//     completed sync or of some write since (never anything else), so every
//     synced write is readable with its data;
//   - a block fails verification only if the crash tore it inside the block
//     (the device's crash sector smaller than the block): its contents on
//     the medium are none of the versions ever written, and recovery has
//     recorded it as an open "torn" finding. With sectors as large as
//     blocks (a medium that writes a block atomically) no block fails;
//   - two blocks corrupted with FlipBit, one before the workload and one in
//     the middle, still fail verification.
//
// A sparse configuration protects a device of holes, two pages longer: the
// volume starts as one empty run (store/runs.go), and the workload's
// first write of a page splits it in the commit that writes the page.
// After recovery the store must still record every page (Coverage).

type crashCfg struct {
	format string
	sector int
	seed   uint64
	ops    int
	key    *Key // keyed volume (keyed_test.go)
	sparse bool // the device holds only holes at Create, and two pages more
}

type crashOp struct {
	kind string // "write", "sync", "discard", "flip"
	off  int64
	data []byte
	n    int64
}

func crashWorkload(cfg crashCfg, bs, blocks int) []crashOp {
	r := rand.New(rand.NewPCG(cfg.seed, 42))
	size := int64(blocks * bs)
	var ops []crashOp
	for i := range cfg.ops {
		switch x := r.IntN(20); {
		case i == cfg.ops/2:
			ops = append(ops, crashOp{kind: "flip"})
		case x < 3:
			ops = append(ops, crashOp{kind: "sync"})
		case x < 4:
			b := r.Int64N(int64(blocks - 2))
			ops = append(ops, crashOp{kind: "discard", off: b * int64(bs), n: int64(1+r.IntN(2)) * int64(bs)})
		default:
			var n int
			switch r.IntN(4) {
			case 0:
				n = 1 + r.IntN(bs)
			case 1:
				n = bs * (1 + r.IntN(2))
			case 2:
				n = 1 + r.IntN(3*bs)
			default:
				n = bs * (5 + r.IntN(4)) // more than a staging batch
			}
			n = min(n, int(size))
			off := r.Int64N(size - int64(n) + 1)
			if r.IntN(2) == 0 {
				off -= off % int64(bs)
			}
			ops = append(ops, crashOp{kind: "write", off: off, data: blocktest.Pattern(n, cfg.seed*1000+uint64(i))})
		}
	}
	// End with a sync, which also waits for the background flushes.
	return append(ops, crashOp{kind: "sync"})
}

// crashEnv is one run of the workload.
type crashEnv struct {
	t        *testing.T
	cfg      crashCfg
	bs       int
	blocks   int // blocks the workload writes; two more are corrupted
	mem      *device.Mem
	fd       *faultdev.Device
	fs       *vfs.MemFS
	kv       *countingKV
	v        *Volume
	mu       sync.Mutex // steps come from the caller and the background flush
	steps    int64
	crashAt  int64
	crashed  bool
	flipped  bool
	clone    *vfs.MemFS
	model    []byte
	synced   []byte
	versions map[int][][]byte
}

var crashOpts = Options{StagingBytes: 8 * 512, Rereads: -1}

func newCrashEnv(t *testing.T, cfg crashCfg, crashAt int64) *crashEnv {
	f := dif.MustFormat(cfg.format)
	bs := f.BlockSize()
	e := &crashEnv{t: t, cfg: cfg, bs: bs, blocks: 24, crashAt: crashAt, versions: map[int][][]byte{}}
	size := (e.blocks + 2) * bs
	if cfg.sparse {
		size += 2 * store.DefaultPageTuples * bs
	}
	var err error
	if e.mem, err = device.NewMem(int64(size), min(bs, 4096)); err != nil {
		t.Fatal(err)
	}
	init := make([]byte, (e.blocks+2)*bs)
	if !cfg.sparse {
		init = blocktest.Pattern(size, cfg.seed)
		e.mem.WriteAt(init, 0)
	}
	if e.fd, err = faultdev.New(e.mem, faultdev.Options{Sector: cfg.sector}); err != nil {
		t.Fatal(err)
	}
	e.fs = vfs.NewCrashableMem()
	kv, err := pebble.OpenOnFS("db", e.fs)
	if err != nil {
		t.Fatal(err)
	}
	e.kv = &countingKV{KV: kv}
	opts := CreateOptions{Format: f, Options: crashOpts}
	opts.StagingBytes = 8 * bs
	opts.Key = cfg.key
	if e.v, err = Create(context.Background(), e.fd, e.kv, opts); err != nil {
		t.Fatal(err)
	}
	// Corrupt the first reserved block before the workload.
	if err := e.fd.FlipBit(int64(e.blocks*bs+5), 2); err != nil {
		t.Fatal(err)
	}
	e.model = init[:e.blocks*bs]
	e.synced = bytes.Clone(e.model)
	e.fd.SetHook(func(faultdev.Step) error { return e.step() })
	e.kv.hook = func(bool) error { return e.step() }
	return e
}

var errTestCrash = errors.New("test crash")

// step numbers a state-changing step and crashes instead of the chosen one.
func (e *crashEnv) step() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.crashed {
		return errTestCrash
	}
	n := e.steps
	e.steps++
	if n != e.crashAt {
		return nil
	}
	seed := e.cfg.seed + uint64(n)
	e.clone = e.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(seed, 1))})
	if err := e.fd.Crash(faultdev.CrashOptions{Keep: 0.5, Seed: seed}); err != nil {
		panic(err)
	}
	e.crashed = true
	return errTestCrash
}

func (e *crashEnv) isCrashed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.crashed
}

// addVersions records the current model contents of the blocks of
// [off, off+n) as versions a crash may leave.
func (e *crashEnv) addVersions(off, n int64) {
	bs := int64(e.bs)
	for b := off / bs; b*bs < off+n; b++ {
		e.versions[int(b)] = append(e.versions[int(b)], bytes.Clone(e.model[b*bs:(b+1)*bs]))
	}
}

// run applies the workload until it ends or crashes; it returns whether it
// crashed.
func (e *crashEnv) run(ops []crashOp) bool {
	for _, op := range ops {
		var err error
		switch op.kind {
		case "write":
			_, err = e.v.WriteAt(op.data, op.off)
			if err == nil || errors.Is(err, errTestCrash) || errors.Is(err, device.ErrCrashed) || e.isCrashed() {
				// A write that crashed may have reached the device in part.
				copy(e.model[op.off:], op.data)
				e.addVersions(op.off, int64(len(op.data)))
			}
		case "sync":
			if err = e.v.Sync(); err == nil {
				copy(e.synced, e.model)
				clear(e.versions)
			}
		case "discard":
			err = e.v.Discard(op.off, op.n)
			if err == nil {
				clear(e.model[op.off : op.off+op.n])
				copy(e.synced, e.model)
				clear(e.versions)
			} else if e.isCrashed() {
				// The sync inside may have completed, and the discard too.
				clear(e.model[op.off : op.off+op.n])
				e.addVersions(op.off, op.n)
			}
		case "flip":
			err = e.fd.FlipBit(int64((e.blocks+1)*e.bs+7), 0)
			e.flipped = err == nil
		}
		if e.isCrashed() {
			return true
		}
		if err != nil {
			e.t.Fatalf("%s at %d: %v (not a crash)", op.kind, op.off, err)
		}
	}
	return false
}

// verify reopens everything after the crash and checks every block.
func (e *crashEnv) verify() RecoveryStats {
	fd, err := e.fd.Reopen()
	if err != nil {
		e.t.Fatal(err)
	}
	e.kv.Close()
	return e.verifyOn(fd, e.clone)
}

// verifyOn opens the volume on fd and the store on fs, as a crash left
// them, and checks every block.
func (e *crashEnv) verifyOn(fd *faultdev.Device, fs *vfs.MemFS) RecoveryStats {
	t := e.t
	kv, err := pebble.OpenOnFS("db", fs)
	if err != nil {
		t.Fatalf("reopening the store after the crash: %v", err)
	}
	defer kv.Close()
	opts := crashOpts
	opts.StagingBytes = 8 * e.bs
	opts.Key = e.cfg.key
	v, err := Open(context.Background(), fd, kv, opts)
	if err != nil {
		t.Fatalf("Open after the crash: %v", err)
	}
	defer v.Close()
	bs := e.bs
	buf := make([]byte, bs)
	raw := make([]byte, bs)
	for b := 0; b < e.blocks; b++ {
		_, err := v.ReadAt(buf, int64(b*bs))
		allowed := append([][]byte{e.synced[b*bs : (b+1)*bs]}, e.versions[b]...)
		match := func(p []byte) bool {
			for _, a := range allowed {
				if bytes.Equal(a, p) {
					return true
				}
			}
			return false
		}
		if err == nil {
			if !match(buf) {
				t.Fatalf("block %d holds contents that are neither synced nor written since (%d versions)", b, len(e.versions[b]))
			}
			continue
		}
		if !errors.Is(err, dif.ErrIntegrity) {
			t.Fatalf("block %d: %v", b, err)
		}
		// A failure is allowed only for a block torn inside by the crash.
		if e.cfg.sector >= bs {
			t.Fatalf("block %d fails after a crash on a medium with atomic blocks: %v", b, err)
		}
		e.mem.ReadAt(raw, int64(b*bs))
		if match(raw) {
			t.Fatalf("block %d fails although its data is a version written to it: %v", b, err)
		}
		found := false
		for f, ferr := range v.Tuples().Findings(store.FindingQuery{LBA: int64(b), N: 1, State: store.FindingOpen}) {
			if ferr != nil {
				t.Fatal(ferr)
			}
			found = found || (f.Field == string(KindTorn) && f.LBA == int64(b))
		}
		if !found {
			t.Fatalf("torn block %d has no open torn finding", b)
		}
	}
	// Corruption injected before the crash is still reported.
	for i, flipped := range []bool{true, e.flipped} {
		_, err := v.ReadAt(buf, int64((e.blocks+i)*bs))
		if flipped && !errors.Is(err, dif.ErrIntegrity) {
			t.Fatalf("corrupted block %d reads without error after the crash (%v)", e.blocks+i, err)
		}
		if !flipped && err != nil {
			t.Fatalf("block %d: %v", e.blocks+i, err)
		}
	}
	// Every page is recorded, or held by an empty run.
	if _, err := v.Tuples().Coverage(nil); err != nil {
		t.Fatalf("the store after the crash: %v", err)
	}
	if e.cfg.key != nil {
		// And the seal covers the tag pages and runs as they are.
		if _, ok, err := v.Tuples().CheckSeal(); err != nil || !ok {
			t.Fatalf("the seal after the crash: %v (sealed %v)", err, ok)
		}
	}
	// And the volume works: write, sync, read.
	p := blocktest.Pattern(bs+3, 77)
	if _, err := v.WriteAt(p, int64(bs-1)); err != nil && !errors.Is(err, dif.ErrIntegrity) {
		t.Fatal(err)
	}
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
	return v.Stats().Recovery
}

func TestVolumeCrash(t *testing.T) {
	cfgs := []crashCfg{
		{format: "512+8", sector: 512, seed: 1, ops: 40},
		{format: "4096+8", sector: 4096, seed: 2, ops: 40},
		{format: "4096+16:crc64", sector: 512, seed: 3, ops: 40},
		{format: "4096+8", sector: 512, seed: 4, ops: 30},
		{format: "512+8", sector: 512, seed: 5, ops: 30, sparse: true},
	}
	if testing.Short() {
		cfgs = []crashCfg{cfgs[0], cfgs[1], cfgs[4]}
		for i := range cfgs {
			cfgs[i].ops = 15
		}
	}
	for _, cfg := range cfgs {
		t.Run(fmt.Sprintf("format=%s/sector=%d/seed=%d/sparse=%v", cfg.format, cfg.sector, cfg.seed, cfg.sparse), func(t *testing.T) {
			bs := dif.MustFormat(cfg.format).BlockSize()
			ops := crashWorkload(cfg, bs, 24)
			// A run without a crash counts the steps.
			e := newCrashEnv(t, cfg, -1)
			if e.run(ops) {
				t.Fatal("crashed without a crash point")
			}
			total := e.steps // no flush is running: the workload ended with a sync
			e.v.Close()
			e.kv.Close()
			if total < 20 {
				t.Fatalf("only %d steps", total)
			}
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

// recoveryCrash runs the recovery of the crash left by e on a volume whose
// device and store crash instead of recovery step r (r < 0: no crash). It
// returns the number of steps recovery took and, after a crash, the device
// and store as it left them.
func (e *crashEnv) recoveryCrash(r int64) (steps int64, fd *faultdev.Device, fs *vfs.MemFS) {
	t := e.t
	fd, err := e.fd.Reopen()
	if err != nil {
		t.Fatal(err)
	}
	e.kv.Close()
	pkv, err := pebble.OpenOnFS("db", e.clone)
	if err != nil {
		t.Fatal(err)
	}
	kv := &countingKV{KV: pkv}
	crashed := false
	step := func() error {
		if crashed {
			return errTestCrash
		}
		n := steps
		steps++
		if n != r {
			return nil
		}
		seed := e.cfg.seed + 1000 + uint64(n)
		fs = e.clone.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(seed, 2))})
		if err := fd.Crash(faultdev.CrashOptions{Keep: 0.5, Seed: seed}); err != nil {
			panic(err)
		}
		crashed = true
		return errTestCrash
	}
	fd.SetHook(func(faultdev.Step) error { return step() })
	kv.hook = func(bool) error { return step() }
	opts := crashOpts
	opts.StagingBytes = 8 * e.bs
	opts.Key = e.cfg.key
	v, err := Open(context.Background(), fd, kv, opts)
	if !crashed {
		fd.SetHook(nil)
		kv.hook = nil
	}
	switch {
	case crashed && err == nil:
		t.Fatalf("recovery crashed at its step %d and Open succeeded", r)
	case crashed:
		pkv.Close()
		fd2, err := fd.Reopen()
		if err != nil {
			t.Fatal(err)
		}
		return steps, fd2, fs
	case err != nil:
		t.Fatalf("Open after the crash: %v", err)
	}
	v.Close()
	pkv.Close()
	return steps, nil, nil
}

// TestVolumeCrashDuringRecovery crashes the recovery itself at each of its
// steps (device syncs and store commits) after a crash of the workload, then
// recovers again: every block must still hold a version the contract
// allows, as if recovery had run once.
func TestVolumeCrashDuringRecovery(t *testing.T) {
	cfgs := []crashCfg{
		{format: "512+8", sector: 512, seed: 5, ops: 30},
		{format: "4096+8", sector: 512, seed: 6, ops: 20},
		// Keyed (keyed.go): recovery also checks the intents' keyed tags
		// and commits tag pages, and a crash between its steps must leave
		// every block's tag matching the version it holds.
		{format: "512+8", sector: 512, seed: 13, ops: 24, key: testKey(t, 9)},
	}
	every := int64(2)
	if testing.Short() {
		// One unkeyed and a small keyed sample.
		cfgs, every = []crashCfg{cfgs[0], cfgs[2]}, 5
		cfgs[1].ops = 10
	}
	for _, cfg := range cfgs {
		t.Run(fmt.Sprintf("format=%s/sector=%d/seed=%d/keyed=%v", cfg.format, cfg.sector, cfg.seed, cfg.key != nil), func(t *testing.T) {
			bs := dif.MustFormat(cfg.format).BlockSize()
			ops := crashWorkload(cfg, bs, 24)
			e := newCrashEnv(t, cfg, -1)
			e.run(ops)
			total := e.steps
			e.v.Close()
			e.kv.Close()
			points := 0
			for k := int64(0); k < total; k += every {
				e := newCrashEnv(t, cfg, k)
				if !e.run(ops) {
					t.Fatalf("crash point %d not reached", k)
				}
				rsteps, _, _ := e.recoveryCrash(-1)
				for r := int64(0); r < rsteps; r++ {
					e := newCrashEnv(t, cfg, k)
					e.run(ops)
					_, fd, fs := e.recoveryCrash(r)
					if fd == nil {
						t.Fatalf("crash point %d: recovery step %d not reached", k, r)
					}
					e.verifyOn(fd, fs)
					points++
				}
			}
			if points == 0 {
				t.Fatal("no recovery had steps to crash")
			}
			t.Logf("%d crashes during recovery", points)
		})
	}
}

// crashKeyModes are the key=off/on subtests of the crash tests below: the
// same scenario on an unkeyed volume and on a keyed one (opened with its
// key throughout, so recovery checks the intents' keyed tags too).
func crashKeyModes(t *testing.T) []struct {
	name string
	key  *Key
} {
	return []struct {
		name string
		key  *Key
	}{{"key=off", nil}, {"key=on", testKey(t, 9)}}
}

// newPowerLossEnvWith is newPowerLossEnv with a key (nil: unkeyed) and a
// sector sum policy.
func newPowerLossEnvWith(t *testing.T, format string, blocks int, key *Key, sums SumPolicy) *powerLossEnv {
	t.Helper()
	if key == nil && sums == SumsAuto {
		return newPowerLossEnv(t, format, blocks)
	}
	f := dif.MustFormat(format)
	bs := f.BlockSize()
	e := &powerLossEnv{t: t, f: f}
	var err error
	if e.mem, err = device.NewMem(int64(blocks*bs), min(bs, 4096)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.mem.WriteAt(blocktest.Pattern(blocks*bs, 5), 0); err != nil {
		t.Fatal(err)
	}
	if e.fd, err = faultdev.New(e.mem, faultdev.Options{}); err != nil {
		t.Fatal(err)
	}
	e.fs = vfs.NewCrashableMem()
	if e.kv, err = pebble.OpenOnFS("db", e.fs); err != nil {
		t.Fatal(err)
	}
	co := CreateOptions{Format: f, SectorSums: sums, Options: Options{Rereads: -1, Key: key}}
	if e.v, err = Create(context.Background(), e.fd, e.kv, co); err != nil {
		t.Fatal(err)
	}
	return e
}

// wantKeyed checks that v is keyed and checks its tags exactly when key is
// given.
func wantKeyed(t *testing.T, v *Volume, key *Key) {
	t.Helper()
	if v.KeyedChecked() != (key != nil) {
		t.Fatalf("volume keyed check %v, want %v", v.KeyedChecked(), key != nil)
	}
}

// TestVolumeProcessCrashThenPowerLoss: a process crash keeps the page cache
// (unsynced data and every store commit survive), so recovery finds the new
// data and folds its tuples; a power loss after recovery must not then lose
// that data under the folded tuples. It fails if recovery folds before the
// data it trusts is durable (recovery's first device sync). Keyed, the
// folded tags must be durable with the tuples and match the data.
func TestVolumeProcessCrashThenPowerLoss(t *testing.T) {
	formats := []string{"512+8", "4096+16:crc64"}
	for _, km := range crashKeyModes(t) {
		for i, format := range formats {
			if testing.Short() && km.key != nil && i > 0 {
				continue // -short: one keyed format
			}
			t.Run(km.name+"/format="+format, func(t *testing.T) {
				key := km.key
				e := newPowerLossEnvWith(t, format, 32, key, SumsAuto)
				bs := e.f.BlockSize()
				if err := e.v.Sync(); err != nil {
					t.Fatal(err)
				}
				// More than a staging batch: flushed (intents durable, data in
				// the page cache), never synced.
				data := blocktest.Pattern(20*bs, 8)
				e.v.opts.StagingBytes = 8 * bs
				v := e.v
				v.Close() // the volume was created with the default staging
				var err error
				if v, err = Open(context.Background(), e.fd, e.kv, Options{Rereads: -1, StagingBytes: 8 * bs, Key: key}); err != nil {
					t.Fatal(err)
				}
				wantKeyed(t, v, key)
				if _, err := v.WriteAt(data, 4*int64(bs)); err != nil {
					t.Fatal(err)
				}
				v.waitFlushed()
				// Process crash: the volume is abandoned; the device keeps what
				// was written (not synced), the store every commit.
				v.fails.p.Store(&errTestCrash)
				e.kv.Close()
				kv, err := pebble.OpenOnFS("db", e.fs)
				if err != nil {
					t.Fatal(err)
				}
				e.kv = kv
				v2, err := Open(context.Background(), e.fd, kv, Options{Rereads: -1, Key: key})
				if err != nil {
					t.Fatal(err)
				}
				if rs := v2.Stats().Recovery; rs.Folded == 0 {
					t.Fatalf("recovery folded nothing (%+v): the test does not reach its case", rs)
				}
				// Power loss right after recovery.
				fd, clone := e.powerLoss()
				kv2, err := pebble.OpenOnFS("db", clone)
				if err != nil {
					t.Fatal(err)
				}
				defer kv2.Close()
				v3, err := Open(context.Background(), fd, kv2, Options{Rereads: -1, Key: key})
				if err != nil {
					t.Fatal(err)
				}
				defer v3.Close()
				wantKeyed(t, v3, key)
				got := make([]byte, v3.Size())
				if _, err := v3.ReadAt(got, 0); err != nil {
					t.Fatalf("after a process crash, recovery and a power loss: %v", err)
				}
			})
		}
	}
}

// TestVolumeCorruptUnderOpenIntent: a block whose write is an open intent
// (flushed, not synced) is damaged before recovery; recovery must report it
// torn, whether the block held data or was unwritten, and never accept it.
// Keyed (key=on), recovery also checks each block against the intent's
// keyed tag, and the damaged block must be a failure there too, never
// laundered into a tag that matches it.
func TestVolumeCorruptUnderOpenIntent(t *testing.T) {
	for _, km := range crashKeyModes(t) {
		for i, format := range []string{"512+8", "4096+16:crc64"} {
			for _, unwritten := range []bool{false, true} {
				if testing.Short() && km.key != nil && i > 0 {
					continue
				}
				t.Run(fmt.Sprintf("%s/format=%s/unwritten=%v", km.name, format, unwritten), func(t *testing.T) {
					key := km.key
					e := newPowerLossEnvWith(t, format, 32, key, SumsAuto)
					bs := e.f.BlockSize()
					const blk = 6
					if unwritten {
						if err := e.v.Discard(0, 16*int64(bs)); err != nil {
							t.Fatal(err)
						}
					}
					e.v.Close()
					v, err := Open(context.Background(), e.fd, e.kv, Options{Rereads: -1, StagingBytes: 8 * bs, Key: key})
					if err != nil {
						t.Fatal(err)
					}
					if _, err := v.WriteAt(blocktest.Pattern(12*bs, 9), 0); err != nil {
						t.Fatal(err)
					}
					v.waitFlushed()
					// Power loss that keeps every write (the data reached the
					// medium), then the block rots.
					clone := e.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(1, 1))})
					if err := e.fd.Crash(faultdev.CrashOptions{Keep: 1}); err != nil {
						t.Fatal(err)
					}
					fd, err := e.fd.Reopen()
					if err != nil {
						t.Fatal(err)
					}
					e.kv.Close()
					if err := fd.FlipBit(blk*int64(bs)+9, 1); err != nil {
						t.Fatal(err)
					}
					kv, err := pebble.OpenOnFS("db", clone)
					if err != nil {
						t.Fatal(err)
					}
					defer kv.Close()
					v2, err := Open(context.Background(), fd, kv, Options{Rereads: -1, Key: key})
					if err != nil {
						t.Fatal(err)
					}
					defer v2.Close()
					wantKeyed(t, v2, key)
					rs := v2.Stats().Recovery
					if rs.Intents == 0 || rs.Torn != 1 {
						t.Fatalf("recovery: %+v; want the one damaged block torn", rs)
					}
					buf := make([]byte, bs)
					if _, err := v2.ReadAt(buf, blk*int64(bs)); !errors.Is(err, dif.ErrIntegrity) {
						t.Fatalf("damaged block under an open intent reads: %v", err)
					}
					for b := int64(0); b < 12; b++ {
						if b == blk {
							continue
						}
						if _, err := v2.ReadAt(buf, b*int64(bs)); err != nil {
							t.Fatalf("block %d: %v", b, err)
						}
					}
					if key == nil {
						return
					}
					// The damaged block keeps no tag that matches it: a check
					// fails it again after the tuples are repaired by hand
					// (as an attacker who recomputes CRCs would), by its
					// keyed tag.
					v2.Close()
					kv.Close()
					kv, err = pebble.OpenOnFS("db", clone)
					if err != nil {
						t.Fatal(err)
					}
					tp, err := store.OpenTuples(kv, DefaultVolumeName, nil)
					if err != nil {
						t.Fatal(err)
					}
					got := make([]byte, bs)
					if _, err := fd.ReadAt(got, blk*int64(bs)); err != nil {
						t.Fatal(err)
					}
					fixTuple(t, tp, e.f, blk, got)
					v3, err := Open(context.Background(), fd, kv, Options{Rereads: -1, Key: key})
					if err != nil {
						t.Fatal(err)
					}
					defer v3.Close()
					_, err = v3.ReadAt(buf, blk*int64(bs))
					var ke *KeyedTagError
					if !errors.As(err, &ke) || ke.LBA != blk {
						t.Fatalf("damaged block with its CRCs recomputed reads: %v, want a keyed-tag failure", err)
					}
				})
			}
		}
	}
}

// fixTuple stores the tuple and sector sum that make data pass the CRC
// checks as block lba, without the key (as an attacker would).
func fixTuple(t *testing.T, tp *store.Tuples, f dif.Format, lba int64, data []byte) {
	t.Helper()
	m := tp.Manifest()
	f = f.WithLayout(dif.Separate)
	tuple := make([]byte, f.TupleSize())
	if err := f.Generate(data, tuple, dif.Params{RefTag: m.InitialRefTag + uint64(lba), AppTag: m.AppTag, LBA: lba}); err != nil {
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

// TestVolumeRecoveryChecksSectorSums: data that matches an intent's PI
// tuple but not its CRC-32C sector checksum (a T10-DIF guard collision,
// made by adding the CRC polynomial to the data) is not the intended write:
// recovery must report it torn, not fold it. Keyed, the intent's keyed tag
// catches it too: with sector sums off (sums=off) the keyed tag is the
// only check that tells the colliding data from the intended write.
func TestVolumeRecoveryChecksSectorSums(t *testing.T) {
	modes := crashKeyModes(t)
	type mode struct {
		name string
		key  *Key
		sums SumPolicy
	}
	ms := []mode{{modes[0].name, nil, SumsAuto}, {modes[1].name, modes[1].key, SumsAuto}, {modes[1].name + "/sums=off", modes[1].key, SumsOff}}
	for _, md := range ms {
		t.Run(md.name, func(t *testing.T) {
			e := newPowerLossEnvWith(t, "512+8", 32, md.key, md.sums) // 16-bit guard: sector sums kept (auto)
			bs := e.f.BlockSize()
			if e.v.Manifest().SectorSums != (md.sums == SumsAuto) {
				t.Fatalf("the volume keeps sector checksums: %v", e.v.Manifest().SectorSums)
			}
			f := e.v.Format()
			e.v.Close()
			v, err := Open(context.Background(), e.fd, e.kv, Options{Rereads: -1, StagingBytes: 8 * bs, Key: md.key})
			if err != nil {
				t.Fatal(err)
			}
			const blk = 2
			data := blocktest.Pattern(12*bs, 10)
			if _, err := v.WriteAt(data, 0); err != nil {
				t.Fatal(err)
			}
			v.waitFlushed()
			clone := e.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(1, 1))})
			if err := e.fd.Crash(faultdev.CrashOptions{Keep: 1}); err != nil {
				t.Fatal(err)
			}
			fd, err := e.fd.Reopen()
			if err != nil {
				t.Fatal(err)
			}
			e.kv.Close()
			// x^16 + 0x8BB7 (0x18BB7), shifted left by 7 to fill three bytes: the
			// data plus a multiple of the polynomial has the same CRC-16/T10-DIF.
			poly := []byte{0xC5, 0xDB, 0x80}
			at := blk*bs + 100
			for i, p := range poly {
				if err := flipByte(fd, int64(at+i), p); err != nil {
					t.Fatal(err)
				}
			}
			// Check the collision: same tuple, different data.
			got := make([]byte, bs)
			if _, err := fd.ReadAt(got, blk*int64(bs)); err != nil {
				t.Fatal(err)
			}
			t1, t2 := make([]byte, 8), make([]byte, 8)
			p := dif.Params{RefTag: blk, LBA: blk}
			if err := f.Generate(data[blk*bs:(blk+1)*bs], t1, p); err != nil {
				t.Fatal(err)
			}
			if err := f.Generate(got, t2, p); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(t1, t2) || bytes.Equal(got, data[blk*bs:(blk+1)*bs]) {
				t.Fatalf("no guard collision: %x %x", t1, t2)
			}
			kv, err := pebble.OpenOnFS("db", clone)
			if err != nil {
				t.Fatal(err)
			}
			defer kv.Close()
			v2, err := Open(context.Background(), fd, kv, Options{Rereads: -1, Key: md.key})
			if err != nil {
				t.Fatal(err)
			}
			defer v2.Close()
			wantKeyed(t, v2, md.key)
			if rs := v2.Stats().Recovery; rs.Torn != 1 || rs.Folded != rs.Blocks-1 || rs.Blocks < 4 {
				t.Fatalf("recovery: %+v; want the colliding block torn and the others folded", rs)
			}
			if _, err := v2.ReadAt(got, blk*int64(bs)); !errors.Is(err, dif.ErrIntegrity) {
				t.Fatalf("the colliding block reads: %v", err)
			}
		})
	}
}

// flipByte XORs the byte at off with x on the medium (FlipBit per bit).
func flipByte(fd *faultdev.Device, off int64, x byte) error {
	for bit := uint(0); bit < 8; bit++ {
		if x>>bit&1 != 0 {
			if err := fd.FlipBit(off, bit); err != nil {
				return err
			}
		}
	}
	return nil
}
