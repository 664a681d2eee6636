package blockdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/blockdev/parity"
	"github.com/difctl/difctl/dif"
)

// The crash test of parity. A volume with 4+2 parity (unkeyed and keyed;
// its data and its parity file on two faultdev devices, a Pebble store on
// a crashable in-memory file system) runs a fixed session: the parity added and
// computed, writes, discards and syncs, a rotted data block read (and
// repaired from the parity), a rotted parity block rewritten by
// ScrubParity. Every state-changing step of the two devices and of the
// store is numbered; the session is run once per step, crashing both
// devices and the store instead of it. Then the volume is opened again
// on what the crash left, with its parity:
//
//   - every block reads without error and holds the contents of the last
//     completed sync or of a write since (0 false positives, 0 lost synced
//     writes, 0 blocks repaired into wrong data);
//   - every parity block of a stripe with parity recorded is the encoding
//     of what the volume reads, or fails its checksum (the rotted one):
//     recovery recomputed (or dropped) every stripe the crash could have
//     left stale, so stale parity is never used;
//   - damage injected after the crash (one block of each stripe) is
//     healed back to those contents where the stripe has parity, and
//     reported, never laundered, where it has none.

type parityCrash struct {
	*crashRig
	key *Key // a keyed volume's
}

var parityCrashSpec = ParitySpec{Data: 4, Parity: 2, Depth: 2, Path: "p"}

func newParityCrash(t *testing.T, format string, sector int, key *Key, crashAt int64) *parityCrash {
	sizes := func(bs int, size int64) [2]int64 { // data, parity
		l, err := ParityLayout(parityCrashSpec, bs, size/int64(bs))
		if err != nil {
			t.Fatal(err)
		}
		return [2]int64{size, l.FileSize()}
	}
	rig := newCrashRig(t, format, sector, crashAt, sizes, CreateOptions{Options: Options{Key: key}})
	return &parityCrash{crashRig: rig, key: key}
}

