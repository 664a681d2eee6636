package pisource

import (
	"bytes"
	"context"
	"testing"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// TestImportImage imports a Source into a volume (blockdev.ImportImage,
// whose own tests use an image in memory): both layouts, a format whose
// ref tags advance with the LBA, unwritten blocks, and with Force a block
// that fails, which the volume keeps failing.
func TestImportImage(t *testing.T) {
	const blocks, bad = 300, 17
	for _, layout := range []dif.Layout{dif.Interleaved, dif.Separate} {
		t.Run("layout="+layoutName(layout), func(t *testing.T) {
			x := newFixture(t, "512+8", layout, blocks, []int{3, 200, 201}, []hit{{lba: bad, field: dif.FieldGuard, bit: 5}})
			dp, mp := x.write(t, t.TempDir())
			src := openSource(t, x.f, x.p, dp, mp)
			mem, err := device.NewMem(blocks*512, 512)
			if err != nil {
				t.Fatal(err)
			}
			kv := store.NewMem()
			defer kv.Close()
			var probs []blockdev.Problem
			v, rep, err := blockdev.ImportImage(context.Background(), src, mem, kv, blockdev.ImportOptions{
				Force: true, RunBytes: 64 * 512, OnProblem: func(p blockdev.Problem) { probs = append(probs, p) }})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			if rep.Unwritten != 3 || rep.Failed != 1 || len(probs) != 1 || probs[0].LBA != bad || probs[0].Kind != blockdev.KindGuard {
				t.Fatalf("import: %+v, problems %+v", rep.RunStats, probs)
			}
			if m := v.Manifest(); m.InitialRefTag != x.p.RefTag || m.AppTag != x.p.AppTag {
				t.Errorf("manifest %+v, params %+v", m, x.p)
			}
			// The data of every block but the failing and unwritten ones.
			got := make([]byte, 512)
			for b := range blocks {
				_, err := v.ReadAt(got, int64(b)*512)
				want := blockData(x, b)
				switch {
				case b == bad:
					if err == nil {
						t.Errorf("block %d: read, want its integrity error", b)
					}
				case b == 3 || b == 200 || b == 201:
					if err != nil || !bytes.Equal(got, make([]byte, 512)) {
						t.Errorf("unwritten block %d: %v, zeros %v", b, err, bytes.Equal(got, make([]byte, 512)))
					}
				case err != nil || !bytes.Equal(got, want):
					t.Errorf("block %d: %v, equal %v", b, err, bytes.Equal(got, want))
				}
			}
		})
	}
}

// blockData returns the data of block b of the fixture.
func blockData(x *piFixture, b int) []byte {
	if x.f.Layout() == dif.Interleaved {
		es := x.f.ExtendedBlockSize()
		return x.data[b*es : b*es+512]
	}
	return x.data[b*512 : (b+1)*512]
}
