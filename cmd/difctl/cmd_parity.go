package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/parity"
	"github.com/difctl/difctl/store"
	"github.com/spf13/cobra"
)

// parityOptions are the inputs of the parity commands and of protect
// --parity.
type parityOptions struct {
	globalOptions
	Image, Store string
	// Shape is K+M (parity add, protect --parity).
	Shape string
	// Depth is --depth: 0 for the default, -1 for the whole volume.
	Depth int64
	// File is --parity-file: default IMAGE.difpar.
	File string
	// Repair is parity check --repair.
	Repair bool
	// pass, for protect --parity, is what protect's pass computed (nil if
	// no pass ran: protect was complete, or the layout's groups do not fit
	// its windows), and passResumed whether that protect was resumed:
	// parity add then reports the two together.
	pass        *blockdev.ParityReport
	passResumed bool
	// served, if not nil, is the volume of difctl serve, on which a scrub
	// run for a client of its control socket ends with its parity check
	// (checkParity).
	served *served
}

// parityRecord is the outcome of parity add (and protect --parity).
type parityRecord struct {
	header
	Image       string  `json:"image"`
	K           int     `json:"k"`
	M           int     `json:"m"`
	Depth       int64   `json:"depth"`
	Path        string  `json:"path"`
	Stripes     int64   `json:"stripes"`
	Computed    int64   `json:"computed"`    // stripes computed now
	Recorded    int64   `json:"recorded"`    // stripes that had parity already (a resumed run)
	Unprotected int64   `json:"unprotected"` // stripes with a block that does not verify: not computed
	Resumed     bool    `json:"resumed"`
	Seconds     float64 `json:"seconds"`
}

func (*parityRecord) recordType() string { return "parity" }

// parityStatusRecord is the state of an image's parity (parity status,
// parity check, parity remove).
type parityStatusRecord struct {
	header
	Image string `json:"image"`
	inspectParity
	Online  bool   `json:"online"`          // the parity file is open and this volume's
	Error   string `json:"error,omitempty"` // why not
	Removed bool   `json:"removed,omitempty"`
	// parity check: parity blocks that fail their checksum (or cannot be
	// read), rewritten (--repair), and left so.
	Checked   int64 `json:"checked_stripes,omitempty"`
	Damaged   int64 `json:"damaged,omitempty"`
	Rewritten int64 `json:"rewritten,omitempty"`
	Unfixable int64 `json:"unfixable,omitempty"`
}

func (*parityStatusRecord) recordType() string { return "parity_status" }

