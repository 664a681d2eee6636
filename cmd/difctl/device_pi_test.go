package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
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

// TestDevicePIFlags: the refusals of --device-pi that need no device, and
// a regular file, which is never taken for a namespace on its own.
func TestDevicePIFlags(t *testing.T) {
	dir := t.TempDir()
	img := dir + "/img"
	randomImage(t, img, 64*512, 1)
	for _, tc := range []struct {
		code int
		msg  string
		args []string
	}{
		{exitUsage, "leave out --interleaved", []string{"verify", "--device-pi", "--interleaved", "512+8", img}},
		{exitUsage, "leave out --store", []string{"verify", "--device-pi", "--store", dir + "/s", img}},
		{exitUsage, "leave out --block-size", []string{"inspect", "--device-pi", "--block-size", "4096", img}},
		{exitOperational, "not an NVMe namespace", []string{"verify", "--device-pi", img}},
		{exitOperational, "not an NVMe namespace", []string{"scrub", "--device-pi", "--store", dir + "/s", img}},
		{exitOperational, "not an NVMe namespace", []string{"write", "--device-pi", "--offset", "0", img, img}},
		{exitOperational, "not an NVMe namespace", []string{"convert", "--from", "device", "--to", "store", img, dir + "/out"}},
		{exitUsage, "--from store", []string{"convert", "--from", "interleaved:512+8", "--to", "device", img, dir + "/out"}},
		{exitUsage, "leave out the format", []string{"convert", "--from", "device:512+8", "--to", "store", img, dir + "/out"}},
		{exitUsage, "--device-pi", []string{"write", "--app-tag", "1", "--offset", "0", img, img}},
		// A store-backed volume on a namespace with PI (volume_pi.go).
		{exitUsage, "keeps its own", []string{"write", "--device-pi", "--store", dir + "/s", "--app-tag", "1", "--offset", "0", img, img}},
		{exitUsage, "leave out --read-only", []string{"serve", "--device-pi", "--read-only", img}},
		{exitOperational, "not an NVMe namespace", []string{"protect", "--device-pi", "--store", dir + "/p", img}},
	} {
		code, out := difctl(t, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.msg) {
			t.Errorf("difctl %s: exit %d, %q; want exit %d saying %q", strings.Join(tc.args, " "), code, out, tc.code, tc.msg)
		}
	}
	if _, err := os.Stat(dir + "/p"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("protect --device-pi of a plain file left its store: %v", err)
	}
	// --device-pi with the store of a protected plain file: refused; the
	// file is written as ever without it.
	mustDifctl(t, 0, "protect", "--store", dir+"/v", img)
	if code, out := difctl(t, "write", "--device-pi", "--store", dir+"/v", "--offset", "0", img, img); code != exitOperational || !strings.Contains(out, "not an NVMe namespace") {
		t.Errorf("write --device-pi of a protected plain file: exit %d, %q", code, out)
	}
	mustDifctl(t, 0, "write", "--store", dir+"/v", "--offset", "0", img, img)
	// A regular file with no store is checked against its store, as
	// before: not probed as a namespace.
	if code, out := difctl(t, "verify", img); code != exitOperational || strings.Contains(out, "NVMe") {
		t.Errorf("verify of a plain file with no store: exit %d, %q", code, out)
	}
}
