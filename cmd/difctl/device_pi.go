package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/difctl/difctl/blockdev/nvme"
	"github.com/difctl/difctl/blockdev/pisource"
	"github.com/difctl/difctl/dif"
	"github.com/spf13/cobra"
)

// Device PI: an NVMe namespace that carries its own protection
// information (docs/device-pi.md). verify, scrub and inspect read its
// tuples from the device's metadata through passthrough (package
// blockdev/nvme), with no store, and check them with the same source as an
// image with its own PI (pisource.NewReaderSource): the same classifier,
// findings and exit codes.
//
// A command takes IMAGE as such a namespace with --device-pi, or on its
// own when IMAGE is a block device, no --store is given and the default
// store (IMAGE.difdb) does not exist: a block device that is no NVMe
// namespace, or a namespace without metadata or PI, is then checked
// against its store as before. With --device-pi every reason the
// namespace cannot be read that way is an error.

// addDevicePIFlag adds --device-pi to a command that checks images.
func addDevicePIFlag(cmd *cobra.Command, fl *imageFlags) {
	cmd.Flags().BoolVar(&fl.devicePI, "device-pi", false,
		"IMAGE is an NVMe namespace that carries its own PI: read the tuples from the device's metadata (NVMe passthrough, needs CAP_SYS_ADMIN); found without this flag when IMAGE is a block device with no store")
}

// resolveDevice sets s to check image as an NVMe namespace with PI when
// --device-pi says so or, failing any other flag that names how the image
// is protected, when it is one (see above). The format is the device's;
// the tag and check flags apply. storeKeepsState: the command's --store
// keeps its state (scrub), which --device-pi then allows.
func (s *imageSpec) resolveDevice(image string, img *imageFlags, pf *piFlags, storeKeepsState bool) error {
	explicit := img.devicePI
	switch {
	case explicit && img.selfContained():
		return usageErrorf("--device-pi reads the PI from the device: leave out --interleaved and --dix")
	case explicit && img.store != "" && !storeKeepsState:
		return usageErrorf("--device-pi reads the PI from the device, with no store: leave out --store")
	case explicit && pf.formatSet():
		return usageErrorf("--device-pi takes the format from the device (Identify Namespace): leave out --block-size, --guard, --type and --pi-first")
	case explicit:
	case s.SelfContained || img.store != "" || !isBlockDevice(image):
		return nil
	default:
		if _, err := os.Stat(storePath(storeURL(image, ""))); err == nil {
			return nil // a store-backed block device
		}
	}
	d, err := nvme.Open(image, false)
	if err != nil {
		if !explicit && (errors.Is(err, nvme.ErrNotNVMe) || errors.Is(err, nvme.ErrNoMetadata) || errors.Is(err, nvme.ErrNoPI)) {
			return nil // checked against its store
		}
		return devicePIError(image, err)
	}
	defer d.Close()
	s.SelfContained, s.Device, s.Meta = true, true, ""
	s.Format = d.Format()
	if s.Params, err = pf.params(s.Format); err != nil {
		return err
	}
	return nil
}

// devicePIError explains why image cannot be checked as a namespace with
// PI, keeping the typed cause.
func devicePIError(image string, err error) error {
	var ue *nvme.UnsupportedFormatError
	var me *nvme.IntegrityMismatchError
	switch {
	case errors.Is(err, nvme.ErrNotNVMe):
		return fmt.Errorf("%s: --device-pi: not an NVMe namespace (check it against a store, without --device-pi): %w", image, err)
	case errors.Is(err, nvme.ErrDenied):
		return fmt.Errorf("%s: reading the device's PI needs NVMe passthrough, which the kernel allows only with CAP_SYS_ADMIN (run as root): %w", image, err)
	case errors.Is(err, nvme.ErrNoMetadata), errors.Is(err, nvme.ErrNoPI):
		return fmt.Errorf("%s: the namespace carries no PI to check (protect it with a store instead): %w", image, err)
	case errors.As(err, &ue):
		return fmt.Errorf("%s: %w", image, err)
	case errors.As(err, &me):
		return fmt.Errorf("%s: the kernel and the device disagree on the PI format: %w", image, err)
	}
	return fmt.Errorf("%s: %w", image, err)
}

// isBlockDevice reports whether path is a block device.
func isBlockDevice(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0
}

// formatSet reports whether a format flag was given.
func (pf *piFlags) formatSet() bool {
	return pf.blockSize.n != 0 || pf.guard.set || pf.typ.set || pf.piFirst
}

// openDevicePI opens the NVMe namespace at path as an image with its own
// PI, checked with p.
func openDevicePI(path string, p dif.Params, write bool) (*piImage, error) {
	d, err := nvme.Open(path, write)
	if err != nil {
		return nil, devicePIError(path, err)
	}
	im := &piImage{path: path, f: d.Format(), p: p, dev: d}
	if im.src, err = pisource.NewReaderSource(d, im.f, p); err != nil {
		d.Close()
		return nil, err
	}
	return im, nil
}

// openImage opens the image of a check: an NVMe namespace with PI, or an
// image file with its own PI.
func openImage(path string, s imageSpec, mode openMode) (*piImage, error) {
	if s.Device {
		return openDevicePI(path, s.Params, mode != openRead)
	}
	return openPIImage(path, s.Meta, s.Format, s.Params, mode)
}
