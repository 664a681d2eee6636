package blockdev

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/faultdev"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
	"github.com/difctl/difctl/store/pebble"
)

// crashRig is what the crash tests of two-device volumes share (a mirror
// leg, mirror_crash_test.go; a parity file, parity_crash_test.go): two
// faultdev devices over memory and a Pebble store on a crashable
// in-memory file system, whose state-changing steps are numbered; at step
// crashAt both devices and the store crash (power lost) and every later
// step fails with errTestCrash.
type crashRig struct {
	t       *testing.T
	bs      int
	blocks  int
	mems    [2]*device.Mem
	fds     [2]*faultdev.Device
	fs      *vfs.MemFS
	kv      *countingKV
	v       *Volume
	mu      sync.Mutex
	steps   int64
	crashAt int64
	crashed bool
	clone   *vfs.MemFS
	model   []byte
	synced  []byte
	// versions are the contents each block may hold after a crash besides
	// synced (writes since the last sync).
	versions map[int][][]byte
}

// newCrashRig makes the rig of a volume of 32 blocks of format: devices of
// sizes bytes (the first the volume's, its data blocktest.Pattern seed 11,
// the model and what is synced), faultdev sectors of sector bytes, and
// the volume created with opts (Format, StagingBytes and Rereads set
// here), the step hooks armed.
func newCrashRig(t *testing.T, format string, sector int, crashAt int64, sizes func(bs int, size int64) [2]int64, opts CreateOptions) *crashRig {
	f := dif.MustFormat(format)
	bs := f.BlockSize()
	e := &crashRig{t: t, bs: bs, blocks: 32, crashAt: crashAt, versions: map[int][][]byte{}}
	size := int64(e.blocks * bs)
	for k, sz := range sizes(bs, size) {
		m, err := device.NewMem(sz, min(bs, 4096))
		if err != nil {
			t.Fatal(err)
		}
		e.mems[k] = m
		if e.fds[k], err = faultdev.New(m, faultdev.Options{Sector: sector}); err != nil {
			t.Fatal(err)
		}
	}
	init := blocktest.Pattern(int(size), 11)
	e.mems[0].WriteAt(init, 0)
	e.fs = vfs.NewCrashableMem()
	kv, err := pebble.OpenOnFS("db", e.fs)
	if err != nil {
		t.Fatal(err)
	}
	e.kv = &countingKV{KV: kv}
	opts.Format, opts.StagingBytes, opts.Rereads = f, 8*bs, -1
	if e.v, err = Create(context.Background(), e.fds[0], e.kv, opts); err != nil {
		t.Fatal(err)
	}
	e.model = bytes.Clone(init)
	e.synced = bytes.Clone(init)
	for _, fd := range e.fds {
		fd.SetHook(func(faultdev.Step) error { return e.step() })
	}
	e.kv.hook = func(bool) error { return e.step() }
	return e
}

func (e *crashRig) step() error {
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
	seed := uint64(n)
	e.clone = e.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(seed, 1))})
	for k, fd := range e.fds {
		if err := fd.Crash(faultdev.CrashOptions{Keep: 0.5, Seed: seed + uint64(k)}); err != nil {
			panic(err)
		}
	}
	e.crashed = true
	return errTestCrash
}

func (e *crashRig) isCrashed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.crashed
}

// reopen returns the devices and the store as the crash left them; the
// caller closes the store.
func (e *crashRig) reopen() ([2]*faultdev.Device, store.KV) {
	t := e.t
	var fds [2]*faultdev.Device
	for k := range fds {
		fd, err := e.fds[k].Reopen()
		if err != nil {
			t.Fatal(err)
		}
		fds[k] = fd
	}
	e.kv.Close()
	kv, err := pebble.OpenOnFS("db", e.clone)
	if err != nil {
		t.Fatalf("reopening the store: %v", err)
	}
	return fds, kv
}
