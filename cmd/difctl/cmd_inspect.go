package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/dif"
	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
)

// inspectOptions are the inputs of runInspect.
type inspectOptions struct {
	globalOptions
	Image string
	imageSpec
	LBA   int64 // first block to show; -1: no blocks, the overview
	Count int64 // blocks to show
	Store string
}

// imageRecord describes an image with its own PI (inspect without --lba).
type imageRecord struct {
	header
	Image        string `json:"image"`
	Metadata     string `json:"metadata,omitempty"`
	Format       string `json:"format"`        // dif text form
	Layout       string `json:"layout"`        // interleaved or dix
	BlockSize    int    `json:"block_size"`    // data bytes per block
	MetadataSize int    `json:"metadata_size"` // metadata bytes per block
	TupleSize    int    `json:"tuple_size"`    // PI tuple bytes (8 or 16)
	Guard        int    `json:"guard"`         // guard bits: 16, 32 or 64
	PIType       int    `json:"pi_type"`       // 0 to 3
	PIPosition   string `json:"pi_position"`   // first or last
	Blocks       int64  `json:"blocks"`
	Bytes        int64  `json:"bytes"` // data bytes (blocks * block_size)
}

func (*imageRecord) recordType() string { return "image" }

// tupleValues are the fields of a PI tuple as hex strings.
type tupleValues struct {
	Guard      string `json:"guard"`
	AppTag     string `json:"app_tag"`
	RefTag     string `json:"ref_tag"`
	StorageTag string `json:"storage_tag,omitempty"` // formats with a storage tag
}

// tupleRecord is one block's stored and computed tuples (inspect --lba).
type tupleRecord struct {
	header
	LBA      int64       `json:"lba"`
	State    string      `json:"state"`             // ok, escaped, unwritten, failed (or "unreadable")
	Stored   tupleValues `json:"stored"`            // as read
	Computed tupleValues `json:"computed"`          // guard computed from the data, tags expected from the flags
	Failed   []string    `json:"failed"`            // kinds of the failed checks, empty when none
	Written  *bool       `json:"written,omitempty"` // store-backed images: whether the block has a tuple
	Keyed    *keyedBlock `json:"keyed,omitempty"`   // keyed volumes: the block's keyed tag
}

func (*tupleRecord) recordType() string { return "tuple" }

