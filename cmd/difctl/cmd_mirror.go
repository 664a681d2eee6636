package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/spf13/cobra"
)

// mirrorOptions are the inputs of the mirror commands and resync.
type mirrorOptions struct {
	globalOptions
	Image string
	Store string
	Legs  []string // mirror add: the new legs; mirror remove: one leg (number or name)
	// Control is resync's --control; served, if not nil, is the volume of
	// difctl serve, which runs the resync for a client of its control
	// socket (control.go).
	Control string
	served  *served
	op      string // the control request's op: "resync" unless set
}

// controlRequest is the request of a resync run by the server holding
// the store (onServer).
func (o mirrorOptions) controlRequest() (*controlRequest, error) {
	op := o.op
	if op == "" {
		op = "resync"
	}
	return newControlRequest(op, o.Image, o.Store, o.Control, o.globalOptions)
}

// legRecord is one copy of a mirrored image (mirror list, inspect).
type legRecord struct {
	header
	Image       string `json:"image"`
	Leg         int    `json:"leg"`            // 0: the image itself
	Name        string `json:"name,omitempty"` // the mirror leg's path
	Online      bool   `json:"online"`         // opened, and written with every write
	StaleBlocks int64  `json:"stale_blocks"`   // blocks it may hold stale (resync)
	StaleAll    bool   `json:"stale_all,omitempty"`
	StaleSince  string `json:"stale_since,omitempty"` // RFC 3339
	Error       string `json:"error,omitempty"`       // why it is offline
}

func (*legRecord) recordType() string { return "leg" }

// resyncRecord is the outcome of a resync (also of mirror add and
// protect --mirror).
type resyncRecord struct {
	header
	Image        string  `json:"image"`
	Legs         []int   `json:"legs"`          // the legs resynced
	Blocks       int64   `json:"blocks"`        // stale blocks looked at
	Copied       int64   `json:"copied"`        // blocks written to the legs
	Failed       int64   `json:"failed"`        // blocks no leg holds a verified copy of: still stale
	BytesRead    int64   `json:"bytes_read"`    //
	BytesWritten int64   `json:"bytes_written"` //
	Resumed      bool    `json:"resumed"`       // continued an interrupted resync
	Seconds      float64 `json:"seconds"`
}

func (*resyncRecord) recordType() string { return "resync" }

func newMirrorCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mirror add|remove|list IMAGE ...",
		Short: "Manage the mirror legs of a protected image: copies that every write reaches and every failing block is repaired from",
		Long: `A protected image may have 1 to 3 mirror legs: image files or block
devices that hold a copy of its data. Every write goes to each leg; a read
verifies the copy it reads and repairs a failing block from any leg whose
copy verifies against the block's tuple, so the reader sees no error;
scrub and verify check every leg. A leg whose write fails goes offline and
records the blocks it missed ("stale"), for resync to copy back.

  mirror add IMAGE LEG...     add legs (a new file of IMAGE's size is made
                              if LEG does not exist) and copy the data
  mirror remove IMAGE LEG     remove leg LEG (its number, or its path)
  mirror list IMAGE           the legs and their states`,
	}
	var store, control string
	add := &cobra.Command{
		Use:   "add IMAGE LEG...",
		Short: "Add mirror legs to a protected image and copy its data to them",
		Long: `Add each LEG (an image file, made with IMAGE's size if it does not exist,
or a block device of IMAGE's size) as a mirror leg of the protected IMAGE,
then copy IMAGE's data to it, every block verified before it is written
(a resync of the new legs). The store records the legs by absolute path;
every command that opens IMAGE opens them.

` + exitCodesHelp(exitOK, exitUncorrected, exitOperational, exitUsage, exitCancelled),
		Example: `  difctl mirror add disk.img /mnt/other/disk-mirror.img`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usageErrorf("%s takes IMAGE LEG..., got %d argument(s)", cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runMirrorAdd(cmd.Context(), mirrorOptions{globalOptions: *g, Image: args[0], Store: store, Legs: args[1:]}, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	remove := &cobra.Command{
		Use:   "remove IMAGE LEG",
		Short: "Remove a mirror leg of a protected image (its data is left as it is)",
		Long: `Remove mirror leg LEG (its number, as mirror list shows it, or its path)
of the protected IMAGE: it is written no more, and its data is left as it
is. The image itself must be in sync (resync first).

` + exitCodesHelp(exitOK, exitOperational, exitUsage, exitCancelled),
		Example: `  difctl mirror remove disk.img 2`,
		Args:    exactArgs(2, "IMAGE LEG"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runMirrorRemove(cmd.Context(), mirrorOptions{globalOptions: *g, Image: args[0], Store: store, Legs: args[1:]}, cmd.OutOrStdout())
		},
	}
	list := &cobra.Command{
		Use:   "list IMAGE",
		Short: "List the copies of a protected image and their states",
		Long: `List the copies of the protected IMAGE: leg 0, the image itself, and its
mirror legs, each online or offline (and why), in sync or stale (how many
blocks, since when). The store is only read. Of an image that difctl
serve serves, the server answers, through its control socket, with the
legs' states as it sees them.

` + exitCodesHelp(exitOK, exitOperational, exitUsage, exitCancelled),
		Example: `  difctl --json mirror list disk.img`,
		Args:    exactArgs(1, "IMAGE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o := mirrorOptions{globalOptions: *g, Image: args[0], Store: store, Control: control, op: "mirror-list"}
			return runMirrorList(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addControlFlag(list, &control)
	for _, c := range []*cobra.Command{add, remove, list} {
		storeFlag(c, &store, "")
		addKeyFlags(c, &g.Key, "required for a keyed volume (add, remove)")
		cmd.AddCommand(c)
	}
	return cmd
}

func newResyncCmd(g *globalOptions) *cobra.Command {
	var store, control string
	cmd := &cobra.Command{
		Use:   "resync IMAGE",
		Short: "Bring the stale mirror legs of a protected image back",
		Long: `Copy to every stale mirror leg of IMAGE (one that missed writes while it
was offline, or a new one) the blocks it needs: only its stale blocks are
read, from a leg that holds them fresh and verified against their tuples,
and only those whose copy on the leg differs are written. A block that
no leg holds a verified copy of is not written, and stays stale. An
interrupted resync continues where it stopped when run again. Of an image
that difctl serve serves, the server runs the resync, through its control
socket, while it serves.

` + exitCodesHelp(exitOK, exitUncorrected, exitOperational, exitUsage, exitCancelled),
		Example: `  difctl resync disk.img`,
		Args:    exactArgs(1, "IMAGE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o := mirrorOptions{globalOptions: *g, Image: args[0], Store: store, Control: control}
			return runResync(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	storeFlag(cmd, &store, "")
	addKeyFlags(cmd, &g.Key, "required for a keyed volume")
	addProgressJSONFlag(cmd, g)
	addControlFlag(cmd, &control)
	return cmd
}

// runResync resyncs the stale legs of the image: opened here, or served
// (o.served), or, when a server holds its store, by that server.
func runResync(ctx context.Context, o mirrorOptions, stdout, stderr io.Writer) error {
	url := storeURL(o.Image, o.Store)
	v, err := o.served.openVolume(ctx, o.Image, url, false, storeWrite, o.Key)
	if err != nil {
		return onServer(ctx, err, o.served, o.controlRequest, stdout, stderr)
	}
	defer v.Close()
	if v.vol.Keyed() && !v.vol.KeyedChecked() {
		return keyError(v.image, blockdev.ErrKeyRequired)
	}
	if v.vol.Legs() == nil {
		return usageErrorf("%s has no mirror legs (difctl mirror add)", o.Image)
	}
	return resync(ctx, o, v, stdout, stderr)
}

func runMirrorAdd(ctx context.Context, opts mirrorOptions, stdout, stderr io.Writer) error {
	url := storeURL(opts.Image, opts.Store)
	v, err := openWritable(ctx, opts.Image, url, opts.Key)
	if err != nil {
		return err
	}
	defer v.Close()
	var devs []device.Device
	defer func() {
		for _, d := range devs {
			d.Close()
		}
	}()
	for _, arg := range opts.Legs {
		name, err := legName(arg)
		if err != nil {
			return err
		}
		dev, err := createLeg(ctx, name, v.vol.Size())
		if err != nil {
			return fmt.Errorf("mirror leg %s: %w", arg, err)
		}
		devs = append(devs, dev)
		if err := v.vol.AddMirror(blockdev.Mirror{Name: name, Dev: dev}); err != nil {
			return fmt.Errorf("%s: add mirror leg %s: %w", opts.Image, arg, err)
		}
	}
	if err := resync(ctx, opts, v, stdout, stderr); err != nil {
		return err
	}
	return v.Close()
}

// resync resyncs the stale legs of v and reports it.
func resync(ctx context.Context, opts mirrorOptions, v *volume, stdout, stderr io.Writer) error {
	var prog progress = noProgress{}
	var shown int64
	bs := int64(v.vol.BlockSize())
	t0 := time.Now()
	rep, err := v.vol.Resync(ctx, blockdev.ResyncOptions{Rereads: blockdev.DefaultRereads, Progress: func(done, total int64) {
		if _, ok := prog.(noProgress); ok && (opts.ProgressJSON || !opts.Quiet && isTerminal(stderr)) {
			prog = newCmdProgress(stderr, opts.globalOptions, total*bs, "resync", opts.Image)
		}
		prog.Add((done - shown) * bs)
		shown = done
	}})
	prog.Finish()
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return fmt.Errorf("resync %s: %w", opts.Image, err)
	}
	rec := &resyncRecord{Image: opts.Image, Legs: rep.Legs, Blocks: rep.Blocks, Copied: rep.Copied, Failed: rep.Failed,
		BytesRead: rep.BytesRead, BytesWritten: rep.BytesWritten, Resumed: rep.Resumed, Seconds: time.Since(t0).Seconds()}
	if rec.Legs == nil {
		rec.Legs = []int{}
	}
	out := newOutput(stdout, opts.JSON)
	if out.json {
		if err := out.emit(rec); err != nil {
			return err
		}
	} else if !opts.Quiet {
		if _, err := fmt.Fprintf(out.w, "%s: resynced legs %v: %d stale blocks looked at, %d copied, %d failed; read %s, wrote %s in %s\n",
			opts.Image, rec.Legs, rep.Blocks, rep.Copied, rep.Failed, formatBytes(rep.BytesRead), formatBytes(rep.BytesWritten),
			time.Since(t0).Round(time.Millisecond)); err != nil {
			return err
		}
	}
	if rep.Failed > 0 {
		return &integrityError{msg: fmt.Sprintf("%s: %d blocks have no copy that verifies: still stale on the legs resynced", opts.Image, rep.Failed)}
	}
	return nil
}

func runMirrorRemove(ctx context.Context, opts mirrorOptions, stdout io.Writer) error {
	url := storeURL(opts.Image, opts.Store)
	v, err := openWritable(ctx, opts.Image, url, opts.Key)
	if err != nil {
		return err
	}
	defer v.Close()
	legs := v.vol.Legs()
	leg := -1
	if n, err := strconv.Atoi(opts.Legs[0]); err == nil {
		leg = n
	} else if name, err := legName(opts.Legs[0]); err == nil {
		for _, l := range legs {
			if l.Leg > 0 && l.Name == name {
				leg = l.Leg
			}
		}
	}
	if leg < 1 || leg >= len(legs) {
		return usageErrorf("%s has no mirror leg %s (difctl mirror list %s)", opts.Image, opts.Legs[0], opts.Image)
	}
	name := legs[leg].Name
	if err := v.vol.RemoveMirror(leg); err != nil {
		return fmt.Errorf("%s: %w", opts.Image, err)
	}
	if err := v.Close(); err != nil {
		return fmt.Errorf("%s: %w", opts.Image, err)
	}
	out := newOutput(stdout, opts.JSON)
	if out.json {
		return out.emit(&legRecord{Image: opts.Image, Leg: leg, Name: name})
	}
	_, err = fmt.Fprintf(out.w, "%s: removed mirror leg %d (%s); its data is left as it is\n", opts.Image, leg, name)
	return err
}

func runMirrorList(ctx context.Context, opts mirrorOptions, stdout, stderr io.Writer) error {
	url := storeURL(opts.Image, opts.Store)
	v, err := opts.served.openVolume(ctx, opts.Image, url, true, storeRead, opts.Key)
	if err != nil {
		return onServer(ctx, err, opts.served, opts.controlRequest, stdout, stderr)
	}
	defer v.Close()
	out := newOutput(stdout, opts.JSON)
	legs := v.vol.Legs()
	if legs == nil {
		if out.json {
			return nil
		}
		_, err := fmt.Fprintf(out.w, "%s: no mirror legs\n", opts.Image)
		return err
	}
	for _, l := range legs {
		rec := legRecordOf(opts.Image, l)
		if out.json {
			if err := out.emit(rec); err != nil {
				return err
			}
			continue
		}
		if _, err := fmt.Fprintln(out.w, legText(rec)); err != nil {
			return err
		}
	}
	return nil
}

// legRecordOf is the record of a leg's state.
func legRecordOf(image string, l blockdev.LegStatus) *legRecord {
	rec := &legRecord{Image: image, Leg: l.Leg, Name: l.Name, Online: l.Online, StaleBlocks: l.StaleBlocks, StaleAll: l.All}
	if !l.StaleSince.IsZero() {
		rec.StaleSince = l.StaleSince.UTC().Format(time.RFC3339)
	}
	if l.Err != nil {
		var le *blockdev.LegError
		if errors.As(l.Err, &le) {
			rec.Error = oneLine(le.Err.Error())
		} else {
			rec.Error = oneLine(l.Err.Error())
		}
	}
	return rec
}

// legText is a leg's line of text.
func legText(r *legRecord) string {
	name := r.Name
	if r.Leg == 0 {
		name = r.Image + " (the image)"
	}
	state := "online"
	if !r.Online {
		state = "offline"
		if r.Error != "" {
			state += " (" + r.Error + ")"
		}
	}
	switch {
	case r.StaleAll:
		state += ", stale: every block (resync)"
	case r.StaleBlocks > 0:
		state += fmt.Sprintf(", stale: %d blocks since %s (resync)", r.StaleBlocks, r.StaleSince)
	default:
		state += ", in sync"
	}
	return fmt.Sprintf("leg %d: %s: %s", r.Leg, name, state)
}
