package dif

import "unsafe"

// Verifying a copy. A reader that serves blocks from memory it does not own,
// such as a read-only mapping of a file's page cache, must verify the bytes
// it hands on, not the bytes it happened to read first: another process, or
// the kernel re-reading an evicted page from a failing disk, may change the
// source between a check and a copy. Copying first and verifying the copy
// is safe but reads every byte twice. Classify with Classification.Src
// does both in one pass where the kernels allow it: the kernels' BlocksCopy
// calls store every loaded vector to data and fold the same register, so
// the guards (and sums) are those of exactly the bytes left in data.
//
// The single pass applies to the separate layout with the guard checked.
// For the interleaved layout, Type0, or a skipped guard check, src is copied
// to data first and the copy is verified. With the 16-bit guard and sums,
// Classification.Copy may replace the copying kernel by a fused one of the
// caller's (see CopyFunc).

// checkCopy checks the buffers of a copying call: same length, disjoint.
func checkCopy(data, src []byte) error {
	if len(data) != len(src) {
		return bufErr("source of %d bytes for a data buffer of %d bytes", len(src), len(data))
	}
	if overlaps(data, src) {
		return bufErr("source and data buffers overlap")
	}
	return nil
}

// overlaps reports whether a and b share memory.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}
