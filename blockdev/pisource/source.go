package pisource

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/check"
	"github.com/difctl/difctl/dif"
)

// A FormatMismatchError reports a dif.Format that does not describe the
// image it was given to verify.
type FormatMismatchError struct {
	Field  string // "block size" or "metadata size"
	Format int    // the format's value
	Image  int    // the image's value
}

func (e *FormatMismatchError) Error() string {
	return fmt.Sprintf("blockdev: the format's %s is %d, the image's %d", e.Field, e.Format, e.Image)
}

// Source verifies an image that carries its own protection information,
// an extended-LBA image ([NewExtendedSource]) or a DIX pair
// ([NewDIXSource]), with package dif. It implements [blockdev.CheckSource]
// and [blockdev.ImportSource], and is safe for concurrent use on disjoint
// runs (it only reads).
//
// Block lba of the image is checked with the source's Params, except that
// Params.LBA is lba and, for Types 1 and 2, the expected ref tag is the low
// RefTagBits of Params.RefTag + lba: Params.RefTag is the ref tag of block 0.
// Blocks whose app, storage and ref tags are all ones count as Unwritten,
// blocks escaped by their app tag as Escaped; neither is a failure.
//
// A run that cannot be read as a whole is read again block by block: only
// the blocks that still cannot be read are reported ([blockdev.KindIO]).
// Re-reads (CheckOptions.Rereads) and Uncached drop the page cache of the
// range first when the image is an *os.File or a [device.CacheDropper];
// other readers are read again as they are.
type Source struct {
	f      dif.Format
	ip     check.ImageParams
	blocks int64
	bs, ms int
	ext    *ExtendedImage // one of ext, dix and rd is set
	dix    *DIXPair
	rd     BlockReader
	inter  bool        // the run's data and metadata are interleaved (ext, or an interleaved rd)
	noMap  atomic.Bool // the images refused to map: read them
}

// NewExtendedSource returns a CheckSource over the extended-LBA image img,
// verified with format f and params p. f's block and metadata sizes must
// match the image's (else a *FormatMismatchError); f's layout is ignored
// (the image is interleaved). Invalid params give an error wrapping
// dif.ErrParams.
func NewExtendedSource(img *ExtendedImage, f dif.Format, p dif.Params) (*Source, error) {
	if img == nil {
		return nil, errors.New("blockdev: nil extended image")
	}
	s, err := newSource(f.WithLayout(dif.Interleaved), p, img.DataSize(), img.MetaSize())
	if err != nil {
		return nil, err
	}
	s.ext, s.blocks, s.inter = img, img.Sectors(), true
	return s, nil
}

// NewDIXSource returns a CheckSource over the DIX pair, verified with format
// f and params p, with the checks of NewExtendedSource (f's layout is
// ignored: the pair is separate).
func NewDIXSource(pair *DIXPair, f dif.Format, p dif.Params) (*Source, error) {
	if pair == nil {
		return nil, errors.New("blockdev: nil DIX pair")
	}
	s, err := newSource(f.WithLayout(dif.Separate), p, pair.BlockSize(), pair.MetaSize())
	if err != nil {
		return nil, err
	}
	s.dix, s.blocks = pair, pair.Blocks()
	return s, nil
}

func newSource(f dif.Format, p dif.Params, bs, ms int) (*Source, error) {
	if !f.Valid() {
		return nil, errors.New("blockdev: invalid format (use dif.NewFormat or dif.Parse)")
	}
	if f.BlockSize() != bs {
		return nil, &FormatMismatchError{Field: "block size", Format: f.BlockSize(), Image: bs}
	}
	if f.MetadataSize() != ms {
		return nil, &FormatMismatchError{Field: "metadata size", Format: f.MetadataSize(), Image: ms}
	}
	// An empty run validates the params without reading anything.
	if err := f.Verify(nil, nil, p); err != nil {
		return nil, fmt.Errorf("blockdev: %w", err)
	}
	return &Source{f: f, ip: check.NewImageParams(f, p), bs: bs, ms: ms}, nil
}

