package blockdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// memFile is a growable in-memory io.WriterAt / io.ReaderAt.
type memFile struct{ b []byte }

func (m *memFile) WriteAt(p []byte, off int64) (int, error) {
	if end := int(off) + len(p); end > len(m.b) {
		m.b = append(m.b, make([]byte, end-len(m.b))...)
	}
	return copy(m.b[off:], p), nil
}

func (m *memFile) ReadAt(p []byte, off int64) (int, error) {
	return copy(p, m.b[off:]), nil
}

// convertVol is a protected volume with some blocks rewritten, blocks
// [10, 20) discarded and block 7's app tag... left alone; its model.
func convertVol(t *testing.T, format string, blocks int) *testVol {
	t.Helper()
	tv := newTestVol(t, format, blocks, CreateOptions{InitialRefTag: 0x100, Options: Options{StagingBytes: 64 << 10}})
	bs := tv.v.BlockSize()
	tv.write(blocktest.Pattern(3*bs+5, 9), int64(bs/2))
	if err := tv.v.Discard(int64(10*bs), int64(10*bs)); err != nil {
		t.Fatal(err)
	}
	clear(tv.model[10*bs : 20*bs])
	if err := tv.v.Sync(); err != nil {
		t.Fatal(err)
	}
	return tv
}

