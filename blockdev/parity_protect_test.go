package blockdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/faultdev"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/blockdev/parity"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
	"github.com/difctl/difctl/store/pebble"
)

// protectParityFile makes the memory parity file of spec for a volume of
// blocks of bs bytes.
func protectParityFile(t testing.TB, spec ParitySpec, bs int, blocks int64) *device.Mem {
	t.Helper()
	l, err := ParityLayout(spec, bs, blocks)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := device.NewMem(l.FileSize(), min(bs, 4096))
	if err != nil {
		t.Fatal(err)
	}
	return pm
}

// TestProtectParity protects sparse image files with parity (Create with
// CreateOptions.Parity): the parity is computed in protect's pass (a
// ComputeParity afterwards has nothing to do) and is the encoding of the
// image, holes as zeros, with holes skipped or protected as zeros, keyed or
// not; a layout whose groups do not fit the pass's windows is left to
// ComputeParity.
func TestProtectParity(t *testing.T) {
	defer func(w int) { parityWindowBytes = w }(parityWindowBytes)
	for _, c := range []struct {
		format    string
		depth     int64
		window    int // parityWindowBytes
		zeroHoles bool
		keyed     bool
		inPass    bool // the parity is computed in protect's pass
	}{
		{"512+8", 16, 16 << 20, false, false, true},
		{"512+8", 16, 4 * 512 * 16 * 3, true, false, true},
		{"4096+8", parity.Consecutive, 4 * 4096 * 5, false, false, true},
		{"4096+8", parity.WholeVolume, 16 << 20, false, true, true},
		{"4096+16:crc64", 64, 4 * 4096 * 16, false, false, false},
	} {
		t.Run(fmt.Sprintf("%s/depth=%d/window=%d/zeroholes=%v/keyed=%v", c.format, c.depth, c.window, c.zeroHoles, c.keyed), func(t *testing.T) {
			parityWindowBytes = c.window
			f := dif.MustFormat(c.format)
			bs := f.BlockSize()
			const blocks = 1000
			// Data in three extents, holes between them and at the end.
			model := make([]byte, blocks*bs)
			path := filepath.Join(t.TempDir(), "img")
			img, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := img.Truncate(int64(len(model))); err != nil {
				t.Fatal(err)
			}
			for i, e := range [][2]int{{0, 130}, {300, 650}, {700, 900}} {
				p := blocktest.Pattern((e[1]-e[0])*bs, uint64(i+1))
				copy(model[e[0]*bs:], p)
				if _, err := img.WriteAt(p, int64(e[0]*bs)); err != nil {
					t.Fatal(err)
				}
			}
			img.Close()
			dev, err := device.OpenFile(path, device.FileOptions{BlockSize: bs})
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			spec := ParitySpec{Data: 4, Parity: 2, Depth: c.depth, Path: "p"}
			pm := protectParityFile(t, spec, bs, blocks)
			spec.Dev = pm
			kv := store.NewMem()
			defer kv.Close()
			opts := CreateOptions{Format: f, ZeroHoles: c.zeroHoles, ChunkBytes: 37 * bs, Parity: &spec}
			if c.keyed {
				opts.Key = testKey(t, 3)
			}
			v, err := Create(context.Background(), dev, kv, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			rep, err := v.ComputeParity(context.Background(), nil)
			stripes := v.par.l.Stripes()
			switch {
			case err != nil:
				t.Fatal(err)
			case c.inPass && (rep.Computed != 0 || rep.Recorded != stripes):
				t.Fatalf("ComputeParity after protect: %+v, want all %d stripes recorded by protect", rep, stripes)
			case !c.inPass && rep.Computed != stripes:
				t.Fatalf("ComputeParity after protect: %+v, want all %d stripes computed", rep, stripes)
			}
			wantParity(t, v, pm, model, nil)
		})
	}
}

// TestProtectParityResume interrupts a protect with parity and resumes
// it: the resumed pass computes the windows it reads, ComputeParity the
// rest, and the parity is right; a resume with another parity is refused.
func TestProtectParityResume(t *testing.T) {
	defer func(w int) { parityWindowBytes = w }(parityWindowBytes)
	parityWindowBytes = 4 * 4096 * 8 * 2 // two groups of depth 8
	const blocks = 512
	mem, _ := device.NewMem(blocks*4096, 4096)
	model := blocktest.Pattern(blocks*4096, 5)
	mem.WriteAt(model, 0)
	kv := store.NewMem()
	defer kv.Close()
	spec := ParitySpec{Data: 4, Parity: 2, Depth: 8, Path: "p"}
	pm := protectParityFile(t, spec, 4096, blocks)
	spec.Dev = keepOpen{pm}
	ctx, cancel := context.WithCancel(context.Background())
	opts := CreateOptions{Format: dif.MustFormat("4096+8"), ChunkBytes: 10 * 4096, CheckpointBytes: 50 * 4096, Parity: &spec,
		Options: Options{OpenParity: func(string) (device.Device, error) { return keepOpen{pm}, nil }},
		Progress: func(done, total int64) {
			if done >= 230*4096 {
				cancel()
			}
		}}
	if _, err := Create(ctx, mem, kv, opts); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted Create: %v, want context.Canceled", err)
	}
	// Another parity does not resume.
	other := spec
	other.Parity = 1
	o2 := opts
	o2.Parity, o2.Progress = &other, nil
	if _, err := Create(context.Background(), mem, kv, o2); err == nil || !bytes.Contains([]byte(err.Error()), []byte("other parity")) {
		t.Fatalf("resume with other parity: %v", err)
	}
	opts.Progress = nil
	v, err := Create(context.Background(), mem, kv, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	rep, err := v.ComputeParity(context.Background(), nil)
	stripes := v.par.l.Stripes()
	if err != nil || rep.Computed == 0 || rep.Computed >= stripes/2 || rep.Computed+rep.Recorded != stripes {
		t.Fatalf("ComputeParity after the resumed protect: %+v, %v; want the stripes of the interrupted window only (of %d)", rep, err, stripes)
	}
	wantParity(t, v, pm, model, nil)
}

// TestProtectParityCrash crashes a protect with parity at every step (a
// device write or sync, a store commit) of the image, the parity file and
// the store, then resumes it on what the crash left and runs
// ComputeParity. Right after the resume, every stripe recorded has parity
// that is the encoding of the image, or that fails its checksum; after
// ComputeParity every stripe is recorded with the right parity.
func TestProtectParityCrash(t *testing.T) {
	defer func(w int) { parityWindowBytes = w }(parityWindowBytes)
	parityWindowBytes = 4 * 512 * 4 * 2 // two groups of depth 4
	spec := ParitySpec{Data: 4, Parity: 2, Depth: 4, Path: "p"}
	const blocks = 200
	model := blocktest.Pattern(blocks*512, 9)
	run := func(crashAt int64) (steps int64, crashed bool) {
		mems := [2]*device.Mem{}
		fds := [2]*faultdev.Device{}
		l, _ := ParityLayout(spec, 512, blocks)
		for k, size := range []int64{blocks * 512, l.FileSize()} {
			mems[k], _ = device.NewMem(size, 512)
			var err error
			if fds[k], err = faultdev.New(mems[k], faultdev.Options{Sector: 512}); err != nil {
				t.Fatal(err)
			}
		}
		mems[0].WriteAt(model, 0)
		fs := vfs.NewCrashableMem()
		pkv, err := pebble.OpenOnFS("db", fs)
		if err != nil {
			t.Fatal(err)
		}
		kv := &countingKV{KV: pkv}
		var clone *vfs.MemFS
		var mu sync.Mutex // protect's pass encodes on a goroutine of its own
		step := func() error {
			mu.Lock()
			defer mu.Unlock()
			if crashed {
				return errTestCrash
			}
			n := steps
			steps++
			if n != crashAt {
				return nil
			}
			clone = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(uint64(n), 1))})
			for k, fd := range fds {
				if err := fd.Crash(faultdev.CrashOptions{Keep: 0.5, Seed: uint64(n) + uint64(k)}); err != nil {
					t.Fatal(err)
				}
			}
			crashed = true
			return errTestCrash
		}
		for _, fd := range fds {
			fd.SetHook(func(faultdev.Step) error { return step() })
		}
		kv.hook = func(bool) error { return step() }
		s := spec
		s.Dev = fds[1]
		opts := CreateOptions{Format: dif.MustFormat("512+8"), ChunkBytes: 12 * 512, CheckpointBytes: 40 * 512, Parity: &s,
			Options: Options{Rereads: -1}}
		v, err := Create(context.Background(), fds[0], kv, opts)
		if err == nil {
			if crashed {
				t.Fatalf("crash at %d: Create succeeded", crashAt)
			}
			// The crash may come in Close.
			if err = v.Close(); err == nil {
				kv.Close()
				return steps, false
			}
		}
		if !crashed {
			t.Fatalf("Create and Close without a crash: %v", err)
		}
		kv.Close()
		// Resume on what the crash left.
		var rfds [2]*faultdev.Device
		for k := range fds {
			if rfds[k], err = fds[k].Reopen(); err != nil {
				t.Fatal(err)
			}
		}
		rkv, err := pebble.OpenOnFS("db", clone)
		if err != nil {
			t.Fatalf("reopening the store: %v", err)
		}
		defer rkv.Close()
		s.Dev = rfds[1]
		opts.OpenParity = func(string) (device.Device, error) { return keepOpen{rfds[1]}, nil }
		v, err = Create(context.Background(), rfds[0], rkv, opts)
		if errors.Is(err, store.ErrExists) {
			// The crash came after protect was complete (its last sync).
			v, err = Open(context.Background(), rfds[0], rkv, opts.Options)
		}
		if err != nil {
			t.Fatalf("crash at %d: resumed Create: %v", crashAt, err)
		}
		defer v.Close()
		checkRecorded := func(all bool) {
			t.Helper()
			pv := v.par
			file := devBytes(t, rfds[1])
			k, m, bs := pv.l.DataShards(), pv.m, pv.bs
			for st := range pv.l.Stripes() {
				pv.mu.Lock()
				sums, ok, err := pv.sums(st)
				pv.mu.Unlock()
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					if all {
						t.Fatalf("crash at %d: stripe %d has no parity after ComputeParity", crashAt, st)
					}
					continue
				}
				shards := make([][]byte, k+m)
				for pos, b := range pv.l.StripeBlocks(nil, st) {
					if b >= 0 {
						shards[pos] = model[b*int64(bs) : (b+1)*int64(bs)]
					}
				}
				for j := range m {
					shards[k+j] = make([]byte, bs)
				}
				if err := pv.codec.Encode(shards); err != nil {
					t.Fatal(err)
				}
				for j := range m {
					o := pv.l.ParityOffset(st, j)
					p := file[o : o+int64(bs)]
					if !bytes.Equal(p, shards[k+j]) && (all || parity.Checksum(st, j, p) == sums[j]) {
						t.Fatalf("crash at %d: stripe %d recorded with parity block %d that is not the encoding of its data", crashAt, st, j)
					}
				}
			}
		}
		if v.par == nil {
			// The crash came before the parity was added: none was
			// recorded, and the resumed Create added it.
			t.Fatalf("crash at %d: resumed Create has no parity", crashAt)
		}
		checkRecorded(false)
		if _, err := v.ComputeParity(context.Background(), nil); err != nil {
			t.Fatalf("crash at %d: ComputeParity: %v", crashAt, err)
		}
		checkRecorded(true)
		got := make([]byte, len(model))
		if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, model) {
			t.Fatalf("crash at %d: the volume reads %v, equal %v", crashAt, err, bytes.Equal(got, model))
		}
		return steps, true
	}
	total, crashed := run(-1)
	if crashed || total < 30 {
		t.Fatalf("the run without a crash point: %d steps, crashed %v", total, crashed)
	}
	step := int64(1)
	if testing.Short() {
		step = 3
	}
	for k := int64(0); k < total; k += step {
		if _, crashed := run(k); !crashed {
			t.Fatalf("crash point %d of %d not reached", k, total)
		}
	}
	t.Logf("%d crash points", total)
}

