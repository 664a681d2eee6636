package device

import "unsafe"

// MemAlign is the memory alignment of buffers returned by [AlignedBuffer],
// enough for O_DIRECT on every Linux filesystem and block device.
const MemAlign = 4096

// AlignedBuffer returns a zeroed buffer of n bytes whose first byte is
// aligned to MemAlign, so that O_DIRECT I/O needs no bounce copy.
// It returns nil for n <= 0.
func AlignedBuffer(n int) []byte {
	if n <= 0 {
		return nil
	}
	b := make([]byte, n+MemAlign)
	skip := 0
	if r := int(uintptr(unsafe.Pointer(&b[0])) & (MemAlign - 1)); r != 0 {
		skip = MemAlign - r
	}
	return b[skip : skip+n : skip+n]
}

// isAligned reports whether p starts at a multiple of align (a power of two).
func isAligned(p []byte, align int) bool {
	if len(p) == 0 {
		return true
	}
	return uintptr(unsafe.Pointer(&p[0]))&uintptr(align-1) == 0
}
