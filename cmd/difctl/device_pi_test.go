package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/difctl/difctl/blockdev/nvme"
	"github.com/difctl/difctl/dif"
)

// TestDeviceRefusalExit: a write the device refused with an end-to-end
// protection error is an integrity failure, exit 4, as difctl's own; any
// other device status is an operational error, exit 8.
func TestDeviceRefusalExit(t *testing.T) {
	for _, tc := range []struct {
		status uint32
		want   int
	}{{0x282, exitUncorrected}, {0x283, exitUncorrected}, {0x284, exitUncorrected}, {0x281, exitOperational}, {0x181, exitOperational}} {
		se := &nvme.StatusError{Op: "write", Status: tc.status}
		var err error = fmt.Errorf("nvme: %w", se)
		if f := se.Field(); f != 0 {
			err = &nvme.WriteCheckError{LBA: 9, Field: f, Err: se}
		}
		if isIntegrityErr(err) {
			err = &integrityError{msg: "write /dev/nvme0n1", err: err}
		}
		if got := exitCode(context.Background(), err, true); got != tc.want {
			t.Errorf("status %#x: exit %d, want %d (%v)", tc.status, got, tc.want, err)
		}
	}
	if !isIntegrityErr(&nvme.WriteCheckError{Field: dif.FieldRefTag, Err: &nvme.StatusError{Status: 0x284}}) {
		t.Error("a refused ref tag is not an integrity error")
	}
}
