package blockdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/faultdev"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// mirrored is a volume on a memory device with mirror legs on memory
// devices (each behind a faultdev), and its model.
type mirrored struct {
	*testVol
	legs   []*device.Mem
	faults []*faultdev.Device
	// down makes OpenLeg fail for these leg names.
	down map[string]bool
}

func (m *mirrored) opener() func(string) (device.Device, error) {
	return func(name string) (device.Device, error) {
		if m.down[name] {
			return nil, fmt.Errorf("leg %s unreachable", name)
		}
		var k int
		if _, err := fmt.Sscanf(name, "m%d", &k); err != nil || k < 1 || k > len(m.faults) {
			return nil, fmt.Errorf("no leg %q", name)
		}
		return nopClose{m.faults[k-1]}, nil
	}
}

// nopClose keeps the volume from closing a test's leg.
type nopClose struct{ *faultdev.Device }

func (nopClose) Close() error { return nil }

// newMirrored protects a volume and adds legs mirror legs m1.., resynced.
func newMirrored(t *testing.T, format string, blocks, legs int) *mirrored {
	t.Helper()
	tv := newTestVol(t, format, blocks, CreateOptions{Options: Options{StagingBytes: 64 << 10}})
	m := &mirrored{testVol: tv, down: map[string]bool{}}
	for k := range legs {
		mem, err := device.NewMem(tv.v.Size(), 512)
		if err != nil {
			t.Fatal(err)
		}
		fd, err := faultdev.New(mem, faultdev.Options{})
		if err != nil {
			t.Fatal(err)
		}
		m.legs, m.faults = append(m.legs, mem), append(m.faults, fd)
		if err := tv.v.AddMirror(Mirror{Name: fmt.Sprintf("m%d", k+1), Dev: nopClose{fd}}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := tv.v.Resync(context.Background(), ResyncOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Blocks != int64(blocks*legs) || rep.Failed != 0 {
		t.Fatalf("resync of new legs: %+v", rep)
	}
	m.same()
	return m
}

// reopen closes the volume and opens it again with its legs.
func (m *mirrored) reopen(o Options) {
	m.t.Helper()
	m.v.Close()
	o.OpenLeg = m.opener()
	v, err := Open(context.Background(), m.fault, m.kv, o)
	if err != nil {
		m.t.Fatal(err)
	}
	m.v = v
	m.t.Cleanup(func() { v.Close() })
}

// same checks that every leg holds the model.
func (m *mirrored) same() {
	m.t.Helper()
	if !bytes.Equal(devBytes(m.t, m.mem), m.model) {
		m.t.Error("leg 0 differs from the model")
	}
	for k, l := range m.legs {
		if !bytes.Equal(devBytes(m.t, l), m.model) {
			m.t.Errorf("leg %d differs from the model", k+1)
		}
	}
}

func (m *mirrored) leg(i int) device.Device {
	if i == 0 {
		return m.mem
	}
	return m.legs[i-1]
}

func TestMirrorWriteReadRepair(t *testing.T) {
	for _, format := range repairFormats {
		t.Run(format, func(t *testing.T) {
			m := newMirrored(t, format, 128, 2)
			bs := m.v.BlockSize()
			r := rand.New(rand.NewPCG(5, 6))
			for i := range 30 {
				n := 1 + r.IntN(3*bs)
				off := r.IntN(len(m.model) - n)
				m.write(blocktest.Pattern(n, uint64(i)), int64(off))
			}
			if err := m.v.Sync(); err != nil {
				t.Fatal(err)
			}
			m.same()
			for _, l := range m.v.Legs() {
				if !l.Online || l.StaleBlocks != 0 {
					t.Fatalf("leg %+v after writes", l)
				}
			}
			// Damage: block 5 on leg 0, block 9 on legs 0 and 1, block 20
			// on leg 2. Every block keeps one good copy.
			damages[0].apply(r, m.leg(0), 5, bs, m.model)
			damages[1].apply(r, m.leg(0), 9, bs, m.model)
			damages[2].apply(r, m.leg(1), 9, bs, m.model)
			damages[3].apply(r, m.leg(2), 20, bs, m.model)
			// A read returns the right bytes, and repairs every leg of the
			// blocks that fail on the leg it reads; a check (a scrub) reads
			// every leg and repairs the rest.
			m.check()
			if s := m.v.Stats(); s.Failed != 0 || s.Repaired != 2 {
				t.Errorf("stats after repairing reads: %d failed, %d repaired; want 0, 2", s.Failed, s.Repaired)
			}
			probs := map[string]bool{}
			if _, err := m.v.CheckRun(context.Background(), 0, 128, make([]byte, m.v.ScratchSize(128)), CheckOptions{}, func(p Problem) {
				probs[fmt.Sprintf("%d:%s:%d", p.LBA, p.Repair, p.Leg)] = true
			}); err != nil {
				t.Fatal(err)
			}
			if !probs["20:repairable:2"] || len(probs) != 1 {
				t.Errorf("check of every leg: %v, want block 20 repairable on leg 2 (both of its failed checks)", probs)
			}
			rep, err := m.v.Repair(context.Background(), nil, RepairOptions{})
			if err != nil || rep.Repaired != 1 || rep.Unrepairable != 0 {
				t.Fatalf("repair: %+v, %v", rep, err)
			}
			m.same()
			var sources []string
			for f, err := range m.v.Tuples().Findings(store.FindingQuery{State: store.FindingRepaired}) {
				if err != nil {
					t.Fatal(err)
				}
				sources = append(sources, fmt.Sprintf("%d:%s", f.LBA, f.Source))
			}
			if len(sources) == 0 || !strings.Contains(strings.Join(sources, " "), "leg ") {
				t.Errorf("repaired findings: %v", sources)
			}
			// A block bad on every leg fails the read, as without legs.
			for i := range 3 {
				damages[1].apply(r, m.leg(i), 30, bs, m.model)
			}
			buf := make([]byte, bs)
			if _, err := m.v.ReadAt(buf, int64(30*bs)); !errors.Is(err, dif.ErrIntegrity) {
				t.Fatalf("block bad on every leg: %v", err)
			}
		})
	}
}

// TestMirrorStaleLeg: a leg whose writes fail goes offline and records
// what it missed, durably, before Sync returns; the volume goes on; after
// a reopen with the leg back, Resync copies only what it missed.
func TestMirrorStaleLeg(t *testing.T) {
	m := newMirrored(t, "4096+8", 256, 1)
	bs := m.v.BlockSize()
	m.faults[0].Inject(faultdev.Fault{Kind: faultdev.FailWrite})
	m.write(blocktest.Pattern(3*bs, 1), int64(10*bs))
	m.write(blocktest.Pattern(2*bs, 2), int64(200*bs))
	if err := m.v.Sync(); err != nil {
		t.Fatalf("sync with a failing leg: %v", err)
	}
	legs := m.v.Legs()
	if legs[1].Online || legs[1].StaleBlocks != 5 || legs[1].Err == nil {
		t.Fatalf("failed leg: %+v", legs[1])
	}
	// Durable: the store says so.
	ms, err := m.v.Tuples().Mirrors()
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(ms.Legs[0].Ranges); got != "[{10 3} {200 2}]" {
		t.Fatalf("stale ranges in the store: %s", got)
	}
	m.check()
	m.faults[0].ClearFaults()
	m.reopen(Options{})
	legs = m.v.Legs()
	if !legs[1].Online || legs[1].StaleBlocks != 5 {
		t.Fatalf("reopened leg: %+v", legs[1])
	}
	// Reads of its stale blocks come from leg 0.
	m.check()
	rep, err := m.v.Resync(context.Background(), ResyncOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Blocks != 5 || rep.Copied != 5 || rep.BytesWritten != int64(5*bs) || rep.BytesRead != int64(10*bs) {
		t.Fatalf("resync of 5 stale blocks: %+v", rep)
	}
	m.same()
	if l := m.v.Legs()[1]; l.StaleBlocks != 0 {
		t.Fatalf("leg after resync: %+v", l)
	}
}

// TestMirrorOpenLegs: a leg that does not open is offline and stale; a
// leg of the wrong size or of another volume is refused.
func TestMirrorOpenLegs(t *testing.T) {
	m := newMirrored(t, "512+8", 256, 2)
	m.down["m2"] = true
	m.reopen(Options{})
	legs := m.v.Legs()
	if legs[2].Online || !legs[2].All || legs[2].Err == nil {
		t.Fatalf("unreachable leg: %+v", legs[2])
	}
	m.check()
	m.write(blocktest.Pattern(512, 3), 0)
	if err := m.v.Sync(); err != nil {
		t.Fatal(err)
	}
	delete(m.down, "m2")
	m.reopen(Options{})
	if _, err := m.v.Resync(context.Background(), ResyncOptions{}); err != nil {
		t.Fatal(err)
	}
	m.same()

	// Another volume's data on leg 1.
	m.v.Close()
	m.legs[0].WriteAt(blocktest.Pattern(len(m.model), 99), 0)
	if _, err := Open(context.Background(), m.fault, m.kv, Options{OpenLeg: m.opener()}); !errors.Is(err, ErrForeignLeg) {
		t.Fatalf("foreign leg: %v", err)
	}
	// Legs of another size (truncated files) are offline, the volume
	// works on leg 0, and the error says why.
	small, _ := device.NewMem(512*16, 512)
	open := func(string) (device.Device, error) { return small, nil }
	v, err := Open(context.Background(), m.fault, m.kv, Options{OpenLeg: open, ReadOnly: true})
	if err != nil {
		t.Fatalf("legs of another size: %v", err)
	}
	defer v.Close()
	var le *LegError
	for _, l := range v.Legs()[1:] {
		if l.Online || !errors.Is(l.Err, ErrMismatch) || !errors.As(l.Err, &le) || le.Leg != l.Leg {
			t.Fatalf("leg of another size: %+v", l)
		}
	}
	buf := make([]byte, 512)
	if _, err := v.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
}

// TestMirrorRemove: removing the legs leaves the volume as before.
func TestMirrorRemove(t *testing.T) {
	m := newMirrored(t, "512+8", 64, 2)
	if err := m.v.RemoveMirror(1); err != nil {
		t.Fatal(err)
	}
	if legs := m.v.Legs(); len(legs) != 2 || legs[1].Name != "m2" {
		t.Fatalf("legs after removing leg 1: %+v", legs)
	}
	if err := m.v.RemoveMirror(1); err != nil {
		t.Fatal(err)
	}
	if m.v.Legs() != nil {
		t.Fatal("legs after removing them all")
	}
	m.write(blocktest.Pattern(512, 1), 512)
	m.check()
	if m.v.Manifest().Schema == store.MirrorSchemaVersion {
		t.Error("schema of a volume without legs")
	}
	m.reopen(Options{})
	m.check()
}

// faultdevFailWrites is a fault that fails every write.
func faultdevFailWrites() faultdev.Fault { return faultdev.Fault{Kind: faultdev.FailWrite} }
