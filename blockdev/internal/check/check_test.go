package check

import (
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
)

func TestFatal(t *testing.T) {
	for _, err := range FatalErrors() {
		if !Fatal(err) || !Fatal(fmt.Errorf("wrapped: %w", err)) {
			t.Errorf("Fatal(%v) is false", err)
		}
	}
	for _, err := range []error{&os.PathError{Op: "read", Path: "dev", Err: syscall.EIO}, device.ErrMapFault, &device.IOError{Op: "read", Err: syscall.EIO}, nil} {
		if Fatal(err) {
			t.Errorf("Fatal(%v) is true", err)
		}
	}
}
