package dif

import "unsafe"

// Verifying a copy. A reader that serves blocks from memory it does not own,
// such as a read-only mapping of a file's page cache, must verify the bytes
// it hands on, not the bytes it happened to read first: another process, or
// the kernel re-reading an evicted page from a failing disk, may change the
// source between a check and a copy. Copying first and verifying the copy
// is safe but reads every byte twice. ClassifyCopy and ClassifySumsCopy do
// both in one pass where the kernels allow it: the kernels' BlocksCopy calls
// store every loaded vector to data and fold the same register, so the
// guards (and sums) are those of exactly the bytes left in data.
//
// The single pass applies to the separate layout with the guard checked.
// For the interleaved layout, Type0, or a skipped guard check, src is copied
// to data first and the copy is verified.

// ClassifyCopy is Classify of the blocks in src, which are copied to data
// (len(data) == len(src), not overlapping): states and the summary describe
// the bytes of data when it returns, whatever src holds by then. Nothing is
// copied if an error is returned. It does not allocate.
func (f Format) ClassifyCopy(states []State, data, src, md []byte, p Params) (Summary, error) {
	if err := checkCopy(data, src); err != nil {
		return Summary{}, err
	}
	return f.classify(states, nil, data, src, md, p)
}

// ClassifySumsCopy is ClassifySums of the blocks in src, which are copied
// to data as ClassifyCopy does; the sums are those of the bytes of data.
func (f Format) ClassifySumsCopy(states []State, sums []uint32, data, src, md []byte, p Params) (Summary, error) {
	if err := checkCopy(data, src); err != nil {
		return Summary{}, err
	}
	if sums == nil {
		sums = []uint32{}
	}
	return f.classify(states, sums, data, src, md, p)
}

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
