package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/difctl/difctl/dif"
	"github.com/spf13/cobra"
)

// writeOptions are the inputs of runWrite.
type writeOptions struct {
	globalOptions
	Image  string
	Store  string
	Offset int64
	Input  string // a file, or "-" for Stdin
	Stdin  io.Reader
	// device: IMAGE is an NVMe namespace that carries PI
	// (cmd_write_device.go), written with the tags of devParams.
	device    bool
	devParams dif.Params
	// pi: whether a store-backed IMAGE must be an NVMe namespace with PI
	// of its volume's format (--device-pi with a store; volume_pi.go).
	pi piMode
}

// writeRecord is the --json result of write.
type writeRecord struct {
	header
	Image  string `json:"image"`
	Store  string `json:"store,omitempty"` // none for an NVMe namespace with PI
	Input  string `json:"input"`           // the file, or "-" for standard input
	Offset int64  `json:"offset"`          // byte offset written at
	Bytes  int64  `json:"bytes"`           // bytes written
	// ClosedFindings counts the open findings of the blocks replaced
	// whole, closed by the write.
	ClosedFindings int `json:"closed_findings"`
	// DevicePI: a store-backed image on an NVMe namespace with PI of its
	// format, the volume's tuples written as its PI (volume_pi.go).
	DevicePI bool `json:"device_pi,omitempty"`
}

func (*writeRecord) recordType() string { return "write" }