// TestProtectParityWriteError fails the parity file's writes during a
// protect with parity: Create returns the device's error and records no
// stripe whose parity was not written; protect resumed once the file
// works again computes the parity, and every stripe is right.
func TestProtectParityWriteError(t *testing.T) {
	defer func(w int) { parityWindowBytes = w }(parityWindowBytes)
	parityWindowBytes = 4 * 4096 * 8 * 2 // two groups of depth 8
	const blocks = 512
	mem, _ := device.NewMem(blocks*4096, 4096)
	model := blocktest.Pattern(blocks*4096, 8)
	mem.WriteAt(model, 0)
	kv := store.NewMem()
	defer kv.Close()
	spec := ParitySpec{Data: 4, Parity: 2, Depth: 8, Path: "p"}
	pm := protectParityFile(t, spec, 4096, blocks)
	pf, err := faultdev.New(pm, faultdev.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := ParityLayout(spec, 4096, blocks)
	// The parity of the third window on: the first two are written.
	if _, err := pf.Inject(faultdev.Fault{Kind: faultdev.FailWrite, Off: l.ParityOffset(2*16, 0), Len: 4096}); err != nil {
		t.Fatal(err)
	}
	spec.Dev = pf
	opts := CreateOptions{Format: dif.MustFormat("4096+8"), ChunkBytes: 10 * 4096, CheckpointBytes: 64 * 4096, Parity: &spec,
		Options: Options{OpenParity: func(string) (device.Device, error) { return keepOpen{pf}, nil }}}
	var ioe *device.IOError
	if _, err := Create(context.Background(), mem, kv, opts); !errors.As(err, &ioe) {
		t.Fatalf("Create with the parity file failing: %v, want the device's *IOError", err)
	}
	pf.ClearFaults()
	v, err := Create(context.Background(), mem, kv, opts)
	if err != nil {
		t.Fatalf("resumed Create: %v", err)
	}
	defer v.Close()
	if _, err := v.ComputeParity(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	wantParity(t, v, pm, model, nil)
}
