package nvme

import (
	"errors"
	"testing"

	"github.com/difctl/difctl/dif"
)

// TestFormat maps every Identify Namespace QEMU can give to dif's format,
// and refuses the namespaces without PI with their typed errors.
func TestFormat(t *testing.T) {
	ns := func(lba, ms int, ext bool, pi int, first bool, guard int) Namespace {
		return Namespace{ID: 1, Blocks: 8, LBASize: lba, MetadataSize: ms, Extended: ext, PIType: pi, PIFirst: first, Guard: guard}
	}
	for _, tc := range []struct {
		ns   Namespace
		want string // dif text form, or "" for an error
		err  error
	}{
		{ns(4096, 8, false, 1, false, Guard16), "4096+8:dix", nil},
		{ns(512, 8, true, 3, true, Guard16), "512+8:type3:pi-first", nil},
		{ns(512, 16, false, 2, false, Guard16), "512+16:type2:dix", nil},
		{ns(4096, 16, false, 1, false, Guard64), "4096+16:crc64:dix", nil},
		{ns(4096, 64, true, 3, true, Guard64), "4096+64:crc64:type3:pi-first", nil},
		{ns(4096, 16, false, 1, false, Guard32), "4096+16:crc32:dix", nil},
		{ns(4096, 0, false, 0, false, Guard16), "", ErrNoMetadata},
		{ns(4096, 8, false, 0, false, Guard16), "", ErrNoPI},
		{ns(4096, 8, false, 1, false, 3), "", nil},       // reserved guard format
		{ns(4096, 8, false, 5, false, Guard16), "", nil}, // reserved PI type
		{ns(4096, 8, false, 1, false, Guard64), "", nil}, // 8 bytes cannot hold a 16-byte tuple
		{ns(256, 8, false, 1, false, Guard16), "", nil},  // below dif's block sizes
	} {
		f, err := tc.ns.Format()
		switch {
		case tc.want != "":
			if err != nil || f != dif.MustFormat(tc.want) {
				t.Errorf("%+v: Format = %v, %v; want %s", tc.ns, f, err, tc.want)
			}
		case tc.err != nil:
			if !errors.Is(err, tc.err) {
				t.Errorf("%+v: Format error %v, want %v", tc.ns, err, tc.err)
			}
		default:
			var ue *UnsupportedFormatError
			if !errors.As(err, &ue) {
				t.Errorf("%+v: Format error %v, want *UnsupportedFormatError", tc.ns, err)
			}
		}
	}
}

// TestStatusError: the three end-to-end statuses match dif's sentinels
// (through a *WriteCheckError too); other statuses match none.
func TestStatusError(t *testing.T) {
	for _, tc := range []struct {
		status uint32
		want   error
	}{
		{0x282, dif.ErrGuard}, {0x283, dif.ErrAppTag}, {0x284, dif.ErrRefTag},
		{0x4282, dif.ErrGuard}, // with Do Not Retry
		{0x281, nil}, {0x002, nil}, {0x182, nil},
	} {
		se := &StatusError{Op: "write", Status: tc.status}
		var err error = se
		if tc.want != nil {
			err = &WriteCheckError{LBA: 7, Field: se.Field(), Err: se}
		}
		if got := errors.Is(err, dif.ErrIntegrity); got != (tc.want != nil) {
			t.Errorf("status %#x: errors.Is(ErrIntegrity) = %v", tc.status, got)
		}
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("status %#x: does not match %v", tc.status, tc.want)
		}
	}
}

func TestProtection(t *testing.T) {
	if got := CheckAll(5, 1, 2).cdw12(); got != 7<<26 {
		t.Errorf("CheckAll cdw12 %#x", got)
	}
	if got := (Protection{Act: true}).cdw12(); got != 1<<29 {
		t.Errorf("PRACT cdw12 %#x", got)
	}
}

// TestIntegrityCheck: the kernel's profiles that agree with a namespace
// pass, those that contradict it are an *IntegrityMismatchError.
func TestIntegrityCheck(t *testing.T) {
	t1 := Namespace{LBASize: 4096, MetadataSize: 8, PIType: 1, Guard: Guard16}
	t3 := Namespace{LBASize: 512, MetadataSize: 8, PIType: 3, Guard: Guard16}
	g64 := Namespace{LBASize: 4096, MetadataSize: 16, PIType: 2, Guard: Guard64}
	in := func(f string, ts, ib int) Integrity {
		return Integrity{Present: true, Format: f, TupleSize: ts, IntervalBytes: ib}
	}
	for _, tc := range []struct {
		in Integrity
		ns Namespace
		ok bool
	}{
		{Integrity{}, t1, true},
		{in("none", 0, 0), t1, true},
		{in("nop", 8, 4096), t1, true},
		{in("T10-DIF-TYPE1-CRC", 8, 4096), t1, true},
		{in("T10-DIF-TYPE3-CRC", 8, 512), t3, true},
		{in("EXT-DIF-TYPE1-CRC64", 16, 4096), g64, true},
		{in("T10-DIF-TYPE3-CRC", 8, 4096), t1, false},
		{in("T10-DIF-TYPE1-CRC", 8, 512), t3, false},
		{in("T10-DIF-TYPE1-CRC", 16, 4096), g64, false},
		{in("EXT-DIF-TYPE1-CRC64", 8, 4096), t1, false},
		{in("T10-DIF-TYPE1-IP", 8, 4096), t1, false},
		{in("T10-DIF-TYPE1-CRC", 8, 512), t1, false},
		{in("T10-DIF-TYPE1-CRC", 16, 4096), t1, false},
	} {
		err := tc.in.Check(tc.ns)
		var me *IntegrityMismatchError
		if tc.ok && err != nil || !tc.ok && !errors.As(err, &me) {
			t.Errorf("%+v against %+v: %v", tc.in, tc.ns, err)
		}
	}
}
