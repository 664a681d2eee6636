package blockdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/faultdev"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/blockdev/internal/check"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
	"github.com/difctl/difctl/store/pebble"
)

// powerLossEnv is a volume over a faultdev.Device over a device.Mem, with a
// Pebble store on a crashable in-memory file system, for tests that lose
// power at a chosen moment.
type powerLossEnv struct {
	t   *testing.T
	f   dif.Format
	mem *device.Mem
	fd  *faultdev.Device
	fs  *vfs.MemFS
	kv  store.KV
	v   *Volume
}

func newPowerLossEnv(t *testing.T, format string, blocks int) *powerLossEnv {
	t.Helper()
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
	if e.v, err = Create(context.Background(), e.fd, e.kv, CreateOptions{Format: f, Options: Options{Rereads: -1}}); err != nil {
		t.Fatal(err)
	}
	return e
}

// powerLoss crashes the device (losing what was not synced) and the store
// (losing every commit that was not synced), and returns the devices as
// found afterwards. The volume is abandoned, as a power loss leaves it.
func (e *powerLossEnv) powerLoss() (*faultdev.Device, *vfs.MemFS) {
	e.t.Helper()
	clone := e.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(1, 1))})
	if err := e.fd.Crash(faultdev.CrashOptions{}); err != nil {
		e.t.Fatal(err)
	}
	fd, err := e.fd.Reopen()
	if err != nil {
		e.t.Fatal(err)
	}
	e.kv.Close()
	return fd, clone
}

