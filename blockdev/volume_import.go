package blockdev

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/check"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// Import: an image carrying its own protection information becomes a
// store-backed volume (see volume_export.go for the pair's contract).

// importCheckpointDiscards bounds the unwritten ranges an import keeps in
// memory before it ends a checkpoint early to apply them.
const importCheckpointDiscards = 4096

// ImportOptions configure ImportImage. The zero value of each field is its
// default.
type ImportOptions struct {
	// Options name the volume (Name, DeviceID, stored in the manifest) and
	// tune it once it is open.
	Options
	// Force imports blocks that fail verification with their tuples as they
	// are, so that the volume keeps reporting them; each is reported.
	// Default false: a source with a failing block is refused before
	// anything is written (a first pass verifies it all), and a block
	// failing during the import (the source changed) stops it.
	Force bool
	// SectorSums selects the volume's CRC-32C sector checksums, computed
	// from the imported data (a block whose PI fails keeps failing by its
	// tuple). Default SumsAuto.
	SectorSums SumPolicy
	// RunBytes is the data read per step. Default DefaultConvertRun.
	RunBytes int
	// CheckpointBytes is how much progress an interruption may lose: the
	// device is synced, the tuples loaded and the journal advanced every
	// CheckpointBytes of data. Default DefaultProtectCheckpoint (256 MiB).
	CheckpointBytes int64
	// Progress, if not nil, is called after every run with the data bytes
	// covered so far (from block 0) and the total, for each pass (the
	// verification pass, without Force, then the import).
	Progress func(done, total int64)
	// OnProblem, if not nil, receives every problem found, in LBA order.
	OnProblem func(Problem)
	// Tool names the program that creates the volume, for the manifest.
	Tool string
}

// An ImportSource is an image that carries its own protection
// information, as ImportImage reads it: package blockdev/pisource's
// *Source is one.
type ImportSource interface {
	CheckSource
	// Format is the format the image is verified with, in the image's
	// layout: dif.Interleaved (each block's data followed by its metadata)
	// or dif.Separate (data and metadata apart).
	Format() dif.Format
	// Params are the params of the image's block 0: block lba is verified
	// with them, except that the LBA is lba and, for Types 1 and 2, the
	// expected ref tag is the low RefTagBits of Params().RefTag + lba.
	Params() dif.Params
	// ReadBlocks reads blocks [lba, lba+n) as the image holds them: in the
	// interleaved layout their n sectors of data and metadata into
	// data[:n*(BlockSize+MetadataSize)] (meta is not used), in the separate
	// layout their data into data[:n*BlockSize] and their metadata into
	// meta[:n*MetadataSize].
	ReadBlocks(lba int64, n int, data, meta []byte) error
}

