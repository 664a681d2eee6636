package blockdev

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// piMem is a memory device that stores PI and checks it, as an NVMe
// namespace of the volume's format does with PRACT clear and PRCHK set
// (blockdev/nvme.VolumeDevice, tested in a guest by cmd/difctl): a
// WriteWithPI whose tuples fail their check against the data and the
// expected tags stores nothing.
type piMem struct {
	*device.Mem
	f      dif.Format
	p      dif.Params // of block 0, app tag checked whole
	mu     sync.Mutex
	pi     []byte // the stored tuples
	piRuns atomic.Int64
	plain  atomic.Int64 // WriteAt calls
	// forge, if set, changes the tuples on their way to the device.
	forge func(lba int64, tuples []byte)
}

func (d *piMem) WriteAt(b []byte, off int64) (int, error) {
	d.plain.Add(1)
	return d.Mem.WriteAt(b, off)
}

func (d *piMem) WriteWithPI(data, tuples []byte, off int64) error {
	bs, ts := d.f.BlockSize(), d.f.TupleSize()
	if err := device.CheckAligned("write", off, int64(len(data)), bs); err != nil {
		return err
	}
	lba := off / int64(bs)
	if len(tuples) != len(data)/bs*ts {
		return errors.New("piMem: tuples do not match the blocks")
	}
	if d.forge != nil {
		tuples = bytes.Clone(tuples)
		d.forge(lba, tuples)
	}
	if err := d.f.Verify(data, tuples, d.f.ParamsAt(d.p, lba)); err != nil {
		return err
	}
	d.piRuns.Add(1)
	d.mu.Lock()
	copy(d.pi[lba*int64(ts):], tuples)
	d.mu.Unlock()
	_, err := d.Mem.WriteAt(data, off)
	return err
}

// TestVolumePIWriter: a volume on a device that takes PI (device.PIWriter)
// writes its staged blocks with the tuples it records in its store, which
// the device checks and keeps; a tuple that changes on the way is refused
// by the device, the volume fails with an error matching dif.ErrIntegrity
// and the device's field sentinel, nothing of the refused run is written,
// and the volume opened again (crash recovery of the intents) reads the
// old data.
func TestVolumePIWriter(t *testing.T) {
	ctx := context.Background()
	for _, format := range []string{"4096+8", "512+8:type2", "4096+16:crc64:type3"} {
		t.Run("format="+format, func(t *testing.T) {
			const blocks = 256
			f := dif.MustFormat(format)
			bs, ts := f.BlockSize(), f.TupleSize()
			mem, err := device.NewMem(int64(blocks*bs), bs)
			if err != nil {
				t.Fatal(err)
			}
			ref := uint64(0)
			if f.Type() == dif.Type2 {
				ref = 1000
			}
			dev := &piMem{Mem: mem, f: f.WithLayout(dif.Separate), p: dif.Params{RefTag: ref, AppTag: 0x5a, AppMask: 0xffff}, pi: make([]byte, blocks*ts)}
			kv := store.NewMem()
			defer kv.Close()
			v, err := Create(ctx, dev, kv, CreateOptions{Format: f, InitialRefTag: ref, AppTag: 0x5a, AppTagMask: 0xffff,
				Options: Options{StagingBytes: 64 * bs}})
			if err != nil {
				t.Fatal(err)
			}
			model := make([]byte, blocks*bs)
			data := blocktest.Pattern(100*bs, 3)
			if _, err := v.WriteAt(data, 10*int64(bs)); err != nil {
				t.Fatal(err)
			}
			copy(model[10*bs:], data)
			// A write that covers a block in part: read, merged, written
			// whole with its tuple.
			if _, err := v.WriteAt(data[:bs/2], 200*int64(bs)+7); err != nil {
				t.Fatal(err)
			}
			copy(model[200*bs+7:], data[:bs/2])
			if err := v.Sync(); err != nil {
				t.Fatal(err)
			}
			if dev.piRuns.Load() == 0 || dev.plain.Load() != 0 {
				t.Fatalf("%d runs written with PI, %d without: every staged block must go with its tuple", dev.piRuns.Load(), dev.plain.Load())
			}
			tuples := make([]byte, blocks*ts)
			written := store.NewBitmap(blocks)
			if _, err := v.tup.ReadRange(0, tuples, nil, written); err != nil {
				t.Fatal(err)
			}
			for _, r := range [][2]int{{10, 110}, {200, 201}} {
				if got, want := dev.pi[r[0]*ts:r[1]*ts], tuples[r[0]*ts:r[1]*ts]; !bytes.Equal(got, want) {
					t.Errorf("blocks [%d, %d): the device holds other PI than the store's tuples", r[0], r[1])
				}
			}
			got := make([]byte, len(model))
			if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, model) {
				t.Fatalf("read back: %v", err)
			}

			// A tuple changed on its way to the device: refused.
			dev.forge = func(lba int64, tu []byte) {
				if lba <= 50 && 50 < lba+int64(len(tu)/ts) {
					tu[(50-lba)*int64(ts)+int64(ts)-1] ^= 1 // the ref tag's low bit
					if f.Type() == dif.Type3 {
						tu[(50-lba)*int64(ts)] ^= 1 // the guard: Type 3 has no ref tag check
					}
				}
			}
			runs := dev.piRuns.Load()
			if _, err := v.WriteAt(bytes.Repeat([]byte{0xee}, 8*bs), 48*int64(bs)); err != nil {
				t.Fatal(err)
			}
			err = v.Sync()
			var ce *dif.CheckError
			switch {
			case !errors.Is(err, dif.ErrIntegrity) || !errors.Is(err, ErrVolumeFailed) || !errors.As(err, &ce):
				t.Fatalf("Sync after a tuple the device refused: %v, want an integrity error failing the volume", err)
			case ce.LBA != 50:
				t.Errorf("refused block %d, want 50", ce.LBA)
			case f.Type() == dif.Type3 && !errors.Is(err, dif.ErrGuard), f.Type() != dif.Type3 && !errors.Is(err, dif.ErrRefTag):
				t.Errorf("refused for %v", err)
			}
			if dev.piRuns.Load() != runs {
				t.Error("the refused run was written in part")
			}
			if _, err := v.WriteAt(data[:bs], 0); !errors.Is(err, ErrVolumeFailed) {
				t.Errorf("a write after the refusal: %v, want ErrVolumeFailed", err)
			}
			v.Close()
			dev.forge = nil
			v, err = Open(ctx, dev, kv, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			if rs := v.Stats().Recovery; rs.Kept != 8 || rs.Torn != 0 {
				t.Errorf("recovery %+v, want the 8 blocks of the refused write kept", rs)
			}
			if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, model) {
				t.Fatalf("read back after the refusal: %v", err)
			}
		})
	}
}
