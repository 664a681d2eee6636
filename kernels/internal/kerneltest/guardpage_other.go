//go:build !unix

package kerneltest

import "testing"

func testGuardPage[T Word](t *testing.T, k Kernel[T]) {
	t.Skip("guard pages need mmap/mprotect")
}
