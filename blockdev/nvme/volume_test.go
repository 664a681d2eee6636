package nvme

import (
	"errors"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
)

// TestVolumeDeviceFormat: a namespace carries the PI of a volume only in
// the volume's format (any layout), with a Type 1 volume's ref tags from
// 0 and an app tag that is not the escape; anything else is a
// *FormatMismatchError. The I/O runs in the guest (cmd/difctl's
// TestGuestDevicePI, volumeDevicePI).
func TestVolumeDeviceFormat(t *testing.T) {
	dev := func(ns Namespace) *Device {
		f, err := ns.Format()
		if err != nil {
			t.Fatal(err)
		}
		return &Device{ns: ns, format: f, path: "/dev/nvme0n1"}
	}
	t1 := dev(Namespace{ID: 1, Blocks: 64, LBASize: 4096, MetadataSize: 8, PIType: 1, Guard: Guard16})
	t2 := dev(Namespace{ID: 2, Blocks: 64, LBASize: 4096, MetadataSize: 16, PIType: 2, Guard: Guard64, Extended: true})
	t3 := dev(Namespace{ID: 3, Blocks: 64, LBASize: 512, MetadataSize: 8, PIType: 3, PIFirst: true, Guard: Guard16, Extended: true})
	for _, tc := range []struct {
		name   string
		d      *Device
		format string
		p      dif.Params
		ok     bool
	}{
		{"dix", t1, "4096+8", dif.Params{}, true},
		{"dix-layout", t1, "4096+8:dix", dif.Params{AppTag: 7, AppMask: 0xffff}, true},
		{"type1-ref", t1, "4096+8", dif.Params{RefTag: 5}, false},
		{"escape", t1, "4096+8", dif.Params{AppTag: 0xffff}, false},
		{"block-size", t1, "512+8", dif.Params{}, false},
		{"type", t1, "4096+8:type3", dif.Params{}, false},
		{"type2-ref", t2, "4096+16:crc64:type2", dif.Params{RefTag: 1 << 40}, true},
		{"guard", t2, "4096+16:crc32:type2", dif.Params{}, false},
		{"type3", t3, "512+8:type3:pi-first", dif.Params{RefTag: 9}, true},
		{"pi-last", t3, "512+8:type3", dif.Params{}, false},
	} {
		t.Run("case="+tc.name, func(t *testing.T) {
			v, err := tc.d.VolumeDevice(dif.MustFormat(tc.format), tc.p)
			var fe *FormatMismatchError
			switch {
			case tc.ok && err != nil:
				t.Fatalf("refused: %v", err)
			case !tc.ok && !errors.As(err, &fe):
				t.Fatalf("%v, want a *FormatMismatchError", err)
			case !tc.ok:
				return
			}
			bs := tc.d.BlockSize()
			if v.Size() != 64*int64(bs) || v.LogicalBlockSize() != bs || v.PhysicalBlockSize() != bs {
				t.Errorf("size %d, blocks %d and %d", v.Size(), v.LogicalBlockSize(), v.PhysicalBlockSize())
			}
			var _ device.Device = v
			var _ device.PIWriter = v
			// Requests the device cannot take fail before any I/O.
			if _, err := v.ReadAt(make([]byte, bs), v.Size()); !errors.Is(err, device.ErrOutOfRange) {
				t.Errorf("read past the end: %v", err)
			}
			if err := v.WriteWithPI(make([]byte, bs), make([]byte, tc.d.format.TupleSize()), 1); !errors.Is(err, device.ErrUnaligned) {
				t.Errorf("unaligned WriteWithPI: %v", err)
			}
			if err := v.WriteWithPI(make([]byte, bs), nil, 0); err == nil {
				t.Error("WriteWithPI without tuples: no error")
			}
		})
	}
}
