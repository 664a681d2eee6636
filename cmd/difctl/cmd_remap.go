package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
	"github.com/spf13/cobra"
)

// remapOptions are the inputs of runRemap.
type remapOptions struct {
	globalOptions
	Image string
	imageSpec
	RefTagSet bool   // --ref-tag was given (a store-backed image checks it against its manifest)
	NewRefTag uint64 // the new ref tag of block 0
	Store     string
}

// remapRecord is the --json result of a remap.
type remapRecord struct {
	header
	Image     string `json:"image"`
	Metadata  string `json:"metadata,omitempty"`
	Store     string `json:"store,omitempty"`
	Format    string `json:"format"`
	OldRefTag string `json:"old_ref_tag"`         // ref tag of block 0 before, hex
	NewRefTag string `json:"new_ref_tag"`         // and after
	Blocks    int64  `json:"blocks"`              // blocks whose tags were rewritten or kept (escaped, unwritten)
	Rewritten int64  `json:"rewritten,omitempty"` // store-backed: tuples whose ref tag was rewritten by this run
	Resumed   bool   `json:"resumed,omitempty"`   // store-backed: an interrupted remap was finished
	Nothing   string `json:"nothing,omitempty"`   // store-backed: why nothing was rewritten: type3, same
}

func (*remapRecord) recordType() string { return "remap" }

