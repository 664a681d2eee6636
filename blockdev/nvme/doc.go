// Package nvme talks to NVMe namespaces through the Linux passthrough ioctls:
// Identify Namespace (the LBA format, metadata size, PI type and location,
// and the guard format), Read with the metadata buffer, with the
// controller's protection checks off, so that a caller sees the PI the
// device stores rather than what it would return after its own checks, and
// Write with the PI in the metadata and the controller's checks on, so that
// the device checks the tuples it is given (PRACT clear, PRCHK set).
//
// [Open] opens a namespace that carries PI as a [Device]: its format as a
// dif.Format, cross-checked with the kernel's integrity profile in sysfs
// ([Integrity]), and reads and writes of runs of blocks cut into commands
// within the transfer limits. A namespace without metadata
// ([ErrNoMetadata]), with metadata but no PI ([ErrNoPI]) or in a format dif
// cannot describe ([*UnsupportedFormatError]), a file that is no NVMe
// namespace ([ErrNotNVMe]) and a passthrough the kernel refuses
// ([ErrDenied]) each have their error. The controller's end-to-end
// protection errors ([*StatusError], [*WriteCheckError]) match
// dif.ErrIntegrity and the field's sentinel.
//
// The commands need CAP_SYS_ADMIN and a Linux kernel; elsewhere every file
// is refused with ErrNotNVMe. The tests of the ioctls run inside a QEMU
// guest (internal/guest).
package nvme
