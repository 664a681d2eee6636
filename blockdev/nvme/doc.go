// Package nvme talks to NVMe namespaces through the Linux passthrough ioctls:
// Identify Namespace (the LBA format, metadata size, PI type and location,
// and the guard format) and Read with the metadata buffer, with the
// controller's protection checks off, so that a caller sees the PI the
// device stores rather than what it would return after its own checks.
//
// The commands need CAP_SYS_ADMIN and a Linux kernel; elsewhere the package
// is empty. Its tests run inside a QEMU guest (internal/guest).
package nvme
