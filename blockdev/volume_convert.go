package blockdev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/store"
)

// Export and import: a store-backed volume to and from an image that
// carries its own protection information (an extended-LBA image or a DIX
// pair), so that a volume's PI can be handed to a PI-formatted drive
// (nvme write --metadata) and a dump of one can become a volume.
//
// Both move tuples as they are stored, never recomputed from the data: an
// export writes the committed tuple of every block, an import stores the
// image's tuples. Both verify every block on the way. Blocks never written
// (or discarded) stay so: an export writes them as zero data with the
// unwritten tuple (app, storage and ref tags all ones, guard zero), an
// import leaves them unwritten in the store and writes zeros for their data
// (an unwritten block must be zeros, see ErrUnwrittenData).

// DefaultConvertRun is the data size of each run of an export or import
// unless the options say otherwise.
const DefaultConvertRun = 1 << 20

// ConvertReport is the outcome of ExportVolume or ImportImage.
type ConvertReport struct {
	// RunStats counts the blocks verified by outcome.
	RunStats
	// Start is the first block converted by this call (after an
	// interrupted import, where it resumed); Next the first block it did
	// not convert (the number of blocks when complete).
	Start, Next int64
	// Bytes is the bytes written: the image (export), the device (import).
	Bytes int64
	// Resumed: an interrupted import was continued.
	Resumed bool
}

// problemList collects the problems of a conversion for its
// *IntegrityError and passes them on.
type problemList struct {
	ie   *IntegrityError
	last int64
	fn   func(Problem)
}

func (l *problemList) add(op string, p Problem) {
	if l.fn != nil {
		l.fn(p)
	}
	if p.Transient {
		return
	}
	if l.ie == nil {
		l.ie = &IntegrityError{Op: op, LBA: p.LBA}
		l.last = -1
	}
	if p.LBA != l.last {
		l.ie.Failed++
		l.last = p.LBA
	}
	l.ie.N = p.LBA - l.ie.LBA + 1
	if len(l.ie.Problems) < MaxListedProblems {
		l.ie.Problems = append(l.ie.Problems, p)
	}
}

// tupleChecker verifies blocks of a device against the committed tuples of
// a volume in a store, without a Volume: for exports (after a Sync) and for
// remaps (which run on a closed volume, possibly with an initial ref tag
// that differs from the manifest's). It checks what a Volume's reads check:
// the PI tuple and, where the manifest keeps them, the sector checksums of
// written blocks. A checker is not safe for concurrent use.
type tupleChecker struct {
	dev             Device
	tup             *store.Tuples
	f               dif.Format // DIX layout, metadata = tuple
	bs, ts          int
	sums            bool
	refConst        bool // Type 3: every block carries the initial ref tag
	refMask         uint64
	appTag, appMask uint16
	rereads         int

	data    []byte
	tuples  []byte
	sumv    []uint32
	crcs    []uint32
	written store.Bitmap
	states  []dif.State
	bad     []bool // blocks failing after re-reads, or unreadable
	reread  []byte
	probs   []Problem
}

