package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/nvme"
	"github.com/difctl/difctl/blockdev/scrub"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// A store-backed image opened as a blockdev.Volume for a command, after
// its identity is checked (identity.go).

// volume is a store-backed image opened for a command.
type volume struct {
	image, url string
	dev        *device.File
	// pi: the NVMe namespace with PI that the volume writes its tuples to
	// as the device's PI (volume_pi.go), the volume's device; nil: dev is.
	pi      *nvme.VolumeDevice
	kv      store.KV
	vol     *blockdev.Volume
	release func() // releases the volume's witness (keyFlags.openWitness); nil: none
	// borrowed: the volume of difctl serve, lent to a check its control
	// socket runs (control.go); Close leaves it open.
	borrowed bool
}

// openVolume opens the protected image and its store, read-only when
// readOnly (the store too, unless the volume has open intents, whose crash
// recovery writes it). The image must be the one the store protects
// (checkImage, identity.go).
func openVolume(ctx context.Context, image, url string, readOnly bool, key keyFlags) (*volume, error) {
	mode := storeWrite
	if readOnly {
		mode = storeRead
	}
	return openVolumeMode(ctx, image, url, readOnly, mode, key)
}

// openWritable opens a protected image and its store read-write for a
// command that changes the volume (write, discard), and refuses a keyed
// volume without its key: it could not produce valid tags.
func openWritable(ctx context.Context, image, url string, key keyFlags) (*volume, error) {
	return openWritablePI(ctx, image, url, key, piAuto)
}

// openWritablePI is openWritable with the device PI mode pi (--device-pi:
// piRequired; volume_pi.go).
func openWritablePI(ctx context.Context, image, url string, key keyFlags, pi piMode) (*volume, error) {
	v, err := openVolumeModePI(ctx, image, url, false, storeWrite, key, pi)
	if err != nil {
		return nil, err
	}
	if v.vol.Keyed() && !v.vol.KeyedChecked() {
		v.Close()
		return nil, keyError(v.image, blockdev.ErrKeyRequired)
	}
	return v, nil
}

// openVolumeMode is openVolume with the store opened in mode: scrub reads
// the image but writes its cursor and findings to the store.
func openVolumeMode(ctx context.Context, image, url string, readOnly bool, mode storeMode, key keyFlags) (*volume, error) {
	return openVolumeModePI(ctx, image, url, readOnly, mode, key, piAuto)
}

// openVolumeModePI is openVolumeMode with the device PI mode pi.
func openVolumeModePI(ctx context.Context, image, url string, readOnly bool, mode storeMode, key keyFlags, pi piMode) (*volume, error) {
	k, err := key.load()
	if err != nil {
		return nil, err
	}
	w, release, err := key.openWitness()
	if err != nil {
		return nil, err
	}
	v, err := openVolumeWith(ctx, image, url, mode, blockdev.Options{ReadOnly: readOnly, Key: k, Witness: w}, store.OpenOptions{}, pi)
	if err != nil {
		release()
		return nil, err
	}
	v.release = release
	return v, nil
}