// ImportImage creates the store-backed volume Options.Name in kv over dev
// from src, an image with its own protection information: the data of
// every block is copied to dev and its tuple, as stored in the image (never
// regenerated), becomes the committed tuple after it verified with src's
// format and params (see ImportOptions.Force). Blocks whose tags are all
// ones (unwritten) stay unwritten, with zeros written for their data. The
// volume's manifest takes src's format
// (DIX layout), and its params' RefTag, AppTag and AppMask as the initial
// ref tag and app tag policy. The format's metadata must be the tuple (8 or
// 16 bytes), the storage tag (if any) zero, and dev the size of the image's
// data. ImportImage returns the volume open.
//
// Tuples are loaded in bulk (store.Loader). The import is journaled
// (store.Journal, OpImport): until it completes, every open of the volume
// fails with a *store.InProgressError, and calling ImportImage again with
// the same source and options resumes it from its last checkpoint. It
// fails with an error matching store.ErrExists if the volume exists
// otherwise. Memory is bounded by RunBytes whatever the image's size.
func ImportImage(ctx context.Context, src ImportSource, dev device.Device, kv store.KV, opts ImportOptions) (*Volume, *ConvertReport, error) {
	if src == nil || dev == nil || kv == nil {
		return nil, nil, errors.New("blockdev: import: nil source, device or store")
	}
	if opts.Name == "" {
		opts.Name = DefaultVolumeName
	}
	name := opts.Name
	f, p := src.Format(), src.Params()
	fail := func(format string, args ...any) (*Volume, *ConvertReport, error) {
		return nil, nil, fmt.Errorf("blockdev: import into volume %q: %s", name, fmt.Sprintf(format, args...))
	}
	switch {
	case opts.Key != nil:
		// A keyed volume commits its tuples with their tags, which an
		// import's bulk load cannot (store/keyed.go).
		return nil, nil, fmt.Errorf("blockdev: import into volume %q: %w: import creates no keyed volumes (protect the data with Create and a key)", name, ErrNotKeyed)
	case f.StorageTagBits() > 0 && p.StorageTag != 0:
		return fail("storage tag %#x: a volume checks storage tags against zero", p.StorageTag)
	case dev.Size() != src.Blocks()*int64(src.BlockSize()):
		return fail("device of %d bytes, the image holds %d blocks of %d bytes", dev.Size(), src.Blocks(), src.BlockSize())
	}
	co := CreateOptions{Options: opts.Options, Format: f, InitialRefTag: p.RefTag, AppTag: p.AppTag, AppTagMask: p.AppMask,
		SectorSums: opts.SectorSums, Tool: opts.Tool}
	m, err := co.manifest(dev)
	if err != nil {
		return nil, nil, err
	}
	if err := opts.Options.normalize(m.BlockSize); err != nil {
		return nil, nil, err
	}
	switch {
	case opts.CheckpointBytes == 0:
		opts.CheckpointBytes = DefaultProtectCheckpoint
	case opts.CheckpointBytes < 0:
		return fail("negative checkpoint interval %d", opts.CheckpointBytes)
	}
	per := runBlocksFor(opts.RunBytes, src.BlockSize())
	rep := &ConvertReport{}
	probs := problemList{fn: opts.OnProblem}
	report := func(p Problem) { probs.add("import", p) }

	tup, j, err := store.OpenJournaled(kv, name, &m)
	var mm *store.ManifestMismatchError
	switch {
	case errors.Is(err, store.ErrNotFound):
		if !opts.Force {
			st, err := checkSource(ctx, src, per, opts.Progress, report)
			rep.RunStats = st
			if err != nil {
				return nil, rep, err
			}
			if probs.ie != nil {
				return nil, rep, probs.ie
			}
			rep.RunStats = RunStats{}
		}
		tup, err = store.CreateJournaled(kv, name, m, store.Journal{Op: store.OpImport})
		if err != nil {
			return nil, rep, fmt.Errorf("blockdev: import into volume %q: %w", name, err)
		}
	case errors.As(err, &mm):
		return nil, nil, &MismatchError{Volume: name, Field: mm.Field, Stored: mm.Stored, Given: mm.Given}
	case err != nil:
		return nil, nil, fmt.Errorf("blockdev: import into volume %q: %w", name, err)
	case j == nil:
		return nil, nil, fmt.Errorf("blockdev: import into volume %q: %w", name, store.ErrExists)
	case j.Op != store.OpImport:
		return nil, nil, fmt.Errorf("blockdev: import into volume %q: %w", name, &store.InProgressError{Volume: name, Journal: *j})
	default:
		rep.Resumed, rep.Start, rep.Next = true, j.Next, j.Next
	}
	if err := importBlocks(ctx, src, dev, tup, &opts, per, rep, report, &probs); err != nil {
		return nil, rep, err
	}
	now := time.Now().UTC()
	if err := tup.SetScrubCursor(protectCursor, store.ScrubCursor{Next: src.Blocks(), Pass: 1, Started: now, Updated: now}, true); err != nil {
		return nil, rep, fmt.Errorf("blockdev: import into volume %q: %w", name, err)
	}
	if err := tup.EndJournal(); err != nil {
		return nil, rep, fmt.Errorf("blockdev: import into volume %q: %w", name, err)
	}
	v, err := Open(ctx, dev, kv, opts.Options)
	if err != nil {
		return nil, rep, err
	}
	return v, rep, nil // with Force, failures are in the report
}

// checkSource verifies every block of src, as the first pass of an import.
func checkSource(ctx context.Context, src ImportSource, per int, progress func(done, total int64), report func(Problem)) (RunStats, error) {
	scratch := make([]byte, src.ScratchSize(per))
	var total RunStats
	bs := int64(src.BlockSize())
	for lba, end := int64(0), src.Blocks(); lba < end; {
		n := int(min(int64(per), end-lba))
		st, err := src.CheckRun(ctx, lba, n, scratch, CheckOptions{Rereads: DefaultRereads}, report)
		if err != nil {
			return total, fmt.Errorf("blockdev: import: verifying blocks [%d, %d): %w", lba, lba+int64(n), err)
		}
		total.Add(st)
		lba += int64(n)
		if progress != nil {
			progress(lba*bs, end*bs)
		}
	}
	return total, nil
}

