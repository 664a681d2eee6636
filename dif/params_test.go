package dif

import (
	"fmt"
	"testing"
)

// ParamsAt advances the ref tag of Types 1 and 2 by the LBA, within the
// format's ref tag bits, and leaves Types 0 and 3 and every other field.
func TestParamsAt(t *testing.T) {
	base := Params{RefTag: 0xffff_fff0, AppTag: 0x1234, AppMask: 0xff00, StorageTag: 7, Skip: CheckGuard}
	for _, tc := range []struct {
		format string
		lba    int64
		ref    uint64
	}{
		{"512+8", 0, 0xffff_fff0},
		{"512+8", 5, 0xffff_fff5},
		{"512+8", 0x20, 0x10}, // 32-bit ref tag: wraps
		{"512+8:type2", 0x20, 0x10},
		{"512+8:type3", 0x20, 0xffff_fff0},
		{"512+8:type0", 0x20, 0xffff_fff0},
		{"4096+16:crc64", 0x20, 0x1_0000_0010}, // 48-bit ref tag
	} {
		t.Run(fmt.Sprintf("format=%s/lba=%d", tc.format, tc.lba), func(t *testing.T) {
			p := MustFormat(tc.format).ParamsAt(base, tc.lba)
			want := base
			want.RefTag, want.LBA = tc.ref, tc.lba
			if p != want {
				t.Errorf("ParamsAt = %+v, want %+v", p, want)
			}
		})
	}
}
