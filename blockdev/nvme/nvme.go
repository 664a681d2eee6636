package nvme

import (
	"errors"
	"fmt"

	"github.com/difctl/difctl/dif"
)

// ErrNotNVMe is returned for a file that refuses the NVMe ioctls (and, off
// Linux, for every file).
var ErrNotNVMe = errors.New("nvme: not an NVMe namespace")

// ErrDenied is returned when the kernel refuses a passthrough command to
// the caller: Linux 6.1 lets only CAP_SYS_ADMIN send them (later kernels
// also let a reader of the generic character device send reads). The
// error also wraps the errno (EACCES or EPERM), so it matches
// fs.ErrPermission.
var ErrDenied = errors.New("nvme: passthrough refused (it needs CAP_SYS_ADMIN)")

// The reasons a namespace carries no PI that difctl can check, from
// Namespace.Format.
var (
	// ErrNoMetadata: the namespace's LBA format has no metadata.
	ErrNoMetadata = errors.New("nvme: the namespace has no metadata (its LBA format has metadata size 0)")
	// ErrNoPI: the namespace has metadata but no protection information
	// (DPS type 0).
	ErrNoPI = errors.New("nvme: the namespace has metadata but no protection information (PI type 0)")
)

// An UnsupportedFormatError reports a namespace whose PI format has no
// dif.Format: a reserved guard format or PI type, a metadata size too
// small for the tuple, or an LBA size outside dif's range.
type UnsupportedFormatError struct {
	NS     Namespace
	Reason string
}

func (e *UnsupportedFormatError) Error() string {
	return fmt.Sprintf("nvme: namespace %d (%d+%d, PI type %d, guard format %d): unsupported PI format: %s",
		e.NS.ID, e.NS.LBASize, e.NS.MetadataSize, e.NS.PIType, e.NS.Guard, e.Reason)
}

// StatusError is a command that the controller completed with an error
// status (the Status Field of the completion, without the phase bit: bits
// 10:8 the Status Code Type, 7:0 the Status Code, 14 Do Not Retry).
//
// The three end-to-end protection errors (Status Code Type 2, Media and Data
// Integrity Errors: Status Codes 0x82 Guard Check Error, 0x83 Application
// Tag Check Error, 0x84 Reference Tag Check Error) unwrap to dif's sentinel
// of the field (dif.ErrGuard, dif.ErrAppTag, dif.ErrRefTag), so they match
// dif.ErrIntegrity like difctl's own integrity failures.
type StatusError struct {
	Op     string
	Status uint32
}

// The Status Codes of Status Code Type 2 that report an end-to-end
// protection check failing.
const (
	statusGuard  = 0x282
	statusAppTag = 0x283
	statusRefTag = 0x284
)

func (e *StatusError) Error() string {
	s := fmt.Sprintf("nvme: %s: status %#x (type %d, code %#x)", e.Op, e.Status, e.Status>>8&7, e.Status&0xff)
	if f := e.Field(); f != 0 {
		s += ": end-to-end " + f.String() + " check error"
	}
	return s
}

// Field returns the PI field of an end-to-end protection error, or 0 for
// any other status.
func (e *StatusError) Field() dif.Field {
	switch e.Status & 0x7ff {
	case statusGuard:
		return dif.FieldGuard
	case statusAppTag:
		return dif.FieldAppTag
	case statusRefTag:
		return dif.FieldRefTag
	}
	return 0
}

// Unwrap returns dif's sentinel of the field of an end-to-end protection
// error (which matches dif.ErrIntegrity), nil for other statuses.
func (e *StatusError) Unwrap() error {
	switch e.Field() {
	case dif.FieldGuard:
		return dif.ErrGuard
	case dif.FieldAppTag:
		return dif.ErrAppTag
	case dif.FieldRefTag:
		return dif.ErrRefTag
	}
	return nil
}

// Guard formats (the PIF field of the extended LBA format).
const (
	Guard16 = 0 // CRC-16/T10-DIF, 8-byte tuple
	Guard32 = 1 // CRC-32C, 16-byte tuple
	Guard64 = 2 // CRC-64/NVME, 16-byte tuple
)

