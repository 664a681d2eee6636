package blockdev

import (
	"context"
	"fmt"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/check"
	"github.com/difctl/difctl/dif"
)

// memImage is an ImportSource over an image with its own PI in memory:
// extended (meta nil) or a DIX pair. The package's tests cannot import
// blockdev/pisource, which imports blockdev; its Source is imported in its
// own tests. CheckRun is the simplest one: block by block, no re-reads.
type memImage struct {
	f          dif.Format // in the image's layout
	ip         check.ImageParams
	data, meta []byte
	blocks     int64
}

// newMemImage returns the image of format f (its layout: Interleaved with
// meta nil, Separate otherwise) whose block 0 has params p.
func newMemImage(t testing.TB, f dif.Format, p dif.Params, data, meta []byte) *memImage {
	t.Helper()
	if meta == nil {
		f = f.WithLayout(dif.Interleaved)
	} else {
		f = f.WithLayout(dif.Separate)
	}
	m := &memImage{f: f, ip: check.NewImageParams(f, p), data: data, meta: meta}
	if meta == nil {
		m.blocks = int64(len(data) / f.ExtendedBlockSize())
	} else {
		m.blocks = int64(len(data) / f.BlockSize())
	}
	if meta == nil && len(data)%f.ExtendedBlockSize() != 0 || meta != nil && (len(data)%f.BlockSize() != 0 || int64(len(meta)) != m.blocks*int64(f.MetadataSize())) {
		t.Fatalf("an image of %d+%d bytes in format %v", len(data), len(meta), f)
	}
	return m
}

func (m *memImage) Format() dif.Format    { return m.f }
func (m *memImage) Params() dif.Params    { return m.ip.P }
func (m *memImage) Blocks() int64         { return m.blocks }
func (m *memImage) BlockSize() int        { return m.f.BlockSize() }
func (m *memImage) ScratchSize(n int) int { return 0 }

// block returns block lba as ImportSource.ReadBlocks lays it out.
func (m *memImage) block(lba int64) (data, md []byte) {
	if m.meta == nil {
		es := int64(m.f.ExtendedBlockSize())
		return m.data[lba*es : (lba+1)*es], nil
	}
	bs, ms := int64(m.f.BlockSize()), int64(m.f.MetadataSize())
	return m.data[lba*bs : (lba+1)*bs], m.meta[lba*ms : (lba+1)*ms]
}

func (m *memImage) ReadBlocks(lba int64, n int, data, meta []byte) error {
	if lba < 0 || n < 0 || lba+int64(n) > m.blocks {
		return fmt.Errorf("%d blocks at %d, of %d: %w", n, lba, m.blocks, device.ErrOutOfRange)
	}
	for i := range int64(n) {
		d, md := m.block(lba + i)
		copy(data[i*int64(len(d)):], d)
		copy(meta[i*int64(len(md)):], md)
	}
	return nil
}

func (m *memImage) CheckRun(ctx context.Context, lba int64, n int, _ []byte, _ CheckOptions, report func(Problem)) (RunStats, error) {
	if err := ctx.Err(); err != nil {
		return RunStats{}, err
	}
	st := RunStats{Blocks: int64(n)}
	for b := lba; b < lba+int64(n); b++ {
		d, md := m.block(b)
		var state [1]dif.State
		if _, err := m.f.Classify(&dif.Classification{States: state[:]}, d, md, m.ip.At(b)); err != nil {
			return RunStats{}, err
		}
		if state[0] == dif.StateFailed && report != nil {
			check.Block{Format: m.f}.Failures(d, md, m.ip.At(b), true, 0, func(ce *dif.CheckError) error {
				report(ProblemOf(ce))
				return nil
			})
		}
		st.Count(state[0])
	}
	return st, nil
}

var _ ImportSource = (*memImage)(nil)
