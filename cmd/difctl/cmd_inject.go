package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
	"github.com/spf13/cobra"
)

// injectOptions are the inputs of runInject.
type injectOptions struct {
	globalOptions
	Image string
	imageSpec
	LBA   int64
	Field dif.Field
	Bit   int
	Store string
}

// injectRecord is the --json result of an injection.
type injectRecord struct {
	header
	Image    string `json:"image"`
	Metadata string `json:"metadata,omitempty"`
	Store    string `json:"store,omitempty"`
	Format   string `json:"format"`
	LBA      int64  `json:"lba"`
	Field    string `json:"field"`            // data, metadata, guard, app, ref, storage
	Bit      int    `json:"bit"`              // the bit flipped (data and metadata: byte bit/8, bit bit%8)
	Before   string `json:"before,omitempty"` // tag fields: the value before, hex
	After    string `json:"after,omitempty"`  // and after
}

func (*injectRecord) recordType() string { return "inject" }

// injectFields maps --field names to dif fields.
var injectFields = map[string]dif.Field{
	"data": dif.FieldData, "metadata": dif.FieldMetadata, "guard": dif.FieldGuard,
	"app": dif.FieldAppTag, "ref": dif.FieldRefTag, "storage": dif.FieldStorageTag,
}

// fieldFlag is an --field name.
type fieldFlag struct {
	name  string
	field dif.Field
}

func (f *fieldFlag) String() string { return f.name }
func (f *fieldFlag) Set(s string) error {
	fd, ok := injectFields[s]
	if !ok {
		return fmt.Errorf("unknown field %q (want data, metadata, guard, app, ref or storage)", s)
	}
	f.name, f.field = s, fd
	return nil
}
func (*fieldFlag) Type() string { return "field" }

