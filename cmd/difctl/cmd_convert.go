package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
	"github.com/spf13/cobra"
)

// The forms an image's protection information can take.
const (
	formInterleaved = "interleaved" // extended-LBA image: one file
	formDIX         = "dix"         // data image and metadata file
	formStore       = "store"       // plain image protected by a store
	formDevice      = "device"      // an NVMe namespace that carries PI (convert_device.go)
)

// formFiles is the number of files an image of each form names.
var formFiles = map[string]int{formInterleaved: 1, formDIX: 2, formStore: 1, formDevice: 1}

// convertOptions are the inputs of runConvert.
type convertOptions struct {
	globalOptions
	From, To string     // forms
	Format   dif.Format // the input's format
	Params   dif.Params // to verify the input with
	Inputs   []string   // the input's files: image (and metadata file)
	Outputs  []string   // the output's files
	Force    bool       // convert even when blocks fail verification
	Store    string     // store URL of a store-backed side
}

// convertRecord is the --json result of a conversion.
type convertRecord struct {
	header
	From    string   `json:"from"`            // interleaved, dix or store
	To      string   `json:"to"`              // interleaved, dix or store
	Format  string   `json:"format"`          // dif text form, without the layout
	Inputs  []string `json:"inputs"`          // the files read
	Outputs []string `json:"outputs"`         // the files written
	Store   string   `json:"store,omitempty"` // the store of a store-backed input or output
	Blocks  int64    `json:"blocks"`          // blocks converted
	Bytes   int64    `json:"bytes"`           // bytes written
}

func (*convertRecord) recordType() string { return "convert" }

