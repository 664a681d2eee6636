package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/parity"
	"github.com/difctl/difctl/blockdev/scrub"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
	"github.com/spf13/cobra"
)

// protectOptions are the inputs of runProtect.
type protectOptions struct {
	globalOptions
	Image string
	Store string // store URL; "" for pebble:IMAGE.difdb
	// FormatText is the format given with --format ("" for none); PI holds
	// the format and tag flags, applied over it or, when the image is
	// being protected already, over the stored manifest.
	FormatText string
	PI         *piFlags
	Rate       int64 // bytes per second, 0 for unlimited
	Checkpoint int64 // bytes of progress an interruption may lose
	// Reprotect deletes the volume's records in the store and protects the
	// data as it is now, with the volume's format, tags and keyed state
	// unless flags change them.
	Reprotect bool
	// DropKey, with Reprotect and the volume's key, protects a keyed
	// volume again without a key.
	DropKey bool
	// DevicePI (--device-pi): IMAGE must be an NVMe namespace with PI
	// that can carry the volume's tuples as its PI (volume_pi.go); with no
	// format given, the volume takes the namespace's.
	DevicePI bool
	// Parity (--parity K+M, with --parity-file and --parity-depth) adds
	// parity, computed in protect's pass over the image (see
	// blockdev.CreateOptions.Parity); runParityAdd then computes what that
	// pass left (a resumed protect's first window) and reports it. When
	// the pass runs, runProtect sets Parity.pass and Parity.passResumed.
	Parity *parityOptions
}

// protectRecord is the --json result of protect.
type protectRecord struct {
	header
	Image     string  `json:"image"`
	Store     string  `json:"store"`
	Format    string  `json:"format"`          // dif text form of the volume (layout dix: tuples apart from the data)
	RefTag    string  `json:"ref_tag"`         // initial ref tag, hex
	AppTag    string  `json:"app_tag"`         // app tag written, hex
	AppMask   string  `json:"app_mask"`        // app tag bits checked, hex
	Blocks    int64   `json:"blocks"`          // blocks of the image
	Bytes     int64   `json:"bytes"`           // image size
	Keyed     bool    `json:"keyed,omitempty"` // a keyed volume (--key-file/--key-env): Poly1305-AES tags beside the tuples
	Resumed   bool    `json:"resumed"`         // an interrupted protect was continued
	Protected bool    `json:"protected"`       // false when the image was protected already and nothing was done
	Seconds   float64 `json:"seconds"`
}

func (*protectRecord) recordType() string { return "protect" }

