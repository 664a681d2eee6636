package main

import (
	"github.com/spf13/cobra"
)

func newRepairCmd(g *globalOptions) *cobra.Command {
	var (
		img     imageFlags
		pf      = newPIFlags()
		opts    scrubOptions
		rate    rateFlag
		control string
	)
	cmd := &cobra.Command{
		Use:   "repair [--from SOURCE]... IMAGE [flags]",
		Short: "Repair every failing block of a protected image from a copy that verifies against its tuples",
		Long: `Repair IMAGE from its mirror legs (difctl mirror) and from each SOURCE,
a copy of it taken at any time (a backup, a snapshot, a replica): an
image file or a block device, with no tuples of its own. Every block of
IMAGE (and of each leg) is read and verified, as scrub does; a block
that fails is taken from the first leg or SOURCE whose copy of it verifies against
the block's stored tuple (guard, app and ref tags, sector checksum and, for
a keyed volume with its key, the keyed tag), written over the bad block,
synced, read back and verified, and its finding recorded as repaired, with
the source.

A copy that does not verify is never written: a stale backup restores only
the blocks it still holds unchanged, and a foreign or damaged one restores
nothing. Blocks with no verifying copy are left as they are, reported, and
recorded unrepairable. Repair is a full scrub pass with --repair (it starts
a new pass, and keeps the same cursor and findings log as scrub); use
scrub --errors-only --repair --from SOURCE to repair only the blocks of
open findings.

A keyed volume is repaired only with its key: without it a copy that
matches the CRCs but not the keyed tag could not be told apart.

An image with parity (difctl parity) is repaired from it too, after the
legs and sources; repair then checks every parity block against its
checksum and rewrites the damaged ones (as parity check --repair does).

` + exitCodesHelp(exitOK, exitCorrected, exitUncorrected, exitOperational, exitUsage, exitCancelled),
		Example: `  difctl repair --from /backup/disk.img disk.img
  difctl --json repair --from /dev/sdc --store pebble:/var/lib/difctl/sdb /dev/sdb`,
		Args: exactArgs(1, "IMAGE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o := opts
			o.globalOptions, o.Repair, o.Restart, o.Control = *g, true, true, control
			err := runScrubCmd(cmd, o, args[0], &img, pf, rate.n)
			o.Image, o.Store = args[0], img.store
			return checkParity(cmd.Context(), o, err, cmd.OutOrStdout())
		},
	}
	img.register(cmd, true, " for the tuples and the findings")
	pf.register(cmd, piRange)
	f := cmd.Flags()
	f.StringArrayVar(&opts.From, "from", nil, "a repair source: an image file or block device holding a copy of IMAGE; repeatable, tried in order")
	f.IntVar(&opts.Workers, "workers", 0, "runs checked in parallel (default: the number of CPUs)")
	f.Var(&rate, "rate", "limit the read rate, e.g. 100MiB/s (default unlimited)")
	f.BoolVar(&opts.Uncached, "uncached", false, "read around the page cache")
	f.IntVar(&opts.Rereads, "rereads", defaultScrubRereads, "times a failing block is read again before it is repaired (a pass then is transient)")
	addKeyFlags(cmd, &g.Key, "the key of a keyed volume (required to repair one)")
	addProgressJSONFlag(cmd, g)
	addControlFlag(cmd, &control)
	return cmd
}
