package blockdev

import (
	"context"
	"errors"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/store"
)

// sampledVolume protects a memory device of blocks blocks of 512+8 and
// discards all but the first written of them; it returns the device and
// the volume's tuples.
func sampledVolume(t *testing.T, blocks, written int64) (*device.Mem, *store.Tuples) {
	t.Helper()
	dev, _, tu := memVolume(t, blocks, 11, CreateOptions{}, func(v *Volume) error {
		if written < blocks {
			return v.Discard(written*512, (blocks-written)*512)
		}
		return nil
	})
	return dev, tu
}

func TestSampleData(t *testing.T) {
	for _, tc := range []struct {
		name            string
		blocks, written int64
		damage          func(dev *device.Mem)
		checked, failed int
		foreign         bool
	}{
		{name: "same", blocks: 4096, written: 4096, checked: 64},
		{name: "other", blocks: 4096, written: 4096, damage: func(dev *device.Mem) {
			dev.WriteAt(blocktest.Pattern(4096*512, 12), 0)
		}, checked: 64, failed: 64, foreign: true},
		{name: "damaged", blocks: 64, written: 64, damage: func(dev *device.Mem) {
			for _, lba := range []int64{3, 30, 60} {
				dev.WriteAt([]byte{0xff, 0xee}, lba*512+9)
			}
		}, checked: 64, failed: 3},
		{name: "few-written", blocks: 2048, written: 7, damage: func(dev *device.Mem) {
			dev.WriteAt(blocktest.Pattern(2048*512, 12), 0)
		}},
	} {
		t.Run("case="+tc.name, func(t *testing.T) {
			dev, tu := sampledVolume(t, tc.blocks, tc.written)
			if tc.damage != nil {
				tc.damage(dev)
			}
			s, err := SampleData(context.Background(), tu, dev, dev.Size())
			if err != nil {
				t.Fatal(err)
			}
			if s.Checked != tc.checked || s.Failed != tc.failed || s.Foreign() != tc.foreign {
				t.Errorf("SampleData = %+v (foreign %v), want %d checked, %d failed (foreign %v)", s, s.Foreign(), tc.checked, tc.failed, tc.foreign)
			}
		})
	}
}

func TestSampleDataUndecided(t *testing.T) {
	dev, tu := sampledVolume(t, 256, 256)
	// A device smaller than the manifest says: nothing is checked.
	if s, err := SampleData(context.Background(), tu, dev, dev.Size()-512); err != nil || s != (DataSample{}) {
		t.Errorf("SampleData of a short device = %+v, %v; want nothing checked", s, err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("stop")
	cancel(stop)
	if _, err := SampleData(ctx, tu, dev, dev.Size()); err != stop {
		t.Errorf("SampleData, cancelled: %v, want the cause", err)
	}
	// Unreadable blocks count for nothing.
	if s, err := SampleData(context.Background(), tu, brokenReader{}, dev.Size()); err != nil || s.Checked != 0 {
		t.Errorf("SampleData of an unreadable device = %+v, %v; want nothing checked", s, err)
	}
	for _, n := range []int{SampleMin - 1, SampleMin} {
		s := DataSample{Checked: n, Failed: n}
		if s.Foreign() != (n >= SampleMin) {
			t.Errorf("%+v: Foreign %v", s, s.Foreign())
		}
	}
}
