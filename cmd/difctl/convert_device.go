package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/dif"
	"github.com/spf13/cobra"
)

// Converting to and from an NVMe namespace that carries PI (form device,
// docs/device-pi.md): from a device, the namespace is an input with its
// own PI like an interleaved image (its format read from the device);
// to a device, a protected image's data and stored tuples are written to
// the namespace with the device checking every tuple (runExportDevice).

// checkDeviceForms refuses the conversions with a device that convert
// does not do, and format flags for a device's input.
func checkDeviceForms(cmd *cobra.Command, opts *convertOptions, text string) error {
	switch {
	case opts.To == formDevice && opts.From != formStore:
		return usageErrorf("--to device converts a protected image (--from store) onto an NVMe namespace with PI")
	case opts.From == formDevice && text != "":
		return usageErrorf("--from device: the device names its format (Identify Namespace); leave out the format")
	case opts.From == formDevice:
		for _, name := range []string{"block-size", "guard", "type", "pi-first"} {
			if cmd.Flags().Changed(name) {
				return usageErrorf("--%s: the device names its format; leave it out", name)
			}
		}
	}
	return nil
}

// runExportDevice writes a protected image, with the tuples of its store,
// onto an NVMe namespace formatted with the same PI format: each run is
// verified against the store as it is read (blockdev.ExportVolume), then
// written with PRACT clear and PRCHK set, so that the device checks every
// tuple. The namespace is written in place, in LBA order: a conversion
// refused for a failing block stops writing there (without --force), and
// a tuple the device refuses stops it with exit 4.
func runExportDevice(ctx context.Context, opts convertOptions, stdout, stderr io.Writer) error {
	image, dev := opts.Inputs[0], opts.Outputs[0]
	url := storeURL(image, opts.Store)
	if err := checkDistinct(opts.Inputs, opts.Outputs); err != nil {
		return err
	}
	v, err := openVolume(ctx, image, url, true, opts.Key)
	if err != nil {
		return err
	}
	defer v.Close()
	im, err := openDevicePI(dev, dif.Params{}, true)
	if err != nil {
		return err
	}
	defer im.Close()
	f, man := v.format(), v.vol.Manifest()
	df := im.dev.Format()
	switch {
	case f.WithLayout(dif.Separate) != df.WithLayout(dif.Separate):
		return usageErrorf("%s is formatted %s, %s is protected in %s: the tuples fit only a namespace of the same format",
			dev, df.WithLayout(dif.Interleaved), image, f.WithLayout(dif.Interleaved))
	case v.vol.Blocks() > im.dev.Blocks():
		return usageErrorf("%s has %d blocks, fewer than the %d of %s", dev, im.dev.Blocks(), v.vol.Blocks(), image)
	case f.Type() == dif.Type1 && man.InitialRefTag != 0:
		return usageErrorf("%s starts its ref tags at %#x; a Type 1 namespace's are its LBAs (difctl remap --ref-tag 0 first)", image, man.InitialRefTag)
	}
	p := dif.Params{RefTag: man.InitialRefTag, AppTag: man.AppTag, AppMask: man.AppTagMask}
	w, err := im.dev.NewRunWriter(p)
	if err != nil {
		return err
	}
	out := newOutput(stdout, opts.JSON)
	fw := newFindings(out, f)
	prog := newProgress(stderr, opts.Quiet, v.vol.Size(), "convert "+image)
	t0 := time.Now()
	rep, err := blockdev.ExportVolume(ctx, v.vol, blockdev.ExportDest{Data: w.Data(), Meta: w.Meta()}, blockdev.ExportOptions{
		Force: opts.Force, OnProblem: fw.report, Progress: byteProgress(prog),
	})
	prog.Finish()
	var ie *blockdev.IntegrityError
	switch {
	case err != nil && ctx.Err() != nil:
		return interrupted(ctx, rep.Failed)
	case err != nil && isIntegrityErr(err) && !errors.As(err, &ie):
		return &integrityError{msg: fmt.Sprintf("convert %s to %s: the device refused a tuple", image, dev), err: err}
	case err != nil && !errors.As(err, &ie):
		return fmt.Errorf("convert %s: %w", image, err)
	}
	if err := im.dev.Flush(); err != nil {
		return fmt.Errorf("flush %s: %w", dev, err)
	}
	format := f.WithLayout(dif.Interleaved).String()
	serr := fw.summary(&summaryRecord{Command: "convert", Image: image, Store: url, Format: format, KeyedCheck: keyedState(v.vol)}, rep.RunStats, time.Since(t0))
	if serr != nil && !errors.Is(serr, dif.ErrIntegrity) {
		return serr
	}
	if rep.Failed > 0 && !opts.Force {
		return &integrityError{msg: fmt.Sprintf("%s: %d of %d blocks failed verification: converted up to LBA %d, the blocks from there on left as they were (--force converts anyway)",
			image, rep.Failed, rep.Blocks, rep.Next)}
	}
	rec := &convertRecord{From: opts.From, To: opts.To, Format: format, Inputs: opts.Inputs, Outputs: opts.Outputs,
		Store: url, Blocks: rep.Blocks, Bytes: rep.Bytes}
	if err := emitConvert(out, rec); err != nil {
		return err
	}
	return convertedFailing(image, rep.RunStats)
}