// newTupleChecker checks the volume's manifest against dev and returns a
// checker for runs of up to runBlocks blocks.
func newTupleChecker(dev Device, tup *store.Tuples, runBlocks, rereads int) (*tupleChecker, error) {
	m := tup.Manifest()
	name := tup.Volume()
	f, err := dif.Parse(m.Format)
	if err != nil {
		return nil, fmt.Errorf("blockdev: volume %q: manifest format %q: %w", name, m.Format, err)
	}
	if f.Layout() != dif.Separate || f.MetadataSize() != f.TupleSize() || f.Type() == dif.Type0 || m.BlockSize != f.BlockSize() {
		return nil, fmt.Errorf("blockdev: volume %q: manifest format %q is not a DIX format with metadata = tuple", name, m.Format)
	}
	if m.DeviceSize != uint64(dev.Size()) {
		return nil, &MismatchError{Volume: name, Field: "device size", Stored: strconv.FormatUint(m.DeviceSize, 10), Given: strconv.FormatInt(dev.Size(), 10)}
	}
	n := max(1, runBlocks)
	c := &tupleChecker{
		dev: dev, tup: tup, f: f, bs: f.BlockSize(), ts: f.TupleSize(), sums: m.SectorSums,
		refConst: f.Type() == dif.Type3, refMask: ^uint64(0), appTag: m.AppTag, appMask: m.AppTagMask,
		rereads: rereads,
		data:    AlignedBuffer(n * f.BlockSize()), tuples: make([]byte, n*f.TupleSize()),
		crcs: make([]uint32, n), written: store.NewBitmap(n), states: make([]dif.State, n),
		bad: make([]bool, n), reread: AlignedBuffer(f.BlockSize()),
	}
	if b := f.RefTagBits(); b < 64 {
		c.refMask = 1<<b - 1
	}
	if c.sums {
		c.sumv = make([]uint32, n)
	}
	return c, nil
}

// params returns the dif params of block lba with initial ref tag ref.
func (c *tupleChecker) params(ref uint64, lba int64) dif.Params {
	if !c.refConst {
		ref += uint64(lba)
	}
	return dif.Params{RefTag: ref & c.refMask, AppTag: c.appTag, AppMask: c.appMask, LBA: uint64(lba)}
}

// fatalDevError reports whether a read error ends the run rather than
// marking blocks unreadable.
func fatalDevError(err error) bool {
	return errors.Is(err, ErrClosed) || errors.Is(err, ErrCrashed) || errors.Is(err, ErrOutOfRange)
}

// run reads blocks [lba, lba+n) and their committed tuples and verifies
// them with initial ref tag ref. Afterwards c.data holds the data (zeros
// for unwritten blocks), c.tuples the stored tuples (all ones for
// unwritten blocks), c.written the written bits and c.bad the blocks that
// failed after re-reads; each problem goes to report, in LBA order.
func (c *tupleChecker) run(lba int64, n int, ref uint64, report func(Problem)) (RunStats, error) {
	bs, ts := c.bs, c.ts
	data, tuples := c.data[:n*bs], c.tuples[:n*ts]
	var sums []uint32
	if c.sums {
		sums = c.sumv[:n]
	}
	if _, err := c.tup.ReadRange(uint64(lba), tuples, sums, c.written); err != nil {
		return RunStats{}, fmt.Errorf("blockdev: reading the tuples of blocks [%d, %d): %w", lba, lba+int64(n), err)
	}
	bad := c.bad[:n]
	clear(bad)
	c.probs = c.probs[:0]
	if _, err := c.dev.ReadAt(data, lba*int64(bs)); err != nil {
		if fatalDevError(err) {
			return RunStats{}, err
		}
		for i := range n {
			blk := data[i*bs : (i+1)*bs]
			var err error
			for r := 0; r <= c.rereads; r++ {
				if r == 0 {
					_, err = c.dev.ReadAt(blk, (lba+int64(i))*int64(bs))
				} else {
					_, err = ReadUncached(c.dev, blk, (lba+int64(i))*int64(bs))
				}
				if err == nil || fatalDevError(err) {
					break
				}
			}
			if err != nil && fatalDevError(err) {
				return RunStats{}, err
			}
			if err != nil {
				bad[i] = true
				clear(blk)
				c.probs = append(c.probs, Problem{LBA: lba + int64(i), Kind: KindIO, Err: err})
			}
		}
	}
	states := c.states[:n]
	if _, err := c.f.Classify(states, data, tuples, c.params(ref, lba)); err != nil {
		return RunStats{}, fmt.Errorf("blockdev: verify: %w", err)
	}
	if c.sums {
		crcs := c.crcs[:n]
		if err := crc32c.Blocks(crcs, data, bs, bs); err != nil {
			return RunStats{}, fmt.Errorf("blockdev: verify: %w", err)
		}
		for i := range crcs {
			if crcs[i] != sums[i] && c.written.Has(i) {
				states[i] = dif.StateFailed
			}
		}
	}
	st := RunStats{Blocks: int64(n)}
	for i, s := range states {
		switch {
		case bad[i]:
			st.Failed++
			continue
		case s == dif.StateOK:
			st.OK++
			continue
		case s == dif.StateEscaped:
			st.Escaped++
			continue
		case s == dif.StateUnwritten:
			st.Unwritten++
			if !c.written.Has(i) {
				clear(data[i*bs : (i+1)*bs])
			}
			continue
		}
		b := lba + int64(i)
		first := len(c.probs)
		c.blockProblems(data[i*bs:(i+1)*bs], i, b, ref)
		ok := false
		for r := 0; r < c.rereads && !ok; r++ {
			if _, err := ReadUncached(c.dev, c.reread, b*int64(bs)); err != nil {
				continue
			}
			ok = c.blockOK(c.reread, i, b, ref)
		}
		if ok {
			copy(data[i*bs:(i+1)*bs], c.reread)
			for k := first; k < len(c.probs); k++ {
				c.probs[k].Transient = true
			}
			st.OK++
			st.Transient++
			continue
		}
		bad[i] = true
		st.Failed++
	}
	sortProblems(c.probs)
	for _, p := range c.probs {
		report(p)
	}
	return st, nil
}

