package blockdev

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/keyed"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// SumPolicy says whether a volume keeps a CRC-32C sector checksum per
// block beside its PI tuple.
type SumPolicy uint8

const (
	// SumsAuto keeps sector checksums for 16-bit guards (CRC-16/T10-DIF is
	// weak on 4 KiB blocks) and not for 32- and 64-bit guards.
	SumsAuto SumPolicy = iota
	SumsOn
	SumsOff
)

// Defaults of [CreateOptions].
const (
	DefaultProtectChunk      = 4 << 20
	DefaultProtectCheckpoint = 256 << 20
)

// CreateOptions configure Create. The zero value of each field is its
// default, except Format, which is required.
type CreateOptions struct {
	Options
	// Format is the PI format. Required. The volume keeps tuples apart from
	// the data, so the format's layout is taken as DIX whatever it says, and
	// its metadata size must equal its tuple size (8 or 16 bytes). Type0 (no
	// PI) is refused. Its block size must be a multiple of the device's
	// logical block size and divide the device size.
	Format dif.Format
	// InitialRefTag is the reference tag of block 0 (Types 1 and 2: block
	// i carries InitialRefTag+i; Type 3: every block carries it). It must
	// fit the format's ref tag width. Default 0.
	InitialRefTag uint64
	// AppTag and AppTagMask are the application tag written to every block
	// and the bits of it that reads check. AppTag 0xFFFF (the escape) is
	// refused. Default 0 and 0 (not checked).
	AppTag, AppTagMask uint16
	// SectorSums selects the CRC-32C sector checksums. Default SumsAuto.
	SectorSums SumPolicy
	// ZeroHoles protects the holes of a sparse device (found with
	// SEEK_DATA/SEEK_HOLE) as zero blocks with tuples. Default false: holes
	// are skipped quickly and recorded as unwritten (they read as zeros
	// either way; unwritten blocks take no space in the store).
	ZeroHoles bool
	// ChunkBytes is the size of each read of the protection pass. Default
	// DefaultProtectChunk (4 MiB), at least one block.
	ChunkBytes int
	// CheckpointBytes is how much protection progress may be lost to an
	// interruption: the progress cursor is made durable every
	// CheckpointBytes of device. Default DefaultProtectCheckpoint (256 MiB).
	CheckpointBytes int64
	// Progress, if not nil, is called after every chunk with the bytes of
	// the device covered so far (holes included) and the device size.
	Progress func(done, total int64)
	// Tool names the program that creates the volume, for the manifest.
	// Default "".
	Tool string
	// Parity, if not nil, gives the volume this parity (AddParity) before
	// protecting it, and protect computes it in the same pass, from the
	// data it reads (see parity_protect.go): the image is read once. A
	// resumed protect of a volume that has parity already takes the same
	// spec and opens the file through Options.OpenParity. Stripes that
	// pass does not compute (a resumed protect's first window, a layout
	// whose groups are larger than the pass's 16 MiB windows) are left
	// for ComputeParity.
	Parity *ParitySpec
	// ParityDone, if not nil, is called when protect's pass ends with what
	// it computed of the parity (Computed: stripes encoded and recorded;
	// Recorded: stripes in its windows that had parity already).
	ParityDone func(ParityReport)
}

