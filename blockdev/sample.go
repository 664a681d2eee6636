package blockdev

import (
	"context"
	"errors"
	"io"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// The data sample of SampleData.
const (
	samplePages  = 16 // tuple pages read, spread over the volume
	sampleBlocks = 64 // written blocks checked at most
	// SampleMin is the fewest checked blocks from which a sample decides
	// (DataSample.Foreign).
	SampleMin = 8
)

// DataSample is what SampleData found: how many written blocks it checked
// against their tuples, and how many of those failed.
type DataSample struct{ Checked, Failed int }

// Foreign reports whether the sample says that the data is another
// image's than the one the store describes: at least SampleMin blocks
// checked, and every one failed. An image with some bad blocks is not
// foreign: it is damaged, for verify and scrub to report.
func (s DataSample) Foreign() bool { return s.Checked >= SampleMin && s.Failed == s.Checked }

// SampleData checks a sample of the written blocks of the volume whose
// tuples are t against the data of dev (size bytes), to tell whether the
// store describes that data without reading it all. It reads the tuple
// pages of up to 16 pages spread over the volume, and checks up to 64 of
// their written blocks, spread over them, against their tuples: the guard
// and the sector sum, which depend on the data (the tags do not, and a
// remap in progress changes the ref tags). Blocks under an open intent
// (an interrupted write, which recovery resolves), escaped blocks and
// blocks that do not read are left out. Each block is read once, and
// nothing is recorded.
//
// With fewer than SampleMin written blocks in the pages read, or a
// manifest that does not describe dev's data (its format does not parse
// or check, it is larger than dev), nothing is checked: Open reports such
// manifests. Store failures are *InspectError (Op "store").
func SampleData(ctx context.Context, t *store.Tuples, dev io.ReaderAt, size int64) (DataSample, error) {
	m := t.Manifest()
	f, err := dif.Parse(m.Format)
	if err != nil {
		return DataSample{}, nil
	}
	f = f.WithLayout(dif.Separate)
	if f.MetadataSize() != f.TupleSize() || m.Blocks() <= 0 || size < m.Blocks()*int64(f.BlockSize()) {
		return DataSample{}, nil
	}
	pages, total, err := sampledPages(t, f, m)
	if err != nil {
		return DataSample{}, err
	}
	k := min(total, sampleBlocks)
	if k < SampleMin {
		return DataSample{}, nil
	}
	// Check k of them, the j-th at written index j*total/k.
	pick := func(j int) int { return int(int64(j) * int64(total) / int64(k)) }
	c := sampleChecker{f: f, m: m, t: t, dev: dev, data: device.AlignedBuffer(f.BlockSize()), tuple: make([]byte, f.TupleSize())}
	if m.SectorSums {
		c.sum = make([]uint32, 1)
	}
	var s DataSample
	base, j := 0, 0 // written blocks in the pages before p; blocks picked
	for _, p := range pages {
		seen := 0
		for i := 0; i < p.n && j < k; i++ {
			if !p.written.Has(i) {
				continue
			}
			idx := base + seen
			seen++
			if idx != pick(j) {
				continue
			}
			j++
			if ctx.Err() != nil {
				return s, context.Cause(ctx)
			}
			checked, failed, err := c.check(p.lba + int64(i))
			if errors.Is(err, errNoSample) {
				return DataSample{}, nil
			}
			if err != nil {
				return s, err
			}
			if checked {
				s.Checked++
			}
			if failed {
				s.Failed++
			}
		}
		base += p.count
	}
	return s, nil
}

// sampledPage is one tuple page of SampleData: its first block, its
// blocks, and which of them are written and under no intent.
type sampledPage struct {
	lba     int64
	n       int
	written store.Bitmap
	count   int
}

// sampledPages reads the tuple pages SampleData samples, spread over the
// volume, and returns them with the number of their written blocks.
func sampledPages(t *store.Tuples, f dif.Format, m store.Manifest) ([]sampledPage, int, error) {
	blocks, ts := m.Blocks(), f.TupleSize()
	pt := int64(m.PageTuples)
	if pt <= 0 {
		pt = store.DefaultPageTuples
	}
	pages := (blocks + pt - 1) / pt
	np := min(pages, samplePages)
	var sp []sampledPage
	tuples := make([]byte, pt*int64(ts))
	var sums []uint32
	if m.SectorSums {
		sums = make([]uint32, pt)
	}
	total := 0
	for i := range np {
		page := int64(0)
		if np > 1 {
			page = i * (pages - 1) / (np - 1)
		}
		lba := page * pt
		n := int(min(pt, blocks-lba))
		w := store.NewBitmap(n)
		var s []uint32
		if sums != nil {
			s = sums[:n]
		}
		if _, err := t.ReadRange(lba, tuples[:n*ts], s, w); err != nil {
			return nil, 0, &InspectError{Op: "store", LBA: lba, Err: err}
		}
		for in, err := range t.Intents(lba, int64(n)) {
			if err != nil {
				return nil, 0, &InspectError{Op: "store", LBA: lba, Err: err}
			}
			for b := max(in.LBA, lba); b < min(in.LBA+in.N, lba+int64(n)); b++ {
				w.Clear(int(b - lba))
			}
		}
		c := w.Count(n)
		sp = append(sp, sampledPage{lba: lba, n: n, written: w, count: c})
		total += c
	}
	return sp, total, nil
}

// sampleChecker checks one written block of SampleData against its tuple.
type sampleChecker struct {
	f     dif.Format
	m     store.Manifest
	t     *store.Tuples
	dev   io.ReaderAt
	data  []byte
	tuple []byte
	sum   []uint32 // nil without sector sums
}

// errNoSample stops a sample that cannot decide: the manifest's tags do
// not fit its format (Open reports it).
var errNoSample = errors.New("blockdev: no sample")

// check reads block lba and its tuple and reports whether the block
// counts (it read and is not escaped) and whether it failed: its guard or
// its sector sum. It fails with errNoSample for a manifest whose tags do
// not fit the format.
func (c *sampleChecker) check(lba int64) (checked, failed bool, err error) {
	if _, err := c.t.ReadRange(lba, c.tuple, c.sum, nil); err != nil {
		return false, false, &InspectError{Op: "store", LBA: lba, Err: err}
	}
	if _, err := c.dev.ReadAt(c.data, lba*int64(c.f.BlockSize())); err != nil {
		return false, false, nil // unreadable: verify reports it
	}
	p := c.f.ParamsAt(dif.Params{RefTag: c.m.InitialRefTag, AppTag: c.m.AppTag, AppMask: c.m.AppTagMask}, lba)
	p.Skip = dif.CheckAppTag | dif.CheckRefTag | dif.CheckStorageTag
	var states [1]dif.State
	if _, err := c.f.Classify(&dif.Classification{States: states[:]}, c.data, c.tuple, p); err != nil {
		return false, false, errNoSample
	}
	switch {
	case states[0] == dif.StateFailed:
		return true, true, nil
	case states[0] != dif.StateOK:
		return false, false, nil // escaped (or all-ones): says nothing of the data
	case c.sum != nil && dif.SectorSum(c.data) != c.sum[0]:
		return true, true, nil
	}
	return true, false, nil
}