func newConvertCmd(g *globalOptions) *cobra.Command {
	var (
		from, to string
		format   formatFlag
		force    bool
		store    string
		pf       = newPIFlags()
	)
	cmd := &cobra.Command{
		Use:   "convert [--from FORM[:FORMAT]] --to FORM INPUT... OUTPUT...",
		Short: "Convert an image between store-backed, interleaved (extended-LBA) and DIX forms",
		Long: `Convert an image with protection information from one form to another,
verifying every block on the way:

  store        a plain image (or block device) protected by difctl protect,
               its tuples in a store (default pebble:IMAGE.difdb); one file
  interleaved  an extended-LBA image, data and PI in one file (520, 4104,
               4112 or 4160-byte sectors); one file
  dix          a data image and a metadata file (as nvme write --data and
               --metadata take them); two files, data first
  device       an NVMe namespace that carries PI, read and written through
               NVMe passthrough (docs/device-pi.md); one file, its block
               device: --from device to a store (its PI imported) or to
               an interleaved image or DIX pair (dumped), --to device from
               a store (the stored tuples written into the device's
               metadata, every one checked by the device)

The arguments are the input's files, then the output's: an interleaved
image to a DIX pair is "IMAGE OUT.img OUT.md", a DIX pair to an
interleaved image "DATA META OUT", a protected image to a DIX pair
"IMAGE OUT.img OUT.md", an interleaved image to a store-backed one
"IMAGE OUT.img". --from defaults to store. The input's format is given
after the form (--from interleaved:512+8) or with --format, and can be
adjusted with the format flags; a store names its own. The PI moves byte
for byte: nothing is recomputed. Blocks never written (or discarded) stay
so: exported as zero data with all-ones tags, imported as unwritten.

Every block is verified, an image with its own PI with the tag flags
(--ref-tag, --app-tag, ...), a store-backed one with its manifest. When
blocks fail, each is reported and nothing is written, unless --force
converts the image as it is; both exit 4. Each file output is written
beside its target and renamed over it once complete, so a refused or
interrupted conversion leaves the target as it was. An output that is one
of the inputs is refused.

To a store, the output image must not exist yet (or be a block device of
the right size); its tuples go to --store (default pebble:OUT.img.difdb),
with the tag flags' ref tag and app tag as the volume's initial ref tag
and app tag policy. The import is resumable: interrupted (Ctrl-C, exit
32, or a crash), the same command continues it, and until then the new
volume cannot be opened.

` + exitCodesHelp(exitOK, exitUncorrected, exitOperational, exitUsage, exitCancelled),
		Example: `  difctl convert --from interleaved:512+8 --to dix disk.dump disk.img disk.md
  nvme write /dev/nvme0n1 --data disk.img --metadata disk.md ...
  difctl convert --from dix:4096+16:crc64 --to interleaved disk.img disk.md disk.dump
  difctl convert --from interleaved:512+8 --to dix --force bad.dump out.img out.md
  difctl convert --to interleaved disk.img disk.dump          # protected image: tuples from disk.img.difdb
  difctl convert --to dix disk.img out.img out.md --store pebble:/var/lib/difctl/disk
  difctl convert --from interleaved:512+8 --to store disk.dump disk.img   # tuples in disk.img.difdb
  difctl convert --to device disk.img /dev/nvme0n1               # a protected image onto a PI namespace
  difctl convert --from device --to store /dev/nvme0n1 copy.img  # a namespace's PI into a store`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := convertOptions{globalOptions: *g, Force: force, Store: store}
			var text string
			var err error
			if from == "" {
				from = formStore
			}
			if opts.From, text, err = parseForm("--from", from); err != nil {
				return err
			}
			var toText string
			if opts.To, toText, err = parseForm("--to", to); err != nil {
				return err
			}
			if toText != "" {
				return usageErrorf("--to %s: the output keeps the input's format; give only the form", to)
			}
			switch {
			case text != "" && format.text != "":
				return usageErrorf("give the format once: in --from or with --format")
			case text == "":
				text = format.text
			}
			if opts.From == formStore {
				if text != "" {
					return usageErrorf("--from store: the store names the format; leave out the format")
				}
				for _, name := range []string{"block-size", "guard", "type", "pi-first", "ref-tag", "app-tag", "app-mask", "storage-tag", "no-guard", "no-app", "no-ref", "no-storage"} {
					if cmd.Flags().Changed(name) {
						return usageErrorf("--%s: a store-backed image is verified with its manifest; leave it out", name)
					}
				}
			}
			if opts.From == formDevice || opts.To == formDevice {
				if err := checkDeviceForms(cmd, &opts, text); err != nil {
					return err
				}
			}
			if text == "" && opts.From != formStore && opts.From != formDevice {
				return usageErrorf("--from %s needs the input's format: --from %s:FORMAT (512+8, 4096+16:crc64, ...)", opts.From, opts.From)
			}
			if opts.From == opts.To {
				return usageErrorf("--from and --to are both %s: nothing to convert", opts.From)
			}
			if opts.Store != "" && opts.From != formStore && opts.To != formStore {
				return usageErrorf("--store names the store of a store-backed input or output; neither is one")
			}
			nin, nout := formFiles[opts.From], formFiles[opts.To]
			if len(args) != nin+nout {
				return usageErrorf("converting %s to %s takes %d input and %d output file(s), got %d argument(s)", opts.From, opts.To, nin, nout, len(args))
			}
			opts.Inputs, opts.Outputs = args[:nin], args[nin:]
			if opts.From == formDevice {
				// The format is the device's, the tag and check flags
				// apply.
				var spec imageSpec
				if err := spec.resolveDevice(opts.Inputs[0], &imageFlags{devicePI: true}, pf, false); err != nil {
					return err
				}
				opts.Format, opts.Params = spec.Format, spec.Params
			} else if opts.From != formStore {
				if opts.Format, err = pf.resolveFormat(text); err != nil {
					return err
				}
				if opts.Params, err = pf.params(opts.Format); err != nil {
					return err
				}
			}
			return runConvert(cmd.Context(), opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "the input's `FORM[:FORMAT]`: store, interleaved:FORMAT, dix:FORMAT or device (default store)")
	f.StringVar(&to, "to", "", "the output's `FORM`: store, interleaved, dix or device (required)")
	f.Var(&format, "format", "the input's format, if not given in --from")
	f.BoolVar(&force, "force", false, "convert even if blocks fail verification (they are reported; exit 4)")
	storeFlag(cmd, &store, " of the store-backed side")
	addKeyFlags(cmd, &g.Key, "check the keyed tags of a keyed volume while exporting it (an import creates no keyed volume)")
	pf.register(cmd, piFormat|piTags|piChecks)
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

// parseForm splits FORM[:FORMAT] and checks the form.
func parseForm(flag, s string) (form, format string, err error) {
	form, format, _ = strings.Cut(s, ":")
	format = normalizeFormatText(format)
	if _, ok := formFiles[form]; !ok {
		return "", "", usageErrorf("%s %q: unknown form %q (want interleaved, dix, store or device)", flag, s, form)
	}
	if format != "" {
		if _, err := dif.Parse(format); err != nil {
			return "", "", usageErrorf("%s %s: %w", flag, s, err)
		}
	}
	return form, format, nil
}

// openConvertInput opens the self-contained input of a convert (an
// interleaved image or a DIX pair), once it is sure that no output
// overwrites an input.
func openConvertInput(opts convertOptions) (*piImage, error) {
	if opts.From == formDevice {
		if err := checkDistinct(opts.Inputs, opts.Outputs); err != nil {
			return nil, err
		}
		return openDevicePI(opts.Inputs[0], opts.Params, false)
	}
	meta := ""
	if opts.From == formDIX {
		meta = opts.Inputs[1]
	}
	im, err := openPIImage(opts.Inputs[0], meta, opts.Format, opts.Params, openRead)
	if err != nil {
		return nil, err
	}
	if err := checkDistinct(opts.Inputs, opts.Outputs); err != nil {
		im.Close()
		return nil, err
	}
	return im, nil
}

func runConvert(ctx context.Context, opts convertOptions, stdout, stderr io.Writer) error {
	if opts.To == formDevice {
		return runExportDevice(ctx, opts, stdout, stderr)
	}
	if opts.From == formStore || opts.To == formStore {
		return runConvertStore(ctx, opts, stdout, stderr)
	}
	im, err := openConvertInput(opts)
	if err != nil {
		return err
	}
	defer im.Close()
	outs, err := createOutputs(opts.Outputs)
	if err != nil {
		return err
	}
	defer outs.discard()

	out := newOutput(stdout, opts.JSON)
	fw := newFindings(out, im.f)
	ext := int64(im.extBlockSize())
	blocks := im.blocks()
	prog := newProgress(stderr, opts.Quiet, blocks*ext, "convert "+opts.Inputs[0])
	t0 := time.Now()
	var st blockdev.RunStats
	per := max(1, checkRunBytes/int(ext))
	data, md := im.runBuffers(per)
	conv := make([]byte, per*int(ext)) // the run in the other layout
	var written int64
	for lba := int64(0); lba < blocks; {
		if ctx.Err() != nil {
			prog.Finish()
			return interrupted(ctx, st.Failed)
		}
		n := int(min(int64(per), blocks-lba))
		d, m, err := im.read(lba, n, data, md)
		if err != nil {
			prog.Finish()
			return fmt.Errorf("read %s: %w", im.name(), err)
		}
		sum, err := im.f.VerifyFunc(d, m, im.f.ParamsAt(opts.Params, lba), func(e *dif.CheckError) error {
			fw.report(blockdev.Problem{LBA: e.LBA, Kind: blockdev.KindOf(e.Field), Expected: e.Expected, Actual: e.Actual, Err: e})
			return nil
		})
		if err != nil {
			prog.Finish()
			return fmt.Errorf("verify %s: %w", im.name(), err)
		}
		st.Add(blockdev.RunStats{Blocks: int64(sum.Blocks), OK: int64(sum.OK), Escaped: int64(sum.Escaped),
			Unwritten: int64(sum.Unwritten), Failed: int64(sum.Failed)})
		if st.Failed == 0 || opts.Force {
			w, err := writeConverted(im.f, opts.To, outs.files, lba, d, m, conv[:n*int(ext)])
			written += w
			if err != nil {
				prog.Finish()
				return err
			}
		}
		prog.Add(int64(n) * ext)
		lba += int64(n)
	}
	prog.Finish()
	keep := st.Failed == 0 || opts.Force
	if keep {
		if err := outs.commit(); err != nil {
			return err
		}
	}
	serr := fw.summary(&summaryRecord{Command: "convert", Image: im.path, Metadata: im.meta, Format: im.f.String()}, st, time.Since(t0))
	if serr != nil && !errors.Is(serr, dif.ErrIntegrity) {
		return serr
	}
	if !keep {
		return notConverted(im.name(), st)
	}
	rec := &convertRecord{From: opts.From, To: opts.To, Format: opts.Format.WithLayout(dif.Interleaved).String(),
		Inputs: opts.Inputs, Outputs: opts.Outputs, Blocks: blocks, Bytes: written}
	if out.json {
		if err := out.emit(rec); err != nil {
			return err
		}
	} else if _, err := fmt.Fprintf(out.w, "converted %d blocks of %s from %s %s to %s %s\n",
		blocks, rec.Format, opts.From, strings.Join(opts.Inputs, " + "), opts.To, strings.Join(opts.Outputs, " + ")); err != nil {
		return err
	}
	return convertedFailing(im.name(), st)
}

// writeConverted writes a run read in f's layout to the outputs in form to,
// using conv as the buffer of the other layout, and returns the bytes
// written. A run already in the output's layout (from a device) is written
// as it is.
func writeConverted(f dif.Format, to string, outs []*outFile, lba int64, data, md, conv []byte) (int64, error) {
	var bufs [][]byte
	var offs []int64
	switch {
	case to == formDIX && f.Layout() == dif.Separate:
		bufs, offs = [][]byte{data, md}, []int64{lba * int64(f.BlockSize()), lba * int64(f.MetadataSize())}
	case to == formInterleaved && f.Layout() == dif.Interleaved:
		bufs, offs = [][]byte{data}, []int64{lba * int64(f.ExtendedBlockSize())}
	case to == formDIX: // from interleaved
		n := len(data) / f.ExtendedBlockSize()
		d, m := conv[:n*f.BlockSize()], conv[n*f.BlockSize():n*f.ExtendedBlockSize()]
		if err := f.ToSeparate(d, m, data); err != nil {
			return 0, err
		}
		bufs, offs = [][]byte{d, m}, []int64{lba * int64(f.BlockSize()), lba * int64(f.MetadataSize())}
	case to == formInterleaved: // from DIX
		if err := f.ToInterleaved(conv, data, md); err != nil {
			return 0, err
		}
		bufs, offs = [][]byte{conv}, []int64{lba * int64(f.ExtendedBlockSize())}
	}
	var written int64
	for i, b := range bufs {
		n, err := outs[i].WriteAt(b, offs[i])
		written += int64(n)
		if err != nil {
			return written, fmt.Errorf("write %s: %w", outs[i].path, unwrapPath(err))
		}
	}
	return written, nil
}

// notConverted is the verdict of a convert that found failing blocks and
// so wrote nothing.
func notConverted(image string, st blockdev.RunStats) error {
	return &integrityError{msg: fmt.Sprintf("%s: %d of %d blocks failed verification: not converted, no output written (--force converts anyway)", image, st.Failed, st.Blocks)}
}

// convertedFailing is the verdict of a convert that wrote its outputs:
// nil, or with --force the blocks that failed verification.
func convertedFailing(image string, st blockdev.RunStats) error {
	if st.Failed == 0 {
		return nil
	}
	return &integrityError{msg: fmt.Sprintf("%s: converted with %d of %d blocks failing verification (--force)", image, st.Failed, st.Blocks)}
}

// runConvertStore converts to or from a store-backed image: an export of
// a protected image's data and stored tuples to an interleaved image or a
// DIX pair, or an import of one of those into a new protected image.
func runConvertStore(ctx context.Context, opts convertOptions, stdout, stderr io.Writer) error {
	if opts.From == formStore {
		return runExport(ctx, opts, stdout, stderr)
	}
	if opts.Key != (keyFlags{}) {
		return usageErrorf("convert --to store does not create keyed volumes: import without a key, or protect the data with protect --key-file")
	}
	return runImport(ctx, opts, stdout, stderr)
}

// runExport writes a protected image, with the tuples of its store, as an
// interleaved image or a DIX pair.
func runExport(ctx context.Context, opts convertOptions, stdout, stderr io.Writer) error {
	image := opts.Inputs[0]
	url := storeURL(image, opts.Store)
	if err := checkDistinct(opts.Inputs, opts.Outputs); err != nil {
		return err
	}
	v, err := openVolume(ctx, image, url, true, opts.Key)
	if err != nil {
		return err
	}
	defer v.Close()
	outs, err := createOutputs(opts.Outputs)
	if err != nil {
		return err
	}
	defer outs.discard()
	out := newOutput(stdout, opts.JSON)
	f := v.format()
	fw := newFindings(out, f)
	prog := newProgress(stderr, opts.Quiet, v.vol.Size(), "convert "+image)
	t0 := time.Now()
	dst := blockdev.ExportDest{Data: outs.files[0]}
	if opts.To == formDIX {
		dst.Meta = outs.files[1]
	}
	rep, err := blockdev.ExportVolume(ctx, v.vol, dst, blockdev.ExportOptions{
		Force: opts.Force, OnProblem: fw.report, Progress: byteProgress(prog),
	})
	prog.Finish()
	var ie *blockdev.IntegrityError
	switch {
	case err != nil && ctx.Err() != nil:
		return interrupted(ctx, rep.Failed)
	case err != nil && !errors.As(err, &ie):
		return fmt.Errorf("convert %s: %w", image, err)
	}
	keep := rep.Failed == 0 || opts.Force
	if keep {
		if err := outs.commit(); err != nil {
			return err
		}
	}
	format := f.WithLayout(dif.Interleaved).String()
	serr := fw.summary(&summaryRecord{Command: "convert", Image: image, Store: url, Format: format, KeyedCheck: keyedState(v.vol)}, rep.RunStats, time.Since(t0))
	if serr != nil && !errors.Is(serr, dif.ErrIntegrity) {
		return serr
	}
	if !keep {
		return notConverted(image, rep.RunStats)
	}
	rec := &convertRecord{From: opts.From, To: opts.To, Format: format, Inputs: opts.Inputs, Outputs: opts.Outputs,
		Store: url, Blocks: rep.Blocks, Bytes: rep.Bytes}
	if err := emitConvert(out, rec); err != nil {
		return err
	}
	return convertedFailing(image, rep.RunStats)
}

// emitConvert writes the convert record, or its line of text.
func emitConvert(out *output, rec *convertRecord) error {
	if out.json {
		return out.emit(rec)
	}
	from, to := strings.Join(rec.Inputs, " + "), strings.Join(rec.Outputs, " + ")
	switch {
	case rec.From == formStore:
		from += " (tuples in " + rec.Store + ")"
	case rec.To == formStore:
		to += " (tuples in " + rec.Store + ")"
	}
	_, err := fmt.Fprintf(out.w, "converted %d blocks of %s from %s %s to %s %s\n", rec.Blocks, rec.Format, rec.From, from, rec.To, to)
	return err
}

// importTargetError explains why the output of an import cannot be
// written.
func importTargetError(outImg, url string, err error) error {
	var te *blockdev.ImportTargetError
	switch {
	case errors.Is(err, blockdev.ErrVolumeExists):
		return usageErrorf("%s holds a protected image already: convert to a new image, or use another --store", url)
	case errors.Is(err, blockdev.ErrImportTargetExists):
		return usageErrorf("%s exists: converting to a store creates a new image (remove it, or choose another name)", outImg)
	case errors.Is(err, blockdev.ErrImportTargetGone):
		return fmt.Errorf("%s: the import into it is in progress in %s, but the image is gone: %w (delete %s to start again)", outImg, url, unwrapPath(err), url)
	case errors.As(err, &te) && te.Op == "store":
		return volumeError(outImg, url, te.Err)
	case errors.As(err, &te) && te.Op == "create":
		return fmt.Errorf("create %s: %w", outImg, te.Err)
	case errors.As(err, &te):
		return te.Err
	}
	return err
}

// importable checks that a store can keep the PI of format f with params p.
func importable(f dif.Format, p dif.Params) error {
	switch {
	case f.Type() == dif.Type0:
		return usageErrorf("format %s is type0: no protection information to import", f.WithLayout(dif.Interleaved))
	case f.MetadataSize() != f.TupleSize():
		return usageErrorf("format %s keeps %d bytes of metadata per block; a store keeps only the %d-byte tuple (convert to interleaved or dix instead)",
			f.WithLayout(dif.Interleaved), f.MetadataSize(), f.TupleSize())
	case p.AppTag == 0xffff:
		return usageErrorf("--app-tag 0xffff is the escape value: blocks carrying it are never checked")
	}
	return nil
}

// runImport creates a protected image from an interleaved image or a DIX
// pair: the data goes to the new image, the tuples, as the input stores
// them, to its store.
func runImport(ctx context.Context, opts convertOptions, stdout, stderr io.Writer) error {
	outImg := opts.Outputs[0]
	url := storeURL(outImg, opts.Store)
	im, err := openConvertInput(opts)
	if err != nil {
		return err
	}
	defer im.Close()
	f := im.f
	if err := importable(f, opts.Params); err != nil {
		return err
	}
	size := im.blocks() * int64(f.BlockSize())

	// The store: new, or holding the import that this command continues.
	ns, err := openNewStore(outImg, url)
	if err != nil {
		return err
	}
	defer ns.close()
	kv := ns.kv
	tgt, err := blockdev.OpenImportTarget(kv, outImg, size, blockdev.ImportTargetOptions{
		OpenDevice: func(p string) (*device.File, error) { return openDevice(p, false) },
	})
	if err != nil {
		return importTargetError(outImg, url, err)
	}
	defer tgt.Close()
	resume := tgt.Resume

	out := newOutput(stdout, opts.JSON)
	fw := newFindings(out, f)
	total := size
	if !opts.Force && !resume {
		total *= 2 // a verification pass first
	}
	prog := newProgress(stderr, opts.Quiet, total, "convert "+im.name())
	t0 := time.Now()
	vol, rep, err := tgt.Import(ctx, im.src, kv, blockdev.ImportOptions{
		Options: blockdev.Options{DeviceID: deviceID(outImg)},
		Force:   opts.Force, Tool: toolName, OnProblem: fw.report, Progress: byteProgress(prog),
	})
	prog.Finish()
	if tgt.Discarded() {
		ns.remove() // a store created for an import that kept nothing
	}
	var ie *blockdev.IntegrityError
	var mm *blockdev.MismatchError
	switch {
	case err != nil && !tgt.Discarded():
		if !errors.As(err, &mm) {
			fmt.Fprintf(stderr, "difctl: %s: conversion stopped; run the same command again to resume\n", outImg)
		}
	case errors.As(err, &ie) && ctx.Err() == nil:
		if serr := fw.summary(&summaryRecord{Command: "convert", Image: im.path, Metadata: im.meta, Format: f.WithLayout(dif.Interleaved).String()}, rep.RunStats, time.Since(t0)); serr != nil && !errors.Is(serr, dif.ErrIntegrity) {
			return serr
		}
		return notConverted(im.name(), rep.RunStats)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		var failed int64
		if rep != nil {
			failed = rep.Failed
		}
		return interrupted(ctx, failed)
	case errors.As(err, &mm):
		return fmt.Errorf("%s: the import in progress in %s has another %s (%s, not %s): give the same flags, or delete %s and %s to start again",
			outImg, url, mm.Field, unquote(mm.Stored), unquote(mm.Given), outImg, url)
	case err != nil:
		return fmt.Errorf("convert %s: %w", im.name(), err)
	}
	if err := vol.Close(); err != nil {
		return fmt.Errorf("%s: %w", outImg, err)
	}
	format := f.WithLayout(dif.Interleaved).String()
	serr := fw.summary(&summaryRecord{Command: "convert", Image: im.path, Metadata: im.meta, Format: format, Start: rep.Start}, rep.RunStats, time.Since(t0))
	if serr != nil && !errors.Is(serr, dif.ErrIntegrity) {
		return serr
	}
	rec := &convertRecord{From: opts.From, To: opts.To, Format: format, Inputs: opts.Inputs, Outputs: opts.Outputs,
		Store: url, Blocks: im.blocks(), Bytes: rep.Bytes}
	if err := emitConvert(out, rec); err != nil {
		return err
	}
	return convertedFailing(im.name(), rep.RunStats)
}