// Format returns the format the source verifies with (in the source's
// layout).
func (s *Source) Format() dif.Format { return s.f }

// Params returns the params given to the constructor.
func (s *Source) Params() dif.Params { return s.ip.P }

// Blocks returns the number of blocks of the image.
func (s *Source) Blocks() int64 { return s.blocks }

// BlockSize returns the data bytes per block.
func (s *Source) BlockSize() int { return s.bs }

// ScratchSize returns the scratch CheckRun needs for n blocks: the blocks'
// data and metadata, and one byte per block for its state.
func (s *Source) ScratchSize(n int) int {
	if n <= 0 {
		return 0
	}
	return n * (s.bs + s.ms + 1)
}

// params returns the dif params of a run starting at lba.
func (s *Source) params(lba int64) dif.Params { return s.ip.At(lba) }

// run is the scratch of one CheckRun cut into its parts.
type piRun struct {
	data, md []byte
	states   []dif.State
}

func (s *Source) split(scratch []byte, n int) piRun {
	var r piRun
	if s.inter {
		r.data = scratch[:n*(s.bs+s.ms)]
	} else {
		r.data = scratch[:n*s.bs]
		r.md = scratch[n*s.bs : n*(s.bs+s.ms)]
	}
	st := scratch[n*(s.bs+s.ms) : n*(s.bs+s.ms+1)]
	// dif.State is a uint8: the state bytes are part of the scratch, so a
	// run allocates nothing.
	r.states = unsafe.Slice((*dif.State)(unsafe.Pointer(unsafe.SliceData(st))), n)
	return r
}

// block returns the buffers of block i of r.
func (s *Source) block(r piRun, i int) (data, md []byte) {
	if s.inter {
		ss := s.bs + s.ms
		return r.data[i*ss : (i+1)*ss], nil
	}
	return r.data[i*s.bs : (i+1)*s.bs], r.md[i*s.ms : (i+1)*s.ms]
}

// ReadBlocks reads blocks [lba, lba+n) as the image holds them: an
// extended image's n sectors into data[:n*(BlockSize+MetadataSize)] (md
// is not used), a DIX pair's data into data[:n*BlockSize] and metadata
// into md[:n*MetadataSize].
func (s *Source) ReadBlocks(lba int64, n int, data, md []byte) error {
	if s.rd != nil {
		return s.rd.ReadBlocks(lba, n, data, md)
	}
	if s.ext != nil {
		return s.ext.ReadSectors(lba, n, data)
	}
	return s.dix.ReadBlocks(lba, n, data, md)
}

// dropCache asks the readers to drop their cached copies of blocks
// [lba, lba+n), best effort.
func (s *Source) dropCache(lba int64, n int) {
	if n <= 0 || s.rd != nil {
		return
	}
	if s.ext != nil {
		ss := int64(s.bs + s.ms)
		_ = s.ext.r.DropCache(lba*ss, int64(n)*ss)
		return
	}
	_ = s.dix.data.DropCache(lba*int64(s.bs), int64(n)*int64(s.bs))
	_ = s.dix.meta.DropCache(lba*int64(s.ms), int64(n)*int64(s.ms))
}

