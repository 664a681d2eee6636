package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/dif"
	"github.com/spf13/cobra"
)

// The forms an image's protection information can take.
const (
	formInterleaved = "interleaved" // extended-LBA image: one file
	formDIX         = "dix"         // data image and metadata file
	formStore       = "store"       // plain image protected by a store
)

// formFiles is the number of files an image of each form names.
var formFiles = map[string]int{formInterleaved: 1, formDIX: 2, formStore: 1}

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
  difctl convert --from interleaved:512+8 --to store disk.dump disk.img   # tuples in disk.img.difdb`,
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
			if text == "" && opts.From != formStore {
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
			if opts.From != formStore {
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
	f.StringVar(&from, "from", "", "the input's `FORM[:FORMAT]`: store, interleaved:FORMAT or dix:FORMAT (default store)")
	f.StringVar(&to, "to", "", "the output's `FORM`: store, interleaved or dix (required)")
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
		return "", "", usageErrorf("%s %q: unknown form %q (want interleaved, dix or store)", flag, s, form)
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
		sum, err := im.f.VerifyFunc(d, m, runParams(im.f, opts.Params, lba), func(e *dif.CheckError) error {
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
// written.
func writeConverted(f dif.Format, to string, outs []*outFile, lba int64, data, md, conv []byte) (int64, error) {
	var bufs [][]byte
	var offs []int64
	switch to {
	case formDIX: // from interleaved
		n := len(data) / f.ExtendedBlockSize()
		d, m := conv[:n*f.BlockSize()], conv[n*f.BlockSize():n*f.ExtendedBlockSize()]
		if err := f.ToSeparate(d, m, data); err != nil {
			return 0, err
		}
		bufs, offs = [][]byte{d, m}, []int64{lba * int64(f.BlockSize()), lba * int64(f.MetadataSize())}
	case formInterleaved: // from DIX
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

// checkDistinct refuses an output that is one of the inputs (or another
// output): creating it would truncate what is still to be read.
func checkDistinct(inputs, outputs []string) error {
	var seen []os.FileInfo
	var names []string
	for _, p := range append(append([]string{}, inputs...), outputs...) {
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		for i, s := range seen {
			if os.SameFile(fi, s) {
				return usageErrorf("%s and %s are the same file: an output cannot be an input or another output", names[i], p)
			}
		}
		seen, names = append(seen, fi), append(names, p)
	}
	return nil
}

// outFile is an output being written: a temporary file beside the target,
// renamed over it only once complete, so that a refused, failed or
// interrupted conversion leaves an existing target as it was. Targets that
// are not regular files (block devices) are written in place.
type outFile struct {
	*os.File
	path string // the target
	tmp  bool   // File is a temporary file, renamed to path on commit
}

// outFiles are the outputs of a command, all put in place by commit or
// none: discard, deferred, removes them unless they were committed.
type outFiles struct {
	files     []*outFile
	committed bool
}

// commit makes every output durable and puts it in place.
func (o *outFiles) commit() error {
	for _, f := range o.files {
		if err := f.commit(); err != nil {
			return err
		}
	}
	o.committed = true
	return nil
}

// discard closes and removes the outputs, unless they were committed.
func (o *outFiles) discard() {
	if !o.committed {
		for _, f := range o.files {
			f.discard()
		}
	}
}

// createOutputs opens the output files, checking first that each target
// can be written.
func createOutputs(paths []string) (*outFiles, error) {
	outs := &outFiles{}
	fail := func(err error) (*outFiles, error) {
		outs.discard()
		return nil, err
	}
	for _, p := range paths {
		fi, err := os.Stat(p)
		switch {
		case err == nil && fi.IsDir():
			return fail(&os.PathError{Op: "create", Path: p, Err: errors.New("is a directory")})
		case err == nil && !fi.Mode().IsRegular():
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return fail(err)
			}
			outs.files = append(outs.files, &outFile{File: f, path: p})
			continue
		case err == nil:
			// The target exists: it must be writable, as it will be replaced.
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return fail(err)
			}
			f.Close()
		case !errors.Is(err, os.ErrNotExist):
			return fail(err)
		}
		f, err := createTemp(p)
		if err != nil {
			return fail(fmt.Errorf("create %s: %w", p, unwrapPath(err)))
		}
		outs.files = append(outs.files, &outFile{File: f, path: p, tmp: true})
	}
	return outs, nil
}

// createTemp creates a new file beside path, with the permissions a new
// file at path would get: 0644 less the umask (never group- or
// world-writable, whatever the umask).
func createTemp(path string) (*os.File, error) {
	for i := 0; ; i++ {
		name := filepath.Join(filepath.Dir(path), fmt.Sprintf(".%s.tmp%d-%d", filepath.Base(path), os.Getpid(), i))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil || !errors.Is(err, os.ErrExist) || i >= 100 {
			return f, err
		}
	}
}

// commit makes the output durable and puts it in place.
func (o *outFile) commit() error {
	if err := o.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", o.path, unwrapPath(err))
	}
	if err := o.Close(); err != nil {
		return fmt.Errorf("close %s: %w", o.path, unwrapPath(err))
	}
	if o.tmp {
		if err := os.Rename(o.Name(), o.path); err != nil {
			os.Remove(o.Name())
			return err
		}
	}
	return nil
}

// discard closes the output and removes the temporary file.
func (o *outFile) discard() {
	o.Close()
	if o.tmp {
		os.Remove(o.Name())
	}
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

// unwrapPath returns the cause of a *fs.PathError, or err.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
