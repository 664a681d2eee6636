//go:build !unix

package kerneltest

import "testing"

func testGuardPage[T Word](t *testing.T, k Kernel[T]) {
	t.Skip("guard pages need mmap/mprotect")
}

func testGuardPageCopy[T Word](t *testing.T, k Kernel[T]) {
	t.Skip("guard pages need mmap/mprotect")
}

// GuardedBuffer skips t: guard pages need mmap/mprotect.
func GuardedBuffer(t *testing.T) (get func(n int) []byte) {
	t.Skip("guard pages need mmap/mprotect")
	return nil
}