// CheckRun implements [blockdev.CheckSource].
func (s *Source) CheckRun(ctx context.Context, lba int64, n int, scratch []byte, opt blockdev.CheckOptions, report func(blockdev.Problem)) (blockdev.RunStats, error) {
	if err := ctx.Err(); err != nil {
		return blockdev.RunStats{}, err
	}
	if err := checkRun("blocks", lba, n, s.blocks); err != nil {
		return blockdev.RunStats{}, err
	}
	if n == 0 {
		return blockdev.RunStats{}, nil
	}
	if need := s.ScratchSize(n); len(scratch) < need {
		return blockdev.RunStats{}, fmt.Errorf("blockdev: scratch of %d bytes, a run of %d blocks needs %d", len(scratch), n, need)
	}
	if report == nil {
		report = func(blockdev.Problem) {}
	}
	r := s.split(scratch, n)
	var sum dif.Summary
	done := false
	if opt.Uncached {
		s.dropCache(lba, n)
	} else {
		var err error
		if sum, done, err = s.classifyMapped(lba, n, r); err != nil {
			return blockdev.RunStats{}, err
		}
	}
	if !done {
		if err := s.ReadBlocks(lba, n, r.data, r.md); err != nil {
			if check.Fatal(err) {
				return blockdev.RunStats{}, err
			}
			return s.checkBlocks(ctx, lba, r, opt, report)
		}
		var err error
		if sum, err = s.f.Classify(&dif.Classification{States: r.states}, r.data, r.md, s.params(lba)); err != nil {
			return blockdev.RunStats{}, fmt.Errorf("blockdev: %w", err)
		}
	}
	st := blockdev.RunStats{Blocks: int64(n), OK: int64(sum.OK), Escaped: int64(sum.Escaped), Unwritten: int64(sum.Unwritten)}
	if sum.Failed == 0 {
		return st, nil
	}
	for i, state := range r.states {
		if state != dif.StateFailed {
			continue
		}
		if err := s.failed(ctx, lba+int64(i), r, i, nil, opt, report, &st); err != nil {
			return blockdev.RunStats{}, err
		}
	}
	return st, nil
}

// classifyMapped classifies blocks [lba, lba+n) in place in the images'
// mappings of the page cache (see Mapper): a scrub returns no data, so
// nothing is copied but the failing blocks, into r, for the re-read path.
// done is false when the run must be read instead: no mapping, or a fault
// on it (the read then reports the I/O error block by block).
func (s *Source) classifyMapped(lba int64, n int, r piRun) (sum dif.Summary, done bool, err error) {
	if s.rd != nil || s.noMap.Load() {
		return sum, false, nil
	}
	v := mapVisits.Get().(*mapVisit)
	v.s, v.r, v.p, v.n, v.lba = s, r, s.params(lba), n, lba
	if s.ext != nil {
		ss := s.bs + s.ms
		err = s.ext.r.ReadMapped(lba*int64(ss), n*ss, v.outer)
	} else {
		err = s.dix.data.ReadMapped(lba*int64(s.bs), n*s.bs, v.outer)
	}
	sum = v.sum
	*v = mapVisit{outer: v.outer, inner: v.inner}
	mapVisits.Put(v)
	switch {
	case err == nil:
		return sum, true, nil
	case errors.Is(err, errors.ErrUnsupported):
		s.noMap.Store(true)
		return sum, false, nil
	case errors.Is(err, device.ErrMapFault):
		return sum, false, nil
	}
	return sum, false, err
}

// mapVisit is the state of one classifyMapped, pooled with its two
// callbacks so that a run allocates nothing.
type mapVisit struct {
	s            *Source
	r            piRun
	p            dif.Params
	n            int
	lba          int64
	sum          dif.Summary
	data         []byte             // DIX: the data mapping, while the metadata's is visited
	outer, inner func([]byte) error // visitOuter, visitInner
}

var mapVisits = sync.Pool{New: func() any {
	v := new(mapVisit)
	v.outer, v.inner = v.visitOuter, v.visitInner
	return v
}}

// visitOuter gets the extended image's mapping, or the DIX data's.
func (v *mapVisit) visitOuter(m []byte) error {
	if v.s.ext != nil {
		return v.classify(m, nil)
	}
	v.data = m
	ms := v.s.ms
	return v.s.dix.meta.ReadMapped(v.lba*int64(ms), v.n*ms, v.inner)
}

func (v *mapVisit) visitInner(md []byte) error { return v.classify(v.data, md) }