// TestVolumeAckedWriteOverUnwrittenLost is the worst case: a block
// is discarded, written and synced; a power loss drops the unsynced fold
// commit, so the block's write is an open intent over an unwritten block;
// then its data is damaged. After Open the block must fail (it matches
// neither its new tuple nor zeros: torn), never read as zeros. The same
// sequence over a block that held data is the control.
func TestVolumeAckedWriteOverUnwrittenLost(t *testing.T) {
	for _, format := range []string{"512+8", "4096+16:crc64"} {
		for _, discard := range []bool{true, false} {
			t.Run(fmt.Sprintf("format=%s/discard=%v", format, discard), func(t *testing.T) {
				e := newPowerLossEnv(t, format, 16)
				bs := e.f.BlockSize()
				const blk = 3
				if discard {
					if err := e.v.Discard(blk*int64(bs), int64(bs)); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := e.v.WriteAt(blocktest.Pattern(bs, 99), blk*int64(bs)); err != nil {
					t.Fatal(err)
				}
				if err := e.v.Sync(); err != nil {
					t.Fatal(err)
				}
				fd, clone := e.powerLoss()
				// The block's data is damaged after the power loss.
				if err := fd.FlipBit(blk*int64(bs)+17, 4); err != nil {
					t.Fatal(err)
				}
				kv, err := pebble.OpenOnFS("db", clone)
				if err != nil {
					t.Fatal(err)
				}
				defer kv.Close()
				v, err := Open(context.Background(), fd, kv, Options{Rereads: -1})
				if err != nil {
					t.Fatal(err)
				}
				defer v.Close()
				if rs := v.Stats().Recovery; rs.Intents == 0 {
					t.Fatalf("no intent left to recover (%+v): the test does not reach its case", rs)
				}
				buf := make([]byte, bs)
				n, err := v.ReadAt(buf, blk*int64(bs))
				if !errors.Is(err, dif.ErrIntegrity) {
					t.Fatalf("damaged block reads with n=%d, err=%v (zeros: %v); want an integrity error", n, err, bytes.Equal(buf, make([]byte, bs)))
				}
				if rs := v.Stats().Recovery; rs.Torn != 1 {
					t.Fatalf("recovery: %+v, want 1 torn", rs)
				}
				found := false
				for f, err := range v.Tuples().Findings(store.FindingQuery{LBA: blk, N: 1, State: store.FindingOpen}) {
					if err != nil {
						t.Fatal(err)
					}
					found = found || f.Field == string(KindTorn)
				}
				if !found {
					t.Fatal("no open torn finding")
				}
			})
		}
	}
}

// unwrittenDev is the device under test of the unwritten-block tests: a
// sparse device.Mem (data in its first half only) or an image file (a hole
// in its second half; a File maps itself, so reads take the mapped path).
func unwrittenDev(t *testing.T, kind string, size int64, bs int) (device.Device, func(p []byte, off int64)) {
	t.Helper()
	half := blocktest.Pattern(int(size/2), 11)
	switch kind {
	case "mem":
		m, err := device.NewMem(size, min(bs, 4096))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.WriteAt(half, 0); err != nil {
			t.Fatal(err)
		}
		return m, func(p []byte, off int64) {
			if _, err := m.WriteAt(p, off); err != nil {
				t.Fatal(err)
			}
		}
	case "file":
		path := filepath.Join(t.TempDir(), "img")
		f, err := device.CreateImage(path, size, device.FileOptions{BlockSize: bs})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(half, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f, func(p []byte, off int64) {
			// Behind difctl's back, as another program would.
			h, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			if _, err := h.WriteAt(p, off); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Fatalf("no device %q", kind)
	return nil, nil
}

// TestVolumeUnwrittenData: data appearing in an unwritten block (a hole
// adopted by Create, or a discarded block) is a finding of its own kind,
// reported by ReadAt (never returned as zeros), CheckRun and Scrub; zeros
// written there are not.
func TestVolumeUnwrittenData(t *testing.T) {
	for _, format := range []string{"512+8", "4096+16:crc64"} {
		for _, dev := range []string{"mem", "file"} {
			for _, how := range []string{"hole", "discarded"} {
				t.Run(fmt.Sprintf("format=%s/dev=%s/block=%s", format, dev, how), func(t *testing.T) {
					f := dif.MustFormat(format)
					bs := f.BlockSize()
					blocks := int64(2 * (256 << 10) / bs)
					d, poke := unwrittenDev(t, dev, blocks*int64(bs), bs)
					kv := store.NewMem()
					defer kv.Close()
					v, err := Create(context.Background(), d, kv, CreateOptions{Format: f, Options: Options{Rereads: -1}})
					if err != nil {
						t.Fatal(err)
					}
					defer v.Close()
					blk := blocks - 3 // in the hole
					if how == "discarded" {
						blk = 5
						if err := v.Discard(blk*int64(bs), int64(bs)); err != nil {
							t.Fatal(err)
						}
					}
					// Zeros written behind the volume's back are fine.
					poke(make([]byte, bs), blk*int64(bs))
					if rep, err := checkAll(context.Background(), v, CheckOptions{}); err != nil || rep.Failed != 0 {
						t.Fatalf("zeros in an unwritten block: %+v, %v", rep, err)
					}
					junk := blocktest.Pattern(bs, 3)
					poke(junk[:100], blk*int64(bs)+int64(bs)/2)

					// ReadAt fails, and leaves nothing unverified in p.
					p := bytes.Repeat([]byte{0xAA}, 4*bs)
					off := (blk - 1) * int64(bs)
					n, err := v.ReadAt(p, off)
					var ue *UnwrittenDataError
					if !errors.Is(err, ErrUnwrittenData) || !errors.Is(err, dif.ErrIntegrity) || !errors.As(err, &ue) || ue.LBA != blk {
						t.Fatalf("ReadAt over the block: n=%d, err=%v; want a data-in-unwritten-block error", n, err)
					}
					if n != bs {
						t.Fatalf("ReadAt returned %d bytes, want the %d before the bad block", n, bs)
					}
					if !check.IsZero(p[n:]) {
						t.Fatal("ReadAt left bytes it did not return in the buffer")
					}
					// CheckRun and Scrub report it.
					var probs []Problem
					s := make([]byte, v.ScratchSize(int(blocks)))
					st, err := v.CheckRun(context.Background(), 0, int(blocks), s, CheckOptions{}, func(p Problem) { probs = append(probs, p) })
					if err != nil || st.Failed != 1 || len(probs) != 1 || probs[0].LBA != blk || probs[0].Kind != KindUnwrittenData {
						t.Fatalf("CheckRun: %+v %v %+v", st, err, probs)
					}
					rep, err := checkAll(context.Background(), v, CheckOptions{Rereads: 1})
					if err != nil || rep.Failed != 1 || rep.Failures[KindUnwrittenData] != 1 {
						t.Fatalf("Scrub: %+v, %v", rep, err)
					}
					// Rewriting the block makes it a written block again.
					if _, err := v.WriteAt(junk, blk*int64(bs)); err != nil {
						t.Fatal(err)
					}
					if _, err := v.ReadAt(p[:bs], blk*int64(bs)); err != nil || !bytes.Equal(p[:bs], junk) {
						t.Fatalf("rewritten block: %v", err)
					}
				})
			}
		}
	}
}

// readCounter counts the bytes read from a device.
type readCounter struct {
	device.Device
	bytes atomic.Int64
}

func (r *readCounter) ReadAt(p []byte, off int64) (int, error) {
	r.bytes.Add(int64(len(p)))
	return r.Device.ReadAt(p, off)
}

func (r *readCounter) NextData(off int64) (device.Extent, error) {
	return r.Device.(device.DataFinder).NextData(off)
}

// TestVolumeHolesNotRead: a scrub of a sparse volume reads the data
// extents only; runs of unwritten blocks in holes are not read.
func TestVolumeHolesNotRead(t *testing.T) {
	const bs = 512
	size := int64(8 << 20)
	m, err := device.NewMem(size, bs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.WriteAt(blocktest.Pattern(1<<20, 1), 3<<20); err != nil {
		t.Fatal(err)
	}
	rc := &readCounter{Device: m}
	kv := store.NewMem()
	defer kv.Close()
	v, err := Create(context.Background(), rc, kv, CreateOptions{Format: dif.MustFormat("512+8"), Options: Options{NoMap: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	rc.bytes.Store(0)
	rep, err := checkAll(context.Background(), v, CheckOptions{})
	if err != nil || rep.Failed != 0 || rep.OK != (1<<20)/bs || rep.Unwritten != (7<<20)/bs {
		t.Fatalf("%+v, %v", rep, err)
	}
	if got := rc.bytes.Load(); got != 1<<20 {
		t.Fatalf("the scrub read %d bytes; want only the 1 MiB of data", got)
	}
	// ReadAt of a hole returns zeros without reading either.
	rc.bytes.Store(0)
	p := bytes.Repeat([]byte{1}, 1<<20)
	if _, err := v.ReadAt(p, 0); err != nil || !check.IsZero(p) {
		t.Fatalf("ReadAt of a hole: %v", err)
	}
	if got := rc.bytes.Load(); got != 0 {
		t.Fatalf("ReadAt of a hole read %d bytes", got)
	}
}