func newRemapCmd(g *globalOptions) *cobra.Command {
	var (
		img    imageFlags
		pf     = newPIFlags()
		newRef = uintFlag{bits: 64}
	)
	cmd := &cobra.Command{
		Use:   "remap IMAGE [--interleaved FORMAT | --dix METAFILE --format FORMAT | --store URL] [--ref-tag OLD] --new-ref-tag NEW",
		Short: "Move the ref tags of an image to a new initial value",
		Long: `Rewrite the reference tags of IMAGE so that block 0 carries NEW instead of
OLD (--ref-tag, default 0), as when a partition or an image is copied to a
new offset: block N goes from OLD+N to NEW+N. Data, guards, app and storage
tags are not touched; escaped and unwritten blocks keep their tags.

The whole image is verified with the old tags first (and the other tag
flags); if any block fails, each is reported and nothing is changed (exit
4). The image is then rewritten in place, run by run; for a DIX pair only
the metadata file is written. Types 0 and 3 have no ref-tag sequence.

A protected image (without --interleaved or --dix) keeps its tuples in
its store (default pebble:IMAGE.difdb, --store URL): OLD is the store's
initial ref tag, the image itself is not written. After the verification
the remap is journaled in the store and rewrites the tuples chunk by
chunk; a remap interrupted (Ctrl-C, exit 32, or a crash) leaves the image
unusable, every command refusing it, until difctl remap is run again with
the same NEW, which finishes it. Type 3 images are only verified: their
ref tags are not checked and there is nothing to rewrite.

` + exitCodesHelp(exitOK, exitUncorrected, exitOperational, exitUsage, exitCancelled),
		Example: `  difctl remap --interleaved 512+8 --new-ref-tag 2048 part.dump
  difctl remap --interleaved 512+8:type2 --ref-tag 0x1000 --new-ref-tag 0 disk.dump
  difctl remap --dix disk.md --format 4096+8 --new-ref-tag 0x800 disk.img
  difctl remap --new-ref-tag 2048 disk.img          # protected image: tuples in disk.img.difdb
  difctl remap --store pebble:/var/lib/difctl/sdb --new-ref-tag 0 /dev/sdb`,
		Args: exactArgs(1, "IMAGE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !newRef.set {
				return usageErrorf("--new-ref-tag is required")
			}
			opts := remapOptions{globalOptions: *g, Image: args[0], NewRefTag: newRef.v, Store: img.store}
			if !img.selfContained() {
				if img.format.text != "" {
					return usageErrorf("--format goes with --dix; a protected image's store names its format")
				}
				opts.Params.RefTag, opts.RefTagSet = pf.refTag.v, pf.refTag.set
				return runRemap(cmd.Context(), opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			if img.store != "" {
				return usageErrorf("--store goes with a protected image, not with --interleaved or --dix")
			}
			if err := opts.resolve(&img, pf); err != nil {
				return err
			}
			return runRemap(cmd.Context(), opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	img.register(cmd, true, " of a store-backed image")
	pf.register(cmd, piFormat|piTags|piChecks)
	cmd.Flags().Var(&newRef, "new-ref-tag", "the new ref tag of block 0 (required)")
	addKeyFlags(cmd, &g.Key, "required to remap a keyed volume")
	return cmd
}

func runRemap(ctx context.Context, opts remapOptions, stdout, stderr io.Writer) error {
	if !opts.SelfContained {
		return runRemapStore(ctx, opts, stdout, stderr)
	}
	f := opts.Format
	if t := f.Type(); t != dif.Type1 && t != dif.Type2 {
		return usageErrorf("format %s is %s: its ref tags do not follow the LBA, there is nothing to remap", f, t)
	}
	if b := f.RefTagBits(); b < 64 && opts.NewRefTag>>b != 0 {
		return usageErrorf("--new-ref-tag %#x does not fit the %d-bit ref tag of format %s", opts.NewRefTag, b, f)
	}
	im, err := openPIImage(opts.Image, opts.Meta, f, opts.Params, openWriteMeta)
	if err != nil {
		return err
	}
	defer im.Close()
	f = im.f // in the image's layout
	out := newOutput(stdout, opts.JSON)
	fw := newFindings(out, im.f)
	ext := int64(im.extBlockSize())
	blocks := im.blocks()

	// Pass 1: verify with the old tags; refuse on any failure.
	prog := newProgress(stderr, opts.Quiet, blocks*ext, "verify "+opts.Image)
	t0 := time.Now()
	st, err := checkRange(ctx, im.src, 0, blocks, blockdev.CheckOptions{}, prog, ext, fw.report)
	prog.Finish()
	if err != nil {
		if ctx.Err() != nil {
			return interrupted(ctx, st.Failed)
		}
		return fmt.Errorf("verify %s: %w", im.name(), err)
	}
	if st.Failed > 0 {
		if err := fw.summary(&summaryRecord{Command: "remap", Image: opts.Image, Metadata: opts.Meta, Format: im.f.String()}, st, time.Since(t0)); err != nil && !isIntegrity(err) {
			return err
		}
		return &integrityError{msg: fmt.Sprintf("%s: %d of %d blocks failed verification with the old ref tags: nothing remapped", im.name(), st.Failed, st.Blocks)}
	}

	// Pass 2: rewrite the tags, run by run.
	prog = newProgress(stderr, opts.Quiet, blocks*ext, "remap "+opts.Image)
	per := max(1, checkRunBytes/int(ext))
	data, md := im.runBuffers(per)
	for lba := int64(0); lba < blocks; {
		if ctx.Err() != nil {
			prog.Finish()
			fmt.Fprintf(stderr, "difctl: %s: remap stopped at LBA %d: blocks before it carry the new ref tags (from %#x), the rest the old ones (from %#x)\n",
				im.name(), lba, opts.NewRefTag, opts.Params.RefTag)
			return context.Cause(ctx)
		}
		n := int(min(int64(per), blocks-lba))
		d, m, err := im.read(lba, n, data, md)
		if err == nil {
			p := f.ParamsAt(opts.Params, lba)
			err = f.Remap(d, m, p, f.ParamsAt(dif.Params{RefTag: opts.NewRefTag}, lba).RefTag)
		}
		if err == nil {
			if opts.Meta != "" {
				d = nil // only the metadata changes
			}
			err = im.write(lba, d, m)
		}
		if err != nil {
			prog.Finish()
			return fmt.Errorf("remap %s at LBA %d: %w (blocks before it carry the new ref tags)", im.name(), lba, err)
		}
		prog.Add(int64(n) * ext)
		lba += int64(n)
	}
	prog.Finish()
	if err := im.sync(); err != nil {
		return fmt.Errorf("sync %s: %w", im.name(), err)
	}
	rec := &remapRecord{Image: opts.Image, Metadata: opts.Meta, Format: im.f.String(),
		OldRefTag: hexWidth(0, opts.Params.RefTag, f.RefTagBits()), NewRefTag: hexWidth(0, opts.NewRefTag, f.RefTagBits()), Blocks: blocks}
	if out.json {
		return out.emit(rec)
	}
	_, err = fmt.Fprintf(out.w, "%s: remapped the ref tags of %d blocks (%s): block 0 from 0x%s to 0x%s\n",
		im.name(), blocks, rec.Format, rec.OldRefTag, rec.NewRefTag)
	return err
}

// remapTestHook, from DIFCTL_TEST_REMAP ("chunk=N,delay=D"), makes a
// store-backed remap rewrite N blocks per store commit, sleep D before each
// and print a "remap-step LBA" line on stdout, so that a test can
// interrupt it part-way. Not for users.
func remapTestHook() (chunk int, delay time.Duration, ok bool) {
	s := os.Getenv("DIFCTL_TEST_REMAP")
	if s == "" {
		return 0, 0, false
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "chunk":
			chunk, _ = strconv.Atoi(v)
		case "delay":
			delay, _ = time.ParseDuration(v)
		}
	}
	return chunk, delay, true
}

// runRemapStore remaps the ref tags of a store-backed image: its stored
// tuples and its manifest's initial ref tag. The data is not touched.
func runRemapStore(ctx context.Context, opts remapOptions, stdout, stderr io.Writer) error {
	url := storeURL(opts.Image, opts.Store)
	if _, err := os.Stat(opts.Image); err != nil {
		return asOpenError(err)
	}
	var j *store.Journal
	st, err := openStoreTuples(opts.Image, url, storeWrite, func(kv store.KV) (t *store.Tuples, err error) {
		t, j, err = store.OpenJournaled(kv, blockdev.DefaultVolumeName, nil)
		return t, err
	})
	if err != nil {
		return err
	}
	defer st.Close()
	kv, m, f := st.kv, st.m, st.f
	dev, err := openDevice(opts.Image, true)
	if err != nil {
		return err
	}
	defer dev.Close()
	if err := checkImage(ctx, opts.Image, url, st.t, dev); err != nil {
		return err
	}
	bits := f.RefTagBits()
	switch {
	case opts.RefTagSet && opts.Params.RefTag != m.InitialRefTag && j == nil:
		return usageErrorf("--ref-tag %#x: %s has initial ref tag %#x in %s (leave --ref-tag out)", opts.Params.RefTag, opts.Image, m.InitialRefTag, url)
	case bits < 64 && opts.NewRefTag>>bits != 0:
		return usageErrorf("--new-ref-tag %#x does not fit the %d-bit ref tag of format %s", opts.NewRefTag, bits, displayFormat(m.Format))
	case j != nil && j.Op == store.OpRemap && j.To != opts.NewRefTag:
		return usageErrorf("%s: a remap to %#x is in progress: run difctl remap %s --new-ref-tag %#x to finish it first",
			opts.Image, j.To, opts.Image, j.To)
	}

	out := newOutput(stdout, opts.JSON)
	fw := newFindings(out, f)
	key, err := opts.Key.load()
	if err != nil {
		return err
	}
	w, release, err := opts.Key.openWitness()
	if err != nil {
		return err
	}
	defer release()
	ropts := blockdev.RemapOptions{OnProblem: fw.report, Options: blockdev.Options{Rereads: blockdev.DefaultRereads, Key: key, Witness: w}}
	rp := newRemapProgress(opts, int64(f.BlockSize()), m.Blocks(), stdout, stderr)
	if rp.hook {
		ropts.ChunkBlocks = rp.chunk
	}
	ropts.Progress = rp.update
	t0 := time.Now()
	rep, err := blockdev.RemapVolume(ctx, dev, kv, opts.NewRefTag, ropts)
	rp.prog.Finish()
	var ie *blockdev.IntegrityError
	switch {
	case err != nil && ctx.Err() != nil:
		if rp.phase == "remap" || rep != nil && rep.Resumed {
			fmt.Fprintf(stderr, "difctl: %s: remap stopped at LBA %d of %d; run difctl remap %s --new-ref-tag %#x again to finish (until then the image cannot be opened)\n",
				opts.Image, rp.next, m.Blocks(), opts.Image, opts.NewRefTag)
		}
		var failed int64
		if rep != nil {
			failed = rep.Verified.Failed
		}
		return interrupted(ctx, failed)
	case errors.As(err, &ie):
		if serr := fw.summary(&summaryRecord{Command: "remap", Image: opts.Image, Store: url, Format: displayFormat(m.Format)}, rep.Verified, time.Since(t0)); serr != nil && !isIntegrity(serr) {
			return serr
		}
		what := "nothing remapped"
		if rep.Resumed {
			what = fmt.Sprintf("the remap in progress (done up to LBA %d) is left as it is", rep.ResumedAt)
		}
		return &integrityError{msg: fmt.Sprintf("%s: %d of %d blocks failed verification with the old ref tags: %s", opts.Image, rep.Verified.Failed, rep.Verified.Blocks, what)}
	case err != nil:
		return volumeError(opts.Image, url, err)
	}
	rec := &remapRecord{Image: opts.Image, Store: url, Format: displayFormat(m.Format),
		OldRefTag: hexWidth(0, rep.From, bits), NewRefTag: hexWidth(0, rep.To, bits), Blocks: m.Blocks(),
		Rewritten: rep.Rewritten, Resumed: rep.Resumed, Nothing: rep.Nothing}
	return emitRemapStore(out, rec, rep)
}

// remapProgress shows the progress of a store-backed remap, a bar per
// phase (verify, then remap), and keeps how far the rewrite got; with
// DIFCTL_TEST_REMAP (remapTestHook) it also paces the rewrite for tests.
type remapProgress struct {
	stderr, stdout io.Writer
	quiet          bool
	image          string
	bs             int64 // bytes per block
	prog           progress
	phase          string
	last, next     int64 // blocks done as last reported; first block not rewritten
	chunk          int
	delay          time.Duration
	hook           bool
}

func newRemapProgress(opts remapOptions, bs, blocks int64, stdout, stderr io.Writer) *remapProgress {
	rp := &remapProgress{stderr: stderr, stdout: stdout, quiet: opts.Quiet, image: opts.Image, bs: bs, phase: "verify",
		prog: newProgress(stderr, opts.Quiet, blocks*bs, "verify "+opts.Image)}
	rp.chunk, rp.delay, rp.hook = remapTestHook()
	return rp
}

// update is the remap's RemapOptions.Progress.
func (rp *remapProgress) update(ph string, done, total int64) {
	if ph != rp.phase {
		rp.prog.Finish()
		rp.prog = newProgress(rp.stderr, rp.quiet, total*rp.bs, "remap "+rp.image)
		rp.phase, rp.last = ph, 0
	}
	rp.prog.Add((done - rp.last) * rp.bs)
	rp.last = done
	if ph == "remap" {
		rp.next = done
		if rp.hook && done < total {
			fmt.Fprintf(rp.stdout, "remap-step %d\n", done)
			time.Sleep(rp.delay)
		}
	}
}

// emitRemapStore writes the result of a store-backed remap.
func emitRemapStore(out *output, rec *remapRecord, rep *blockdev.RemapReport) error {
	if out.json {
		return out.emit(rec)
	}
	var err error
	switch rep.Nothing {
	case blockdev.RemapNothingType3:
		_, err = fmt.Fprintf(out.w, "%s: format %s is type3: ref tags are not checked and do not follow the LBA, nothing to rewrite (%d blocks verified)\n",
			rec.Image, rec.Format, rec.Blocks)
	case blockdev.RemapNothingSame:
		_, err = fmt.Fprintf(out.w, "%s: the initial ref tag is 0x%s already: nothing to rewrite (%d blocks verified)\n", rec.Image, rec.NewRefTag, rec.Blocks)
	default:
		resumed := ""
		if rep.Resumed {
			resumed = fmt.Sprintf(", resumed at LBA %d", rep.ResumedAt)
		}
		_, err = fmt.Fprintf(out.w, "%s: remapped the ref tags of %d blocks (%s%s): block 0 from 0x%s to 0x%s, tuples in %s\n",
			rec.Image, rec.Blocks, rec.Format, resumed, rec.OldRefTag, rec.NewRefTag, rec.Store)
	}
	return err
}
