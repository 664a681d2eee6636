package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/scrub"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
	"github.com/spf13/cobra"
)

// scrubOptions are the inputs of runScrub.
type scrubOptions struct {
	globalOptions
	Image string
	imageSpec
	Range       rangeFlag
	Store       string // store URL; "" for pebble:IMAGE.difdb
	Workers     int    // 0: GOMAXPROCS
	Rate        int64  // bytes per second, 0 unlimited
	Restart     bool   // start a new pass instead of resuming
	ErrorsOnly  bool   // recheck only the open findings
	Uncached    bool
	Rereads     int
	Badblocks   string   // file for a badblocks(8) list
	BadblocksBS int      // block size of the list; 0: the image's
	Mapfile     string   // file for a GNU ddrescue mapfile
	Repair      bool     // write verified copies over failing blocks
	From        []string // repair sources (--from)
	metricsOptions
	Control string // --control: a server's control socket; "" for the store's default
	// served, if not nil, is the volume of difctl serve, which runs the
	// scrub for a client of its control socket or on SIGUSR1 (control.go).
	served *served
}

// defaultScrubRereads is --rereads' default.
const defaultScrubRereads = 1

// check refuses the values and combinations of flags a scrub cannot run
// with.
func (o *scrubOptions) check() error {
	switch {
	case o.Workers < 0 || o.Workers > scrub.MaxWorkers:
		return usageErrorf("--workers must be 0 (the number of CPUs) to %d, not %d", scrub.MaxWorkers, o.Workers)
	case o.BadblocksBS != 0 && o.Badblocks == "":
		return usageErrorf("--badblocks-block-size needs --badblocks")
	case o.Rereads < 0:
		return usageErrorf("--rereads must not be negative, not %d", o.Rereads)
	case o.Restart && o.ErrorsOnly:
		return usageErrorf("--restart and --errors-only exclude each other")
	case o.Rate < 0:
		return usageErrorf("--rate must not be negative")
	}
	if o.BadblocksBS != 0 {
		var bs blockSizeFlag
		if err := bs.Set(strconv.Itoa(o.BadblocksBS)); err != nil {
			return usageErrorf("--badblocks-block-size: %v", err)
		}
	}
	return nil
}

// controlRequest is the request of a scrub run by the server holding the
// store (onServer).
func (o scrubOptions) controlRequest() (*controlRequest, error) {
	r, err := newControlRequest("scrub", o.Image, o.Store, o.Control, o.globalOptions)
	if err != nil {
		return nil, err
	}
	r.Range = o.Range.String()
	r.Scrub = &controlScrubArgs{Workers: o.Workers, Rate: o.Rate, Restart: o.Restart, ErrorsOnly: o.ErrorsOnly, Uncached: o.Uncached,
		Rereads: o.Rereads, Badblocks: o.Badblocks, BadblocksBS: o.BadblocksBS, Mapfile: o.Mapfile, Repair: o.Repair}
	if r.From, err = absPaths(o.From); err != nil {
		return nil, err
	}
	for _, f := range []string{o.Badblocks, o.Mapfile} {
		if f != "" {
			r.client.files = append(r.client.files, f)
		}
	}
	if o.MetricsListen != "" && r.client.refuse == nil {
		r.client.refuse = usageErrorf("--metrics-listen: %s is served, and its server runs the scrub: leave out --metrics-listen (serve --metrics-listen exports the server's metrics)", o.Image)
	}
	return r, nil
}

