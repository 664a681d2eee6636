package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// discardOptions are the inputs of runDiscard.
type discardOptions struct {
	globalOptions
	Image      string
	Store      string
	LBA, Count int64
}

// discardRecord is the --json result of discard.
type discardRecord struct {
	header
	Image string `json:"image"`
	Store string `json:"store"`
	LBA   int64  `json:"lba"`   // first block discarded
	Count int64  `json:"count"` // blocks discarded
}

func (*discardRecord) recordType() string { return "discard" }

func newDiscardCmd(g *globalOptions) *cobra.Command {
	var (
		blocks blocksFlags
		store  string
	)
	cmd := &cobra.Command{
		Use:   "discard IMAGE --lba N --count M",
		Short: "Discard blocks of a protected image (unwritten from then on)",
		Long: `Discard blocks N to N+M-1 of the protected IMAGE: deallocate them on the
image (a hole; on a block device a discard that reads back as zeros, or
zeros written), mark them unwritten in the store, so that they read back
as zeros and verify as unwritten, not as failures, and close their open
findings. An unwritten block must be zeros on the device: data appearing
there later is reported as "data in unwritten block". The change is
durable when discard returns.

` + exitCodesHelp(exitOK, exitOperational, exitUsage, exitCancelled),
		Example: `  difctl discard disk.img --lba 1024 --count 2048`,
		Args:    exactArgs(1, "IMAGE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			lba, count, _, err := blocks.blocks(true)
			if err != nil {
				return err
			}
			return runDiscard(cmd.Context(), discardOptions{globalOptions: *g, Image: args[0], Store: store,
				LBA: lba, Count: count}, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	blocks.register(cmd, "first block to discard (required)", "number of blocks to discard (required)")
	storeFlag(cmd, &store, "")
	addKeyFlags(cmd, &g.Key, "required to discard blocks of a keyed volume")
	return cmd
}

func runDiscard(ctx context.Context, opts discardOptions, stdout, _ io.Writer) error {
	url := storeURL(opts.Image, opts.Store)
	v, err := openWritable(ctx, opts.Image, url, opts.Key)
	if err != nil {
		return err
	}
	defer v.Close()
	if err := checkLBAs(opts.LBA, opts.Count, v.vol.Blocks()); err != nil {
		return err
	}
	bs := int64(v.vol.BlockSize())
	if err := v.vol.Discard(opts.LBA*bs, opts.Count*bs); err != nil {
		return fmt.Errorf("discard %s: %w", opts.Image, err)
	}
	if err := v.vol.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", opts.Image, err)
	}
	// The discarded blocks' old findings went with their contents.
	if _, err := closeOverwritten(v.vol.Tuples(), opts.LBA, opts.Count); err != nil {
		return fmt.Errorf("%s: closing the findings of the discarded blocks: %w", opts.Image, err)
	}
	if err := v.Close(); err != nil {
		return fmt.Errorf("%s: %w", opts.Image, err)
	}
	out := newOutput(stdout, opts.JSON)
	rec := &discardRecord{Image: opts.Image, Store: url, LBA: opts.LBA, Count: opts.Count}
	if out.json {
		return out.emit(rec)
	}
	_, err = fmt.Fprintf(out.w, "%s: discarded %d blocks, LBA %d to %d\n", opts.Image, opts.Count, opts.LBA, opts.LBA+opts.Count-1)
	return err
}