// Create protects the existing contents of dev: it generates the tuple
// (and sector checksum) of every block and records them, with the manifest,
// as the volume Options.Name in kv, then returns the volume open. The
// device must not change while Create runs.
//
// Create is resumable: its progress is checkpointed in the store, and when
// it is interrupted (error, cancelled ctx, crash) calling it again with the
// same options continues where the last checkpoint left off. Until it has
// completed, Open refuses the volume with ErrIncomplete. Create fails with
// an error matching store.ErrExists if the volume is complete already, and
// with a *MismatchError if an incomplete one was begun with other options.
func Create(ctx context.Context, dev device.Device, kv store.KV, opts CreateOptions) (*Volume, error) {
	if dev == nil || kv == nil {
		return nil, errors.New("blockdev: create volume: nil device or store")
	}
	if opts.Name == "" {
		opts.Name = DefaultVolumeName
	}
	m, err := opts.manifest(dev)
	if err != nil {
		return nil, err
	}
	if err := opts.Options.normalize(m.BlockSize); err != nil {
		return nil, err
	}
	switch {
	case opts.ChunkBytes == 0:
		opts.ChunkBytes = DefaultProtectChunk
	case opts.ChunkBytes < m.BlockSize || opts.ChunkBytes > 1<<30:
		return nil, fmt.Errorf("blockdev: create volume: chunk of %d bytes, want one block (%d) to 1 GiB", opts.ChunkBytes, m.BlockSize)
	}
	switch {
	case opts.CheckpointBytes == 0:
		opts.CheckpointBytes = DefaultProtectCheckpoint
	case opts.CheckpointBytes < 0:
		return nil, fmt.Errorf("blockdev: create volume: negative checkpoint interval %d", opts.CheckpointBytes)
	}

	name := opts.Name
	var next int64
	started := time.Now().UTC()
	mk := m
	var tup *store.Tuples
	if opts.Key != nil {
		// Every tag page is recorded at creation, in an empty run sealed
		// with the page key (store/runs.go).
		pk, kerr := opts.Key.keyManifest(&mk)
		if kerr != nil {
			return nil, kerr
		}
		tup, err = store.CreateKeyedTuples(kv, name, mk, pk)
	} else {
		tup, err = store.CreateTuples(kv, name, mk)
	}
	switch {
	case errors.Is(err, store.ErrExists):
		tup, err = store.OpenTuples(kv, name, &m)
		if mm := (*store.ManifestMismatchError)(nil); errors.As(err, &mm) {
			return nil, &MismatchError{Volume: name, Field: mm.Field, Stored: mm.Stored, Given: mm.Given}
		}
		if err != nil {
			return nil, fmt.Errorf("blockdev: create volume %q: %w", name, err)
		}
		c, cerr := tup.ScrubCursor(protectCursor)
		switch {
		case cerr == nil && c.Pass >= 1:
			return nil, fmt.Errorf("blockdev: create volume %q: %w (protection complete)", name, store.ErrExists)
		case cerr == nil:
			next, started = c.Next, c.Started
		case !errors.Is(cerr, store.ErrNotFound):
			return nil, fmt.Errorf("blockdev: create volume %q: %w", name, cerr)
		}
	case err != nil:
		return nil, fmt.Errorf("blockdev: create volume %q: %w", name, err)
	default:
		if err := tup.SetScrubCursor(protectCursor, store.ScrubCursor{Started: started, Updated: started}, true); err != nil {
			return nil, fmt.Errorf("blockdev: create volume %q: %w", name, err)
		}
	}
	v, err := newVolume(dev, tup, opts.Options)
	if err != nil {
		return nil, err
	}
	if err := v.keyedWritable("create"); err != nil {
		return nil, err
	}
	// A crashed session of a volume being created has no intents, but a
	// volume is only ever opened through recovery.
	if err := v.recover(ctx); err != nil {
		return nil, err
	}
	if opts.Parity != nil {
		if err := v.createParity(ctx, *opts.Parity); err != nil {
			v.closeParity()
			return nil, err
		}
	}
	if err := v.protect(ctx, next, started, &opts); err != nil {
		v.closeParity()
		return nil, err
	}
	if err := v.publishSeal(); err != nil {
		return nil, err
	}
	return v, nil
}

// manifest validates the creation options against dev and returns the
// volume's manifest.
func (o *CreateOptions) manifest(dev device.Device) (store.Manifest, error) {
	bad := func(format string, args ...any) (store.Manifest, error) {
		return store.Manifest{}, fmt.Errorf("blockdev: create volume %q: %s", o.Name, fmt.Sprintf(format, args...))
	}
	if !o.Format.Valid() {
		return bad("no valid PI format given")
	}
	f := o.Format.WithLayout(dif.Separate)
	bs := f.BlockSize()
	switch {
	case f.Type() == dif.Type0:
		return bad("format %s has no protection information (type0)", f)
	case f.MetadataSize() != f.TupleSize():
		return bad("format %s: metadata of %d bytes, the volume keeps only the %d-byte tuple", f, f.MetadataSize(), f.TupleSize())
	case bs%dev.LogicalBlockSize() != 0:
		return bad("format block size %d is not a multiple of the device's %d-byte logical blocks", bs, dev.LogicalBlockSize())
	case dev.Size() <= 0 || dev.Size()%int64(bs) != 0:
		return bad("device size %d is not a positive multiple of the %d-byte block size", dev.Size(), bs)
	case o.AppTag == 0xFFFF:
		return bad("app tag 0xFFFF is the escape value")
	case f.RefTagBits() < 64 && o.InitialRefTag>>f.RefTagBits() != 0:
		return bad("initial ref tag %#x does not fit %d bits", o.InitialRefTag, f.RefTagBits())
	case o.SectorSums > SumsOff:
		return bad("unknown sector sum policy %d", o.SectorSums)
	}
	m := store.NewManifest(f.String(), bs, f.TupleSize(), dev.Size(), o.DeviceID)
	m.InitialRefTag = o.InitialRefTag
	m.AppTag, m.AppTagMask = o.AppTag, o.AppTagMask
	m.Tool = o.Tool
	switch o.SectorSums {
	case SumsOn:
		m.SectorSums = true
	case SumsOff:
		m.SectorSums = false
	}
	return m, nil
}

