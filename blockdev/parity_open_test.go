package blockdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/faultdev"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/blockdev/parity"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// TestParityOpen: a writable volume opens only with its own parity file
// (a missing opener, a file that does not open, another volume's file or
// one without its header fail with ErrParityOffline); a read-only one
// opens without it. A volume has one parity: a second AddParity is
// refused; after RemoveParity the volume opens without a parity file.
func TestParityOpen(t *testing.T) {
	tv := newTestVol(t, "512+8", 64, CreateOptions{})
	pm := addTestParity(t, tv, 4, 2, 2)
	if err := tv.v.AddParity(ParitySpec{Data: 4, Parity: 2, Path: "other", Dev: pm}); err == nil {
		t.Fatal("a second AddParity succeeded")
	}
	if err := tv.v.Close(); err != nil {
		t.Fatal(err)
	}
	other := newTestVol(t, "512+8", 64, CreateOptions{})
	otherPM := addTestParity(t, other, 4, 2, 2)
	for _, tc := range []struct {
		name string
		open func(string) (device.Device, error)
	}{
		{"none", nil},
		{"fails", func(string) (device.Device, error) { return nil, errors.New("no such file") }},
		{"foreign", func(string) (device.Device, error) { return keepOpen{otherPM}, nil }},
		{"zeros", func(string) (device.Device, error) {
			z, _ := device.NewMem(pm.Size(), 512)
			return z, nil
		}},
	} {
		_, err := Open(context.Background(), tv.fault, tv.kv, Options{OpenParity: tc.open})
		var pe *ParityError
		if !errors.Is(err, ErrParityOffline) || !errors.As(err, &pe) {
			t.Errorf("%s: Open = %v, want a *ParityError", tc.name, err)
		}
		if tc.name == "foreign" && !errors.Is(err, parity.ErrForeign) {
			t.Errorf("foreign: %v, want parity.ErrForeign", err)
		}
		ro, err := Open(context.Background(), tv.fault, tv.kv, Options{ReadOnly: true, OpenParity: tc.open})
		if err != nil {
			t.Fatalf("%s: read-only open: %v", tc.name, err)
		}
		if st, ok, err := ro.Parity(); err != nil || !ok || st.Online || st.Err == nil {
			t.Errorf("%s: read-only Parity() = %+v, %v, %v", tc.name, st, ok, err)
		}
		ro.Close()
	}
	openParityVol(t, tv, pm, Options{})
	if err := tv.v.RemoveParity(); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := tv.v.Parity(); ok || err != nil {
		t.Fatalf("after RemoveParity: %v, %v", ok, err)
	}
	tv.write(blocktest.Pattern(512, 1), 0)
	if err := tv.v.Close(); err != nil {
		t.Fatal(err)
	}
	v, err := Open(context.Background(), tv.fault, tv.kv, Options{})
	if err != nil {
		t.Fatalf("open after RemoveParity: %v", err)
	}
	tv.v = v
	tv.check()
}