// Namespace is what Identify Namespace says of a namespace's format.
type Namespace struct {
	ID           uint32
	Blocks       uint64 // NSZE: the namespace's size in logical blocks
	LBASize      int    // bytes of data per block (2^LBADS)
	MetadataSize int    // bytes of metadata per block (MS)
	// Extended reports metadata transferred at the end of each block's data
	// (FLBAS bit 4: DIF, extended LBAs); false: in a separate buffer (DIX).
	Extended bool
	PIType   int  // DPS bits 2:0: 0 none, 1 to 3
	PIFirst  bool // DPS bit 3: the tuple is the first bytes of the metadata
	// Guard is the guard format of the LBA format in use (Guard16, Guard32,
	// Guard64), from the NVM Command Set Identify Namespace; Guard16 where
	// the controller has no such page (it then supports no other).
	Guard int
	// STS is the storage tag size in bits, from the same page.
	STS int
}

// Format returns the namespace's PI format in dif's terms: its LBA and
// metadata sizes, guard, PI type and position, storage tag size, and the
// layout of its transfers (dif.Interleaved for extended LBAs, dif.Separate
// for a separate metadata buffer). A namespace without metadata gives
// ErrNoMetadata, one with metadata but no PI ErrNoPI, and a format dif
// cannot describe an *UnsupportedFormatError.
func (ns Namespace) Format() (dif.Format, error) {
	if ns.MetadataSize == 0 {
		return dif.Format{}, fmt.Errorf("nvme: namespace %d: %w", ns.ID, ErrNoMetadata)
	}
	if ns.PIType == 0 {
		return dif.Format{}, fmt.Errorf("nvme: namespace %d: %w", ns.ID, ErrNoPI)
	}
	o := dif.Options{BlockSize: ns.LBASize, MetadataSize: ns.MetadataSize, StorageTagBits: ns.STS, Layout: dif.Separate}
	switch ns.Guard {
	case Guard16:
		o.Guard = dif.Guard16
	case Guard32:
		o.Guard = dif.Guard32
	case Guard64:
		o.Guard = dif.Guard64
	default:
		return dif.Format{}, &UnsupportedFormatError{NS: ns, Reason: fmt.Sprintf("reserved guard format %d", ns.Guard)}
	}
	switch ns.PIType {
	case 1:
		o.Type = dif.Type1
	case 2:
		o.Type = dif.Type2
	case 3:
		o.Type = dif.Type3
	default:
		return dif.Format{}, &UnsupportedFormatError{NS: ns, Reason: fmt.Sprintf("reserved PI type %d", ns.PIType)}
	}
	if ns.PIFirst {
		o.Position = dif.PIFirst
	}
	if ns.Extended {
		o.Layout = dif.Interleaved
	}
	f, err := dif.NewFormat(o)
	if err != nil {
		return dif.Format{}, &UnsupportedFormatError{NS: ns, Reason: err.Error()}
	}
	return f, nil
}

// Protection is the PRINFO field of a Read or Write command and the tags
// the controller checks against: PRACT (Act) has the controller insert the
// PI of a write (and strip it from a read, when the metadata is the tuple
// alone), and each PRCHK bit has it check one field.
type Protection struct {
	Act                   bool
	Guard, AppTag, RefTag bool // PRCHK: check the guard, the app tag, the ref tag
	// Ref is the expected ref tag of the command's first block (Types 1
	// and 2; Type 1 requires the low bits of the starting LBA): the Initial
	// Logical Block Reference Tag, CDW14, and bits 47:32 in CDW3 for the
	// 64-bit guard's 48-bit ref tag.
	Ref uint64
	// App and AppMask are the expected app tag and the bits compared
	// (ELBAT and ELBATM, CDW15).
	App, AppMask uint16
}

// CheckAll is a Protection that has the controller check every field of
// every block against the PI given with it (PRACT clear).
func CheckAll(ref uint64, app, mask uint16) Protection {
	return Protection{Guard: true, AppTag: true, RefTag: true, Ref: ref, App: app, AppMask: mask}
}

// cdw12 returns the PRINFO bits of CDW12 (29 PRACT, 28 to 26 PRCHK guard,
// app, ref).
func (p Protection) cdw12() uint32 {
	var v uint32
	if p.Act {
		v |= 1 << 29
	}
	if p.Guard {
		v |= 1 << 28
	}
	if p.AppTag {
		v |= 1 << 27
	}
	if p.RefTag {
		v |= 1 << 26
	}
	return v
}