// scrubRecord closes a scrub, after its summary record.
type scrubRecord struct {
	header
	Image      string  `json:"image"`
	Store      string  `json:"store"`               // where the cursor and findings are kept
	Start      int64   `json:"start"`               // the range scrubbed: [start, end)
	End        int64   `json:"end"`                 //
	From       int64   `json:"from"`                // first block this run checked (after start when resumed)
	Next       int64   `json:"next"`                // first block it did not check (end when complete)
	Resumed    bool    `json:"resumed"`             // continued a stopped pass
	Complete   bool    `json:"complete"`            // the pass reached the end
	Pass       uint64  `json:"pass"`                // number of the pass
	ErrorsOnly bool    `json:"errors_only"`         // only open findings were rechecked
	Rechecked  int64   `json:"rechecked,omitempty"` // errors-only: findings rechecked
	Resolved   int64   `json:"resolved,omitempty"`  // open findings that pass now, closed
	StillOpen  int64   `json:"still_open,omitempty"`
	Bytes      int64   `json:"bytes"`               // data bytes checked by this run
	Rate       float64 `json:"bytes_per_second"`    // over the active time
	Badblocks  string  `json:"badblocks,omitempty"` // the badblocks list written
	// BadblocksBlockSize is the unit of the block numbers in the list.
	BadblocksBlockSize int `json:"badblocks_block_size,omitempty"`
	// PassFailed counts the failed blocks of the whole pass: with a
	// resumed scrub, those found before the interruption too (the summary
	// record counts this run's blocks only).
	PassFailed int64  `json:"pass_failed"`
	Mapfile    string `json:"mapfile,omitempty"` // the ddrescue mapfile written
}

func (*scrubRecord) recordType() string { return "scrub" }

