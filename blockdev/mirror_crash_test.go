package blockdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/faultdev"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
)

// The crash test of mirrored volumes and repairs. A volume with one mirror
// leg (two faultdev devices and a Pebble store on a crashable in-memory
// file system) runs a fixed session: the leg added and resynced, mirrored
// writes and syncs, then a block of leg 0 rotted and the volume read
// whole, which repairs it. Every state-changing step of the two devices
// and of the store is numbered; the session is run once per step,
// crashing both devices and the store instead of it (power lost). Then
// the volume is opened again on what the crash left, with its leg:
//
//   - right after recovery, a check of every leg finds every fresh copy
//     good: recovery made the legs agree;
//   - every block reads without error, and holds the contents of the last
//     completed sync or of a write since (0 false positives, 0 lost synced
//     writes, 0 laundered blocks): recovery decided each block from
//     whichever leg matched, repairs took only verified copies;
//   - after a resync and a repairing check (scrub --repair), both legs
//     hold exactly what the reads returned: no leg is left silently
//     different.

type mirrorCrash struct {
	*crashRig
}

func newMirrorCrash(t *testing.T, format string, sector int, crashAt int64) *mirrorCrash {
	same := func(_ int, size int64) [2]int64 { return [2]int64{size, size} }
	e := &mirrorCrash{newCrashRig(t, format, sector, crashAt, same, CreateOptions{})}
	// The new leg: other data.
	e.mems[1].WriteAt(blocktest.Pattern(e.blocks*e.bs, 12), 0)
	return e
}

func legOpener(fd *faultdev.Device) func(string) (device.Device, error) {
	return func(name string) (device.Device, error) {
		if name != "m1" {
			return nil, fmt.Errorf("no leg %q", name)
		}
		return nopClose{fd}, nil
	}
}

// run runs the session until it ends or crashes.
func (e *mirrorCrash) run() bool {
	bs := e.bs
	fail := func(what string, err error) bool {
		if e.isCrashed() {
			return true
		}
		if err != nil {
			e.t.Fatalf("%s: %v (not a crash)", what, err)
		}
		return false
	}
	if fail("add mirror", e.v.AddMirror(Mirror{Name: "m1", Dev: nopClose{e.fds[1]}})) {
		return true
	}
	if _, err := e.v.Resync(context.Background(), ResyncOptions{}); fail("resync", err) {
		return true
	}
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 12 {
		if i%4 == 3 {
			err := e.v.Sync()
			if err == nil {
				copy(e.synced, e.model)
				clear(e.versions)
			}
			if fail("sync", err) {
				return true
			}
			continue
		}
		n := bs * (1 + r.IntN(3))
		off := int64(r.IntN(e.blocks-3) * bs)
		p := blocktest.Pattern(n, uint64(100+i))
		_, err := e.v.WriteAt(p, off)
		copy(e.model[off:], p)
		for b := off / int64(bs); b < (off+int64(n))/int64(bs); b++ {
			e.versions[int(b)] = append(e.versions[int(b)], bytes.Clone(e.model[b*int64(bs):(b+1)*int64(bs)]))
		}
		if fail("write", err) {
			return true
		}
	}
	if fail("sync", e.v.Sync()) {
		return true
	}
	copy(e.synced, e.model)
	clear(e.versions)
	// Rot on leg 0, repaired by a read from leg 1.
	if fail("flip", e.fds[0].FlipBit(int64(5*bs+9), 3)) {
		return true
	}
	buf := make([]byte, e.blocks*bs)
	if _, err := e.v.ReadAt(buf, 0); fail("read", err) {
		return true
	}
	if !bytes.Equal(buf, e.model) {
		e.t.Fatal("read before the crash: wrong bytes")
	}
	return fail("close", e.v.Close())
}

// verify opens the volume on what the crash left and checks it.
func (e *mirrorCrash) verify() {
	t := e.t
	fds, kv := e.reopen()
	defer kv.Close()
	if e.crashAt%2 == 1 {
		// Half the time the first open after the crash is read-only (a
		// verify): its recovery writes no device, and records the
		// blocks where the legs differ stale instead.
		v, err := Open(context.Background(), fds[0], kv, Options{ReadOnly: true, Rereads: -1, OpenLeg: legOpener(fds[1])})
		if err != nil {
			t.Fatalf("read-only open after the crash: %v", err)
		}
		e.checkLegs(v)
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
	}
	v, err := Open(context.Background(), fds[0], kv, Options{StagingBytes: 8 * e.bs, Rereads: -1, OpenLeg: legOpener(fds[1])})
	if err != nil {
		t.Fatalf("open after the crash: %v", err)
	}
	defer v.Close()
	bs := e.bs
	e.checkLegs(v)
	got := make([]byte, e.blocks*bs)
	for b := range e.blocks {
		blk := got[b*bs : (b+1)*bs]
		if _, err := v.ReadAt(blk, int64(b*bs)); err != nil {
			t.Fatalf("block %d fails after the crash: %v", b, err)
		}
		ok := bytes.Equal(blk, e.synced[b*bs:(b+1)*bs])
		for _, ver := range e.versions[b] {
			ok = ok || bytes.Equal(blk, ver)
		}
		if !ok {
			t.Fatalf("block %d holds contents that are neither synced nor written since (%d versions)", b, len(e.versions[b]))
		}
	}
	if v.Legs() != nil {
		if _, err := v.Resync(context.Background(), ResyncOptions{}); err != nil {
			t.Fatalf("resync after the crash: %v", err)
		}
	}
	if _, err := v.Repair(context.Background(), nil, RepairOptions{}); err != nil && !errors.Is(err, ErrNoCopies) {
		t.Fatalf("repair after the crash: %v", err)
	}
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
	for k, m := range e.mems {
		if k == 1 && v.Legs() == nil {
			continue // the crash came before the leg was recorded
		}
		if data := devBytes(t, m); !bytes.Equal(data, got) {
			i := 0
			for data[i] == got[i] {
				i++
			}
			t.Fatalf("leg %d differs from what the volume reads at block %d after resync and repair", k, i/bs)
		}
	}
}

func TestMirrorCrash(t *testing.T) {
	cfgs := []struct {
		format string
		sector int
	}{{"512+8", 512}, {"4096+8", 4096}}
	for _, cfg := range cfgs {
		t.Run(cfg.format, func(t *testing.T) {
			e := newMirrorCrash(t, cfg.format, cfg.sector, -1)
			if e.run() {
				t.Fatal("crashed without a crash point")
			}
			total := e.steps
			e.kv.Close()
			if total < 20 {
				t.Fatalf("only %d steps", total)
			}
			step := int64(1)
			if testing.Short() {
				step = 3
			}
			for k := int64(0); k < total; k += step {
				e := newMirrorCrash(t, cfg.format, cfg.sector, k)
				if !e.run() {
					t.Fatalf("crash point %d of %d not reached", k, total)
				}
				e.verify()
			}
			t.Logf("%d crash points", total)
		})
	}
}

// checkLegs checks that right after recovery every fresh copy of every
// block verifies: a check of every leg (no repair) finds nothing.
func (e *mirrorCrash) checkLegs(v *Volume) {
	e.t.Helper()
	if _, err := v.CheckRun(context.Background(), 0, e.blocks, make([]byte, v.ScratchSize(e.blocks)), CheckOptions{}, func(p Problem) {
		if p.LBA != 5 { // the rotted block, if the crash came before its repair
			e.t.Fatalf("block %d fails on a leg after recovery: %s (%s)", p.LBA, p.Kind, p.Repair)
		}
	}); err != nil {
		e.t.Fatal(err)
	}
}