// TestParityWriteFallback: a write whose delta cannot be used computes the
// stripe whole (the old data of the written block bad, or a parity block
// damaged), rebuilding another bad block of the stripe from the parity
// when it has at most m erasures, and drops the stripe's parity when it
// has more; ComputeParity then leaves the stripe unprotected until its
// blocks are repaired.
func TestParityWriteFallback(t *testing.T) {
	const blocks, k, m = 64, 4, 2
	tv := newTestVol(t, "512+8", blocks, CreateOptions{})
	bs := tv.v.BlockSize()
	pm := addTestParity(t, tv, k, m, parity.Consecutive)
	sync := func() {
		t.Helper()
		if err := tv.v.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	// Stripe 0: block 1's old data rotted, then block 1 rewritten.
	tv.mem.WriteAt([]byte{0xee}, 1*int64(bs)+5)
	tv.write(blocktest.Pattern(bs, 1), 1*int64(bs))
	// Stripe 1: parity block 0 rotted, then block 5 rewritten.
	pm.WriteAt([]byte{0xee}, tv.v.par.l.ParityOffset(1, 0)+9)
	tv.write(blocktest.Pattern(bs, 2), 5*int64(bs))
	sync()
	wantParity(t, tv.v, pm, tv.model, nil)
	if st, _, _ := tv.v.Parity(); st.Dropped != 0 {
		t.Fatalf("%d stripes dropped", st.Dropped)
	}
	// Stripe 2: blocks 8 and 9 rotted, then block 8 rewritten: block 9 is
	// rebuilt from the parity (two erasures), verified, and encoded with
	// the new block 8; a read then heals it from that parity.
	tv.mem.WriteAt([]byte{0xee}, 8*int64(bs)+5)
	tv.mem.WriteAt([]byte{0xee}, 9*int64(bs)+5)
	tv.write(blocktest.Pattern(bs, 3), 8*int64(bs))
	sync()
	if st, _, _ := tv.v.Parity(); st.Dropped != 0 || st.Recorded != st.Stripes {
		t.Fatalf("stripe 2: Parity() = %+v, want every stripe kept", st)
	}
	tv.check()
	if st := tv.v.Stats(); st.Repaired != 1 {
		t.Fatalf("%d blocks repaired, want block 9", st.Repaired)
	}
	wantParity(t, tv.v, pm, tv.model, nil)
	// Stripe 3: blocks 12, 13 and 14 rotted, then block 12 rewritten:
	// three erasures, so the stripe's parity is dropped.
	for _, b := range []int64{12, 13, 14} {
		tv.mem.WriteAt([]byte{0xee}, b*int64(bs)+5)
	}
	tv.write(blocktest.Pattern(bs, 4), 12*int64(bs))
	sync()
	st, _, err := tv.v.Parity()
	if err != nil || st.Dropped != 1 || st.Recorded != st.Stripes-1 {
		t.Fatalf("Parity() = %+v, %v; want stripe 3 dropped", st, err)
	}
	rep, err := tv.v.ComputeParity(context.Background(), nil)
	if err != nil || rep.Unprotected != 1 || rep.Computed != 0 {
		t.Fatalf("ComputeParity = %+v, %v; want 1 unprotected", rep, err)
	}
	// Blocks 13 and 14 repaired from elsewhere: the stripe is computed
	// again.
	tv.mem.WriteAt(tv.model[13*bs:15*bs], 13*int64(bs))
	rep, err = tv.v.ComputeParity(context.Background(), nil)
	if err != nil || rep.Unprotected != 0 || rep.Computed != 1 {
		t.Fatalf("ComputeParity = %+v, %v; want 1 computed", rep, err)
	}
	wantParity(t, tv.v, pm, tv.model, nil)
}

// TestParityConcurrent: writes, reads that repair a rotted block from the
// parity, and a ComputeParity run at once (run it with -race); the parity
// ends the encoding of the data.
func TestParityConcurrent(t *testing.T) {
	const blocks, k, m = 256, 4, 2
	tv := newTestVol(t, "512+8", blocks, CreateOptions{Options: Options{StagingBytes: 16 << 10}})
	bs := tv.v.BlockSize()
	pm := addTestParity(t, tv, k, m, 8)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range 60 {
				// Writer w owns blocks [w·128, w·128+96).
				lba := w*128 + r.IntN(90)
				n := 1 + r.IntN(6)
				p := blocktest.Pattern(n*bs, r.Uint64())
				if _, err := tv.v.WriteAt(p, int64(lba*bs)); err != nil {
					errs <- err
					return
				}
				copy(tv.model[lba*bs:], p)
				if i%10 == 0 {
					if err := tv.v.Sync(); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 16*bs)
		for i := range 40 {
			// Blocks 100-127 and 228-255 are never written: rot one and
			// read it back repaired.
			lba := int64(100 + i%28)
			tv.mem.WriteAt([]byte{byte(i + 1)}, lba*int64(bs)+3)
			if _, err := tv.v.ReadAt(buf[:bs], lba*int64(bs)); err != nil {
				errs <- fmt.Errorf("read of rotted block %d: %w", lba, err)
				return
			}
			if !bytes.Equal(buf[:bs], tv.model[lba*int64(bs):(lba+1)*int64(bs)]) {
				errs <- fmt.Errorf("block %d: wrong bytes", lba)
				return
			}
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := tv.v.ComputeParity(context.Background(), nil); err != nil {
			errs <- err
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := tv.v.Sync(); err != nil {
		t.Fatal(err)
	}
	tv.check()
	wantParity(t, tv.v, pm, tv.model, nil)
}

// TestParityComputeWindows: ComputeParity reads whole groups at once, or
// a group in parts (k runs of neighbouring blocks) when a group is larger
// than its window; both compute the encoding of the data, with discarded
// blocks as zeros, and leave a stripe with a bad block unprotected.
func TestParityComputeWindows(t *testing.T) {
	defer func(w int) { parityWindowBytes = w }(parityWindowBytes)
	for _, win := range []int{4 * 512 * 3, 16 << 20} {
		for _, depth := range []int64{1, 7, 16, parity.WholeVolume} {
			t.Run(fmt.Sprintf("window=%d/depth=%d", win, depth), func(t *testing.T) {
				parityWindowBytes = win
				tv := newTestVol(t, "512+8", 203, CreateOptions{})
				if err := tv.v.Discard(10*512, 7*512); err != nil {
					t.Fatal(err)
				}
				clear(tv.model[10*512 : 17*512])
				unwritten := map[int64]bool{}
				for b := int64(10); b < 17; b++ {
					unwritten[b] = true
				}
				pm := addTestParity(t, tv, 4, 2, depth)
				wantParity(t, tv.v, pm, tv.model, unwritten)
				if err := tv.v.RemoveParity(); err != nil {
					t.Fatal(err)
				}
				tv.mem.WriteAt([]byte{0xee}, 100*512+3)
				spec := ParitySpec{Data: 4, Parity: 2, Depth: depth, Path: "again", Dev: pm}
				if err := tv.v.AddParity(spec); err != nil {
					t.Fatal(err)
				}
				rep, err := tv.v.ComputeParity(context.Background(), nil)
				if err != nil || rep.Unprotected != 1 || rep.Computed != tv.v.par.l.Stripes()-1 {
					t.Fatalf("ComputeParity with block 100 bad: %+v, %v", rep, err)
				}
				s, _ := tv.v.par.l.Locate(100)
				tv.v.par.mu.Lock()
				_, ok, _ := tv.v.par.sums(s)
				tv.v.par.mu.Unlock()
				if ok {
					t.Fatalf("stripe %d of the bad block has parity", s)
				}
			})
		}
	}
}

// TestParityIntentReadOnly: a stripe left under a parity intent (a crash)
// is not used by a read-only open, which cannot recompute it: a bad block
// there fails the read, while one of another stripe is served from the
// parity. The next writable open recomputes it, and its blocks heal.
func TestParityIntentReadOnly(t *testing.T) {
	const blocks, k, m = 64, 4, 2
	tv := newTestVol(t, "512+8", blocks, CreateOptions{})
	bs := int64(tv.v.BlockSize())
	pm := addTestParity(t, tv, k, m, parity.Consecutive)
	if err := tv.v.Close(); err != nil {
		t.Fatal(err)
	}
	tup, err := store.OpenTuples(tv.kv, DefaultVolumeName, nil)
	if err != nil {
		t.Fatal(err)
	}
	x := tup.NewTxn()
	if err := x.MarkParityDirty(1); err != nil { // blocks 4 to 7
		t.Fatal(err)
	}
	if err := x.Commit(true); err != nil {
		t.Fatal(err)
	}
	tv.mem.WriteAt(make([]byte, 8), 5*bs)  // stripe 1
	tv.mem.WriteAt(make([]byte, 8), 21*bs) // stripe 5
	openParityVol(t, tv, pm, Options{ReadOnly: true})
	buf := make([]byte, bs)
	if _, err := tv.v.ReadAt(buf, 5*bs); !errors.Is(err, dif.ErrIntegrity) {
		t.Fatalf("read-only, block 5 under a parity intent: %v, want an integrity error", err)
	}
	if _, err := tv.v.ReadAt(buf, 21*bs); err != nil || !bytes.Equal(buf, tv.model[21*bs:22*bs]) {
		t.Fatalf("read-only, block 21: %v", err)
	}
	if st, _, _ := tv.v.Parity(); st.Recorded != st.Stripes-1 {
		t.Fatalf("read-only Parity(): %d of %d stripes recorded, want all but the one under an intent", st.Recorded, st.Stripes)
	}
	tv.v.Close()
	openParityVol(t, tv, pm, Options{})
	if d, err := tv.v.Tuples().ParityDirty(); err != nil || len(d) != 0 {
		t.Fatalf("after a writable open: parity intents %v, %v", d, err)
	}
	// Block 5 was bad when recovery recomputed stripe 1: with two
	// erasures at most it was rebuilt from the parity and encoded again.
	tv.check()
	wantParity(t, tv.v, pm, tv.model, nil)
}

// TestParityDeviceFails: a parity file whose writes or syncs fail costs
// the parity of the stripes written, not the volume: writes and syncs
// succeed, the stripes' checksums are dropped (never used), the failure
// is reported, and ComputeParity brings them back once the file works.
func TestParityDeviceFails(t *testing.T) {
	for _, kind := range []faultdev.Kind{faultdev.FailWrite, faultdev.FailSync} {
		t.Run("fault="+kind.String(), func(t *testing.T) {
			const blocks = 64
			tv := newTestVol(t, "512+8", blocks, CreateOptions{})
			bs := tv.v.BlockSize()
			spec := ParitySpec{Data: 4, Parity: 2, Depth: parity.Consecutive, Path: "p"}
			size, _ := tv.v.ParityFileSize(spec)
			pm, _ := device.NewMem(size, 512)
			fd, err := faultdev.New(pm, faultdev.Options{})
			if err != nil {
				t.Fatal(err)
			}
			spec.Dev = fd
			if err := tv.v.AddParity(spec); err != nil {
				t.Fatal(err)
			}
			if _, err := tv.v.ComputeParity(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			if _, err := fd.Inject(faultdev.Fault{Kind: kind}); err != nil {
				t.Fatal(err)
			}
			tv.write(blocktest.Pattern(2*bs, 5), 9*int64(bs)) // stripe 2
			if err := tv.v.Sync(); err != nil {
				t.Fatalf("Sync with the parity file failing: %v", err)
			}
			st, _, err := tv.v.Parity()
			if err != nil || st.Dropped == 0 || st.IOErr == nil || st.Recorded != st.Stripes-st.Dropped {
				t.Fatalf("Parity() = %+v, %v; want stripe 2 dropped and the failure reported", st, err)
			}
			tv.check()
			fd.ClearFaults()
			rep, err := tv.v.ComputeParity(context.Background(), nil)
			if err != nil || rep.Computed != st.Dropped {
				t.Fatalf("ComputeParity = %+v, %v", rep, err)
			}
			wantParity(t, tv.v, fd, tv.model, nil)
		})
	}
}