func newInjectCmd(g *globalOptions) *cobra.Command {
	var (
		img   imageFlags
		pf    = newPIFlags()
		lba   = lbaFlag{}
		field = fieldFlag{name: "data", field: dif.FieldData}
		bit   int
	)
	cmd := &cobra.Command{
		Use:   "inject IMAGE [--interleaved FORMAT | --dix METAFILE --format FORMAT] --lba N [--field F] [--bit B]",
		Short: "Corrupt one bit of a block, for drills",
		Long: `Flip one bit of block --lba of IMAGE, in place, to rehearse the detection
and handling of corruption: verify and scrub must then report the block.

--field selects what is hit: data (bit B of the block's data: byte B/8,
bit B%8), metadata (the metadata bytes outside the PI tuple, numbered the
same way), or a PI field: guard, app, ref or storage (bit B of the field's
value, 0 the least significant). For a DIX pair, data goes to the data
file and the other fields to the metadata file. For a store-backed image
(no --interleaved or --dix), data is flipped on the image and tag bits in
the tuple kept in the store, behind the protected layer's back.

` + exitCodesHelp(exitOK, exitOperational, exitUsage, exitCancelled),
		Example: `  difctl inject disk.img --lba 5
  difctl inject --interleaved 512+8 --lba 5 disk.dump
  difctl inject --interleaved 512+8 --lba 9 --field app --bit 3 disk.dump
  difctl inject --dix disk.md --format 4096+8 --lba 0 --field ref disk.img`,
		Args: exactArgs(1, "IMAGE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !lba.set {
				return usageErrorf("--lba is required")
			}
			if bit < 0 {
				return usageErrorf("--bit must not be negative, not %d", bit)
			}
			opts := injectOptions{globalOptions: *g, Image: args[0], LBA: lba.v, Field: field.field, Bit: bit, Store: img.store}
			if err := opts.resolve(&img, pf); err != nil {
				return err
			}
			return runInject(cmd.Context(), opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	img.register(cmd, true, " of a store-backed image")
	pf.register(cmd, piFormat)
	f := cmd.Flags()
	f.Var(&lba, "lba", "the block to corrupt (required)")
	f.Var(&field, "field", "what to hit: data, metadata, guard, app, ref or storage")
	f.IntVar(&bit, "bit", 0, "the bit to flip (see above)")
	return cmd
}

func runInject(ctx context.Context, opts injectOptions, stdout, stderr io.Writer) error {
	if !opts.SelfContained {
		return runInjectStore(ctx, opts, stdout, stderr)
	}
	mode := openWriteMeta
	if opts.Field == dif.FieldData {
		mode = openWriteData
	}
	f := opts.Format
	im, err := openPIImage(opts.Image, opts.Meta, f, dif.Params{}, mode)
	if err != nil {
		return err
	}
	defer im.Close()
	if err := checkLBAs(opts.LBA, 1, im.blocks()); err != nil {
		return err
	}
	data, md := im.runBuffers(1)
	if data, md, err = im.read(opts.LBA, 1, data, md); err != nil {
		return fmt.Errorf("read %s: %w", im.name(), err)
	}
	before, _ := im.f.ReadTuple(data, md, 0)
	if err := im.f.Inject(data, md, 0, opts.Field, opts.Bit); err != nil {
		if errors.Is(err, dif.ErrParams) {
			return usageErrorf("--field %s --bit %d: %w", fieldName(opts.Field), opts.Bit, &restatedError{msg: difCause(err), err: err})
		}
		return err
	}
	after, _ := im.f.ReadTuple(data, md, 0)
	if opts.Meta != "" {
		if opts.Field == dif.FieldData {
			md = nil
		} else {
			data = nil
		}
	}
	if err := im.write(opts.LBA, data, md); err != nil {
		return fmt.Errorf("write %s: %w", im.name(), unwrapPath(err))
	}
	if err := im.sync(); err != nil {
		return fmt.Errorf("sync %s: %w", im.name(), err)
	}
	rec := &injectRecord{Image: opts.Image, Metadata: opts.Meta, Format: im.f.String(), LBA: opts.LBA,
		Field: fieldName(opts.Field), Bit: opts.Bit}
	rec.Before, rec.After = tupleField(f, before, opts.Field), tupleField(f, after, opts.Field)
	return emitInject(newOutput(stdout, opts.JSON), im.name(), rec)
}

// difCause returns the message of a dif error without its prefixes.
func difCause(err error) string {
	s := strings.TrimPrefix(err.Error(), "dif: ")
	s = strings.TrimPrefix(s, "invalid parameters: ")
	return strings.Replace(s, " of block 0", "", 1)
}

// emitInject writes the result of an injection.
func emitInject(out *output, name string, rec *injectRecord) error {
	if out.json {
		return out.emit(rec)
	}
	var err error
	switch rec.Field {
	case "data", "metadata":
		_, err = fmt.Fprintf(out.w, "%s: LBA %d: flipped bit %d of the %s (byte %d, bit %d)\n", name, rec.LBA, rec.Bit, rec.Field, rec.Bit/8, rec.Bit%8)
	default:
		_, err = fmt.Fprintf(out.w, "%s: LBA %d: flipped bit %d of the %s: 0x%s -> 0x%s\n", name, rec.LBA, rec.Bit, injectFields[rec.Field], rec.Before, rec.After)
	}
	return err
}

// fieldName is the --field name of a field.
func fieldName(fd dif.Field) string {
	for name, f := range injectFields {
		if f == fd {
			return name
		}
	}
	return fd.String()
}

// runInjectStore flips a bit of a store-backed image behind the volume's
// back: a data bit on the image itself, or a bit of the block's tuple in
// the store.
func runInjectStore(ctx context.Context, opts injectOptions, stdout, _ io.Writer) error {
	if opts.Field == dif.FieldMetadata {
		return usageErrorf("--field metadata: a store-backed image keeps only the tuple; use data, guard, app, ref or storage")
	}
	url := storeURL(opts.Image, opts.Store)
	st, err := openStoreTuples(opts.Image, url, storeWrite, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	t, m, f := st.t, st.m, st.f
	f = f.WithLayout(dif.Separate)
	if err := checkLNAsStore(opts.LBA, t); err != nil {
		return err
	}
	dev, err := openDevice(opts.Image, opts.Field != dif.FieldData)
	if err != nil {
		return err
	}
	defer dev.Close()
	if err := checkImage(ctx, opts.Image, url, t, dev); err != nil {
		return err
	}
	bs := int64(f.BlockSize())
	data := make([]byte, bs)
	md := make([]byte, f.MetadataSize())
	written := store.NewBitmap(1)
	if _, err := dev.ReadAt(data, opts.LBA*bs); err != nil {
		return fmt.Errorf("read %s: %w", opts.Image, err)
	}
	var sums []uint32
	if m.SectorSums {
		sums = make([]uint32, 1)
	}
	if _, err := t.ReadRange(opts.LBA, md, sums, written); err != nil {
		return storeErr(url, err)
	}
	if opts.Field != dif.FieldData && !written.Has(0) {
		return usageErrorf("LBA %d is unwritten: it has no tuple to corrupt", opts.LBA)
	}
	before, _ := f.ReadTuple(data, md, 0)
	if err := f.Inject(data, md, 0, opts.Field, opts.Bit); err != nil {
		if errors.Is(err, dif.ErrParams) {
			return usageErrorf("--field %s --bit %d: %w", fieldName(opts.Field), opts.Bit, &restatedError{msg: difCause(err), err: err})
		}
		return err
	}
	after, _ := f.ReadTuple(data, md, 0)
	if opts.Field == dif.FieldData {
		if _, err := dev.WriteAt(data, opts.LBA*bs); err != nil {
			return fmt.Errorf("write %s: %w", opts.Image, err)
		}
		if err := dev.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", opts.Image, err)
		}
	} else if err := t.WriteRange(opts.LBA, md, sums, true); err != nil {
		return storeErr(url, err)
	}
	rec := &injectRecord{Image: opts.Image, Store: url, Format: displayFormat(m.Format), LBA: opts.LBA,
		Field: fieldName(opts.Field), Bit: opts.Bit,
		Before: tupleField(f, before, opts.Field), After: tupleField(f, after, opts.Field)}
	return emitInject(newOutput(stdout, opts.JSON), opts.Image, rec)
}

// checkLNAsStore refuses an LBA beyond the volume.
func checkLNAsStore(lba int64, t *store.Tuples) error { return checkLBAs(lba, 1, t.Blocks()) }
