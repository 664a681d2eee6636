package faultdev

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
)

// crashOracle follows a workload on a flat copy of the device and knows,
// for every sector, which contents a crash may leave: the synced version or
// any version written since.
type crashOracle struct {
	sector   int
	cur      []byte
	synced   []byte
	versions map[int][][]byte // sector -> versions written since the last sync
}

func newCrashOracle(init []byte, sector int) *crashOracle {
	return &crashOracle{sector: sector, cur: bytes.Clone(init), synced: bytes.Clone(init), versions: map[int][][]byte{}}
}

func (o *crashOracle) write(p []byte, off int) {
	copy(o.cur[off:], p)
	for s := off / o.sector; s*o.sector < off+len(p); s++ {
		o.versions[s] = append(o.versions[s], bytes.Clone(o.cur[s*o.sector:][:o.sector]))
	}
}

func (o *crashOracle) sync() {
	copy(o.synced, o.cur)
	clear(o.versions)
}

// check verifies that got is a state a crash may leave.
func (o *crashOracle) check(t *testing.T, got []byte) {
	t.Helper()
	for s := 0; s*o.sector < len(got); s++ {
		g := got[s*o.sector:][:o.sector]
		if bytes.Equal(g, o.synced[s*o.sector:][:o.sector]) {
			continue
		}
		if !slices.ContainsFunc(o.versions[s], func(v []byte) bool { return bytes.Equal(v, g) }) {
			t.Fatalf("sector %d holds contents that were never written to it", s)
		}
	}
}

// randomWorkload runs n random writes (unaligned offsets and lengths) with
// an occasional Sync on d and the oracle. It stops at the first error.
func randomWorkload(d device.Device, o *crashOracle, seed uint64, n int) error {
	r := rand.New(rand.NewPCG(seed, 7))
	size := int(d.Size())
	for i := range n {
		if r.IntN(6) == 0 {
			if err := d.Sync(); err != nil {
				return err
			}
			o.sync()
			continue
		}
		off := r.IntN(size)
		l := 1 + r.IntN(min(size-off, 3*4096))
		p := blocktest.Pattern(l, seed*1000+uint64(i))
		if _, err := d.WriteAt(p, int64(off)); err != nil {
			return err
		}
		o.write(p, off)
	}
	return nil
}

func TestCrashInvariants(t *testing.T) {
	size := int64(64 << 10)
	ops := 60
	if testing.Short() {
		ops = 20
	}
	for _, sector := range []int{512, 4096} {
		for _, keep := range []float64{0, 0.3, 0.7, 1} {
			for seed := range uint64(4) {
				t.Run(fmt.Sprintf("sector=%d/keep=%v/seed=%d", sector, keep, seed), func(t *testing.T) {
					d, m, init := newFault(t, size, 4096, sector)
					o := newCrashOracle(init, sector)
					if err := randomWorkload(d, o, seed, ops); err != nil {
						t.Fatal(err)
					}
					if err := d.Crash(CrashOptions{Keep: keep, Seed: seed}); err != nil {
						t.Fatal(err)
					}
					got := mustRead(t, m, 0, int(size))
					o.check(t, got)
					switch keep {
					case 0: // exactly the synced state
						if !bytes.Equal(got, o.synced) {
							t.Fatal("Keep 0: state differs from the last sync")
						}
					case 1: // every write kept
						if !bytes.Equal(got, o.cur) {
							t.Fatal("Keep 1: state differs from the state before the crash")
						}
					}
					// Deterministic: the same history and seed give the same state.
					d2, m2, _ := newFault(t, size, 4096, sector)
					if err := randomWorkload(d2, newCrashOracle(init, sector), seed, ops); err != nil {
						t.Fatal(err)
					}
					if err := d2.Crash(CrashOptions{Keep: keep, Seed: seed}); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(mustRead(t, m2, 0, int(size)), got) {
						t.Fatal("same seed, different crash state")
					}
				})
			}
		}
	}
}