func newInspectCmd(g *globalOptions) *cobra.Command {
	var (
		img   imageFlags
		pf    = newPIFlags()
		lba   = lbaFlag{}
		count = lbaFlag{}
		store string
	)
	cmd := &cobra.Command{
		Use:   "inspect IMAGE [--interleaved FORMAT | --dix METAFILE --format FORMAT] [--lba N [--count M]]",
		Short: "Show an image's format and, per block, the stored and computed tuples",
		Long: `Describe IMAGE: for a store-backed image the manifest, how many blocks have
tuples and a summary of the findings log; for an image with its own PI
(--interleaved, --dix) its format and size.

A store is opened read-only, and its manifest is checked against IMAGE
(size and name) before anything else: another image's store is refused
(exit 8). The coverage count reads each stored page once.

With --lba N (and --count M, default 1) show blocks N to N+M-1 side by
side: each block's state, its stored tuple, and the computed one (the guard
computed from the data, the tags expected from the tag flags or the
manifest). A "!" marks a stored value that fails its check.

` + exitCodesHelp(exitOK, exitOperational, exitUsage),
		Example: `  difctl inspect --interleaved 512+8 disk.dump
  difctl inspect --interleaved 512+8 --lba 5 --count 3 disk.dump
  difctl inspect disk.img
  difctl --json inspect disk.img --lba 0 --count 8`,
		Args: exactArgs(1, "IMAGE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := inspectOptions{globalOptions: *g, Image: args[0], LBA: -1, Store: store}
			if count.set && !lba.set {
				return usageErrorf("--count needs --lba")
			}
			if lba.set {
				opts.LBA, opts.Count = lba.v, 1
				if count.set {
					if count.v == 0 {
						return usageErrorf("--count must be at least 1")
					}
					opts.Count = count.v
				}
			}
			if err := opts.resolve(&img, pf); err != nil {
				return err
			}
			return runInspect(cmd.Context(), opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	img.register(cmd, true)
	pf.register(cmd, piFormat|piTags|piChecks)
	f := cmd.Flags()
	f.Var(&lba, "lba", "first block to show")
	f.Var(&count, "count", "number of blocks to show (default 1)")
	storeFlag(cmd, &store, " of a store-backed image")
	addKeyFlags(cmd, &g.Key, "check the key against a keyed volume and, with --lba, each block's keyed tag")
	return cmd
}

func runInspect(ctx context.Context, opts inspectOptions, stdout, stderr io.Writer) error {
	if !opts.SelfContained {
		return runInspectStore(ctx, opts, stdout, stderr)
	}
	im, err := openPIImage(opts.Image, opts.Meta, opts.Format, opts.Params, openRead)
	if err != nil {
		return err
	}
	defer im.Close()
	out := newOutput(stdout, opts.JSON)
	f := im.f
	if opts.LBA < 0 {
		layout := "interleaved"
		if opts.Meta != "" {
			layout = "dix"
		}
		pos := "last"
		if f.Position() == dif.PIFirst {
			pos = "first"
		}
		rec := &imageRecord{Image: opts.Image, Metadata: opts.Meta, Format: f.String(), Layout: layout,
			BlockSize: f.BlockSize(), MetadataSize: f.MetadataSize(), TupleSize: f.TupleSize(),
			Guard: f.Guard().Bits(), PIType: int(f.Type()), PIPosition: pos,
			Blocks: im.blocks(), Bytes: im.blocks() * int64(f.BlockSize())}
		if out.json {
			return out.emit(rec)
		}
		tw := tabwriter.NewWriter(out.w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "image:\t%s\n", im.name())
		fmt.Fprintf(tw, "format:\t%s (%s)\n", rec.Format, layout)
		fmt.Fprintf(tw, "blocks:\t%d of %d+%d bytes (%s of data)\n", rec.Blocks, rec.BlockSize, rec.MetadataSize, formatBytes(rec.Bytes))
		fmt.Fprintf(tw, "guard:\t%s, %d-byte tuple, PI %s in the metadata\n", guardName(f.Guard()), rec.TupleSize, pos)
		fmt.Fprintf(tw, "type:\t%d\n", rec.PIType)
		return tw.Flush()
	}
	start, count := opts.LBA, opts.Count
	if err := checkLBAs(start, count, im.blocks()); err != nil {
		return err
	}
	tt := newTupleTable(out, f)
	data, md := im.runBuffers(1)
	for lba := start; lba < start+count; lba++ {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		d, m, err := im.read(lba, 1, data, md)
		if err != nil {
			return fmt.Errorf("read %s at LBA %d: %w", im.name(), lba, err)
		}
		rec, err := inspectBlock(f, d, m, runParams(f, opts.Params, lba))
		if err != nil {
			return err
		}
		rec.LBA = lba
		if err := tt.row(rec); err != nil {
			return err
		}
	}
	return tt.flush()
}

// inspectBlock returns the stored and computed tuples of one block (data
// and md in f's layout) checked with p.
func inspectBlock(f dif.Format, data, md []byte, p dif.Params) (*tupleRecord, error) {
	stored, err := f.ReadTuple(data, md, 0)
	if err != nil {
		return nil, err
	}
	// The computed tuple: generate over a copy.
	cd, cm := append([]byte(nil), data...), append([]byte(nil), md...)
	if err := f.Generate(cd, cm, p); err != nil {
		return nil, err
	}
	computed, err := f.ReadTuple(cd, cm, 0)
	if err != nil {
		return nil, err
	}
	var states [1]dif.State
	if _, err := f.Classify(&dif.Classification{States: states[:]}, data, md, p); err != nil {
		return nil, err
	}
	rec := &tupleRecord{State: states[0].String(), Stored: tupleOf(f, stored), Computed: tupleOf(f, computed), Failed: []string{}}
	if _, err := f.VerifyFunc(data, md, p, func(e *dif.CheckError) error {
		rec.Failed = append(rec.Failed, string(blockdev.KindOf(e.Field)))
		return nil
	}); err != nil {
		return nil, err
	}
	return rec, nil
}

func tupleOf(f dif.Format, t dif.Tuple) tupleValues {
	v := tupleValues{
		Guard:  tupleField(f, t, dif.FieldGuard),
		AppTag: tupleField(f, t, dif.FieldAppTag),
		RefTag: tupleField(f, t, dif.FieldRefTag),
	}
	if f.StorageTagBits() > 0 {
		v.StorageTag = tupleField(f, t, dif.FieldStorageTag)
	}
	return v
}

// tupleTable writes tuple records, or a table of them.
type tupleTable struct {
	out *output
	f   dif.Format
	tw  *tabwriter.Writer
}

func newTupleTable(out *output, f dif.Format) *tupleTable {
	t := &tupleTable{out: out, f: f}
	if !out.json {
		t.tw = tabwriter.NewWriter(out.w, 0, 0, 2, ' ', 0)
		cols := "LBA\tSTATE\tGUARD\tCOMPUTED\tAPP\tEXPECTED\tREF\tEXPECTED"
		if f.StorageTagBits() > 0 {
			cols += "\tSTORAGE\tEXPECTED"
		}
		fmt.Fprintln(t.tw, cols)
	}
	return t
}

func (t *tupleTable) row(rec *tupleRecord) error {
	if t.out.json {
		return t.out.emit(rec)
	}
	failed := map[string]bool{}
	for _, k := range rec.Failed {
		failed[k] = true
	}
	mark := func(v string, k blockdev.Kind) string {
		if failed[string(k)] {
			return v + " !"
		}
		return v
	}
	state := rec.State
	switch {
	case failed[string(blockdev.KindUnwrittenData)]:
		state = "unwritten, data !"
	case rec.Written != nil && !*rec.Written:
		state = "unwritten"
	}
	cols := []string{fmt.Sprint(rec.LBA), state,
		mark(rec.Stored.Guard, blockdev.KindGuard), rec.Computed.Guard,
		mark(rec.Stored.AppTag, blockdev.KindAppTag), rec.Computed.AppTag,
		mark(rec.Stored.RefTag, blockdev.KindRefTag), rec.Computed.RefTag}
	if t.f.StorageTagBits() > 0 {
		cols = append(cols, mark(rec.Stored.StorageTag, blockdev.KindStorageTag), rec.Computed.StorageTag)
	}
	if rec.Keyed != nil {
		cols = append(cols, keyedColumn(rec.Keyed))
	}
	_, err := fmt.Fprintln(t.tw, strings.Join(cols, "\t"))
	return err
}

func (t *tupleTable) flush() error {
	if t.tw == nil {
		return nil
	}
	return t.tw.Flush()
}

// formatBytes writes a byte count for people: 32 KiB, 1.5 GiB.
func formatBytes(n int64) string { return humanize.IBytes(uint64(n)) }

func guardName(g dif.Guard) string {
	switch g {
	case dif.Guard16:
		return "CRC-16/T10-DIF"
	case dif.Guard32:
		return "CRC-32C"
	case dif.Guard64:
		return "CRC-64/NVME"
	}
	return g.String()
}