func newScrubCmd(g *globalOptions) *cobra.Command {
	var (
		img   imageFlags
		pf    = newPIFlags()
		opts  scrubOptions
		rate  rateFlag
		badBS blockSizeFlag
	)
	cmd := &cobra.Command{
		Use:   "scrub IMAGE [--interleaved FORMAT | --dix METAFILE --format FORMAT] [flags]",
		Short: "Check every block of an image, fsck-style: resumable, rate-limited, parallel",
		Long: `Scrub IMAGE: read and verify every block, with --workers runs in parallel
and at most --rate bytes per second, and report every block that fails,
then a summary (blocks checked, clean, failed by field, unwritten,
transient: failed, then passed when read again).

IMAGE is checked against its store (protect), or carries its own PI with
--interleaved FORMAT or --dix METAFILE, or is an NVMe namespace that
carries PI (--device-pi, or found as verify finds one; its state store
must then be given with --store). Either way the scrub's
cursor and findings are kept in the store, by default IMAGE.difdb
(--store mem: keeps nothing): an interrupted scrub (Ctrl-C, exit 32)
continues where it stopped when run again, unless --restart; its summary
counts this run's blocks, and the line after it (and the exit status) the
failures of the whole pass, those found before the interruption included.
With --errors-only only the blocks of open findings are checked again;
those that pass now are marked rechecked-ok (they stay in the log, as
inspect shows; a write over the whole block, or a discard, closes a
finding).

A scrub writes its store (cursor, findings), so it holds it alone: other
commands on the same store fail meanwhile, naming the scrub's process. The
store must describe IMAGE (size and name): another image's store is
refused (exit 8).

` + servedHelp("scrub") + `

--badblocks FILE writes the failing blocks as a badblocks(8) list, one
block number a line, in units of --badblocks-block-size bytes (default the
image's block size; as badblocks -b). For e2fsck -l give the filesystem's
block size (4096 for most ext4): a block of the list is listed when any of
its bytes is bad (ranges are rounded outward). --mapfile FILE writes a GNU
ddrescue mapfile ('-' for bad ranges). Both are written once the pass is
complete.

Text output lists the first 100 failing blocks, then only counts them:
--json, --badblocks, --mapfile and the store's findings log have them all.

--uncached reads around the page cache, to check the medium rather than a
cached copy.

--from SOURCE names a copy of IMAGE (a backup, a snapshot, another
device), repeatable: a failing block is repairable when the source's copy
of it verifies against the block's stored tuple (guard, tags, sector
checksum and, with the key, the keyed tag). The scrub then says so;
with --repair it writes that copy over the bad block, syncs, reads it back
and records the finding as repaired (see difctl repair).

On an image with parity (difctl parity) a failing block is also
repairable from its stripe, and a pass ends with a check of every parity
block against its checksum (parity check): damaged parity is reported,
and with --repair rewritten from its stripe's data.

` + exitCodesHelp(exitOK, exitCorrected, exitUncorrected, exitOperational, exitUsage, exitCancelled),
		Example: `  difctl scrub disk.img
  difctl scrub --repair --from /backup/disk.img disk.img
  difctl scrub --rate 100MiB/s --workers 2 --badblocks bad.txt /dev/sdb --store pebble:/var/lib/difctl/sdb
  difctl scrub --interleaved 512+8 disk.dump
  difctl scrub --errors-only disk.img
  difctl --json scrub --mapfile disk.map disk.img`,
		Args: exactArgs(1, "IMAGE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o := opts
			o.globalOptions, o.BadblocksBS = *g, badBS.n
			err := runScrubCmd(cmd, o, args[0], &img, pf, rate.n)
			o.Image, o.Store = args[0], img.store
			return checkParity(cmd.Context(), o, err, cmd.OutOrStdout())
		},
	}
	img.register(cmd, true, " for the tuples and the scrub state")
	addDevicePIFlag(cmd, &img)
	pf.register(cmd, piFormat|piTags|piChecks|piRange)
	f := cmd.Flags()
	f.IntVar(&opts.Workers, "workers", 0, "runs checked in parallel (default: the number of CPUs)")
	f.Var(&rate, "rate", "limit the read rate, e.g. 100MiB/s (default unlimited)")
	f.BoolVar(&opts.Restart, "restart", false, "start a new pass instead of resuming a stopped one")
	f.BoolVar(&opts.ErrorsOnly, "errors-only", false, "recheck only the blocks of open findings")
	f.BoolVar(&opts.Uncached, "uncached", false, "read around the page cache")
	f.IntVar(&opts.Rereads, "rereads", defaultScrubRereads, "times a failing block is read again before it is reported (a pass then is transient)")
	f.StringVar(&opts.Badblocks, "badblocks", "", "write the failing blocks to `FILE` as a badblocks(8) list (for e2fsck -l, with --badblocks-block-size)")
	f.Var(&badBS, "badblocks-block-size", "unit of the badblocks list's block numbers, as badblocks -b: the filesystem's block size for e2fsck -l (default: the image's block size); ranges are rounded outward")
	f.StringVar(&opts.Mapfile, "mapfile", "", "write the failing blocks to `FILE` as a GNU ddrescue mapfile")
	f.BoolVar(&opts.Repair, "repair", false, "write over every failing block a copy from a --from source that verifies against its tuple (a keyed volume needs its key)")
	f.StringArrayVar(&opts.From, "from", nil, "a repair source: an image file or block device holding a copy of IMAGE (a backup, a snapshot); repeatable. Without --repair the scrub only says which failing blocks it could repair")
	addKeyFlags(cmd, &g.Key, "check the keyed tags too (without it a keyed volume's tuples are checked and the keyed check skipped)")
	addProgressJSONFlag(cmd, g)
	addMetricsFlag(cmd, &opts.metricsOptions)
	addControlFlag(cmd, &opts.Control)
	return cmd
}

