package blockdev

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
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
// ExportVolume syncs v first and then verifies and reads each run through
// v's verifier (as CheckRun does, with the committed tuples read from the
// store, page checksums checked): nothing may write to v while it runs. It is safe to run
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
	done, err := v.enter()
	if err != nil {
		return nil, fmt.Errorf("blockdev: export: %w", err)
	}
	defer done()
	f, bs, ts := v.f, v.bs, v.ts
	per := min(runBlocksFor(opts.RunBytes, bs), v.chunk)
	data := device.AlignedBuffer(per * bs)
	sc := v.getScratch()
	defer v.putScratch(sc)
	req := readReq{ctx: ctx, rereads: rereadsFor(opts.Rereads), zero: true, storeTuples: true, ref: v.refBase}
	unwritten := make([]byte, ts)
	if err := f.WriteTuple(make([]byte, bs), unwritten, 0, f.UnwrittenTuple()); err != nil {
		return nil, fmt.Errorf("blockdev: export: %w", err)
	}
	var conv []byte
	if dst.Meta == nil {
		conv = make([]byte, per*(bs+ts))
	}
	rep := &ConvertReport{Start: opts.Start, Next: opts.Start}
	probs := problemList{fn: opts.OnProblem}
	blocks := v.Blocks()
	writing := true
	for lba := opts.Start; lba < blocks; {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		n := int(min(int64(per), blocks-lba))
		st, err := v.verifyCommitted(lba, n, data[:n*bs], sc, req)
		for _, p := range sc.probs {
			probs.add("export", p)
		}
		if err != nil {
			return rep, fmt.Errorf("blockdev: export of blocks [%d, %d): %w", lba, lba+int64(n), err)
		}
		rep.RunStats.Add(st)
		if st.Failed > 0 && !opts.Force {
			writing = false
		}
		if writing {
			md := sc.tuples[:n*ts] // the stored tuples, as verified
			for i := range n {
				if !sc.written.Has(i) {
					copy(md[i*ts:(i+1)*ts], unwritten)
				}
			}
			w, err := exportRun(f, dst, conv, lba, data[:n*bs], md)
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

// verifyCommitted verifies blocks [lba, lba+n) (n <= v.chunk) of v into
// data with req, under a shared lock of the range, for an export or a
// remap: sc then holds the run's stored tuples, written bits and problems.
func (v *Volume) verifyCommitted(lba int64, n int, data []byte, sc *scratch, req readReq) (RunStats, error) {
	id := v.locks.lock(lba, lba+int64(n), false)
	defer v.locks.unlock(id)
	return v.verifyRun(lba, n, data, sc, req)
}