func (c *tupleChecker) blockOK(data []byte, i int, lba int64, ref uint64) bool {
	if c.f.Verify(data, c.tuples[i*c.ts:(i+1)*c.ts], c.params(ref, lba)) != nil {
		return false
	}
	return !c.sums || !c.written.Has(i) || crc32c.Checksum(data) == c.sumv[i]
}

func (c *tupleChecker) blockProblems(data []byte, i int, lba int64, ref uint64) {
	c.f.VerifyFunc(data, c.tuples[i*c.ts:(i+1)*c.ts], c.params(ref, lba), func(ce *dif.CheckError) error {
		c.probs = append(c.probs, Problem{LBA: lba, Kind: KindOf(ce.Field), Expected: ce.Expected, Actual: ce.Actual, Err: ce})
		return nil
	})
	if c.sums && c.written.Has(i) {
		if s := crc32c.Checksum(data); s != c.sumv[i] {
			c.probs = append(c.probs, Problem{LBA: lba, Kind: KindSectorSum, Expected: uint64(s), Actual: uint64(c.sumv[i]),
				Err: &SumError{LBA: lba, Expected: s, Actual: c.sumv[i]}})
		}
	}
}

// runBlocksFor returns the blocks per run for a run size in bytes.
func runBlocksFor(runBytes, bs int) int {
	if runBytes <= 0 {
		runBytes = DefaultConvertRun
	}
	return max(1, min(runBytes, 1<<30)/bs)
}

// rereadsFor applies the Options.Rereads convention: 0 means the default,
// negative none.
func rereadsFor(n int) int {
	switch {
	case n == 0:
		return DefaultRereads
	case n < 0:
		return 0
	}
	return min(n, 100)
}

// ExportDest is where ExportVolume writes: an extended-LBA image (Meta nil:
// Data receives blocks of BlockSize+TupleSize bytes, data then tuple), or a
// DIX pair (Data receives the data blocks, Meta the tuples, TupleSize bytes
// per block). Block i goes to offset i times the unit in each.
type ExportDest struct {
	Data io.WriterAt // required
	Meta io.WriterAt // nil for an extended-LBA image
}

// ExportOptions tune ExportVolume. The zero value of each field is its
// default.
type ExportOptions struct {
	// Force exports blocks that fail verification as they are (data and
	// stored tuple: the failure travels with the image); each is still
	// reported. Default false: the first failing block stops the writing;
	// verification goes on to the end so that every failing block is
	// reported, and ExportVolume returns an *IntegrityError.
	Force bool
	// Rereads is how many times a failing block is read again (around the
	// page cache) before it counts as failed; as Options.Rereads, 0 means
	// DefaultRereads and negative none.
	Rereads int
	// RunBytes is the data read per step. Default DefaultConvertRun (1 MiB).
	RunBytes int
	// Start is the first block to export, to continue an interrupted export
	// into the same destination (ConvertReport.Next). Default 0.
	Start int64
	// Progress, if not nil, is called after every run with the data bytes
	// of the volume covered so far (from block 0) and its size.
	Progress func(done, total int64)
	// OnProblem, if not nil, receives every problem (failed check,
	// unreadable block, transient failure), in LBA order.
	OnProblem func(Problem)
}