// runScrubCmd completes o with the command line (IMAGE, the image, range,
// rate and store flags), checks it and runs the scrub (scrub, repair).
func runScrubCmd(cmd *cobra.Command, o scrubOptions, image string, img *imageFlags, pf *piFlags, rate int64) error {
	o.Image, o.Range, o.Rate, o.Store = image, pf.rng, rate, img.store
	if err := o.check(); err != nil {
		return err
	}
	if err := o.resolve(img, pf); err != nil {
		return err
	}
	if err := o.resolveDevice(image, img, pf, true); err != nil {
		return err
	}
	if o.Device && o.Store == "" {
		// As protect refuses it: the default store of a block device
		// would be on /dev.
		return usageErrorf("%s is an NVMe namespace with PI: its scrub state needs a store, and the default %s would be on /dev (devtmpfs) and lost at reboot; name a persistent one, e.g. --store pebble:/var/lib/difctl/%s.scrub",
			image, storePath(storeURL(image, "")), filepath.Base(image))
	}
	if err := o.checkRepair(); err != nil {
		return err
	}
	return runScrub(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
}

// checkRepair refuses repair flags that cannot work.
func (o *scrubOptions) checkRepair() error {
	switch {
	case (o.Repair || len(o.From) > 0) && o.SelfContained:
		return usageErrorf("--repair and --from work on protected images (protect), not on images with their own PI")
	case o.Repair && strings.HasPrefix(o.Store, "mem:"):
		return usageErrorf("--repair needs a store that keeps the findings (not --store mem:)")
	}
	return nil
}

func runScrub(ctx context.Context, opts scrubOptions, stdout, stderr io.Writer) error {
	m, err := startMetrics(opts.metricsOptions, opts.Quiet, stderr)
	if err != nil {
		return err
	}
	defer m.close()
	url := storeURL(opts.Image, opts.Store)
	srcs, err := openRepairSources(ctx, opts.From)
	if err != nil {
		return err
	}
	defer srcs.close()
	tg, err := openScrubTarget(ctx, opts, url)
	if err != nil {
		return onServer(ctx, err, opts.served, opts.controlRequest, stdout, stderr)
	}
	defer tg.close()
	start, count, err := opts.Range.bounds(tg.src.Blocks())
	if err != nil {
		return err
	}
	state, err := scrub.NewStoreState(tg.tup, scrubName)
	if err != nil {
		return err
	}
	// The bad blocks of the pass: those a resumed pass found before it
	// stopped come from the findings log, the rest as they are found.
	earlier := &scrub.Earlier{}
	if !opts.Restart && !opts.ErrorsOnly {
		if earlier, err = scrub.LoadEarlier(state, start, start+count); err != nil {
			return fmt.Errorf("store %s: %w", url, err)
		}
	}
	out := newOutput(stdout, opts.JSON)
	fw := newFindings(out, tg.f)
	fw.more = "--json, --badblocks or --mapfile list them all"
	if !strings.HasPrefix(url, "mem:") {
		keeps := fmt.Sprintf("the findings log in %s keeps them (difctl inspect %s)", url, opts.Image)
		fw.more += ", and " + keeps
		fw.log = opts.served.findingsLog(tg.f, keeps)
	}
	prog := &scrubProgress{stderr: stderr, g: opts.globalOptions, image: opts.Image, p: noProgress{}}
	so := scrubEngineOptions(opts, state, start, start+count, prog, func(fd scrub.Finding) error {
		earlier.Bad.AddFinding(fd)
		fw.reportFinding(fd)
		return fw.err
	})
	so.Check.Repair, so.Check.Sources = opts.Repair, srcs.srcs
	m.scrub(&so, filepath.Base(opts.Image), tg.src)
	rep, err := scrub.Run(ctx, tg.src, so)
	prog.p.Finish()
	if errors.Is(err, blockdev.ErrNoCopies) {
		return usageErrorf("%s has no mirror legs: --repair needs a repair source (--from)", opts.Image)
	}
	if err != nil || rep == nil {
		return scrubStopped(ctx, err, rep, tg.name, url, earlier, stderr)
	}
	return reportScrub(opts, url, tg, rep, earlier, fw)
}

// scrubEngineOptions are the options of the scrub engine for a scrub of
// blocks [start, end) with state, reporting its progress to prog and its
// findings to onFinding.
func scrubEngineOptions(opts scrubOptions, state scrub.State, start, end int64, prog *scrubProgress, onFinding func(scrub.Finding) error) scrub.Options {
	so := scrub.Options{
		Start: start, End: end,
		Workers:          opts.Workers,
		Check:            blockdev.CheckOptions{Uncached: opts.Uncached, Rereads: opts.Rereads},
		State:            state,
		Resume:           !opts.Restart,
		ErrorsOnly:       opts.ErrorsOnly,
		OnFinding:        onFinding,
		MaxFindings:      -1,
		Progress:         prog.update,
		ProgressInterval: 200 * time.Millisecond,
	}
	if opts.Rate > 0 {
		so.Limiter = scrub.NewRateLimiter(opts.Rate)
	}
	return so
}

// scrubStopped is the error of a scrub the engine stopped (err, rep as
// scrub.Run returned them): interrupted, it says where it stopped and
// keeps exit bit 4 for the failures of the pass so far; otherwise it
// failed.
func scrubStopped(ctx context.Context, err error, rep *scrub.Report, name, url string, earlier *scrub.Earlier, stderr io.Writer) error {
	switch {
	case err != nil && ctx.Err() != nil && rep == nil:
		return context.Cause(ctx)
	case err != nil && ctx.Err() != nil:
		fmt.Fprintf(stderr, "difctl: %s: scrub stopped at LBA %d of %d; run it again to resume\n", name, rep.Next, rep.End)
		return interrupted(ctx, rep.Failed+earlier.Blocks)
	}
	return storeFailure("scrub "+name, url, err)
}

// reportScrub writes the outcome of a scrub that ran to its end: the
// summary of this run, the lists of the pass's bad blocks once it is
// complete, the scrub record or line; and returns the verdict.
func reportScrub(opts scrubOptions, url string, tg *scrubTarget, rep *scrub.Report, earlier *scrub.Earlier, fw *findings) error {
	srec := &summaryRecord{Command: "scrub", Image: opts.Image, Metadata: opts.Meta, Format: displayFormat(tg.f.String()), Start: rep.From, KeyedCheck: tg.keyed}
	if !opts.SelfContained {
		srec.Store = url
	}
	if vol, ok := tg.src.(*blockdev.Volume); ok {
		if err := checkSeal(vol, srec); err != nil {
			return storeFailure("scrub "+tg.name, url, err)
		}
	}
	// The summary counts the blocks of this run; failures by kind come
	// from the report (complete even for findings not delivered).
	fw.byKind = map[string]int64{}
	for k, n := range rep.Failures {
		fw.byKind[string(k)] = n
	}
	serr := fw.summary(srec, rep.RunStats, rep.Elapsed)
	if serr != nil && !isIntegrity(serr) {
		return serr
	}
	rec := &scrubRecord{Image: opts.Image, Store: url, Start: rep.Start, End: rep.End, From: rep.From, Next: rep.Next,
		Resumed: rep.Resumed, Complete: rep.Complete, Pass: rep.Pass, ErrorsOnly: rep.ErrorsOnly,
		Rechecked: rep.Rechecked, Resolved: rep.Resolved, StillOpen: rep.StillOpen, Bytes: rep.Bytes,
		PassFailed: rep.PassFailed(earlier)}
	if s := rep.Active.Seconds(); s > 0 {
		rec.Rate = float64(rep.Bytes) / s
	}
	if rep.Complete || rep.ErrorsOnly {
		if err := writeBadLists(opts, rec, rep, &earlier.Bad, tg.src); err != nil {
			return err
		}
	}
	text := scrubText(rec, rep, earlier)
	if out := fw.out; out.json {
		if err := out.emit(rec); err != nil {
			return err
		}
	} else if !opts.Quiet {
		fmt.Fprintln(out.w, text)
	}
	opts.served.logLine(text)
	switch {
	case serr == nil && opts.ErrorsOnly && rep.StillOpen > 0:
		serr = &integrityError{msg: fmt.Sprintf("%s: %d findings still failing", tg.name, rep.StillOpen)}
	case serr == nil && rec.PassFailed > 0:
		// Failures found by this pass before it was interrupted.
		serr = &integrityError{msg: fmt.Sprintf("%s: %d blocks of this pass failed verification before the scrub was resumed", tg.name, rec.PassFailed)}
	}
	return withRepairs(serr, rep.Repaired)
}

// withRepairs adds exit bit 1 (errors corrected) to the verdict err of a
// check that repaired blocks: 1 alone when nothing is left failing, 1|4
// when some blocks are.
func withRepairs(err error, repaired int64) error {
	if repaired == 0 {
		return err
	}
	if err == nil {
		return &exitError{code: exitCorrected}
	}
	return &exitError{code: exitCorrected | exitUncorrected, err: err}
}

// scrubTarget is what a scrub checks and where it keeps its state: a
// protected volume, in its own store, or an image with its own PI, in the
// store's volume for it (scrub.ImageStateVolume).
type scrubTarget struct {
	src   blockdev.CheckSource
	tup   *store.Tuples // where the cursor and the findings go
	f     dif.Format    // of the findings, interleaved for a volume
	name  string        // for messages: a DIX pair's two files
	keyed string        // keyed_check of the summary
	close func() error
}

// openScrubTarget opens the image of a scrub and its store (read-write:
// the cursor and the findings are written; created for an image with its
// own PI).
func openScrubTarget(ctx context.Context, opts scrubOptions, url string) (*scrubTarget, error) {
	if !opts.SelfContained {
		// The image is opened read-only unless the scrub repairs.
		v, err := opts.served.openVolume(ctx, opts.Image, url, !opts.Repair, storeWrite, opts.Key) // cursor and findings
		if err != nil {
			return nil, err
		}
		if opts.Repair && v.vol.Keyed() && !v.vol.KeyedChecked() {
			v.Close()
			return nil, keyError(v.image, blockdev.ErrKeyRequired)
		}
		return &scrubTarget{src: v.vol, tup: v.vol.Tuples(), f: v.format().WithLayout(dif.Interleaved), name: opts.Image,
			keyed: keyedState(v.vol), close: v.Close}, nil
	}
	im, err := openImage(opts.Image, opts.imageSpec, openRead)
	if err != nil {
		return nil, err
	}
	kv, err := openStore(opts.Image, url, storeCreate)
	if err != nil {
		im.Close()
		return nil, err
	}
	tg := &scrubTarget{src: im.src, f: im.f, name: im.name(), close: func() error { kv.Close(); return im.Close() }}
	if tg.tup, err = openImageState(kv, url, opts.Image, im.f, im.blocks()); err != nil {
		tg.close()
		return nil, err
	}
	return tg, nil
}

// openImageState opens the volume that keeps the scrub state of an image
// with its own PI in kv (scrub.OpenImageState), the image named by its
// absolute path, and explains a store that keeps another image's.
func openImageState(kv store.KV, url, image string, f dif.Format, blocks int64) (*store.Tuples, error) {
	abs, err := filepath.Abs(image)
	if err != nil {
		abs = image
	}
	t, err := scrub.OpenImageState(kv, f, blocks, abs, toolName)
	var mm *store.ManifestMismatchError
	switch {
	case errors.As(err, &mm) && mm.Field == "format":
		return nil, usageErrorf("%s keeps the scrub state of %s in format %s, not %s (use --store, or delete %s)", url, image, unquote(mm.Stored), unquote(mm.Given), url)
	case errors.As(err, &mm):
		return nil, fmt.Errorf("%s keeps the scrub state of another image: %s is %s there, %s here (use --store, or delete %s)", url, mm.Field, unquote(mm.Stored), unquote(mm.Given), url)
	case err != nil:
		return nil, storeErr(url, err)
	}
	return t, nil
}

// scrubProgress shows a scrub's progress on a terminal, unless --quiet: a
// bar from the scrub's first report, which knows the total.
type scrubProgress struct {
	stderr io.Writer
	g      globalOptions
	image  string
	p      progress
	done   int64
}

// update is the scrub's Options.Progress.
func (s *scrubProgress) update(p scrub.Progress) {
	if _, ok := s.p.(noProgress); ok && p.Total > 0 && (s.g.ProgressJSON || !s.g.Quiet && isTerminal(s.stderr)) {
		s.p = newCmdProgress(s.stderr, s.g, p.Total, "scrub", s.image)
	}
	s.p.Add(p.Done - s.done)
	s.done = p.Done
}

// writeBadLists writes the bad blocks of the pass to the --badblocks and
// --mapfile files, if asked, and names them in rec.
func writeBadLists(opts scrubOptions, rec *scrubRecord, rep *scrub.Report, bad *scrub.BadRanges, src blockdev.CheckSource) error {
	bs := src.BlockSize()
	listBS := bs
	if opts.BadblocksBS != 0 {
		listBS = opts.BadblocksBS
	}
	if opts.Badblocks != "" {
		if err := opts.served.writeFileWith(opts.Badblocks, func(w io.Writer) error {
			return scrub.WriteBadblocks(w, bad.Ranges(), bs, listBS)
		}); err != nil {
			return err
		}
		rec.Badblocks, rec.BadblocksBlockSize = opts.Badblocks, listBS
	}
	if opts.Mapfile != "" {
		if err := opts.served.writeFileWith(opts.Mapfile, func(w io.Writer) error {
			return scrub.WriteMapfile(w, bad.Ranges(), scrub.MapfileOptions{
				BlockSize: bs, Blocks: src.Blocks(), Start: rep.Start, End: rep.End,
				Comments: []string{"Command line: " + commandLine(opts.Args), "Start time: " + time.Now().Add(-rep.Elapsed).Format("2006-01-02 15:04:05")},
			})
		}); err != nil {
			return err
		}
		rec.Mapfile = opts.Mapfile
	}
	return nil
}

// scrubText is the line of text that closes a scrub, after its summary.
func scrubText(rec *scrubRecord, rep *scrub.Report, earlier *scrub.Earlier) string {
	var b strings.Builder
	switch {
	case rep.ErrorsOnly:
		fmt.Fprintf(&b, "errors-only: %d open findings rechecked, %d resolved, %d still failing", rep.Rechecked, rep.Resolved, rep.StillOpen)
	case rep.Resumed:
		fmt.Fprintf(&b, "pass %d resumed at LBA %d, complete", rep.Pass, rep.From)
	default:
		fmt.Fprintf(&b, "pass %d complete", rep.Pass)
	}
	if !rep.ErrorsOnly && rep.Resolved > 0 {
		fmt.Fprintf(&b, ", %d earlier findings resolved", rep.Resolved)
	}
	fmt.Fprintf(&b, ": %s in %s", formatBytes(rep.Bytes), rep.Elapsed.Round(time.Millisecond))
	if rec.Rate > 0 {
		fmt.Fprintf(&b, " (%s/s)", formatBytes(int64(rec.Rate)))
	}
	fmt.Fprintf(&b, "; state in %s", rec.Store)
	if rep.Resumed && earlier.Blocks > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(earlier.Failures)) {
			parts = append(parts, fmt.Sprintf("%s %d", kindName(k), earlier.Failures[k]))
		}
		fmt.Fprintf(&b, "; whole pass: %d blocks failed, %d of them before LBA %d, found before the interruption (%s)",
			rec.PassFailed, earlier.Blocks, rep.From, strings.Join(parts, ", "))
	}
	if rec.Badblocks != "" {
		fmt.Fprintf(&b, "; badblocks list %s", rec.Badblocks)
	}
	if rec.Mapfile != "" {
		fmt.Fprintf(&b, "; mapfile %s", rec.Mapfile)
	}
	return b.String()
}