func (e *parityCrash) run() bool {
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
	spec := parityCrashSpec
	spec.Dev = keepOpen{e.fds[1]}
	if fail("add parity", e.v.AddParity(spec)) {
		return true
	}
	if _, err := e.v.ComputeParity(context.Background(), nil); fail("compute parity", err) {
		return true
	}
	sync := func() bool {
		err := e.v.Sync()
		if err == nil {
			copy(e.synced, e.model)
			clear(e.versions)
		}
		return fail("sync", err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 14 {
		switch i % 5 {
		case 4:
			if sync() {
				return true
			}
			continue
		case 2:
			n := 1 + r.IntN(3)
			lba := r.IntN(e.blocks - 3)
			err := e.v.Discard(int64(lba*bs), int64(n*bs))
			clear(e.model[lba*bs : (lba+n)*bs])
			for b := lba; b < lba+n; b++ {
				e.versions[b] = append(e.versions[b], make([]byte, bs))
			}
			if fail("discard", err) {
				return true
			}
			continue
		}
		n := bs * (1 + r.IntN(9))
		off := int64(r.IntN(e.blocks-9) * bs)
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
	if sync() {
		return true
	}
	// Rot on the data, repaired from the parity by a read.
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
	// Rot on the parity, rewritten by a scrub.
	l := e.v.par.l
	if fail("flip parity", e.fds[1].FlipBit(l.ParityOffset(3, 1)+7, 1)) {
		return true
	}
	if rep, err := e.v.ScrubParity(context.Background(), true); fail("scrub parity", err) {
		return true
	} else if rep.Damaged != 1 || rep.Rewritten != 1 {
		e.t.Fatalf("ScrubParity before the crash: %+v", rep)
	}
	return fail("close", e.v.Close())
}

// verify opens the volume on what the crash left and checks it.
func (e *parityCrash) verify() {
	t := e.t
	fds, kv := e.reopen()
	defer kv.Close()
	opener := func(string) (device.Device, error) { return keepOpen{fds[1]}, nil }
	v, err := Open(context.Background(), fds[0], kv, Options{StagingBytes: 8 * e.bs, Rereads: -1, OpenParity: opener, Key: e.key})
	if err != nil {
		t.Fatalf("open after the crash: %v", err)
	}
	defer v.Close()
	bs := e.bs
	got := make([]byte, e.blocks*bs)
	okBlock := func(b int, blk []byte) bool {
		ok := bytes.Equal(blk, e.synced[b*bs:(b+1)*bs])
		for _, ver := range e.versions[b] {
			ok = ok || bytes.Equal(blk, ver)
		}
		return ok
	}
	for b := range e.blocks {
		blk := got[b*bs : (b+1)*bs]
		if _, err := v.ReadAt(blk, int64(b*bs)); err != nil {
			t.Fatalf("block %d fails after the crash: %v", b, err)
		}
		if !okBlock(b, blk) {
			t.Fatalf("block %d holds contents that are neither synced nor written since (%d versions)", b, len(e.versions[b]))
		}
	}
	if v.par == nil {
		return // the crash came before the parity was recorded
	}
	// Every recorded stripe's parity is the encoding of what is read.
	l := v.par.l
	k, m := l.DataShards(), l.ParityShards()
	file := devBytes(t, fds[1])
	recorded := map[int64]bool{}
	for s := range l.Stripes() {
		v.par.mu.Lock()
		sums, ok, err := v.par.sums(s)
		v.par.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			continue
		}
		recorded[s] = true
		shards := make([][]byte, k+m)
		for pos, b := range l.StripeBlocks(nil, s) {
			if b >= 0 {
				shards[pos] = got[b*int64(bs) : (b+1)*int64(bs)]
			}
		}
		for j := range m {
			shards[k+j] = make([]byte, bs)
		}
		if err := v.par.codec.Encode(shards); err != nil {
			t.Fatal(err)
		}
		for j := range m {
			o := l.ParityOffset(s, j)
			// A parity block may differ only if its checksum says so (the
			// rot injected before the crash, not yet rewritten).
			if p := file[o : o+int64(bs)]; !bytes.Equal(p, shards[k+j]) && parity.Checksum(s, j, p) == sums[j] {
				t.Fatalf("stripe %d is recorded with parity block %d that is not the encoding of its data", s, j)
			}
		}
	}
	if len(recorded) == 0 && e.crashAt > 40 {
		t.Logf("crash at %d: no stripe recorded", e.crashAt)
	}
	// Damage after the crash: position 1 of each stripe.
	for s := range l.Stripes() {
		b, ok := l.Block(s, 1)
		if !ok {
			continue
		}
		if err := fds[0].FlipBit(b*int64(bs)+3, 0); err != nil {
			t.Fatal(err)
		}
		blk := make([]byte, bs)
		_, err := v.ReadAt(blk, b*int64(bs))
		switch {
		case err == nil && !bytes.Equal(blk, got[b*int64(bs):(b+1)*int64(bs)]):
			t.Fatalf("block %d of stripe %d: read after damage returned other contents", b, s)
		case err == nil && !recorded[s]:
			t.Fatalf("block %d of stripe %d (no parity): damage not reported", b, s)
		case err != nil && (recorded[s] || !errors.Is(err, dif.ErrIntegrity)):
			t.Fatalf("block %d of stripe %d (parity recorded %v): read after damage: %v", b, s, recorded[s], err)
		}
	}
}

func TestParityCrash(t *testing.T) {
	cfgs := []struct {
		name, format string
		sector       int
		keyed        bool
	}{{"512+8", "512+8", 512, false}, {"4096+8", "4096+8", 4096, false}, {"4096+8/keyed", "4096+8", 4096, true}}
	for _, cfg := range cfgs {
		t.Run(cfg.name, func(t *testing.T) {
			var key *Key
			if cfg.keyed {
				key = testKey(t, 7)
			}
			e := newParityCrash(t, cfg.format, cfg.sector, key, -1)
			if e.run() {
				t.Fatal("crashed without a crash point")
			}
			total := e.steps
			e.kv.Close()
			if total < 40 {
				t.Fatalf("only %d steps", total)
			}
			step := int64(1)
			if testing.Short() {
				step = 3
			}
			for k := int64(0); k < total; k += step {
				t.Run(fmt.Sprintf("crash=%d", k), func(t *testing.T) {
					e := newParityCrash(t, cfg.format, cfg.sector, key, k)
					if !e.run() {
						t.Fatalf("crash point %d of %d not reached", k, total)
					}
					e.verify()
				})
			}
			t.Logf("%d crash points", total)
		})
	}
}