// protect generates and stores the tuples of blocks [next, blocks),
// checkpointing the protect cursor, and marks the volume complete.
func (v *Volume) protect(ctx context.Context, next int64, started time.Time, o *CreateOptions) error {
	bs, ts := int64(v.bs), v.ts
	chunk := max(1, o.ChunkBytes/v.bs)
	pp := v.newProtectParity(next) // nil: no parity computed in this pass
	if pp != nil {
		defer pp.release()
	}
	var data []byte // protect's own buffer, unless every read goes to pp's windows
	if pp == nil || pp.b0 > next {
		data = device.AlignedBuffer(chunk * v.bs)
	}
	tuples := make([]byte, chunk*ts)
	var sums []uint32
	if v.sums {
		sums = make([]uint32, chunk)
	}
	total := v.Size()
	pos := next
	lastCkpt := pos * bs
	fail := func(err error) error {
		return fmt.Errorf("blockdev: create volume %q: protecting block %d: %w", v.opts.Name, pos, err)
	}
	var ps keyed.ProtectScratch // keyed volumes: protectTags' buffers
	// Tuples go to the store through its bulk loader (sorted tables
	// ingested whole, skipping the write-ahead log), one loader per
	// contiguous run of blocks. A loader's tuples become visible and durable
	// only at Finish, so every checkpoint finishes the loader before it
	// moves the cursor past its blocks; an interruption loses at most what
	// the cursor does not cover, and protect redoes it.
	var ld *store.Loader
	finishLoader := func() error {
		if ld == nil {
			return nil
		}
		err := ld.Finish(true)
		ld = nil
		return err
	}
	defer func() {
		if ld != nil {
			ld.Abort()
		}
	}()
	checkpoint := func(force bool) error {
		if !force && pos*bs-lastCkpt < o.CheckpointBytes {
			return nil
		}
		if err := finishLoader(); err != nil {
			return err
		}
		now := time.Now().UTC()
		if err := v.tup.SetScrubCursor(protectCursor, store.ScrubCursor{Next: pos, Started: started, Updated: now}, true); err != nil {
			return err
		}
		lastCkpt = pos * bs
		if pp != nil {
			// The tuples of every block read are durable: the parity
			// computed from them can be synced and recorded.
			return pp.sync()
		}
		return nil
	}
	// run protects blocks [pos, end): from the device, or as zeros.
	run := func(end int64, zeros bool) error {
		if zeros {
			clear(data)
		}
		for pos < end {
			if err := ctx.Err(); err != nil {
				return errors.Join(err, checkpoint(true))
			}
			n := int(min(int64(chunk), end-pos))
			data := data
			if pp != nil {
				// Read into the parity window (or before the first one,
				// into data).
				var w []byte
				if w, n = pp.buf(pos, n); w != nil {
					data = w
					if zeros {
						clear(data)
					}
				}
			}
			if !zeros {
				if err := v.readDev(data[:n*v.bs], pos, false); err != nil {
					return err
				}
			}
			var s []uint32
			if v.sums {
				s = sums[:n]
			}
			if err := v.generate(data, pos, n, tuples, s); err != nil {
				return err
			}
			if v.tags != nil {
				// A keyed volume commits the tuples with their tags, in
				// one batch: the tag page's MAC seals the tuple page.
				if err := v.protectTags(pos, n, data, tuples[:n*ts], s, &ps); err != nil {
					return err
				}
				pos += int64(n)
				if pp != nil {
					if err := pp.done(pos); err != nil {
						return err
					}
				}
				if err := checkpoint(false); err != nil {
					return err
				}
				if o.Progress != nil {
					o.Progress(pos*bs, total)
				}
				continue
			}
			if ld != nil && ld.Next() != pos {
				if err := finishLoader(); err != nil {
					return err
				}
			}
			if ld == nil {
				var err error
				if ld, err = v.tup.NewLoader(pos); err != nil {
					return err
				}
			}
			if err := ld.Write(tuples[:n*ts], s); err != nil {
				return err
			}
			pos += int64(n)
			if pp != nil {
				if err := pp.done(pos); err != nil {
					return err
				}
			}
			if err := checkpoint(false); err != nil {
				return err
			}
			if o.Progress != nil {
				o.Progress(pos*bs, total)
			}
		}
		return nil
	}
	hole := func(end int64) error {
		if end <= pos {
			return nil
		}
		if o.ZeroHoles {
			return run(end, true)
		}
		if pp != nil {
			if err := pp.skip(pos, end); err != nil {
				return err
			}
		}
		pos = end
		if o.Progress != nil {
			o.Progress(pos*bs, total)
		}
		return nil
	}
	for e, err := range device.DataExtents(v.dev, pos*bs, total) {
		if err != nil {
			return fail(err)
		}
		eb0, eb1 := e.Off/bs, (e.End()+bs-1)/bs
		if err := hole(eb0); err != nil {
			return fail(err)
		}
		if err := run(max(eb1, pos), false); err != nil {
			return fail(err)
		}
	}
	if err := hole(v.blocks); err != nil {
		return fail(err)
	}
	if err := finishLoader(); err != nil {
		return fail(err)
	}
	now := time.Now().UTC()
	if err := v.tup.SetScrubCursor(protectCursor, store.ScrubCursor{Next: v.blocks, Pass: 1, Started: started, Updated: now}, true); err != nil {
		return fail(err)
	}
	if pp != nil {
		if err := pp.sync(); err != nil {
			return fail(err)
		}
		if o.ParityDone != nil {
			o.ParityDone(pp.report())
		}
	}
	return nil
}
