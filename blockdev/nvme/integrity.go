package nvme

import (
	"fmt"
	"strings"
)

// Integrity is the kernel's integrity profile of a namespace's block
// device, from /sys/block/NAME/integrity: what the block layer generates
// and checks for plain reads and writes.
type Integrity struct {
	// Present: the directory exists (a kernel built with
	// CONFIG_BLK_DEV_INTEGRITY, and a block device). Without it nothing
	// is cross-checked.
	Present bool
	// Format is the profile's name: "T10-DIF-TYPE1-CRC" (Types 1 and 2,
	// 16-bit guard), "T10-DIF-TYPE3-CRC", "EXT-DIF-TYPE1-CRC64" and
	// "EXT-DIF-TYPE3-CRC64" (64-bit guard); "none" when the kernel has no
	// profile (Linux 6.1 gives extended-LBA namespaces none, and the
	// controller inserts and strips their PI: PRACT), "nop" when it
	// carries metadata without generating PI (a tuple it cannot place).
	Format string
	// TupleSize is the metadata bytes per interval the kernel transfers
	// (Linux 6.1 gives the whole metadata size), 0 when absent.
	TupleSize int
	// IntervalBytes is the data bytes each tuple protects (the LBA size),
	// 0 when absent.
	IntervalBytes int
}

// KernelPI reports whether the kernel generates and checks the PI of
// plain reads and writes itself (a T10-DIF or EXT-DIF profile).
func (in Integrity) KernelPI() bool {
	return strings.HasPrefix(in.Format, "T10-DIF-") || strings.HasPrefix(in.Format, "EXT-DIF-")
}

// An IntegrityMismatchError reports a kernel integrity profile that
// contradicts the namespace's format as Identify Namespace reports it.
type IntegrityMismatchError struct {
	Attr     string // the sysfs attribute: "format", "tuple_size" or "protection_interval_bytes"
	Sysfs    string // its value
	Identify string // what Identify Namespace implies
}

func (e *IntegrityMismatchError) Error() string {
	return fmt.Sprintf("nvme: the kernel's integrity %s is %s, but Identify Namespace says %s", e.Attr, e.Sysfs, e.Identify)
}

// Check cross-checks the profile against ns: a T10-DIF or EXT-DIF profile
// must name the namespace's guard (CRC for the 16-bit guard, CRC64 for the
// 64-bit one) and PI type (TYPE1 for Types 1 and 2, TYPE3 for Type 3),
// protect intervals of the LBA size and carry its metadata size. "none",
// "nop" and a profile this package does not know are not contradictions:
// the kernel then leaves the PI to the controller or to its caller.
func (in Integrity) Check(ns Namespace) error {
	if !in.Present || !in.KernelPI() {
		return nil
	}
	var guard string
	switch {
	case strings.HasPrefix(in.Format, "T10-DIF-") && strings.HasSuffix(in.Format, "-CRC"):
		guard = "16-bit guard"
		if ns.Guard != Guard16 {
			return &IntegrityMismatchError{Attr: "format", Sysfs: in.Format, Identify: fmt.Sprintf("guard format %d", ns.Guard)}
		}
	case strings.HasPrefix(in.Format, "EXT-DIF-") && strings.HasSuffix(in.Format, "-CRC64"):
		guard = "64-bit guard"
		if ns.Guard != Guard64 {
			return &IntegrityMismatchError{Attr: "format", Sysfs: in.Format, Identify: fmt.Sprintf("guard format %d", ns.Guard)}
		}
	default:
		// T10-DIF-TYPE*-IP (an IP checksum guard) is no NVMe format.
		return &IntegrityMismatchError{Attr: "format", Sysfs: in.Format, Identify: "an NVMe guard (CRC-16 or CRC-64)"}
	}
	switch {
	case strings.Contains(in.Format, "-TYPE1-"):
		if ns.PIType != 1 && ns.PIType != 2 {
			return &IntegrityMismatchError{Attr: "format", Sysfs: in.Format, Identify: fmt.Sprintf("PI type %d", ns.PIType)}
		}
	case strings.Contains(in.Format, "-TYPE3-"):
		if ns.PIType != 3 {
			return &IntegrityMismatchError{Attr: "format", Sysfs: in.Format, Identify: fmt.Sprintf("PI type %d", ns.PIType)}
		}
	default:
		return &IntegrityMismatchError{Attr: "format", Sysfs: in.Format, Identify: fmt.Sprintf("PI type %d with a %s", ns.PIType, guard)}
	}
	if in.IntervalBytes != 0 && in.IntervalBytes != ns.LBASize {
		return &IntegrityMismatchError{Attr: "protection_interval_bytes", Sysfs: fmt.Sprint(in.IntervalBytes), Identify: fmt.Sprintf("LBA size %d", ns.LBASize)}
	}
	if in.TupleSize != 0 && in.TupleSize != ns.MetadataSize {
		return &IntegrityMismatchError{Attr: "tuple_size", Sysfs: fmt.Sprint(in.TupleSize), Identify: fmt.Sprintf("metadata size %d", ns.MetadataSize)}
	}
	return nil
}