// parseShape parses K+M.
func parseShape(s string) (k, m int, err error) {
	a, b, ok := strings.Cut(s, "+")
	if ok {
		k, err = strconv.Atoi(a)
		if err == nil {
			m, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || k < 1 || m < 1 || m > k || k+m > parity.MaxShards {
		return 0, 0, usageErrorf("parity %q: want K+M with 1 ≤ M ≤ K and K+M ≤ %d, e.g. 16+2", s, parity.MaxShards)
	}
	return k, m, nil
}

func newParityCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "parity add|remove|status|check IMAGE ...",
		Short: "Manage the Reed-Solomon parity of a protected image: m parity blocks per k data blocks, which heal up to m bad blocks of each stripe",
		Long: `A protected image may keep Reed-Solomon parity in a parity file beside
it (IMAGE.difpar by default): stripes of K data blocks and M parity
blocks, so that up to M failing blocks of a stripe (data or parity) are
rebuilt, for M/K of the space. The PI tuples say which blocks fail, so each
is an erasure. A rebuilt block is used only if it verifies against its
tuple. Every write keeps the parity up to date; reads, scrub --repair and
repair heal from it after the mirror legs and --from sources.

  parity add IMAGE K+M       add parity and compute it (resumes when run again)
  parity remove IMAGE        drop the parity (the file is left as it is)
  parity status IMAGE        the parity and its stripes' health
  parity check IMAGE         read the parity file and check every parity
                             block against its checksum (--repair rewrites
                             the damaged ones)

See docs/parity.md for choosing K+M and the interleave depth.`,
	}
	var o parityOptions
	add := &cobra.Command{
		Use:   "add IMAGE K+M",
		Short: "Add Reed-Solomon parity to a protected image and compute it",
		Long: `Give the protected IMAGE parity of K data and M parity blocks per stripe
(16+2, 8+1, 32+4: M/K of the space; any M failing blocks of a stripe are
rebuilt), in the parity file --parity-file (default IMAGE.difpar, made if
missing), and compute it: every block is read and verified against its
tuple, a stripe at a time. A stripe with a block that does not verify gets
no parity (repair the block, then run parity add again). Interrupted, it
continues where it stopped when run again. --depth interleaves the stripes
so that a run of up to M·depth neighbouring bad blocks is rebuildable.

` + exitCodesHelp(exitOK, exitUncorrected, exitOperational, exitUsage, exitCancelled),
		Example: `  difctl parity add disk.img 16+2
  difctl parity add --parity-file /mnt/other/disk.difpar --depth 1024 disk.img 16+2`,
		Args: exactArgs(2, "IMAGE K+M"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := o
			p.globalOptions, p.Image, p.Shape = *g, args[0], args[1]
			return runParityAdd(cmd.Context(), p, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	add.Flags().StringVar(&o.File, "parity-file", "", "the parity file or device (default IMAGE.difpar)")
	add.Flags().Int64Var(&o.Depth, "depth", 0, "the interleave depth: stripes per group (default 256; 1: no interleave; -1: the whole image)")
	remove := &cobra.Command{
		Use:   "remove IMAGE",
		Short: "Drop the parity of a protected image (the parity file is left as it is)",
		Long: `Drop the parity of the protected IMAGE: its configuration and checksums in
the store. Writes no longer update it, and the parity file is left as it is.

` + exitCodesHelp(exitOK, exitOperational, exitUsage, exitCancelled),
		Args: exactArgs(1, "IMAGE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := o
			p.globalOptions, p.Image = *g, args[0]
			return runParityRemove(cmd.Context(), p, cmd.OutOrStdout())
		},
	}
	status := &cobra.Command{
		Use:   "status IMAGE",
		Short: "Show the parity of a protected image and its stripes' health",
		Long: `Show the parity of the protected IMAGE: K+M, depth, parity file, whether
the file is this image's, and how many stripes have parity (unprotected
ones have none: never computed, or dropped by a write that could not update
them; parity add computes them). The store and the files are only read.

` + exitCodesHelp(exitOK, exitOperational, exitUsage, exitCancelled),
		Args: exactArgs(1, "IMAGE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := o
			p.globalOptions, p.Image = *g, args[0]
			return runParityStatus(cmd.Context(), p, false, cmd.OutOrStdout())
		},
	}
	check := &cobra.Command{
		Use:   "check IMAGE",
		Short: "Check every parity block of a protected image against its checksum",
		Long: `Read the parity file of the protected IMAGE and check every parity block
of each stripe with parity against its checksum in the store. A damaged
parity block is never used to rebuild data; with --repair it is rebuilt
from its stripe's data (which must verify) and written back when the
result matches its checksum.

` + exitCodesHelp(exitOK, exitCorrected, exitUncorrected, exitOperational, exitUsage, exitCancelled),
		Args: exactArgs(1, "IMAGE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := o
			p.globalOptions, p.Image = *g, args[0]
			return runParityStatus(cmd.Context(), p, true, cmd.OutOrStdout())
		},
	}
	check.Flags().BoolVar(&o.Repair, "repair", false, "rewrite the damaged parity blocks")
	for _, c := range []*cobra.Command{add, remove, status, check} {
		storeFlag(c, &o.Store, "")
		addKeyFlags(c, &g.Key, "required for a keyed volume (add, remove, check --repair)")
		cmd.AddCommand(c)
	}
	addProgressJSONFlag(add, g)
	return cmd
}

// parityFileName returns the path the parity file is recorded under: the
// absolute path of arg, or IMAGE.difpar.
func parityFileName(image, arg string) (string, error) {
	if arg == "" {
		arg = image + ".difpar"
	}
	return filepath.Abs(arg)
}

// createParityFile opens the parity file name for writing, creating it
// (sparse) or growing it to size bytes if it is a smaller regular file.
func createParityFile(name string, size int64) (device.Device, error) {
	fi, err := ensureFile(name, size)
	if err != nil {
		return nil, err
	}
	if fi != nil && fi.Mode().IsRegular() && fi.Size() < size {
		if err := os.Truncate(name, size); err != nil {
			return nil, err
		}
	}
	return device.OpenFile(name, device.FileOptions{})
}

func runParityAdd(ctx context.Context, o parityOptions, stdout, stderr io.Writer) error {
	k, m, err := parseShape(o.Shape)
	if err != nil {
		return err
	}
	if o.Depth < parity.WholeVolume {
		return usageErrorf("--depth %d: want a number of stripes, or -1 for the whole image", o.Depth)
	}
	url := storeURL(o.Image, o.Store)
	v, err := openWritable(ctx, o.Image, url, o.Key)
	if err != nil {
		return err
	}
	defer v.Close()
	t0 := time.Now()
	st, has, err := v.vol.Parity()
	if err != nil {
		return fmt.Errorf("%s: %w", o.Image, err)
	}
	rec := &parityRecord{Image: o.Image, K: k, M: m}
	if has {
		// Resume: the same K+M (and depth, if given) only.
		c := st.Config
		if c.Data != k || c.Parity != m || o.Depth != 0 && st.Layout.Depth() != o.Depth && o.Depth != parity.WholeVolume {
			return usageErrorf("%s has parity %d+%d depth %d already (difctl parity remove first)", o.Image, c.Data, c.Parity, c.Depth)
		}
		if o.File != "" {
			if name, err := parityFileName(o.Image, o.File); err != nil || name != c.Path {
				return usageErrorf("%s keeps its parity in %s already (difctl parity remove first)", o.Image, c.Path)
			}
		}
		if !st.Online {
			return fmt.Errorf("%s: parity file %s: %w", o.Image, c.Path, st.Err)
		}
		rec.Resumed = true
	} else {
		name, err := parityFileName(o.Image, o.File)
		if err != nil {
			return err
		}
		spec := blockdev.ParitySpec{Data: k, Parity: m, Depth: o.Depth, Path: name}
		size, err := v.vol.ParityFileSize(spec)
		if err != nil {
			return usageErrorf("parity %d+%d depth %d: %v", k, m, o.Depth, err)
		}
		dev, err := createParityFile(name, size)
		if err != nil {
			return fmt.Errorf("parity file %s: %w", name, err)
		}
		defer dev.Close()
		spec.Dev = dev
		if err := v.vol.AddParity(spec); err != nil {
			return fmt.Errorf("%s: %w", o.Image, err)
		}
	}
	var prog progress = noProgress{}
	var shown int64
	rep, err := v.vol.ComputeParity(ctx, func(done, total int64) {
		if _, ok := prog.(noProgress); ok && (o.ProgressJSON || !o.Quiet && isTerminal(stderr)) {
			prog = newCmdProgress(stderr, o.globalOptions, total, "parity", o.Image)
		}
		prog.Add(done - shown)
		shown = done
	})
	prog.Finish()
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return fmt.Errorf("%s: compute parity: %w", o.Image, err)
	}
	st, _, err = v.vol.Parity()
	if err != nil {
		return fmt.Errorf("%s: %w", o.Image, err)
	}
	if err := v.Close(); err != nil {
		return fmt.Errorf("%s: %w", o.Image, err)
	}
	rec.Depth, rec.Path, rec.Stripes = st.Config.Depth, st.Config.Path, st.Stripes
	if o.pass != nil {
		// The stripes protect's pass computed are recorded by now: they
		// count as computed by this command.
		rep.Computed += o.pass.Computed
		rep.Recorded -= o.pass.Computed
		rec.Resumed = o.passResumed
	}
	rec.Computed, rec.Recorded, rec.Unprotected = rep.Computed, rep.Recorded, rep.Unprotected
	rec.Seconds = time.Since(t0).Seconds()
	out := newOutput(stdout, o.JSON)
	if out.json {
		if err := out.emit(rec); err != nil {
			return err
		}
	} else if !o.Quiet {
		verb := "computed"
		if rec.Resumed {
			verb = "resumed"
		}
		if _, err := fmt.Fprintf(out.w, "%s: parity %d+%d depth %d in %s %s: %d stripes computed, %d had parity, %d unprotected, in %s\n",
			o.Image, k, m, rec.Depth, rec.Path, verb, rep.Computed, rep.Recorded, rep.Unprotected, time.Since(t0).Round(time.Millisecond)); err != nil {
			return err
		}
	}
	if rep.Unprotected > 0 {
		return &integrityError{msg: fmt.Sprintf("%s: %d stripes hold a block that does not verify and have no parity (repair, then difctl parity add again)", o.Image, rep.Unprotected)}
	}
	return nil
}

func runParityRemove(ctx context.Context, o parityOptions, stdout io.Writer) error {
	url := storeURL(o.Image, o.Store)
	var cfg store.ParityConfig
	v, err := openWritable(ctx, o.Image, url, o.Key)
	switch {
	case errors.Is(err, blockdev.ErrParityOffline):
		// The parity file is lost or not this image's: drop the parity
		// from the store alone (nothing writes the image meanwhile: the
		// volume did not open).
		st, err := openStoreTuples(o.Image, url, storeWrite, nil)
		if err != nil {
			return err
		}
		defer st.Close()
		c, has, err := st.t.Parity()
		if err != nil {
			return fmt.Errorf("%s: %w", o.Image, err)
		}
		if !has {
			return usageErrorf("%s has no parity", o.Image)
		}
		if err := st.t.RemoveParity(true); err != nil {
			return fmt.Errorf("%s: remove parity: %w", o.Image, err)
		}
		cfg = c
	case err != nil:
		return err
	default:
		defer v.Close()
		st, has, err := v.vol.Parity()
		if err != nil {
			return fmt.Errorf("%s: %w", o.Image, err)
		}
		if !has {
			return usageErrorf("%s has no parity", o.Image)
		}
		if err := v.vol.RemoveParity(); err != nil {
			return fmt.Errorf("%s: %w", o.Image, err)
		}
		if err := v.Close(); err != nil {
			return fmt.Errorf("%s: %w", o.Image, err)
		}
		cfg = st.Config
	}
	out := newOutput(stdout, o.JSON)
	if out.json {
		return out.emit(&parityStatusRecord{Image: o.Image, inspectParity: inspectParity{K: cfg.Data, M: cfg.Parity, Depth: cfg.Depth, Path: cfg.Path, ID: cfg.ID}, Removed: true})
	}
	_, err = fmt.Fprintf(out.w, "%s: removed parity %d+%d; %s is left as it is\n", o.Image, cfg.Data, cfg.Parity, cfg.Path)
	return err
}

func runParityStatus(ctx context.Context, o parityOptions, check bool, stdout io.Writer) error {
	url := storeURL(o.Image, o.Store)
	readOnly := !(check && o.Repair)
	var v *volume
	var err error
	switch {
	case o.served != nil:
		mode := storeRead
		if !readOnly {
			mode = storeWrite
		}
		v, err = o.served.openVolume(ctx, o.Image, url, readOnly, mode, o.Key)
	case readOnly:
		v, err = openVolume(ctx, o.Image, url, true, o.Key)
	default:
		v, err = openWritable(ctx, o.Image, url, o.Key)
	}
	if err != nil {
		return err
	}
	defer v.Close()
	st, has, err := v.vol.Parity()
	if err != nil {
		return fmt.Errorf("%s: %w", o.Image, err)
	}
	if !has {
		return usageErrorf("%s has no parity (difctl parity add)", o.Image)
	}
	ov, err := blockdev.Inspect(ctx, v.vol.Tuples(), scrubName)
	if err != nil {
		return fmt.Errorf("%s: %w", o.Image, err)
	}
	rec := &parityStatusRecord{Image: o.Image, inspectParity: *inspectParityOf(ov.Parity), Online: st.Online}
	if st.Err != nil {
		rec.Error = oneLine(st.Err.Error())
	}
	var code status
	if check {
		if !st.Online {
			return fmt.Errorf("%s: parity file %s: %w", o.Image, st.Config.Path, st.Err)
		}
		sr, err := v.vol.ScrubParity(ctx, o.Repair)
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("%s: check parity: %w", o.Image, err)
		}
		rec.Checked, rec.Damaged, rec.Rewritten, rec.Unfixable = sr.Stripes, sr.Damaged, sr.Rewritten, sr.Unfixable
		if sr.Rewritten > 0 {
			code.add(exitCorrected)
		}
		if sr.Damaged > sr.Rewritten {
			code.add(exitUncorrected)
		}
	}
	if err := v.Close(); err != nil {
		return fmt.Errorf("%s: %w", o.Image, err)
	}
	out := newOutput(stdout, o.JSON)
	if out.json {
		if err := out.emit(rec); err != nil {
			return err
		}
	} else if !o.Quiet {
		state := "online"
		if !rec.Online {
			state = "offline (" + rec.Error + ")"
		}
		if _, err := fmt.Fprintf(out.w, "%s: parity %s; parity file %s\n", o.Image, parityText(&rec.inspectParity), state); err != nil {
			return err
		}
		if check {
			if _, err := fmt.Fprintf(out.w, "%s: checked the parity of %d stripes: %d damaged parity blocks, %d rewritten, %d left\n",
				o.Image, rec.Checked, rec.Damaged, rec.Rewritten, rec.Damaged-rec.Rewritten); err != nil {
				return err
			}
		}
	}
	return code.err()
}

// checkParity ends a scrub (and difctl repair, a scrub with --repair) of
// an image with parity: every parity block is checked against its
// checksum (parity check), and with o.Repair each damaged one is rewritten
// from its stripe's data (parity check --repair); the exit codes of the
// scrub and the check are combined. Nothing is done after an errors-only
// scrub, a scrub that failed as a whole, for an image with its own PI, or
// when the store cannot be opened here (a server holds it: the server
// ends the scrub it runs for the client with this check itself).
func checkParity(ctx context.Context, o scrubOptions, scrubErr error, stdout io.Writer) error {
	code := classify(scrubErr, true)
	if code&^(exitCorrected|exitUncorrected) != 0 || o.SelfContained || o.ErrorsOnly {
		return scrubErr
	}
	if o.served != nil {
		if _, has, err := o.served.vol.vol.Parity(); err != nil || !has {
			return scrubErr
		}
	} else {
		url := storeURL(o.Image, o.Store)
		st, err := openStoreTuples(o.Image, url, storeRead, nil)
		if err != nil {
			return scrubErr
		}
		_, has, err := st.t.Parity()
		st.Close()
		if err != nil || !has {
			return scrubErr
		}
	}
	perr := runParityStatus(ctx, parityOptions{globalOptions: o.globalOptions, Image: o.Image, Store: o.Store, Repair: o.Repair, served: o.served}, true, stdout)
	pcode := classify(perr, true)
	switch {
	case pcode&^(exitCorrected|exitUncorrected) != 0:
		return perr
	case code|pcode == exitOK:
		return nil
	case scrubErr != nil:
		return &exitError{code: code | pcode, err: cause(scrubErr)}
	}
	return &exitError{code: code | pcode, err: cause(perr)}
}

// cause is what main prints of err: nothing for an *exitError already
// reported, else err.
func cause(err error) error {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.err
	}
	return err
}