// TestCrashSeedsDiffer checks that partial keeping does explore: different
// seeds leave different states, and some leave torn writes.
func TestCrashSeedsDiffer(t *testing.T) {
	const size = 64 << 10
	states := map[string]bool{}
	torn := false
	w := bytes.Repeat([]byte{0xCC}, 4*4096)
	for seed := range uint64(16) {
		d, m, init := newFault(t, size, 4096, 512)
		if _, err := d.WriteAt(w, 4096); err != nil {
			t.Fatal(err)
		}
		if err := d.Crash(CrashOptions{Keep: 0.5, Seed: seed}); err != nil {
			t.Fatal(err)
		}
		got := mustRead(t, m, 4096, len(w))
		states[string(got)] = true
		if !bytes.Equal(got, w) && !bytes.Equal(got, init[4096:][:len(w)]) {
			torn = true
		}
	}
	if len(states) < 8 || !torn {
		t.Fatalf("16 seeds gave %d distinct states (torn: %v)", len(states), torn)
	}
}

// TestCrashKeepFunc scripts exactly which versions reach the medium.
func TestCrashKeepFunc(t *testing.T) {
	d, m, init := newFault(t, 16<<10, 4096, 512)
	a := bytes.Repeat([]byte{0xAA}, 4096)
	b := bytes.Repeat([]byte{0xBB}, 4096)
	for _, p := range [][]byte{a, b} {
		if _, err := d.WriteAt(p, 4096); err != nil {
			t.Fatal(err)
		}
	}
	// Write 0 (A) reaches sectors 0-3 of the block, write 1 (B) sector 1 only.
	err := d.Crash(CrashOptions{KeepFunc: func(w int, off int64) bool {
		s := (off - 4096) / 512
		return (w == 0 && s < 4) || (w == 1 && s == 1)
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(init)
	copy(want[4096:], a[:4*512])
	copy(want[4096+512:], b[:512])
	if got := mustRead(t, m, 0, 16<<10); !bytes.Equal(got, want) {
		t.Fatal("crash state differs from the scripted one")
	}
}

// TestCrashAtEveryStep crashes a fixed workload at each of its steps in
// turn: synced data always survives, and the device can be reopened and
// used.
func TestCrashAtEveryStep(t *testing.T) {
	const size = 32 << 10
	workload := func(d device.Device) (synced [][2]int, err error) {
		// returns the writes ([off, value]) covered by a completed sync
		var pending [][2]int
		for i := range 12 {
			off := (i * 5 % 8) * 4096
			if _, err := d.WriteAt(bytes.Repeat([]byte{byte(i + 1)}, 4096), int64(off)); err != nil {
				return synced, err
			}
			pending = append(pending, [2]int{off, i + 1})
			if i%3 == 2 {
				if err := d.Sync(); err != nil {
					return synced, err
				}
				synced = append(synced, pending...)
				pending = nil
			}
		}
		return synced, nil
	}
	completed := false
	for step := int64(0); step < 100 && !completed; step++ {
		t.Run(fmt.Sprintf("step=%d", step), func(t *testing.T) {
			d, _, init := newFault(t, size, 4096, 0)
			if err := d.CrashAt(step, CrashOptions{}); err != nil {
				t.Fatal(err)
			}
			synced, err := workload(d)
			if err == nil {
				completed = true
				if d.Steps() != step {
					t.Fatalf("workload completed after %d steps, crash armed at %d", d.Steps(), step)
				}
				return
			}
			if !errors.Is(err, device.ErrCrashed) {
				t.Fatalf("workload failed with %v, want device.ErrCrashed", err)
			}
			if d.Steps() != step+1 {
				t.Fatalf("crashed after %d steps, armed at %d", d.Steps(), step)
			}
			if _, err := d.ReadAt(make([]byte, 1), 0); !errors.Is(err, device.ErrCrashed) {
				t.Fatalf("read after crash: %v", err)
			}
			want := bytes.Clone(init)
			for _, w := range synced {
				copy(want[w[0]:], bytes.Repeat([]byte{byte(w[1])}, 4096))
			}
			r, err := d.Reopen()
			if err != nil {
				t.Fatal(err)
			}
			if got := mustRead(t, r, 0, size); !bytes.Equal(got, want) {
				t.Fatal("state after the crash is not the last synced state")
			}
			if _, err := r.WriteAt(make([]byte, 4096), 0); err != nil {
				t.Fatalf("write after reopen: %v", err)
			}
		})
	}
	if !completed {
		t.Fatal("the workload never completed")
	}
}

func TestCrashHookAndReopen(t *testing.T) {
	d, m, init := newFault(t, 16<<10, 4096, 0)
	var seen []Step
	d.SetHook(func(s Step) error {
		seen = append(seen, s)
		if s.Op == "write" && s.Off == 8192 {
			return d.Crash(CrashOptions{})
		}
		return nil
	})
	if _, err := d.Reopen(); err == nil {
		t.Fatal("Reopen of a live device succeeded")
	}
	if _, err := d.WriteAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.WriteAt(make([]byte, 4096), 4096); err != nil {
		t.Fatal(err)
	}
	if _, err := d.WriteAt(make([]byte, 4096), 8192); !errors.Is(err, device.ErrCrashed) {
		t.Fatalf("write that the hook crashes: %v", err)
	}
	wantSteps := []Step{{0, "write", 0, 4096}, {1, "sync", 0, 0}, {2, "write", 4096, 4096}, {3, "write", 8192, 4096}}
	if fmt.Sprint(seen) != fmt.Sprint(wantSteps) {
		t.Fatalf("steps %v, want %v", seen, wantSteps)
	}
	want := bytes.Clone(init)
	clear(want[:4096])
	if got := mustRead(t, m, 0, 16<<10); !bytes.Equal(got, want) {
		t.Fatal("state after the hook's crash")
	}
	if err := d.Sync(); !errors.Is(err, device.ErrCrashed) {
		t.Fatalf("Sync after crash: %v", err)
	}
	if err := d.CrashAt(10, CrashOptions{}); !errors.Is(err, device.ErrCrashed) {
		t.Fatalf("CrashAt after crash: %v", err)
	}
	// A clean Close keeps unsynced writes.
	r, err := d.Reopen()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.WriteAt(bytes.Repeat([]byte{7}, 4096), 12288); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); !errors.Is(err, device.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	r2, err := r.Reopen()
	if err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, r2, 12288, 4096); !bytes.Equal(got, bytes.Repeat([]byte{7}, 4096)) {
		t.Fatal("unsynced write lost by a clean close")
	}
	if err := r2.CrashAt(-1, CrashOptions{}); err == nil {
		t.Fatal("CrashAt in the past succeeded")
	}
}

// TestCrashDiscard checks that discards are rolled back like writes.
func TestCrashDiscard(t *testing.T) {
	d, m, init := newFault(t, 64<<10, 4096, 0)
	if err := d.Discard(0, 64<<10); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, d, 0, 4096); !bytes.Equal(got, make([]byte, 4096)) {
		t.Fatal("discarded range does not read zeros")
	}
	if err := d.Crash(CrashOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, m, 0, 64<<10); !bytes.Equal(got, init) {
		t.Fatal("unsynced discard survived the crash")
	}
}

// TestCrashOverFile runs the crash machinery over an image file.
func TestCrashOverFile(t *testing.T) {
	f, err := device.CreateImage(t.TempDir()+"/img", 64<<10, device.FileOptions{BlockSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := New(f, Options{Sector: 512})
	if err != nil {
		t.Fatal(err)
	}
	o := newCrashOracle(make([]byte, 64<<10), 512)
	if err := randomWorkload(d, o, 42, 30); err != nil {
		t.Fatal(err)
	}
	if err := d.Crash(CrashOptions{Keep: 0.5, Seed: 42}); err != nil {
		t.Fatal(err)
	}
	o.check(t, mustRead(t, f, 0, 64<<10))
}
