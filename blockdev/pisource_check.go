package blockdev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

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

// PISource verifies an image that carries its own protection information,
// an extended-LBA image ([NewExtendedSource]) or a DIX pair
// ([NewDIXSource]), with package dif. It implements [CheckSource] and is
// safe for concurrent use on disjoint runs (it only reads).
//
// Block lba of the image is checked with the source's Params, except that
// Params.LBA is lba and, for Types 1 and 2, the expected ref tag is the low
// RefTagBits of Params.RefTag + lba: Params.RefTag is the ref tag of block 0.
// Blocks whose app, storage and ref tags are all ones count as Unwritten,
// blocks escaped by their app tag as Escaped; neither is a failure.
//
// A run that cannot be read as a whole is read again block by block: only
// the blocks that still cannot be read are reported (KindIO). Re-reads
// (CheckOptions.Rereads) and Uncached drop the page cache of the range first
// when the image is an *os.File or a [CacheDropper]; other readers are read
// again as they are.
type PISource struct {
	f       dif.Format
	p       dif.Params
	refMask uint64 // 0 when ref tags do not advance with the LBA
	blocks  int64
	bs, ms  int
	ext     *ExtendedImage // one of ext and dix is set
	dix     *DIXPair
	noMap   atomic.Bool // the images refused to map: read them
}

// NewExtendedSource returns a CheckSource over the extended-LBA image img,
// verified with format f and params p. f's block and metadata sizes must
// match the image's (else a *FormatMismatchError); f's layout is ignored
// (the image is interleaved). Invalid params give an error wrapping
// dif.ErrParams.
func NewExtendedSource(img *ExtendedImage, f dif.Format, p dif.Params) (*PISource, error) {
	if img == nil {
		return nil, errors.New("blockdev: nil extended image")
	}
	s, err := newPISource(f.WithLayout(dif.Interleaved), p, img.DataSize(), img.MetaSize())
	if err != nil {
		return nil, err
	}
	s.ext, s.blocks = img, img.Sectors()
	return s, nil
}

// NewDIXSource returns a CheckSource over the DIX pair, verified with format
// f and params p, with the checks of NewExtendedSource (f's layout is
// ignored: the pair is separate).
func NewDIXSource(pair *DIXPair, f dif.Format, p dif.Params) (*PISource, error) {
	if pair == nil {
		return nil, errors.New("blockdev: nil DIX pair")
	}
	s, err := newPISource(f.WithLayout(dif.Separate), p, pair.BlockSize(), pair.MetaSize())
	if err != nil {
		return nil, err
	}
	s.dix, s.blocks = pair, pair.Blocks()
	return s, nil
}

func newPISource(f dif.Format, p dif.Params, bs, ms int) (*PISource, error) {
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
	s := &PISource{f: f, p: p, bs: bs, ms: ms}
	if t := f.Type(); t == dif.Type1 || t == dif.Type2 {
		if b := f.RefTagBits(); b >= 64 {
			s.refMask = ^uint64(0)
		} else {
			s.refMask = 1<<b - 1
		}
	}
	return s, nil
}

// Format returns the format the source verifies with (in the source's
// layout).
func (s *PISource) Format() dif.Format { return s.f }

// Params returns the params given to the constructor.
func (s *PISource) Params() dif.Params { return s.p }

// Blocks returns the number of blocks of the image.
func (s *PISource) Blocks() int64 { return s.blocks }

// BlockSize returns the data bytes per block.
func (s *PISource) BlockSize() int { return s.bs }

// ScratchSize returns the scratch CheckRun needs for n blocks: the blocks'
// data and metadata, and one byte per block for its state.
func (s *PISource) ScratchSize(n int) int {
	if n <= 0 {
		return 0
	}
	return n * (s.bs + s.ms + 1)
}

// params returns the dif params of a run starting at lba.
func (s *PISource) params(lba int64) dif.Params {
	p := s.p
	p.LBA = lba
	if s.refMask != 0 {
		p.RefTag = (p.RefTag + uint64(lba)) & s.refMask
	}
	return p
}

