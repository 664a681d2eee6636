package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/spf13/cobra"
)

// verifyOptions are the inputs of runVerify.
type verifyOptions struct {
	globalOptions
	Image     string
	imageSpec // a self-contained image; otherwise checked against Store
	Range     rangeFlag
	Store     string   // store URL; "" for the default, IMAGE.difdb
	From      []string // repair sources: say which failing blocks they could repair
	Control   string   // --control: a server's control socket; "" for the store's default
	// served, if not nil, is the volume of difctl serve, which runs the
	// check for a client of its control socket (control.go).
	served *served
}

// controlRequest is the request of a verify run by the server holding
// the store (onServer).
func (o verifyOptions) controlRequest() (*controlRequest, error) {
	r, err := newControlRequest("verify", o.Image, o.Store, o.Control, o.globalOptions)
	if err != nil {
		return nil, err
	}
	r.Range = o.Range.String()
	if r.From, err = absPaths(o.From); err != nil {
		return nil, err
	}
	return r, nil
}

func newVerifyCmd(g *globalOptions) *cobra.Command {
	var (
		img     imageFlags
		pf      = newPIFlags()
		from    []string
		control string
	)
	cmd := &cobra.Command{
		Use:   "verify IMAGE [--interleaved FORMAT | --dix METAFILE --format FORMAT] [flags]",
		Short: "Verify the protection information of an image, reporting every failing block",
		Long: `Verify the protection information of IMAGE and report every block that
fails a check, with the field that failed and the expected (computed) and
stored values, then a summary: blocks checked, ok, failed by field,
unwritten (all-ones tags: never written or discarded) and escaped (app tag
0xffff). An unwritten block of a store-backed image must be zeros (or a
hole) on the image: one holding data is reported as "data in unwritten
block" (kind unwritten-data). Text output lists the first 100 findings and
counts the rest; --json lists them all.

The image carries its own PI with --interleaved FORMAT (an extended-LBA
dump: 520, 4104, 4112 or 4160-byte sectors) or --dix METAFILE (a data image
and a separate metadata file, format by --format or the format flags).
Without either, IMAGE is checked against the tuples protect stored for it
(--store, default IMAGE.difdb). The store is opened read-only: verify
changes nothing, runs beside other readers (inspect, verify), and needs
only read access to the store, unless the store holds writes an interrupted
session left open, whose recovery writes it. The store must describe IMAGE
(its size and name); another image's store is refused (exit 8), as is a
damaged one, named in the message. Human output lists the first 100
failed checks and counts the rest; --json lists every one.

An NVMe namespace that carries its own PI is checked with no store
(--device-pi, or on its own when IMAGE is a block device, no --store is
given and the default store does not exist): its format comes from the
device, its tuples from the device's metadata through NVMe passthrough,
with the device's own checks off (docs/device-pi.md). That needs
CAP_SYS_ADMIN. A block device that is not such a namespace is checked
against its store.

` + servedHelp("verify") + `

The expected tags come from the flags: --ref-tag is the ref tag of block 0
(Types 1 and 2: block N carries REF+N), --app-tag is checked under
--app-mask, and --no-guard, --no-app, --no-ref, --no-storage switch checks
off. --range limits the check to some LBAs. The image is streamed in runs
of about 1 MiB; memory does not grow with its size.

` + exitCodesHelp(exitOK, exitUncorrected, exitOperational, exitUsage, exitCancelled),
		Example: `  difctl verify --interleaved 512+8 disk.dump
  difctl verify --interleaved 4096+16:crc64 --range 1000+64 nvme.dump
  difctl verify --interleaved 512+8 --app-tag 0x1234 disk.dump
  difctl verify --dix disk.md --format 4096+8 disk.img
  difctl --json verify --interleaved 512+8:type2 --ref-tag 0x1000 disk.dump`,
		Args: exactArgs(1, "IMAGE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := verifyOptions{globalOptions: *g, Image: args[0], Range: pf.rng, Store: img.store, From: from, Control: control}
			if err := opts.resolve(&img, pf); err != nil {
				return err
			}
			if err := opts.resolveDevice(args[0], &img, pf, false); err != nil {
				return err
			}
			if len(from) > 0 && opts.SelfContained {
				return usageErrorf("--from works on protected images (protect), not on images with their own PI")
			}
			return runVerify(cmd.Context(), opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	img.register(cmd, true, " of a store-backed image")
	addDevicePIFlag(cmd, &img)
	pf.register(cmd, piFormat|piTags|piChecks|piRange)
	cmd.Flags().StringArrayVar(&from, "from", nil, "a repair source (an image file or block device holding a copy of IMAGE), repeatable: report which failing blocks it holds a verified copy of (verify changes nothing; repair with scrub --repair or repair)")
	addKeyFlags(cmd, &g.Key, "check the keyed tags too (without it a keyed volume's tuples are checked and the keyed check skipped)")
	addProgressJSONFlag(cmd, g)
	addControlFlag(cmd, &control)
	return cmd
}

func runVerify(ctx context.Context, opts verifyOptions, stdout, stderr io.Writer) error {
	if !opts.SelfContained {
		return runVerifyStore(ctx, opts, stdout, stderr)
	}
	im, err := openImage(opts.Image, opts.imageSpec, openRead)
	if err != nil {
		return err
	}
	defer im.Close()
	start, count, err := opts.Range.bounds(im.blocks())
	if err != nil {
		return err
	}
	out := newOutput(stdout, opts.JSON)
	fw := newFindings(out, im.f)
	ext := int64(im.extBlockSize())
	prog := newCmdProgress(stderr, opts.globalOptions, count*ext, "verify", opts.Image)
	t0 := time.Now()
	st, err := checkRange(ctx, im.src, start, count, blockdev.CheckOptions{}, prog, ext, fw.report)
	prog.Finish()
	if err != nil {
		if ctx.Err() != nil {
			return interrupted(ctx, st.Failed)
		}
		return fmt.Errorf("verify %s: %w", im.name(), err)
	}
	return fw.summary(&summaryRecord{
		Command: "verify", Image: opts.Image, Metadata: opts.Meta, Format: im.f.String(), Start: start,
	}, st, time.Since(t0))
}

// runVerifyStore verifies a store-backed image against its stored tuples.
func runVerifyStore(ctx context.Context, opts verifyOptions, stdout, stderr io.Writer) error {
	url := storeURL(opts.Image, opts.Store)
	srcs, err := openRepairSources(ctx, opts.From)
	if err != nil {
		return err
	}
	defer srcs.close()
	v, err := opts.served.openVolume(ctx, opts.Image, url, true, storeRead, opts.Key)
	if err != nil {
		return onServer(ctx, err, opts.served, opts.controlRequest, stdout, stderr)
	}
	defer v.Close()
	start, count, err := opts.Range.bounds(v.vol.Blocks())
	if err != nil {
		return err
	}
	out := newOutput(stdout, opts.JSON)
	fw := newFindings(out, v.format())
	fw.log = opts.served.findingsLog(v.format(), "the client's --json lists them all")
	bs := int64(v.vol.BlockSize())
	prog := newCmdProgress(stderr, opts.globalOptions, count*bs, "verify", opts.Image)
	t0 := time.Now()
	st, err := checkRange(ctx, v.vol, start, count, blockdev.CheckOptions{Rereads: blockdev.DefaultRereads, Sources: srcs.srcs}, prog, bs, fw.report)
	prog.Finish()
	if err != nil {
		if ctx.Err() != nil {
			return interrupted(ctx, st.Failed)
		}
		return storeFailure("verify "+opts.Image, url, err)
	}
	rec := &summaryRecord{
		Command: "verify", Image: opts.Image, Store: url, Format: displayFormat(v.format().String()), Start: start, KeyedCheck: keyedState(v.vol),
	}
	if err := checkSeal(v.vol, rec); err != nil {
		return storeFailure("verify "+opts.Image, url, err)
	}
	return fw.summary(rec, st, time.Since(t0))
}