// checkImage verifies an exported image with its own PI and returns the
// source.
func checkImage(t *testing.T, f dif.Format, p dif.Params, data, meta []byte, wantFailed, wantUnwritten int64) *memImage {
	t.Helper()
	src := newMemImage(t, f, p, data, meta)
	st, err := src.CheckRun(context.Background(), 0, int(src.Blocks()), make([]byte, src.ScratchSize(int(src.Blocks()))), CheckOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Failed != wantFailed || st.Unwritten != wantUnwritten {
		t.Fatalf("exported image: %+v, want %d failed, %d unwritten", st, wantFailed, wantUnwritten)
	}
	return src
}

// storedTuples returns every committed tuple and the written bitmap.
func storedTuples(t *testing.T, tup *store.Tuples) ([]byte, store.Bitmap) {
	t.Helper()
	n := int(tup.Blocks())
	tu, w := make([]byte, n*tup.TupleSize()), store.NewBitmap(n)
	if _, err := tup.ReadRange(0, tu, nil, w); err != nil {
		t.Fatal(err)
	}
	return tu, w
}

func TestExportImportRoundTrip(t *testing.T) {
	for _, format := range volFormats {
		for _, layout := range []string{"interleaved", "dix"} {
			t.Run(fmt.Sprintf("format=%s/layout=%s", format, layout), func(t *testing.T) {
				ctx := context.Background()
				const blocks = 300
				tv := convertVol(t, format, blocks)
				f := tv.v.Format()
				bs := f.BlockSize()
				data, meta := &memFile{}, &memFile{}
				dst := ExportDest{Data: data}
				if layout == "dix" {
					dst.Meta = meta
				}
				var last int64
				rep, err := ExportVolume(ctx, tv.v, dst, ExportOptions{RunBytes: 37 * bs, Progress: func(done, total int64) { last = done }})
				if err != nil {
					t.Fatal(err)
				}
				if rep.Blocks != blocks || rep.Unwritten != 10 || rep.Failed != 0 || rep.Next != blocks || last != int64(blocks*bs) {
					t.Fatalf("export report %+v (progress %d)", rep, last)
				}
				p := dif.Params{RefTag: 0x100}
				var m []byte
				if layout == "dix" {
					m = meta.b
					if !bytes.Equal(data.b, tv.model) {
						t.Fatal("exported data differs from the volume's")
					}
				}
				src := checkImage(t, f, p, data.b, m, 0, 10)

				// Import into a new volume: the same data, the same tuples.
				mem, _ := device.NewMem(int64(blocks*bs), min(bs, 4096))
				kv := store.NewMem()
				v2, irep, err := ImportImage(ctx, src, mem, kv, ImportOptions{RunBytes: 29 * bs, CheckpointBytes: int64(100 * bs), Options: Options{Name: "copy"}})
				if err != nil {
					t.Fatal(err)
				}
				defer v2.Close()
				if irep.Blocks != blocks || irep.Unwritten != 10 || irep.Resumed || irep.Next != blocks {
					t.Fatalf("import report %+v", irep)
				}
				if m := v2.Manifest(); m.InitialRefTag != 0x100 || m.Format != tv.v.Manifest().Format || m.SectorSums != tv.v.Manifest().SectorSums {
					t.Fatalf("imported manifest %+v", m)
				}
				got := make([]byte, blocks*bs)
				if _, err := v2.ReadAt(got, 0); err != nil || !bytes.Equal(got, tv.model) {
					t.Fatalf("imported volume reads differently (%v)", err)
				}
				t1, w1 := storedTuples(t, tv.v.Tuples())
				t2, w2 := storedTuples(t, v2.Tuples())
				if !bytes.Equal(t1, t2) || !slicesEqual(w1, w2) {
					t.Fatal("imported tuples differ from the original volume's")
				}
				// And back: byte-identical.
				data2, meta2 := &memFile{}, &memFile{}
				dst2 := ExportDest{Data: data2}
				if layout == "dix" {
					dst2.Meta = meta2
				}
				if _, err := ExportVolume(ctx, v2, dst2, ExportOptions{}); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(data.b, data2.b) || !bytes.Equal(meta.b, meta2.b) {
					t.Fatal("second export differs from the first")
				}
			})
		}
	}
}

func slicesEqual(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestExportFailing(t *testing.T) {
	ctx := context.Background()
	tv := convertVol(t, "4096+8", 64)
	bs := int64(tv.v.BlockSize())
	if err := tv.fault.FlipBit(40*bs+3, 1); err != nil {
		t.Fatal(err)
	}
	if err := tv.fault.FlipBit(50*bs+9, 0); err != nil {
		t.Fatal(err)
	}
	var seen []Problem
	out := &memFile{}
	rep, err := ExportVolume(ctx, tv.v, ExportDest{Data: out}, ExportOptions{RunBytes: int(8 * bs), Rereads: -1, OnProblem: func(p Problem) { seen = append(seen, p) }})
	var ie *IntegrityError
	if !errors.As(err, &ie) || !errors.Is(err, dif.ErrIntegrity) || ie.Failed != 2 || ie.LBA != 40 {
		t.Fatalf("export of a failing volume: %v", err)
	}
	if rep.Failed != 2 || rep.Blocks != 64 || rep.Next != 40 || int64(len(out.b)) != 40*(bs+8) {
		t.Fatalf("report %+v, %d bytes written", rep, len(out.b))
	}
	// Both blocks fail the guard and the sector checksum.
	if len(seen) != 4 || seen[0].LBA != 40 || seen[2].LBA != 50 {
		t.Fatalf("problems %+v", seen)
	}
	// Forced: everything is written, the failures travel with the image.
	out = &memFile{}
	rep, err = ExportVolume(ctx, tv.v, ExportDest{Data: out}, ExportOptions{Force: true, Rereads: -1})
	if err != nil || rep.Failed != 2 || rep.Next != 64 {
		t.Fatalf("forced export: %+v, %v", rep, err)
	}
	src := checkImage(t, tv.v.Format(), dif.Params{RefTag: 0x100}, out.b, nil, 2, 10)

	// Importing the failing image is refused before anything is written.
	mem, _ := device.NewMem(64*bs, 4096)
	kv := store.NewMem()
	seen = nil
	_, _, err = ImportImage(ctx, src, mem, kv, ImportOptions{OnProblem: func(p Problem) { seen = append(seen, p) }})
	if !errors.As(err, &ie) || ie.Failed != 2 || len(seen) != 2 {
		t.Fatalf("import of a failing image: %v (%d problems)", err, len(seen))
	}
	if vols, _ := store.Volumes(kv); len(vols) != 0 || mem.Allocated() != 0 {
		t.Fatalf("refused import left volumes %v and %d bytes of data", vols, mem.Allocated())
	}
	// Forced, the volume keeps failing the same blocks.
	v, rep, err := ImportImage(ctx, src, mem, kv, ImportOptions{Force: true})
	if err != nil || rep.Failed != 2 {
		t.Fatalf("forced import: %+v, %v", rep, err)
	}
	defer v.Close()
	if _, err := v.ReadAt(make([]byte, bs), 40*bs); !errors.Is(err, dif.ErrGuard) {
		t.Fatalf("block 40 of the forced import: %v", err)
	}
	if _, err := v.ReadAt(make([]byte, bs), 41*bs); err != nil {
		t.Fatal(err)
	}
	// A volume that exists is not imported over.
	if _, _, err := ImportImage(ctx, src, mem, kv, ImportOptions{Force: true}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("import over an existing volume: %v", err)
	}
}

func TestImportResume(t *testing.T) {
	ctx := context.Background()
	f := dif.MustFormat("512+8")
	const blocks = 5000
	img := blocktest.Pattern(blocks*f.ExtendedBlockSize(), 5)
	if err := f.Generate(img, nil, dif.Params{RefTag: 77}); err != nil {
		t.Fatal(err)
	}
	// Blocks 1000-1099 unwritten.
	for b := 1000; b < 1100; b++ {
		blk := img[b*520 : (b+1)*520]
		clear(blk[:512])
		copy(blk[512:], []byte{0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	}
	src := newMemImage(t, f, dif.Params{RefTag: 77}, img, nil)
	mem, _ := device.NewMem(blocks*512, 512)
	kv := store.NewMem()
	cctx, cancel := context.WithCancel(ctx)
	opts := ImportOptions{RunBytes: 64 * 512, CheckpointBytes: 512 * 512, Force: true}
	opts.Progress = func(done, total int64) {
		if done >= 2000*512 {
			cancel()
		}
	}
	_, rep, err := ImportImage(cctx, src, mem, kv, opts)
	if !errors.Is(err, context.Canceled) || rep.Next < 2000 || rep.Next >= blocks {
		t.Fatalf("interrupted import: %+v, %v", rep, err)
	}
	// Nothing opens the volume meanwhile.
	if _, err := Open(ctx, mem, kv, Options{}); !errors.Is(err, store.ErrInProgress) {
		t.Fatalf("Open during an import: %v", err)
	}
	if _, err := Create(ctx, mem, kv, CreateOptions{Format: dif.MustFormat("512+8:dix")}); !errors.Is(err, store.ErrInProgress) {
		t.Fatalf("Create during an import: %v", err)
	}
	opts.Progress = nil
	v, rep, err := ImportImage(ctx, src, mem, kv, opts)
	if err != nil || !rep.Resumed || rep.Start == 0 || rep.Next != blocks {
		t.Fatalf("resumed import: %+v, %v", rep, err)
	}
	defer v.Close()
	out := &memFile{}
	erep, err := ExportVolume(ctx, v, ExportDest{Data: out}, ExportOptions{})
	if err != nil || erep.Unwritten != 100 || !bytes.Equal(out.b, img) {
		t.Fatalf("export of the resumed import: %+v, %v, identical %v", erep, err, bytes.Equal(out.b, img))
	}
}