func newProtectCmd(g *globalOptions) *cobra.Command {
	var (
		pf      = newPIFlags()
		format  formatFlag
		store   string
		rate    rateFlag
		ckpt    = sizeFlag{n: 64 << 20}
		reprot  bool
		dropKey bool
		mirrors []string
		par     parityOptions
		devPI   bool
	)
	cmd := &cobra.Command{
		Use:   "protect IMAGE [flags]",
		Short: "Generate and store the protection information of an image",
		Long: `Protect the existing contents of IMAGE (an image file or a block device):
compute the PI tuple of every block and keep the tuples in a store, by
default the Pebble database IMAGE.difdb beside it (--store pebble:PATH or
mem:). The image itself is only read. verify, scrub and inspect then check
it against the store; write and discard change it through the store.

The format defaults to 512-byte blocks, a 16-bit guard (CRC-16/T10-DIF)
and Type 1, with the tags' initial ref tag 0 and app tag 0 (not checked);
--format or the format flags choose another (--block-size 4096 --guard 64).
Holes of a sparse image are recorded as unwritten blocks, at no cost.

protect is resumable: interrupted (Ctrl-C, exit 32, or a crash), it
continues where it stopped when run again; flags left out then take the
values the interrupted run used, and flags that contradict them are
refused. An image protected already is left as it is. --rate limits the
read rate (100MiB/s) to spare a busy disk.

protect never re-checksums what a store may have protected before: a
store that holds records of the image (tuples, findings, cursors) but not
its manifest, as a damaged store may, is refused, since protecting again
would take the data as it is now, corruption included, for good.
--reprotect is the explicit way to start over: it deletes the image's
records in the store and checksums the data as it is now; use it only on
data known to be good. A store that does not open (damaged files) is
never deleted: move it away by hand.

--mirror LEG (repeatable, up to 3) then adds LEG as a mirror leg and
copies the image to it, as difctl mirror add does: an image file (made
with IMAGE's size if there is none) or a block device. Every write then
reaches each leg, and a failing block is repaired from any leg whose copy
verifies.

--parity K+M then adds Reed-Solomon parity of K data and M parity blocks
per stripe and computes it, as difctl parity add does, in --parity-file
(default IMAGE.difpar): up to M failing blocks of each stripe are rebuilt.
Interrupted, it continues when run again.

A block device needs --store: the default IMAGE.difdb would sit beside the
device node, on /dev (devtmpfs), and be lost at the next reboot. Keep it on
a persistent file system, e.g. --store pebble:/var/lib/difctl/sdb.

The store knows a block device by the stable identifier udev reports for
it (a WWN or serial in /dev/disk/by-id, a partition UUID), and an image
file, or a device without one, by its data: not by its name. Renamed,
reached through a link, or back as another device after a reboot, it is
the same image; another image's store is refused.

` + exitCodesHelp(exitOK, exitOperational, exitUsage, exitCancelled),
		Example: `  difctl protect disk.img
  difctl protect --block-size 4096 --guard 64 --type 1 /dev/sdb --store pebble:/var/lib/difctl/sdb
  difctl protect --format 4096+16:crc32:type3 --app-tag 0x5a5a disk.img
  difctl protect --rate 200MiB/s disk.img`,
		Args: exactArgs(1, "IMAGE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := runProtect(cmd.Context(), protectOptions{
				globalOptions: *g, Image: args[0], Store: store, FormatText: format.text, PI: pf, Rate: rate.n, Checkpoint: int64(ckpt.n),
				Reprotect: reprot, DropKey: dropKey, DevicePI: devPI, Parity: &par,
			}, cmd.OutOrStdout(), cmd.ErrOrStderr()); err != nil {
				return err
			}
			if len(mirrors) > 0 {
				if err := runMirrorAdd(cmd.Context(), mirrorOptions{globalOptions: *g, Image: args[0], Store: store, Legs: mirrors}, cmd.OutOrStdout(), cmd.ErrOrStderr()); err != nil {
					return err
				}
			}
			if par.Shape == "" {
				return nil
			}
			p := par
			p.globalOptions, p.Image, p.Store = *g, args[0], store
			return runParityAdd(cmd.Context(), p, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.Var(&format, "format", "the PI format in the text form (512+8, 4096+16:crc64, ...); the metadata must be the tuple (8 or 16 bytes)")
	pf.register(cmd, piFormat|piTags)
	storeFlag(cmd, &store, "")
	f.Var(&rate, "rate", "limit the read rate, e.g. 100MiB/s (default unlimited)")
	f.Var(&ckpt, "checkpoint", "save progress every `SIZE` of the image: what an interruption may cost")
	addKeyFlags(cmd, &g.Key, "protect as a keyed volume, tamper-evident under the key (see docs/keyed.md)")
	addProgressJSONFlag(cmd, g)
	f.BoolVar(&reprot, "reprotect", false, "delete the image's records in the store (tuples, findings, cursors) and protect the data as it is now, keeping its format, tags and key unless flags change them; only for data known to be good")
	f.StringArrayVar(&mirrors, "mirror", nil, "add `LEG` (an image file, made if missing, or a block device) as a mirror leg and copy the image to it; repeatable, up to 3")
	f.StringVar(&par.Shape, "parity", "", "add Reed-Solomon parity of `K+M` (e.g. 16+2) and compute it (see difctl parity add)")
	f.StringVar(&par.File, "parity-file", "", "with --parity: the parity file or device (default IMAGE.difpar)")
	f.Int64Var(&par.Depth, "parity-depth", 0, "with --parity: the interleave depth (default 256; 1: none; -1: the whole image)")
	f.BoolVar(&devPI, "device-pi", false, "IMAGE must be an NVMe namespace with PI that can carry the volume's tuples (its format, when no format is given; a Type 1 volume's ref tags from 0): the volume's writes then give the device its tuples to check (docs/device-pi.md)")
	f.BoolVar(&dropKey, "drop-key", false, "with --reprotect and the volume's key: protect a keyed volume again without a key")
	return cmd
}

// protectSpec is what a volume is protected with.
type protectSpec struct {
	f               dif.Format
	refTag          uint64
	appTag, appMask uint16
}

// resolveProtect merges the flags over the manifest m of the volume
// being protected already (a resume) or, with reprotect, of the volume
// that was (nil for a new volume): the format and the tags left out are
// m's. A resume refuses flags that contradict m; a reprotect takes them
// as changes.
func resolveProtect(opts protectOptions, m *store.Manifest, reprotect bool) (protectSpec, error) {
	pf := opts.PI
	var s protectSpec
	base := opts.FormatText
	if m != nil && base == "" {
		base = m.Format
	}
	f, err := pf.resolveFormat(base)
	if err != nil {
		return s, err
	}
	s.f = f.WithLayout(dif.Separate)
	p, err := pf.params(s.f)
	if err != nil {
		return s, err
	}
	s.refTag, s.appTag, s.appMask = p.RefTag, p.AppTag, p.AppMask
	if !pf.appTag.set && !pf.appMask.set {
		s.appMask = 0
	}
	if m == nil {
		return s, nil
	}
	if !pf.refTag.set {
		s.refTag = m.InitialRefTag
	}
	if !pf.appTag.set {
		s.appTag = m.AppTag
	}
	if !pf.appTag.set && !pf.appMask.set {
		s.appMask = m.AppTagMask
	}
	if reprotect {
		return s, nil
	}
	mismatch := func(field, stored, given string) error {
		return usageErrorf("%s is protected with %s %s in %s, not %s: leave the flag out, or use another --store",
			opts.Image, field, stored, storeURL(opts.Image, opts.Store), given)
	}
	switch {
	case s.f.String() != m.Format:
		return s, mismatch("format", displayFormat(m.Format), displayFormat(s.f.String()))
	case s.refTag != m.InitialRefTag:
		return s, mismatch("initial ref tag", fmt.Sprintf("%#x", m.InitialRefTag), fmt.Sprintf("%#x", s.refTag))
	case s.appTag != m.AppTag:
		return s, mismatch("app tag", fmt.Sprintf("%#04x", m.AppTag), fmt.Sprintf("%#04x", s.appTag))
	case s.appMask != m.AppTagMask:
		return s, mismatch("app mask", fmt.Sprintf("%#04x", m.AppTagMask), fmt.Sprintf("%#04x", s.appMask))
	}
	return s, nil
}

// check refuses a spec that protects nothing, or an image that is not
// whole blocks of it.
func (s protectSpec) check(image string, size int64) error {
	switch {
	case s.f.Type() == dif.Type0:
		return usageErrorf("type 0 has no protection information: nothing to protect")
	case s.appTag == 0xffff:
		return usageErrorf("--app-tag 0xffff is the escape value: blocks carrying it are never checked")
	case size == 0 || size%int64(s.f.BlockSize()) != 0:
		return fmt.Errorf("%s: size %d is not a positive multiple of the %d-byte block size (truncated, or another --block-size?)", image, size, s.f.BlockSize())
	}
	return nil
}

func runProtect(ctx context.Context, opts protectOptions, stdout, stderr io.Writer) error {
	url := storeURL(opts.Image, opts.Store)
	// The key first: a bad key file must not leave an empty store either.
	key, err := opts.Key.load()
	if err != nil {
		return err
	}
	if err := checkProtectSize(opts); err != nil {
		return err
	}
	// Open the image first: a missing image must not leave an empty store.
	dev, err := openDevice(opts.Image, true)
	if err != nil {
		return err
	}
	defer dev.Close()
	if opts.Store == "" && dev.IsBlockDevice() {
		return usageErrorf("%s is a block device: its default store %s would be on /dev (devtmpfs) and lost at reboot; name a persistent one, e.g. --store pebble:/var/lib/difctl/%s",
			opts.Image, storePath(url), filepath.Base(opts.Image))
	}
	// A namespace with PI (--device-pi) before the store: a device that
	// is none must not leave an empty store.
	var nsFormat string
	if opts.DevicePI {
		if nsFormat, err = devicePIFormat(opts.Image); err != nil {
			return err
		}
	}
	kv, err := openStore(opts.Image, url, storeCreate)
	if err != nil {
		return err
	}
	defer kv.Close()
	prior, key, err := prepareProtect(ctx, opts, url, kv, dev, key)
	if err != nil {
		return err
	}
	if opts.DevicePI && opts.FormatText == "" && prior.Manifest == nil && !opts.PI.formatSet() {
		opts.FormatText = nsFormat
	}
	spec, err := resolveProtect(opts, prior.Manifest, prior.Deleted)
	if err != nil {
		return err
	}
	if opts.DevicePI {
		if err := protectDevicePI(opts.Image, spec.f, dif.Params{RefTag: spec.refTag, AppTag: spec.appTag, AppMask: spec.appMask}); err != nil {
			return err
		}
	}
	if err := spec.check(opts.Image, dev.Size()); err != nil {
		return err
	}
	t0 := time.Now()
	id := deviceID(opts.Image)
	if prior.Resume() {
		id = prior.Manifest.DeviceID // checkImage accepted the image: resume as begun
	}
	w, release, err := opts.Key.openWitness()
	if err != nil {
		return err
	}
	defer release()
	pspec, closeParity, err := protectParity(opts, spec.f.BlockSize(), dev.Size())
	if err != nil {
		return err
	}
	defer closeParity()
	protected, err := protectVolume(ctx, opts, url, kv, dev, blockdev.CreateOptions{
		Options: blockdev.Options{DeviceID: id, Key: key, Witness: w,
			OpenParity: func(path string) (device.Device, error) { return openCopy(ctx, path, false) }},
		Format:          spec.f,
		InitialRefTag:   spec.refTag,
		AppTag:          spec.appTag,
		AppTagMask:      spec.appMask,
		Tool:            toolName,
		CheckpointBytes: opts.Checkpoint,
		Parity:          pspec,
		ParityDone: func(r blockdev.ParityReport) {
			opts.Parity.pass, opts.Parity.passResumed = &r, prior.Resume()
		},
	}, stderr)
	if err != nil {
		return err
	}
	rec := &protectRecord{
		Image: opts.Image, Store: url, Format: displayFormat(spec.f.String()),
		RefTag: hexWidth(0, spec.refTag, spec.f.RefTagBits()), AppTag: hexWidth(0, uint64(spec.appTag), 16),
		AppMask: hexWidth(0, uint64(spec.appMask), 16),
		Blocks:  dev.Size() / int64(spec.f.BlockSize()), Bytes: dev.Size(),
		Resumed: prior.Resume() && protected, Protected: protected, Seconds: time.Since(t0).Seconds(),
		Keyed: key != nil || prior.Resume() && prior.Manifest.Keyed(),
	}
	return emitProtect(newOutput(stdout, opts.JSON), rec)
}

// protectParity returns the parity of --parity for protect's pass (nil
// without it), its file created at its size for an image of size bytes in
// blocks of bs, and the function that closes the file.
func protectParity(opts protectOptions, bs int, size int64) (*blockdev.ParitySpec, func(), error) {
	o := opts.Parity
	if o == nil || o.Shape == "" {
		return nil, func() {}, nil
	}
	k, m, err := parseShape(o.Shape)
	if err != nil {
		return nil, nil, err
	}
	if o.Depth < parity.WholeVolume {
		return nil, nil, usageErrorf("--parity-depth %d: want a number of stripes, or -1 for the whole image", o.Depth)
	}
	name, err := parityFileName(opts.Image, o.File)
	if err != nil {
		return nil, nil, err
	}
	spec := blockdev.ParitySpec{Data: k, Parity: m, Depth: o.Depth, Path: name}
	l, err := blockdev.ParityLayout(spec, bs, size/int64(bs))
	if err != nil {
		return nil, nil, usageErrorf("parity %d+%d depth %d: %v", k, m, o.Depth, err)
	}
	dev, err := createParityFile(name, l.FileSize())
	if err != nil {
		return nil, nil, fmt.Errorf("parity file %s: %w", name, err)
	}
	spec.Dev = dev
	return &spec, func() { dev.Close() }, nil
}

// prepareProtect applies the rules of protecting over what the store
// holds of the image (blockdev.PrepareCreate): a volume it holds is
// resumed if it describes dev, or, with --reprotect, deleted once the key
// is checked. It returns what was found and the key to protect with.
func prepareProtect(ctx context.Context, opts protectOptions, url string, kv store.KV, dev *device.File, key *blockdev.Key) (*blockdev.Prior, *blockdev.Key, error) {
	prior, err := blockdev.PrepareCreate(kv, blockdev.DefaultVolumeName, blockdev.PrepareOptions{
		Reprotect: opts.Reprotect,
		Check: func(t *store.Tuples) error {
			if !opts.Reprotect {
				return checkImage(ctx, opts.Image, url, t, dev)
			}
			// Start over with what the volume was (format, tags, key)
			// unless flags change it; the key is checked before anything
			// goes. The identity is not: --reprotect is the explicit start
			// over, from the data as it is now, and records the image's
			// identity anew.
			m := t.Manifest()
			var err error
			key, err = reprotectKey(opts, &m, key)
			return err
		},
	})
	if err != nil {
		return nil, nil, prepareError(opts.Image, url, err)
	}
	if opts.DropKey && prior.Previous() == nil {
		return nil, nil, usageErrorf("--drop-key goes with --reprotect of a keyed volume")
	}
	return prior, key, nil
}

// protectVolume protects dev as co says, at --rate, showing progress, and
// reports whether it protected anything: false when the image was
// protected already.
func protectVolume(ctx context.Context, opts protectOptions, url string, kv store.KV, dev *device.File, co blockdev.CreateOptions, stderr io.Writer) (bool, error) {
	dev2, err := withRate(dev, opts.Rate)
	if err != nil {
		return false, err
	}
	prog := newCmdProgress(stderr, opts.globalOptions, dev.Size(), "protect", opts.Image)
	co.Progress = byteProgress(prog)
	vol, err := blockdev.Create(ctx, dev2(ctx), kv, co)
	prog.Finish()
	switch {
	case errors.Is(err, store.ErrExists):
		return false, nil
	case err != nil && ctx.Err() != nil:
		fmt.Fprintf(stderr, "difctl: %s: protection stopped; run difctl protect %s again to resume\n", opts.Image, opts.Image)
		return false, context.Cause(ctx)
	case err != nil:
		return false, volumeError(opts.Image, url, err)
	}
	if err := vol.Close(); err != nil {
		return false, fmt.Errorf("%s: %w", opts.Image, err)
	}
	return true, nil
}

// checkProtectSize names an image that cannot hold whole blocks of the
// format given with --format with that block size, not the smallest one
// openDevice checks.
func checkProtectSize(opts protectOptions) error {
	if opts.FormatText == "" || opts.PI == nil {
		return nil
	}
	f, err := opts.PI.resolveFormat(opts.FormatText)
	if err != nil {
		return nil
	}
	if fi, err := os.Stat(opts.Image); err == nil && fi.Mode().IsRegular() && fi.Size()%int64(f.BlockSize()) != 0 {
		return fmt.Errorf("%s: size %d is not a multiple of the %d-byte blocks of format %s (truncated?)", opts.Image, fi.Size(), f.BlockSize(), opts.FormatText)
	}
	return nil
}

// prepareError explains why the store's earlier state of the image keeps
// protect from starting (blockdev.PrepareCreate).
func prepareError(image, url string, err error) error {
	var pe *blockdev.PrepareError
	switch {
	case errors.Is(err, blockdev.ErrLostManifest):
		return &identityError{fmt.Errorf("store %s holds records of %s (tuples, findings or cursors) but no manifest: it may have protected it and lost the manifest, and protecting now would checksum the data as it is now; to start over on data known to be good, run protect --reprotect", url, image)}
	case errors.As(err, &pe) && pe.Op == "delete":
		return storeErr(url, pe.Err)
	case errors.As(err, &pe):
		return volumeError(image, url, pe.Err)
	}
	return err
}

// emitProtect writes the result of protect.
func emitProtect(out *output, rec *protectRecord) error {
	if out.json {
		return out.emit(rec)
	}
	var err error
	switch {
	case !rec.Protected:
		_, err = fmt.Fprintf(out.w, "%s: protected already (%s, %d blocks, store %s): nothing to do\n", rec.Image, rec.Format, rec.Blocks, rec.Store)
	case rec.Resumed:
		_, err = fmt.Fprintf(out.w, "%s: protected %d blocks (%s, resumed), tuples in %s\n", rec.Image, rec.Blocks, formatBytes(rec.Bytes), rec.Store)
	default:
		what := "tuples"
		if rec.Keyed {
			what = "tuples and keyed tags"
		}
		_, err = fmt.Fprintf(out.w, "%s: protected %d blocks (%s), format %s, %s in %s\n", rec.Image, rec.Blocks, formatBytes(rec.Bytes), rec.Format, what, rec.Store)
	}
	return err
}

// reprotectKey is the key a --reprotect of volume m protects with
// (blockdev.ReprotectKey), its refusals in the flags' words.
func reprotectKey(opts protectOptions, m *store.Manifest, key *blockdev.Key) (*blockdev.Key, error) {
	k, err := blockdev.ReprotectKey(blockdev.DefaultVolumeName, m, key, opts.DropKey)
	switch {
	case errors.Is(err, blockdev.ErrNotKeyed):
		return nil, usageErrorf("--drop-key: %s is not keyed", opts.Image)
	case errors.Is(err, blockdev.ErrKeyRequired):
		return nil, usageErrorf("%s is a keyed volume: --reprotect keeps it keyed and needs its key (--key-file or --key-env); to protect it again without a key, add --drop-key with the key", opts.Image)
	case err != nil:
		return nil, fmt.Errorf("%s: --reprotect with a key that is not the volume's: %w", opts.Image, err)
	}
	return k, nil
}

// withRate returns a function giving dev limited to rate bytes per second
// of reads (dev itself when unlimited).
func withRate(dev *device.File, rate int64) (func(ctx context.Context) device.Device, error) {
	if rate <= 0 {
		return func(context.Context) device.Device { return dev }, nil
	}
	l := scrub.NewRateLimiter(rate)
	return func(ctx context.Context) device.Device { return &limitedDevice{File: dev, l: l, ctx: ctx} }, nil
}

// limitedDevice limits the reads of a device; it keeps its data finder so
// that holes are still skipped.
type limitedDevice struct {
	*device.File
	l   *scrub.RateLimiter
	ctx context.Context
}

func (d *limitedDevice) ReadAt(p []byte, off int64) (int, error) {
	if err := d.l.Wait(d.ctx, int64(len(p))); err != nil {
		return 0, err
	}
	return d.File.ReadAt(p, off)
}