func newWriteCmd(g *globalOptions, stdin io.Reader) *cobra.Command {
	var (
		offset = uintFlag{bits: 63}
		store  string
		img    imageFlags
		pf     = newPIFlags()
	)
	cmd := &cobra.Command{
		Use:   "write IMAGE --offset N [FILE|-]",
		Short: "Write data into a protected image, through its protection",
		Long: `Write the contents of FILE (standard input when FILE is - or left out) into
the protected IMAGE at byte offset N, through the protected layer: the new
blocks get new tuples in the store, and a crash at any moment leaves every
block verifying against its old or its new contents. A write that covers
part of a block reads and verifies the rest of it first; if that block
fails verification nothing is written (exit 4). The data is durable when
write returns.

An NVMe namespace that carries its own PI (--device-pi, or a block device
with no store: see verify) is written with no store: difctl generates each
block's PI (ref tag from --ref-tag and the LBA, app tag --app-tag) and
sends it with the data through NVMe passthrough with PRACT clear and
PRCHK set, so that the device checks every tuple before it stores it. A
tuple the device refuses (its guard, app tag or ref tag check error) is an
integrity error naming the LBA (exit 4); the blocks before it are written.

A store-backed IMAGE that is an NVMe namespace with PI of its volume's
format is written with the volume's tuples as the device's PI, which the
device checks (on its own; --device-pi with a store requires it, exit 8
otherwise); a tuple it refuses fails the write (exit 4). Writing past the end of the image is refused (exit 16, from a
file or from standard input alike). The open findings of the blocks the
write replaces whole are closed: their failures went with the old data.

` + exitCodesHelp(exitOK, exitUncorrected, exitOperational, exitUsage, exitCancelled),
		Example: `  difctl write disk.img --offset 4096 patch.bin
  difctl write --device-pi /dev/nvme0n1 --offset 0 boot.img
  printf 'hello' | difctl write disk.img --offset 0x200`,
		Args: cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("%s takes IMAGE [FILE|-]", cmd.CommandPath())
			}
			if !offset.set {
				return usageErrorf("--offset is required")
			}
			in := "-"
			if len(args) == 2 {
				in = args[1]
			}
			opts := writeOptions{globalOptions: *g, Image: args[0], Store: store,
				Offset: int64(offset.v), Input: in, Stdin: stdin}
			img.store = store
			var spec imageSpec
			if img.devicePI && (store != "" || storeExists(args[0])) {
				// A store-backed volume on a namespace with PI: the
				// volume's tuples are the device's PI (volume_pi.go).
				if pf.appTag.set || pf.refTag.set {
					return usageErrorf("--app-tag and --ref-tag set the PI of a write to an NVMe namespace with no store; a store-backed image keeps its own")
				}
				opts.pi = piRequired
				return runWrite(cmd.Context(), opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			if err := spec.resolveDevice(args[0], &img, pf, false); err != nil {
				return err
			}
			if !spec.Device && (pf.appTag.set || pf.refTag.set) {
				return usageErrorf("--app-tag and --ref-tag set the PI of a write to an NVMe namespace with PI (--device-pi); a store-backed image keeps its own")
			}
			opts.device, opts.devParams = spec.Device, spec.Params
			return runWrite(cmd.Context(), opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.Var(&offset, "offset", "byte offset in IMAGE to write at (required)")
	storeFlag(cmd, &store, "")
	addDevicePIFlag(cmd, &img)
	f.Var(&pf.refTag, "ref-tag", "with --device-pi: the ref tag of block 0 (Types 1 and 2: block N carries REF+N; default 0, as Linux writes)")
	f.Var(&pf.appTag, "app-tag", "with --device-pi: the app tag written, which the device checks (default 0)")
	addKeyFlags(cmd, &g.Key, "required to write to a keyed volume")
	return cmd
}

func runWrite(ctx context.Context, opts writeOptions, stdout, stderr io.Writer) error {
	if opts.device {
		return runWriteDevice(ctx, opts, stdout, stderr)
	}
	url := storeURL(opts.Image, opts.Store)
	r := opts.Stdin
	if r == nil {
		r = eofReader{}
	}
	size := int64(-1)
	if opts.Input != "-" {
		f, err := os.Open(opts.Input)
		if err != nil {
			return err
		}
		defer f.Close()
		r, size = f, inputSize(f)
	}
	v, err := openWritablePI(ctx, opts.Image, url, opts.Key, opts.pi)
	if err != nil {
		return err
	}
	defer v.Close()
	devSize := v.vol.Size()
	if opts.Offset > devSize || size >= 0 && opts.Offset+size > devSize {
		return usageErrorf("writing %d bytes at offset %d goes past the end of %s (%d bytes)", max(size, 0), opts.Offset, opts.Image, devSize)
	}
	prog := newProgress(stderr, opts.Quiet, size, "write "+opts.Image)
	buf := make([]byte, 1<<20)
	off := opts.Offset
	var werr error
	for werr == nil {
		if ctx.Err() != nil {
			werr = context.Cause(ctx)
			break
		}
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			if off+int64(n) > devSize {
				// A usage error, as for a file whose size says so up front.
				werr = usageErrorf("input goes past the end of %s (%d bytes) at offset %d: the first %d bytes were written", opts.Image, devSize, off, off-opts.Offset)
				break
			}
			if _, err := v.vol.WriteAt(buf[:n], off); err != nil {
				werr = err
				break
			}
			off += int64(n)
			prog.Add(int64(n))
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			werr = fmt.Errorf("read %s: %w", displayName(opts.Input), unwrapPath(rerr))
		}
	}
	prog.Finish()
	// Whatever happened, what was written is made durable.
	serr := v.vol.Sync()
	if werr != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if isIntegrityErr(werr) {
			return &integrityError{msg: "write " + opts.Image, err: werr}
		}
		var ue *usageError
		if errors.As(werr, &ue) {
			return usageErrorf("write %s: %w", opts.Image, ue.err)
		}
		return fmt.Errorf("write %s: %w", opts.Image, werr)
	}
	if serr != nil && isIntegrityErr(serr) {
		// A namespace with PI refused a tuple (volume_pi.go).
		return &integrityError{msg: "write " + opts.Image, err: serr}
	}
	if serr != nil {
		return fmt.Errorf("sync %s: %w", opts.Image, serr)
	}
	// Blocks replaced whole: their old findings are resolved (closed).
	bs := int64(v.vol.BlockSize())
	first, end := (opts.Offset+bs-1)/bs, off/bs
	closed, err := closeOverwritten(v.vol.Tuples(), first, end-first)
	if err != nil {
		return fmt.Errorf("%s: closing the findings of the rewritten blocks: %w", opts.Image, err)
	}
	if err := v.Close(); err != nil {
		return fmt.Errorf("%s: %w", opts.Image, err)
	}
	out := newOutput(stdout, opts.JSON)
	rec := &writeRecord{Image: opts.Image, Store: url, Input: opts.Input, Offset: opts.Offset, Bytes: off - opts.Offset, ClosedFindings: closed, DevicePI: v.pi != nil}
	if out.json {
		return out.emit(rec)
	}
	msg := fmt.Sprintf("%s: wrote %d bytes at offset %d", opts.Image, rec.Bytes, rec.Offset)
	if rec.DevicePI {
		msg += ", with the volume's tuples as the PI the device checked"
	}
	if closed > 0 {
		msg += fmt.Sprintf("; %d findings of the rewritten blocks closed", closed)
	}
	_, err = fmt.Fprintln(out.w, msg)
	return err
}
