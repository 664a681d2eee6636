package main

import (
	"fmt"
	"os"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/nvme"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// A store-backed volume on an NVMe namespace that carries PI of the
// volume's format (docs/device-pi.md, "A protected volume on a namespace
// with PI"): opened for writing (write, serve, discard, ...), its device is
// an nvme.VolumeDevice, so that the volume's blocks reach the namespace
// with the tuples the volume generated and records in its store as their
// PI (PRACT clear, PRCHK guard, app and ref tag set), and the device checks
// them end to end. A tuple the device refuses fails the write and the
// volume with an integrity error (exit 4). The store keeps the tuples as
// ever, and the sector CRC-32Cs and keyed tags, which the metadata cannot
// hold.
//
// This happens on its own when the image is a block device that is such a
// namespace (piAuto): any reason it cannot be (not NVMe, no PI, another
// format, a Type 1 volume whose ref tags do not start at 0, passthrough
// refused without CAP_SYS_ADMIN) leaves the image a plain block device,
// whose PI the kernel or the controller generates, as before. With
// --device-pi (piRequired) each of those reasons is an error.

// piMode says whether a writable store-backed volume uses its namespace's
// PI.
type piMode int

const (
	piAuto     piMode = iota // when the image is a namespace with PI of the volume's format
	piRequired               // --device-pi: the image must be one
)

// openVolumePI returns the device of the volume name of kv on image when
// it is a namespace with PI of the volume's format, or nil (piAuto, and it
// is not); with piRequired every reason it is not is an error, a format
// that differs an *nvme.FormatMismatchError.
func openVolumePI(image string, kv store.KV, name string, mode piMode) (*nvme.VolumeDevice, error) {
	if mode == piAuto && !isBlockDevice(image) {
		return nil, nil
	}
	if name == "" {
		name = blockdev.DefaultVolumeName
	}
	t, err := store.OpenTuples(kv, name, nil)
	if err != nil {
		return nil, nil // blockdev.Open reports it
	}
	m := t.Manifest()
	f, err := dif.Parse(m.Format)
	if err != nil {
		return nil, nil // blockdev.Open reports it
	}
	d, err := nvme.Open(image, true)
	if err != nil {
		if mode == piAuto {
			return nil, nil
		}
		return nil, devicePIError(image, err)
	}
	vd, err := d.VolumeDevice(f, dif.Params{RefTag: m.InitialRefTag, AppTag: m.AppTag, AppMask: m.AppTagMask})
	if err != nil {
		d.Close()
		if mode == piAuto {
			return nil, nil
		}
		return nil, fmt.Errorf("%s: --device-pi: %w", image, err)
	}
	return vd, nil
}

// testHookVolumePI, if set, gives the device a volume on a namespace
// with PI is opened with, in place of the namespace's (the guest test
// changes a tuple on its way there).
var testHookVolumePI func(*nvme.VolumeDevice) device.Device

// devicePIMode is the piMode of --device-pi.
func devicePIMode(flag bool) piMode {
	if flag {
		return piRequired
	}
	return piAuto
}

// protectDevicePI checks, for protect --device-pi, that image is a
// namespace with PI that can carry the PI of a volume of format f whose
// block 0 has params p (*nvme.FormatMismatchError otherwise).
func protectDevicePI(image string, f dif.Format, p dif.Params) error {
	d, err := nvme.Open(image, false)
	if err != nil {
		return devicePIError(image, err)
	}
	defer d.Close()
	if _, err := d.VolumeDevice(f, p); err != nil {
		return fmt.Errorf("%s: --device-pi: %w", image, err)
	}
	return nil
}

// devicePIFormat returns the format of the namespace at image, in the
// text form protect takes, for protect --device-pi without a format.
func devicePIFormat(image string) (string, error) {
	d, err := nvme.Open(image, false)
	if err != nil {
		return "", devicePIError(image, err)
	}
	defer d.Close()
	return d.Format().WithLayout(dif.Interleaved).String(), nil
}

// storeExists reports whether image's default store (IMAGE.difdb) exists.
func storeExists(image string) bool {
	_, err := os.Stat(storePath(storeURL(image, "")))
	return err == nil
}