// importBlocks copies blocks [rep.Next, end) of src to dev and tup, one
// checkpoint at a time: data written and synced, tuples bulk-loaded,
// unwritten blocks discarded, then the journal advanced.
func importBlocks(ctx context.Context, src ImportSource, dev device.Device, tup *store.Tuples, opts *ImportOptions, per int,
	rep *ConvertReport, report func(Problem), probs *problemList) error {
	sf := src.Format()
	interleaved := sf.Layout() == dif.Interleaved
	f := sf.WithLayout(dif.Separate)
	bs, ms, ts := f.BlockSize(), f.MetadataSize(), f.TupleSize()
	ip := check.NewImageParams(sf, src.Params())
	blocks := src.Blocks()
	sums := tup.Manifest().SectorSums
	// The run as the image holds it (raw, and rawMD for a separate one),
	// and in the DIX layout (data, md).
	var raw, rawMD, data, md []byte
	if interleaved {
		raw, data, md = make([]byte, per*(bs+ms)), device.AlignedBuffer(per*bs), make([]byte, per*ms)
	} else {
		raw, rawMD = make([]byte, per*bs), make([]byte, per*ms)
	}
	allStates := make([]dif.State, per)
	var sumv []uint32
	if sums {
		sumv = make([]uint32, per)
	}
	ckpt := max(int64(per), opts.CheckpointBytes/int64(bs))
	name := tup.Volume()
	wrap := func(lba int64, err error) error {
		return fmt.Errorf("blockdev: import into volume %q at block %d: %w", name, lba, err)
	}
	chk := blockCheck{f: f} // the image's PI alone: the sums are made here
	var buf [5]Problem
	pos := rep.Next
	for pos < blocks {
		l, err := tup.NewLoader(pos)
		if err != nil {
			return wrap(pos, err)
		}
		var holes []BlockRange
		segEnd := min(blocks, pos+ckpt)
		stopped := false
		for pos < segEnd && len(holes) < importCheckpointDiscards {
			if ctx.Err() != nil {
				stopped = true
				break
			}
			n := int(min(int64(per), segEnd-pos))
			var rd, rm []byte
			if interleaved {
				rd = raw[:n*(bs+ms)]
			} else {
				rd, rm = raw[:n*bs], rawMD[:n*ms]
			}
			if err := src.ReadBlocks(pos, n, rd, rm); err != nil {
				l.Abort()
				return wrap(pos, err)
			}
			d, m := rd, rm
			if interleaved {
				d, m = data[:n*bs], md[:n*ms]
				if err := f.ToSeparate(d, m, rd); err != nil {
					l.Abort()
					return wrap(pos, err)
				}
			}
			states := allStates[:n]
			sum, err := f.Classify(&dif.Classification{States: states}, d, m, ip.At(pos))
			if err != nil {
				l.Abort()
				return wrap(pos, err)
			}
			if sum.Failed > 0 {
				for i, s := range states {
					if s != dif.StateFailed {
						continue
					}
					b := pos + int64(i)
					for _, p := range chk.problems(buf[:0], b, d[i*bs:(i+1)*bs], m[i*ms:(i+1)*ms], ip.At(b), true, 0) {
						report(p)
					}
				}
				if !opts.Force {
					l.Abort()
					return probs.ie
				}
			}
			rep.RunStats.Add(RunStats{Blocks: int64(n), OK: int64(sum.OK), Escaped: int64(sum.Escaped),
				Unwritten: int64(sum.Unwritten), Failed: int64(sum.Failed)})
			if sum.Unwritten > 0 {
				// An unwritten block must be zeros on the device (see
				// ErrUnwrittenData): whatever the dump holds there is not
				// data.
				for i, st := range states {
					if st == dif.StateUnwritten {
						clear(d[i*bs : (i+1)*bs])
					}
				}
			}
			if _, err := dev.WriteAt(d, pos*int64(bs)); err != nil {
				l.Abort()
				return wrap(pos, err)
			}
			rep.Bytes += int64(len(d))
			var s []uint32
			if sums {
				s = sumv[:n]
				if err := dif.SectorSums(s, d, bs); err != nil {
					l.Abort()
					return wrap(pos, err)
				}
			}
			for i, st := range states {
				if st != dif.StateUnwritten {
					continue
				}
				if s != nil {
					s[i] = 0
				}
				b := pos + int64(i)
				if k := len(holes) - 1; k >= 0 && holes[k].End() == b {
					holes[k].N++
				} else {
					holes = append(holes, BlockRange{LBA: b, N: 1})
				}
			}
			// The metadata is the tuple: the run's metadata is its tuples.
			if err := l.Write(m[:n*ts], s); err != nil {
				l.Abort()
				return wrap(pos, err)
			}
			pos += int64(n)
			if opts.Progress != nil {
				opts.Progress(pos*int64(bs), blocks*int64(bs))
			}
		}
		// Checkpoint: data durable, tuples loaded, holes unwritten, then
		// the journal moves on.
		if err := dev.Sync(); err != nil {
			l.Abort()
			return wrap(pos, err)
		}
		if err := l.Finish(true); err != nil {
			return wrap(pos, err)
		}
		for i, h := range holes {
			if err := tup.Discard(h.LBA, h.N, i == len(holes)-1); err != nil {
				return wrap(h.LBA, err)
			}
		}
		if err := tup.AdvanceJournal(pos, true); err != nil {
			return wrap(pos, err)
		}
		rep.Next = pos
		if stopped {
			return ctx.Err()
		}
	}
	return nil
}