// ExportVolume writes the protected volume v, with its stored tuples, to dst
// as an extended-LBA image or a DIX pair in v's format, verifying every block
// as it goes (see ExportOptions.Force). Blocks never written or discarded
// are exported as zero data with the unwritten tuple (dif's UnwrittenTuple:
// app, storage and ref tags all ones), never with a tuple computed from the
// data. Memory is bounded by RunBytes whatever the volume's size.
//
// ExportVolume syncs v first and then reads the device and the committed
// tuples directly: nothing may write to v while it runs. It is safe to run
// again from the start, or from ConvertReport.Next, after an interruption.
// It returns the report with every error; a cancelled ctx stops it between
// runs with ctx's error.
func ExportVolume(ctx context.Context, v *Volume, dst ExportDest, opts ExportOptions) (*ConvertReport, error) {
	if v == nil || dst.Data == nil {
		return nil, errors.New("blockdev: export: nil volume or destination")
	}
	if opts.Start < 0 || opts.Start > v.Blocks() {
		return nil, fmt.Errorf("blockdev: export: start block %d out of [0, %d]", opts.Start, v.Blocks())
	}
	if err := v.Sync(); err != nil {
		return nil, fmt.Errorf("blockdev: export: %w", err)
	}
	c, err := newTupleChecker(v.Device(), v.Tuples(), runBlocksFor(opts.RunBytes, v.BlockSize()), rereadsFor(opts.Rereads))
	if err != nil {
		return nil, err
	}
	f, bs, ts := c.f, c.bs, c.ts
	ref := v.Manifest().InitialRefTag
	unwritten := make([]byte, ts)
	if err := f.WriteTuple(make([]byte, bs), unwritten, 0, f.UnwrittenTuple()); err != nil {
		return nil, fmt.Errorf("blockdev: export: %w", err)
	}
	var conv []byte
	if dst.Meta == nil {
		conv = make([]byte, len(c.data)+len(c.tuples))
	}
	rep := &ConvertReport{Start: opts.Start, Next: opts.Start}
	probs := problemList{fn: opts.OnProblem}
	report := func(p Problem) { probs.add("export", p) }
	blocks, per := v.Blocks(), len(c.states)
	writing := true
	for lba := opts.Start; lba < blocks; {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		n := int(min(int64(per), blocks-lba))
		st, err := c.run(lba, n, ref, report)
		if err != nil {
			return rep, fmt.Errorf("blockdev: export of blocks [%d, %d): %w", lba, lba+int64(n), err)
		}
		rep.RunStats.Add(st)
		if st.Failed > 0 && !opts.Force {
			writing = false
		}
		if writing {
			data, md := c.data[:n*bs], c.tuples[:n*ts]
			for i := range n {
				if !c.written.Has(i) {
					copy(md[i*ts:(i+1)*ts], unwritten)
				}
			}
			w, err := exportRun(f, dst, conv, lba, data, md)
			rep.Bytes += w
			if err != nil {
				return rep, fmt.Errorf("blockdev: export of blocks [%d, %d): %w", lba, lba+int64(n), err)
			}
			rep.Next = lba + int64(n)
		}
		lba += int64(n)
		if opts.Progress != nil {
			opts.Progress(lba*int64(bs), v.Size())
		}
	}
	if probs.ie != nil && !opts.Force {
		return rep, probs.ie
	}
	return rep, nil
}