// openVolumeWith is openVolumeMode with the volume's options (serve's);
// opts.ReadOnly opens the image read-only; sizes are the store engine's
// memory sizes (serve's), zero for the defaults; pi says whether a
// writable volume on an NVMe namespace with PI of its format writes its
// tuples as the device's PI (volume_pi.go).
func openVolumeWith(ctx context.Context, image, url string, mode storeMode, opts blockdev.Options, sizes store.OpenOptions, pi piMode) (*volume, error) {
	readOnly := opts.ReadOnly
	if _, err := os.Stat(image); err != nil {
		return nil, asOpenError(err)
	}
	kv, err := openStoreSized(image, url, mode, sizes)
	if err != nil {
		return nil, err
	}
	if mode == storeRead {
		recovery, err := needsRecovery(kv)
		if err == nil && recovery {
			kv.Close()
			kv, err = openStoreSized(image, url, storeWrite, sizes)
			if err != nil {
				return nil, fmt.Errorf("%s: the store holds writes an interrupted session left open, which recovery must resolve in the store: %w", image, err)
			}
		}
	}
	v := &volume{image: image, url: url, kv: kv}
	ok := false
	defer func() {
		if !ok {
			v.Close()
		}
	}()
	if err := checkProtected(kv, image, url); err != nil {
		return nil, err
	}
	v.dev, err = openDevice(image, readOnly)
	if err != nil {
		return nil, err
	}
	if err := checkOpenImage(ctx, image, url, kv, v.dev); err != nil {
		return nil, err
	}
	var dev device.Device = v.dev
	if !readOnly {
		if v.pi, err = openVolumePI(image, kv, opts.Name, pi); err != nil {
			return nil, err
		}
		if v.pi != nil {
			dev = v.pi
			if testHookVolumePI != nil {
				dev = testHookVolumePI(v.pi)
			}
		}
	}
	if opts.OpenLeg == nil {
		opts.OpenLeg = func(name string) (device.Device, error) { return openCopy(ctx, name, readOnly) }
	}
	if opts.OpenParity == nil {
		opts.OpenParity = func(path string) (device.Device, error) { return openCopy(ctx, path, readOnly) }
	}
	v.vol, err = blockdev.Open(ctx, dev, kv, opts)
	if err != nil {
		return nil, volumeError(image, url, err)
	}
	ok = true
	return v, nil
}

// needsRecovery tells whether the protected volume of kv has open intents.
func needsRecovery(kv store.KV) (bool, error) {
	t, err := store.OpenTuples(kv, blockdev.DefaultVolumeName, nil)
	if err != nil {
		return false, err
	}
	for _, err := range t.AllIntents() {
		return err == nil, err
	}
	return false, nil
}

// openDevice opens an image or block device for a volume.
func openDevice(image string, readOnly bool) (*device.File, error) {
	dev, err := device.OpenFile(image, device.FileOptions{ReadOnly: readOnly})
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, asOpenError(pe)
		}
		if fi, serr := os.Stat(image); serr == nil && fi.Mode().IsRegular() && fi.Size()%512 != 0 {
			return nil, fmt.Errorf("%s: size %d is not a multiple of 512 bytes (truncated?)", image, fi.Size())
		}
		return nil, fmt.Errorf("%s: %w", image, err)
	}
	return dev, nil
}

// asOpenError presents the failed stat of a file the user named as a
// failed open, as the other commands report it.
func asOpenError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Op == "stat" {
		return &os.PathError{Op: "open", Path: pe.Path, Err: pe.Err}
	}
	return err
}

// Close closes the volume, the store, the device and the witness, unless
// borrowed.
func (v *volume) Close() error {
	if v.borrowed {
		return nil
	}
	var errs []error
	if v.vol != nil {
		errs = append(errs, v.vol.Close())
	}
	if v.kv != nil {
		errs = append(errs, v.kv.Close())
	}
	if v.dev != nil {
		errs = append(errs, v.dev.Close())
	}
	if v.pi != nil {
		errs = append(errs, v.pi.Close())
	}
	if v.release != nil {
		v.release() // after the volume, whose Close may record its seal
	}
	return errors.Join(errs...)
}

// format returns the volume's format in the interleaved layout, for
// messages and records.
func (v *volume) format() dif.Format { return v.vol.Format() }

// closeOverwritten closes the open findings of the blocks [lba, lba+n),
// which a write has just replaced whole and made durable: their failures
// are gone with their old contents (state "closed", the log's "resolved:
// repaired, accepted or rewritten"). It returns how many it closed.
func closeOverwritten(tup *store.Tuples, lba, n int64) (int, error) {
	if n <= 0 {
		return 0, nil
	}
	var open []store.Finding
	for f, err := range tup.Findings(store.FindingQuery{LBA: lba, N: n, Bad: true}) {
		if err != nil {
			return 0, err
		}
		// Only findings wholly inside the rewritten blocks.
		if f.LBA >= lba && f.LBA+max(f.N, 1) <= lba+n {
			open = append(open, f)
		}
	}
	for i, f := range open {
		if _, err := tup.SetFindingState(f.LBA, f.Field, scrub.FindingClosed, i == len(open)-1); err != nil {
			return i, err
		}
	}
	return len(open), nil
}