// run is the scratch of one CheckRun cut into its parts.
type piRun struct {
	data, md []byte
	states   []dif.State
}

func (s *PISource) split(scratch []byte, n int) piRun {
	var r piRun
	if s.ext != nil {
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
func (s *PISource) block(r piRun, i int) (data, md []byte) {
	if s.ext != nil {
		ss := s.bs + s.ms
		return r.data[i*ss : (i+1)*ss], nil
	}
	return r.data[i*s.bs : (i+1)*s.bs], r.md[i*s.ms : (i+1)*s.ms]
}

func (s *PISource) read(lba int64, n int, data, md []byte) error {
	if s.ext != nil {
		return s.ext.ReadSectors(lba, n, data)
	}
	return s.dix.ReadBlocks(lba, n, data, md)
}

// dropCache asks the readers to drop their cached copies of blocks
// [lba, lba+n), best effort.
func (s *PISource) dropCache(lba int64, n int) {
	if s.ext != nil {
		ss := int64(s.bs + s.ms)
		unmapRange(s.ext.m, lba*ss, int64(n)*ss)
		dropCached(s.ext.r, lba*ss, int64(n)*ss)
		return
	}
	unmapRange(s.dix.dm, lba*int64(s.bs), int64(n)*int64(s.bs))
	unmapRange(s.dix.mm, lba*int64(s.ms), int64(n)*int64(s.ms))
	dropCached(s.dix.data, lba*int64(s.bs), int64(n)*int64(s.bs))
	dropCached(s.dix.meta, lba*int64(s.ms), int64(n)*int64(s.ms))
}

func dropCached(r io.ReaderAt, off, n int64) {
	if n <= 0 {
		return
	}
	switch d := r.(type) {
	case CacheDropper:
		_ = d.DropCache(off, n)
	case *os.File:
		_ = fadviseDontNeed(d, off, n)
	}
}

// CheckRun implements [CheckSource].
func (s *PISource) CheckRun(ctx context.Context, lba int64, n int, scratch []byte, opt CheckOptions, report func(Problem)) (RunStats, error) {
	if err := ctx.Err(); err != nil {
		return RunStats{}, err
	}
	if err := checkRun("blocks", lba, n, s.blocks); err != nil {
		return RunStats{}, err
	}
	if n == 0 {
		return RunStats{}, nil
	}
	if need := s.ScratchSize(n); len(scratch) < need {
		return RunStats{}, fmt.Errorf("blockdev: scratch of %d bytes, a run of %d blocks needs %d", len(scratch), n, need)
	}
	if report == nil {
		report = func(Problem) {}
	}
	r := s.split(scratch, n)
	var sum dif.Summary
	done := false
	if opt.Uncached {
		s.dropCache(lba, n)
	} else {
		var err error
		if sum, done, err = s.classifyMapped(lba, n, r); err != nil {
			return RunStats{}, err
		}
	}
	if !done {
		if err := s.read(lba, n, r.data, r.md); err != nil {
			if fatalReadError(err) {
				return RunStats{}, err
			}
			return s.checkBlocks(ctx, lba, r, opt, report)
		}
		var err error
		if sum, err = s.f.Classify(&dif.Classification{States: r.states}, r.data, r.md, s.params(lba)); err != nil {
			return RunStats{}, fmt.Errorf("blockdev: %w", err)
		}
	}
	st := RunStats{Blocks: int64(n), OK: int64(sum.OK), Escaped: int64(sum.Escaped), Unwritten: int64(sum.Unwritten)}
	if sum.Failed == 0 {
		return st, nil
	}
	for i, state := range r.states {
		if state != dif.StateFailed {
			continue
		}
		if err := s.failed(ctx, lba+int64(i), r, i, nil, opt, report, &st); err != nil {
			return RunStats{}, err
		}
	}
	return st, nil
}

// classifyMapped classifies blocks [lba, lba+n) in place in the images'
// mappings of the page cache (see Mapper): a scrub returns no data, so
// nothing is copied but the failing blocks, into r, for the re-read path.
// done is false when the run must be read instead: no mapping, or a fault
// on it (the read then reports the I/O error block by block).
func (s *PISource) classifyMapped(lba int64, n int, r piRun) (sum dif.Summary, done bool, err error) {
	if s.noMap.Load() || (s.ext == nil || s.ext.m == nil) && (s.dix == nil || s.dix.dm == nil || s.dix.mm == nil) {
		return sum, false, nil
	}
	v := mapVisits.Get().(*mapVisit)
	v.s, v.r, v.p, v.n, v.lba = s, r, s.params(lba), n, lba
	if s.ext != nil {
		ss := s.bs + s.ms
		err = s.ext.m.ReadMapped(lba*int64(ss), n*ss, v.outer)
	} else {
		err = s.dix.dm.ReadMapped(lba*int64(s.bs), n*s.bs, v.outer)
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
	case errors.Is(err, ErrMapFault):
		return sum, false, nil
	}
	return sum, false, err
}

// mapVisit is the state of one classifyMapped, pooled with its two
// callbacks so that a run allocates nothing.
type mapVisit struct {
	s            *PISource
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
	return v.s.dix.mm.ReadMapped(v.lba*int64(ms), v.n*ms, v.inner)
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
func (s *PISource) checkBlocks(ctx context.Context, lba int64, r piRun, opt CheckOptions, report func(Problem)) (RunStats, error) {
	st := RunStats{Blocks: int64(len(r.states))}
	for i := range r.states {
		if err := ctx.Err(); err != nil {
			return RunStats{}, err
		}
		data, md := s.block(r, i)
		b := lba + int64(i)
		if err := s.read(b, 1, data, md); err != nil {
			if fatalReadError(err) {
				return RunStats{}, err
			}
			if err := s.failed(ctx, b, r, i, err, opt, report, &st); err != nil {
				return RunStats{}, err
			}
			continue
		}
		state, err := s.classify(b, r, i)
		if err != nil {
			return RunStats{}, err
		}
		if state == dif.StateFailed {
			if err := s.failed(ctx, b, r, i, nil, opt, report, &st); err != nil {
				return RunStats{}, err
			}
			continue
		}
		st.count(state)
	}
	return st, nil
}

func (st *RunStats) count(state dif.State) {
	switch state {
	case dif.StateOK:
		st.OK++
	case dif.StateEscaped:
		st.Escaped++
	case dif.StateUnwritten:
		st.Unwritten++
	default:
		st.Failed++
	}
}

// classify checks block i of r (block lba of the image) alone.
func (s *PISource) classify(lba int64, r piRun, i int) (dif.State, error) {
	data, md := s.block(r, i)
	if _, err := s.f.Classify(&dif.Classification{States: r.states[i : i+1]}, data, md, s.params(lba)); err != nil {
		return 0, fmt.Errorf("blockdev: %w", err)
	}
	return r.states[i], nil
}

// failed handles block i of r (block lba), which failed verification or,
// with readErr, could not be read, with the package's block classifier and
// re-read loop (verify.go): its problems are those of the first read; it
// is re-read opt.Rereads times and reported as transient if a re-read
// passes, as failed otherwise.
func (s *PISource) failed(ctx context.Context, lba int64, r piRun, i int, readErr error, opt CheckOptions, report func(Problem), st *RunStats) error {
	data, md := s.block(r, i)
	p := s.params(lba)
	chk := blockCheck{f: s.f} // no store: no sector sums, every block written
	var buf [5]Problem        // at most one per field and a sum: no allocation
	probs := buf[:0]
	if readErr != nil {
		probs = append(probs, Problem{LBA: lba, Kind: KindIO, Err: readErr})
	} else {
		probs = chk.problems(probs, lba, data, md, p, true, 0)
	}
	passed, err := reread(ctx, opt.Rereads,
		func() error {
			s.dropCache(lba, 1)
			return s.read(lba, 1, data, md)
		},
		func() bool { return chk.ok(data, md, p, true, 0) })
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

var _ CheckSource = (*PISource)(nil)
