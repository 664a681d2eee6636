package blockdev

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// memVolume protects a memory device of blocks blocks of 512+8 holding
// random data from seed, in a new mem store, with co (its Format set
// here); edit, if not nil, changes the volume before it is closed. It
// returns the device, the store and the volume's tuples.
func memVolume(t *testing.T, blocks int64, seed uint64, co CreateOptions, edit func(*Volume) error) (*device.Mem, store.KV, *store.Tuples) {
	t.Helper()
	kv := store.NewMem()
	t.Cleanup(func() { kv.Close() })
	dev, err := device.NewMem(blocks*512, 512)
	if err != nil {
		t.Fatal(err)
	}
	dev.WriteAt(blocktest.Pattern(int(blocks)*512, seed), 0)
	co.Format = dif.MustFormat("512+8")
	v, err := Create(context.Background(), dev, kv, co)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		if err := edit(v); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	tu, err := store.OpenTuples(kv, DefaultVolumeName, nil)
	if err != nil {
		t.Fatal(err)
	}
	return dev, kv, tu
}

// inspectedVolume protects a memory device of 64 blocks of 512+8, discards
// blocks 10 and 11, records two findings (open guard at 3, closed at 7)
// and a scrub cursor, and returns the device and the volume's tuples.
func inspectedVolume(t *testing.T) (*device.Mem, *store.Tuples) {
	t.Helper()
	dev, _, tu := memVolume(t, 64, 5, CreateOptions{AppTag: 0x1234, AppTagMask: 0xffff}, func(v *Volume) error {
		return v.Discard(10*512, 2*512)
	})
	for _, f := range []store.Finding{{LBA: 3, N: 1, Field: string(KindGuard)}, {LBA: 7, N: 1, Field: string(KindRefTag), State: store.FindingClosed}} {
		if _, err := tu.RecordFinding(f, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := tu.SetScrubCursor("difctl", store.ScrubCursor{Next: 5, Pass: 2}, true); err != nil {
		t.Fatal(err)
	}
	return dev, tu
}

func TestInspect(t *testing.T) {
	_, tu := inspectedVolume(t)
	o, err := Inspect(context.Background(), tu, "difctl")
	if err != nil {
		t.Fatal(err)
	}
	if o.Blocks != 64 || o.Written != 62 {
		t.Errorf("Blocks %d, Written %d; want 64 and 62", o.Blocks, o.Written)
	}
	if o.Findings[store.FindingOpen] != 1 || o.Findings[store.FindingClosed] != 1 || len(o.Findings) != 2 {
		t.Errorf("Findings %v, want one open and one closed", o.Findings)
	}
	if o.OpenByKind[KindGuard] != 1 || len(o.OpenByKind) != 1 {
		t.Errorf("OpenByKind %v, want one guard", o.OpenByKind)
	}
	if o.Scrub == nil || o.Scrub.Next != 5 || o.Scrub.Pass != 2 {
		t.Errorf("Scrub %+v, want next 5, pass 2", o.Scrub)
	}
	if o, err := Inspect(context.Background(), tu, "other"); err != nil || o.Scrub != nil {
		t.Errorf("Inspect of a scrub that never ran: %+v, %v", o, err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("stop")
	cancel(stop)
	if _, err := Inspect(ctx, tu, "difctl"); err != stop {
		t.Errorf("Inspect, cancelled: %v, want the cause", err)
	}
}

// brokenReader fails every read.
type brokenReader struct{}

func (brokenReader) ReadAt([]byte, int64) (int, error) { return 0, errors.New("medium error") }

func TestInspectStored(t *testing.T) {
	dev, tu := inspectedVolume(t)
	// Block 4 loses a bit; unwritten block 11 gets data.
	b := make([]byte, 512)
	dev.ReadAt(b, 4*512)
	b[100] ^= 1
	dev.WriteAt(b, 4*512)
	dev.WriteAt([]byte{1}, 11*512+7)

	var got []*BlockInspection
	if err := InspectStored(context.Background(), tu, dev, 2, 10, nil, func(b *BlockInspection) error {
		got = append(got, b)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 10 {
		t.Fatalf("%d blocks inspected, want 10", len(got))
	}
	for _, b := range got {
		state, failed, written := dif.StateOK, []Kind{}, true
		switch b.LBA {
		case 4:
			state, failed = dif.StateFailed, []Kind{KindGuard}
		case 10:
			state, written = dif.StateUnwritten, false
		case 11:
			state, failed, written = dif.StateFailed, []Kind{KindUnwrittenData}, false
		}
		if b.State != state || !slices.Equal(b.Failed, failed) || b.Failed == nil || b.Written != written || b.Keyed != nil {
			t.Errorf("block %d: state %v, failed %v, written %v, keyed %v; want %v, %v, %v, nil", b.LBA, b.State, b.Failed, b.Written, b.Keyed, state, failed, written)
		}
		if written && (b.Computed.AppTag != 0x1234 || b.Computed.RefTag != uint64(b.LBA)) {
			t.Errorf("block %d: computed tags %+v, want app 0x1234, ref %d", b.LBA, b.Computed, b.LBA)
		}
		if written && (b.Stored == b.Computed) != (b.LBA != 4) {
			t.Errorf("block %d: stored %+v, computed %+v", b.LBA, b.Stored, b.Computed)
		}
	}

	var ie *InspectError
	err := InspectStored(context.Background(), tu, brokenReader{}, 3, 1, nil, func(*BlockInspection) error { return nil })
	if !errors.As(err, &ie) || ie.Op != "read" || ie.LBA != 3 {
		t.Errorf("InspectStored of an unreadable device: %v, want an InspectError read at 3", err)
	}
	stop := errors.New("stop")
	if err := InspectStored(context.Background(), tu, dev, 0, 5, nil, func(*BlockInspection) error { return stop }); err != stop {
		t.Errorf("InspectStored with a failing fn: %v, want its error", err)
	}
}

func TestInspectStoredKeyed(t *testing.T) {
	key := testKey(t, 7)
	k := newKeyedVol(t, "512+8", key, nil, "")
	tu, err := store.OpenTuples(k.kv, DefaultVolumeName, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := tu.Manifest()
	vk, err := key.ForVolume(DefaultVolumeName, &m)
	if err != nil {
		t.Fatal(err)
	}
	// Block 5 is altered on the device: its tuple no longer matches,
	// and neither does its keyed tag.
	b := make([]byte, 512)
	k.dev.ReadAt(b, 5*512)
	b[0] ^= 0x80
	k.dev.WriteAt(b, 5*512)
	for _, withKey := range []bool{false, true} {
		t.Run(fmt.Sprintf("key=%v", withKey), func(t *testing.T) {
			var vkey *VolumeKey
			if withKey {
				vkey = vk
				if err := tu.SetPageMACKey(vk.PageKey()); err != nil {
					t.Fatal(err)
				}
			}
			err := InspectStored(context.Background(), tu, k.dev, 4, 2, vkey, func(b *BlockInspection) error {
				ki := b.Keyed
				if ki == nil || ki.Gen == 0 {
					t.Fatalf("block %d: keyed %+v, want a tag", b.LBA, ki)
				}
				want, failed := "skipped", []Kind{}
				switch {
				case withKey && b.LBA == 5:
					want, failed = "mismatch", []Kind{KindGuard, KindKeyedTag}
				case withKey:
					want = "ok"
				case b.LBA == 5:
					failed = []Kind{KindGuard}
				}
				if ki.Check != want || !slices.Equal(b.Failed, failed) || (ki.Computed != nil) != withKey {
					t.Errorf("block %d: check %q, failed %v, computed %v; want %q, %v", b.LBA, ki.Check, b.Failed, ki.Computed, want, failed)
				}
				if withKey && b.LBA == 4 && *ki.Computed != ki.Stored {
					t.Errorf("block 4: computed tag %x, stored %x", *ki.Computed, ki.Stored)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