func (v *mapVisit) classify(data, md []byte) error {
	var err error
	if v.sum, err = v.s.f.Classify(&dif.Classification{States: v.r.states}, data, md, v.p); err != nil {
		return fmt.Errorf("blockdev: %w", err)
	}
	for i := 0; v.sum.Failed > 0 && i < v.n; i++ {
		if v.r.states[i] != dif.StateFailed {
			continue
		}
		d, m := v.s.block(v.r, i)
		copy(d, data[i*len(d):])
		copy(m, md[i*len(m):])
	}
	return nil
}

// checkBlocks checks a run whose read failed one block at a time.
func (s *Source) checkBlocks(ctx context.Context, lba int64, r piRun, opt blockdev.CheckOptions, report func(blockdev.Problem)) (blockdev.RunStats, error) {
	st := blockdev.RunStats{Blocks: int64(len(r.states))}
	for i := range r.states {
		if err := ctx.Err(); err != nil {
			return blockdev.RunStats{}, err
		}
		data, md := s.block(r, i)
		b := lba + int64(i)
		if err := s.ReadBlocks(b, 1, data, md); err != nil {
			if check.Fatal(err) {
				return blockdev.RunStats{}, err
			}
			if err := s.failed(ctx, b, r, i, err, opt, report, &st); err != nil {
				return blockdev.RunStats{}, err
			}
			continue
		}
		state, err := s.classify(b, r, i)
		if err != nil {
			return blockdev.RunStats{}, err
		}
		if state == dif.StateFailed {
			if err := s.failed(ctx, b, r, i, nil, opt, report, &st); err != nil {
				return blockdev.RunStats{}, err
			}
			continue
		}
		st.Count(state)
	}
	return st, nil
}

// classify checks block i of r (block lba of the image) alone.
func (s *Source) classify(lba int64, r piRun, i int) (dif.State, error) {
	data, md := s.block(r, i)
	if _, err := s.f.Classify(&dif.Classification{States: r.states[i : i+1]}, data, md, s.params(lba)); err != nil {
		return 0, fmt.Errorf("blockdev: %w", err)
	}
	return r.states[i], nil
}

// failed handles block i of r (block lba), which failed verification or,
// with readErr, could not be read, with the block classifier and re-read
// loop every verifier shares (package blockdev/internal/check): its
// problems are those of the first read; it is re-read opt.Rereads times
// and reported as transient if a re-read passes, as failed otherwise.
func (s *Source) failed(ctx context.Context, lba int64, r piRun, i int, readErr error, opt blockdev.CheckOptions, report func(blockdev.Problem), st *blockdev.RunStats) error {
	data, md := s.block(r, i)
	p := s.params(lba)
	chk := check.Block{Format: s.f} // no store: no sector sums, every block written
	var buf [5]blockdev.Problem     // at most one per field and a sum: no allocation
	probs := buf[:0]
	if readErr != nil {
		probs = append(probs, blockdev.Problem{LBA: lba, Kind: blockdev.KindIO, Err: readErr})
	} else {
		// Written, no sums: nothing fails but the PI fields.
		chk.Failures(data, md, p, true, 0, func(ce *dif.CheckError) error {
			probs = append(probs, blockdev.ProblemOf(ce))
			return nil
		})
	}
	passed, err := check.Reread(ctx, opt.Rereads,
		func() error {
			s.dropCache(lba, 1)
			return s.ReadBlocks(lba, 1, data, md)
		},
		func() bool { return chk.OK(data, md, p, true, 0) })
	if err != nil {
		return err
	}
	for _, pr := range probs {
		pr.Transient = passed
		report(pr)
	}
	if passed {
		st.OK++
		st.Transient++
	} else {
		st.Failed++
	}
	return nil
}

var (
	_ blockdev.CheckSource  = (*Source)(nil)
	_ blockdev.ImportSource = (*Source)(nil)
)
