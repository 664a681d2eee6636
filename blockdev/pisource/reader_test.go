package pisource

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
)

// memReader is a BlockReader over a fixture in memory; reads of the blocks
// in bad fail, as a device's media error does.
type memReader struct {
	x   *piFixture
	bad map[int64]bool
}

func (m *memReader) Blocks() int64     { return int64(m.x.blocks) }
func (m *memReader) BlockSize() int    { return m.x.f.BlockSize() }
func (m *memReader) MetaSize() int     { return m.x.f.MetadataSize() }
func (m *memReader) Interleaved() bool { return m.x.f.Layout() == dif.Interleaved }

func (m *memReader) ReadBlocks(lba int64, n int, data, md []byte) error {
	if lba < 0 || lba+int64(n) > m.Blocks() {
		return fmt.Errorf("memReader: %d+%d: %w", lba, n, device.ErrOutOfRange)
	}
	for i := lba; i < lba+int64(n); i++ {
		if m.bad[i] {
			return fmt.Errorf("memReader: media error at %d", i)
		}
	}
	if m.Interleaved() {
		ss := int64(m.x.f.ExtendedBlockSize())
		copy(data[:int64(n)*ss], m.x.data[lba*ss:])
		return nil
	}
	bs, ms := int64(m.BlockSize()), int64(m.MetaSize())
	copy(data[:int64(n)*bs], m.x.data[lba*bs:])
	copy(md[:int64(n)*ms], m.x.md[lba*ms:])
	return nil
}

// TestReaderSource: a Source over a BlockReader reports the same blocks
// and fields as one over the files of the same image, in both layouts,
// and a block the reader cannot read as KindIO with its LBA only.
func TestReaderSource(t *testing.T) {
	for _, format := range []string{"512+8", "4096+16:crc64", "512+16:pi-first:type3"} {
		for _, layout := range []dif.Layout{dif.Interleaved, dif.Separate} {
			t.Run(fmt.Sprintf("format=%s/layout=%s", format, layoutName(layout)), func(t *testing.T) {
				const blocks = 100
				hits := []hit{{3, dif.FieldData, 5}, {40, dif.FieldAppTag, 0}, {99, dif.FieldGuard, 2}}
				if dif.MustFormat(format).Type() != dif.Type3 {
					hits = append(hits, hit{41, dif.FieldRefTag, 1})
				}
				x := newFixture(t, format, layout, blocks, []int{7}, hits)
				r := &memReader{x: x, bad: map[int64]bool{60: true}}
				s, err := NewReaderSource(r, x.f.WithLayout(1-layout), x.p)
				if err != nil {
					t.Fatal(err)
				}
				if s.Format().Layout() != layout {
					t.Errorf("source layout %v, want the reader's %v", s.Format().Layout(), layout)
				}
				var got []blockdev.Problem
				var total blockdev.RunStats
				scratch := make([]byte, s.ScratchSize(32))
				for lba := int64(0); lba < blocks; lba += 32 {
					n := int(min(32, blocks-lba))
					st, err := s.CheckRun(context.Background(), lba, n, scratch, blockdev.CheckOptions{Rereads: 1}, func(p blockdev.Problem) {
						got = append(got, blockdev.Problem{LBA: p.LBA, Kind: p.Kind})
					})
					if err != nil {
						t.Fatal(err)
					}
					total.Add(st)
				}
				want := append(x.badSet(), blockdev.Problem{LBA: 60, Kind: blockdev.KindIO})
				slices.SortFunc(want, cmpProblem)
				slices.SortFunc(got, cmpProblem)
				if !slices.Equal(got, want) {
					t.Errorf("problems %v, want %v", got, want)
				}
				if total.Unwritten != 1 || total.Failed != int64(len(want)) || total.Blocks != blocks {
					t.Errorf("stats %+v", total)
				}
				if _, err := s.CheckRun(context.Background(), blocks-1, 2, make([]byte, s.ScratchSize(2)), blockdev.CheckOptions{}, nil); !errors.Is(err, device.ErrOutOfRange) {
					t.Errorf("a run past the end: %v", err)
				}
			})
		}
	}
	if _, err := NewReaderSource(nil, dif.MustFormat("512+8"), dif.Params{}); err == nil {
		t.Error("nil reader accepted")
	}
}