// exportRun writes one run in dst's layout and returns the bytes written.
func exportRun(f dif.Format, dst ExportDest, conv []byte, lba int64, data, md []byte) (int64, error) {
	bs, ts := f.BlockSize(), f.TupleSize()
	if dst.Meta != nil {
		n, err := dst.Data.WriteAt(data, lba*int64(bs))
		if err != nil {
			return int64(n), err
		}
		m, err := dst.Meta.WriteAt(md, lba*int64(ts))
		return int64(n + m), err
	}
	conv = conv[:len(data)+len(md)]
	if err := f.ToInterleaved(conv, data, md); err != nil {
		return 0, err
	}
	n, err := dst.Data.WriteAt(conv, lba*int64(bs+ts))
	return int64(n), err
}

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
func ImportImage(ctx context.Context, src *PISource, dev Device, kv store.KV, opts ImportOptions) (*Volume, *ConvertReport, error) {
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
		rep.Resumed, rep.Start, rep.Next = true, int64(j.Next), int64(j.Next)
	}
	if err := importBlocks(ctx, src, dev, tup, &opts, per, rep, report, &probs); err != nil {
		return nil, rep, err
	}
	now := time.Now().UTC()
	if err := tup.SetScrubCursor(protectCursor, store.ScrubCursor{Next: uint64(src.Blocks()), Pass: 1, Started: now, Updated: now}, true); err != nil {
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
func checkSource(ctx context.Context, src *PISource, per int, progress func(done, total int64), report func(Problem)) (RunStats, error) {
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
func importBlocks(ctx context.Context, src *PISource, dev Device, tup *store.Tuples, opts *ImportOptions, per int,
	rep *ConvertReport, report func(Problem), probs *problemList) error {
	f := src.f.WithLayout(dif.Separate)
	bs, ms, ts := src.bs, src.ms, f.TupleSize()
	blocks := src.Blocks()
	sums := tup.Manifest().SectorSums
	r := src.split(make([]byte, src.ScratchSize(per)), per)
	var data, md []byte // the run in the DIX layout
	if src.ext != nil {
		data, md = AlignedBuffer(per*bs), make([]byte, per*ms)
	}
	var sumv []uint32
	if sums {
		sumv = make([]uint32, per)
	}
	ckpt := max(int64(per), opts.CheckpointBytes/int64(bs))
	name := tup.Volume()
	wrap := func(lba int64, err error) error {
		return fmt.Errorf("blockdev: import into volume %q at block %d: %w", name, lba, err)
	}
	pos := rep.Next
	for pos < blocks {
		l, err := tup.NewLoader(uint64(pos))
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
			rd, rm := r.data[:n*(bs+ms)], []byte(nil)
			if src.dix != nil {
				rd, rm = r.data[:n*bs], r.md[:n*ms]
			}
			if err := src.read(pos, n, rd, rm); err != nil {
				l.Abort()
				return wrap(pos, err)
			}
			d, m := rd, rm
			if src.ext != nil {
				d, m = data[:n*bs], md[:n*ms]
				if err := f.ToSeparate(d, m, rd); err != nil {
					l.Abort()
					return wrap(pos, err)
				}
			}
			states := r.states[:n]
			sum, err := f.Classify(states, d, m, src.params(pos))
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
					f.VerifyFunc(d[i*bs:(i+1)*bs], m[i*ms:(i+1)*ms], src.params(b), func(ce *dif.CheckError) error {
						report(Problem{LBA: b, Kind: KindOf(ce.Field), Expected: ce.Expected, Actual: ce.Actual, Err: ce})
						return nil
					})
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
				if err := crc32c.Blocks(s, d, bs, bs); err != nil {
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
			if err := tup.Discard(uint64(h.LBA), uint64(h.N), i == len(holes)-1); err != nil {
				return wrap(h.LBA, err)
			}
		}
		if err := tup.AdvanceJournal(uint64(pos), true); err != nil {
			return wrap(pos, err)
		}
		rep.Next = pos
		if stopped {
			return ctx.Err()
		}
	}
	return nil
}
