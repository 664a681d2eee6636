package pisource

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/faultdev"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
)

// hit is a corruption injected into a fixture: one bit of one field of one
// block (dif Format.Inject).
type hit struct {
	lba   int
	field dif.Field
	bit   int
}

// kind is the Kind a scrub must report for h.
func (h hit) kind() blockdev.Kind {
	switch h.field {
	case dif.FieldData, dif.FieldMetadata, dif.FieldGuard:
		return blockdev.KindGuard
	}
	return blockdev.KindOf(h.field)
}

// piFixture is a generated PI image: data and md in the format's layout,
// with corruptions and unwritten blocks.
type piFixture struct {
	f         dif.Format
	p         dif.Params
	blocks    int
	data, md  []byte
	hits      []hit
	unwritten []int
}

// testParams checks the app tag, so that app tag corruptions are seen.
var testParams = dif.Params{RefTag: 1000, AppTag: 0x1234, AppMask: 0xFFFF}

// newFixture generates blocks blocks of format (text form) in layout,
// then marks unwritten blocks and injects hits.
func newFixture(t testing.TB, format string, layout dif.Layout, blocks int, unwritten []int, hits []hit) *piFixture {
	t.Helper()
	f := dif.MustFormat(format).WithLayout(layout)
	x := &piFixture{f: f, p: testParams, blocks: blocks, hits: hits, unwritten: unwritten}
	src := blocktest.Pattern(blocks*f.BlockSize(), uint64(blocks))
	if layout == dif.Interleaved {
		x.data = make([]byte, blocks*f.ExtendedBlockSize())
	} else {
		x.data = make([]byte, blocks*f.BlockSize())
		x.md = make([]byte, blocks*f.MetadataSize())
	}
	if err := f.Insert(x.data, x.md, src, x.p); err != nil {
		t.Fatal(err)
	}
	for _, b := range unwritten {
		if err := f.WriteTuple(x.data, x.md, b, f.UnwrittenTuple()); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range hits {
		if err := f.Inject(x.data, x.md, h.lba, h.field, h.bit); err != nil {
			t.Fatal(err)
		}
	}
	return x
}

// badSet returns the (LBA, Kind) pairs a scrub must report.
func (x *piFixture) badSet() []blockdev.Problem {
	var out []blockdev.Problem
	for _, h := range x.hits {
		out = append(out, blockdev.Problem{LBA: int64(h.lba), Kind: h.kind()})
	}
	slices.SortFunc(out, cmpProblem)
	return slices.CompactFunc(out, func(a, b blockdev.Problem) bool { return cmpProblem(a, b) == 0 })
}

func cmpProblem(a, b blockdev.Problem) int {
	if a.LBA != b.LBA {
		if a.LBA < b.LBA {
			return -1
		}
		return 1
	}
	switch {
	case a.Kind < b.Kind:
		return -1
	case a.Kind > b.Kind:
		return 1
	}
	return 0
}

// write stores the fixture in files under dir and returns its paths
// (the metadata path is empty for interleaved).
func (x *piFixture) write(t testing.TB, dir string) (dataPath, metaPath string) {
	t.Helper()
	dataPath = filepath.Join(dir, "image")
	if err := os.WriteFile(dataPath, x.data, 0o644); err != nil {
		t.Fatal(err)
	}
	if x.f.Layout() == dif.Separate {
		metaPath = filepath.Join(dir, "image.meta")
		if err := os.WriteFile(metaPath, x.md, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dataPath, metaPath
}

// source writes the fixture to files and opens a Source over them.
func (x *piFixture) source(t testing.TB, dir string) *Source {
	t.Helper()
	dp, mp := x.write(t, dir)
	return openSource(t, x.f, x.p, dp, mp)
}

func openSource(t testing.TB, f dif.Format, p dif.Params, dp, mp string) *Source {
	t.Helper()
	var s *Source
	if mp == "" {
		img, err := OpenExtendedImage(dp, f.BlockSize(), f.MetadataSize())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { img.Close() })
		if s, err = NewExtendedSource(img, f, p); err != nil {
			t.Fatal(err)
		}
	} else {
		pair, err := OpenDIXPair(dp, mp, f.BlockSize(), f.MetadataSize())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pair.Close() })
		if s, err = NewDIXSource(pair, f, p); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

var testFormats = []string{"512+8", "4096+8", "4096+16:crc32", "4096+16:crc64", "512+16:crc64:pi-first", "512+32:crc32", "4096+8:type3", "512+8:sts=8"}

func layoutName(l dif.Layout) string { return l.String() }

func TestSourceCheckRun(t *testing.T) {
	layouts := []dif.Layout{dif.Interleaved, dif.Separate}
	for _, format := range testFormats {
		for _, layout := range layouts {
			for _, run := range []int{1, 5, 64, 200} {
				t.Run(fmt.Sprintf("format=%s/layout=%s/run=%d", format, layoutName(layout), run), func(t *testing.T) {
					const blocks = 150
					f := dif.MustFormat(format)
					hits := []hit{{0, dif.FieldData, 3}, {4, dif.FieldGuard, 0}, {5, dif.FieldAppTag, 1}, {63, dif.FieldData, 4000}, {64, dif.FieldData, 0}, {149, dif.FieldAppTag, 0}}
					if f.Type() != dif.Type3 && f.RefTagBits() > 0 {
						hits = append(hits, hit{77, dif.FieldRefTag, 0})
					}
					if f.StorageTagBits() > 0 {
						hits = append(hits, hit{78, dif.FieldStorageTag, 0})
					}
					if f.MetadataSize() > f.TupleSize() && f.Position() == dif.PILast {
						hits = append(hits, hit{90, dif.FieldMetadata, 1})
					}
					unwritten := []int{10, 11, 12, 100}
					x := newFixture(t, format, layout, blocks, unwritten, hits)
					s := x.source(t, t.TempDir())
					if s.Blocks() != blocks || s.BlockSize() != f.BlockSize() {
						t.Fatalf("geometry %d x %d", s.Blocks(), s.BlockSize())
					}
					scratch := make([]byte, s.ScratchSize(run))
					var got []blockdev.Problem
					var total blockdev.RunStats
					for lba := int64(0); lba < blocks; lba += int64(run) {
						n := int(min(int64(run), blocks-lba))
						st, err := s.CheckRun(context.Background(), lba, n, scratch, blockdev.CheckOptions{}, func(p blockdev.Problem) {
							if p.LBA < lba || p.LBA >= lba+int64(n) || p.Transient || p.Err == nil {
								t.Errorf("problem %+v outside run %d+%d", p, lba, n)
							}
							got = append(got, blockdev.Problem{LBA: p.LBA, Kind: p.Kind})
						})
						if err != nil {
							t.Fatal(err)
						}
						if st.Blocks != int64(n) || st.OK+st.Escaped+st.Unwritten+st.Failed != st.Blocks {
							t.Fatalf("stats %+v for %d blocks", st, n)
						}
						total.Add(st)
					}
					want := x.badSet()
					if !slices.Equal(got, want) {
						t.Errorf("problems\n got %v\nwant %v", got, want)
					}
					bad := map[int64]bool{}
					for _, w := range want {
						bad[w.LBA] = true
					}
					wantStats := blockdev.RunStats{Blocks: blocks, OK: blocks - int64(len(unwritten)) - int64(len(bad)), Unwritten: int64(len(unwritten)), Failed: int64(len(bad))}
					if total != wantStats {
						t.Errorf("stats %+v, want %+v", total, wantStats)
					}
				})
			}
		}
	}
}

func TestSourceProblemValues(t *testing.T) {
	x := newFixture(t, "512+8", dif.Interleaved, 8, nil, []hit{{2, dif.FieldAppTag, 0}, {3, dif.FieldRefTag, 1}})
	s := x.source(t, t.TempDir())
	var got []blockdev.Problem
	if _, err := s.CheckRun(context.Background(), 0, 8, make([]byte, s.ScratchSize(8)), blockdev.CheckOptions{}, func(p blockdev.Problem) { got = append(got, p) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("problems %v", got)
	}
	if p := got[0]; p.LBA != 2 || p.Kind != blockdev.KindAppTag || p.Expected != 0x1234 || p.Actual != 0x1235 || !errors.Is(p.Err, dif.ErrAppTag) {
		t.Errorf("app tag problem %+v", p)
	}
	// Ref tag of block 3 is RefTag+3 = 1003; bit 1 flipped gives 1001.
	if p := got[1]; p.LBA != 3 || p.Kind != blockdev.KindRefTag || p.Expected != 1003 || p.Actual != 1001 {
		t.Errorf("ref tag problem %+v", p)
	}
	var ce *dif.CheckError
	if !errors.As(got[1].Err, &ce) || ce.LBA != 3 {
		t.Errorf("cause %v", got[1].Err)
	}
}

func TestSourceErrors(t *testing.T) {
	x := newFixture(t, "512+8", dif.Interleaved, 16, nil, nil)
	dir := t.TempDir()
	dp, _ := x.write(t, dir)
	img, err := OpenExtendedImage(dp, 512, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	var me *FormatMismatchError
	if _, err := NewExtendedSource(img, dif.MustFormat("4096+8"), dif.Params{}); !errors.As(err, &me) || me.Field != "block size" {
		t.Errorf("block size mismatch: %v", err)
	}
	if _, err := NewExtendedSource(img, dif.MustFormat("512+16:crc32"), dif.Params{}); !errors.As(err, &me) || me.Field != "metadata size" {
		t.Errorf("metadata size mismatch: %v", err)
	}
	if _, err := NewExtendedSource(img, dif.Format{}, dif.Params{}); err == nil {
		t.Error("zero format accepted")
	}
	if _, err := NewExtendedSource(img, dif.MustFormat("512+8"), dif.Params{RefTag: 1 << 40}); !errors.Is(err, dif.ErrParams) {
		t.Errorf("ref tag too wide: %v", err)
	}
	if _, err := NewExtendedSource(nil, dif.MustFormat("512+8"), dif.Params{}); err == nil {
		t.Error("nil image accepted")
	}
	if _, err := NewDIXSource(nil, dif.MustFormat("512+8"), dif.Params{}); err == nil {
		t.Error("nil pair accepted")
	}
	for _, err := range []error{me} {
		if err.Error()[:10] != "blockdev: " {
			t.Errorf("message %q", err)
		}
	}
	s, err := NewExtendedSource(img, dif.MustFormat("512+8"), testParams)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	buf := make([]byte, s.ScratchSize(16))
	for _, c := range []struct {
		lba int64
		n   int
	}{{-1, 1}, {16, 1}, {15, 2}, {0, -1}} {
		if _, err := s.CheckRun(ctx, c.lba, c.n, buf, blockdev.CheckOptions{}, nil); !errors.Is(err, device.ErrOutOfRange) {
			t.Errorf("CheckRun(%d, %d): %v", c.lba, c.n, err)
		}
	}
	if _, err := s.CheckRun(ctx, 0, 16, buf[:len(buf)-1], blockdev.CheckOptions{}, nil); err == nil {
		t.Error("short scratch accepted")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.CheckRun(cctx, 0, 16, buf, blockdev.CheckOptions{}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if st, err := s.CheckRun(ctx, 0, 16, buf, blockdev.CheckOptions{Uncached: true}, nil); err != nil || st.OK != 16 {
		t.Errorf("uncached: %+v %v", st, err)
	}
	img.Close()
	if _, err := s.CheckRun(ctx, 0, 16, buf, blockdev.CheckOptions{}, nil); err == nil {
		t.Error("closed image: no error")
	}
}

// faultySource returns a Source over x held in a faultdev.Device, for
// transient and permanent read faults.
func faultySource(t *testing.T, x *piFixture) (*Source, *faultdev.Device) {
	t.Helper()
	if x.f.Layout() != dif.Interleaved {
		t.Fatal("faultySource: interleaved fixtures only")
	}
	m, err := device.NewMem(int64(len(x.data)), 512)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.WriteAt(x.data, 0); err != nil {
		t.Fatal(err)
	}
	fd, err := faultdev.New(m, faultdev.Options{})
	if err != nil {
		t.Fatal(err)
	}
	img, err := NewExtendedImage(fd, fd.Size(), x.f.BlockSize(), x.f.MetadataSize())
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewExtendedSource(img, x.f, x.p)
	if err != nil {
		t.Fatal(err)
	}
	return s, fd
}

func TestSourceRereads(t *testing.T) {
	const blocks = 64 // 64*520 is a multiple of 512
	ss := int64(520)
	for _, c := range []struct {
		name    string
		fault   faultdev.Fault
		rereads int
		want    []blockdev.Problem // LBA, Kind, Transient
		stats   blockdev.RunStats
	}{
		{"fault=corrupt-once/rereads=0", faultdev.Fault{Kind: faultdev.CorruptRead, Bit: (9*ss + 100) * 8, Times: 1}, 0,
			[]blockdev.Problem{{LBA: 9, Kind: blockdev.KindGuard}}, blockdev.RunStats{Blocks: blocks, OK: blocks - 1, Failed: 1}},
		{"fault=corrupt-once/rereads=1", faultdev.Fault{Kind: faultdev.CorruptRead, Bit: (9*ss + 100) * 8, Times: 1}, 1,
			[]blockdev.Problem{{LBA: 9, Kind: blockdev.KindGuard, Transient: true}}, blockdev.RunStats{Blocks: blocks, OK: blocks, Transient: 1}},
		{"fault=corrupt-always/rereads=3", faultdev.Fault{Kind: faultdev.CorruptRead, Bit: (9*ss + 100) * 8}, 3,
			[]blockdev.Problem{{LBA: 9, Kind: blockdev.KindGuard}}, blockdev.RunStats{Blocks: blocks, OK: blocks - 1, Failed: 1}},
		{"fault=eio-once/rereads=0", faultdev.Fault{Kind: faultdev.FailRead, Off: 20 * ss, Len: 1, Times: 2}, 0,
			[]blockdev.Problem{{LBA: 20, Kind: blockdev.KindIO}}, blockdev.RunStats{Blocks: blocks, OK: blocks - 1, Failed: 1}},
		{"fault=eio-twice/rereads=1", faultdev.Fault{Kind: faultdev.FailRead, Off: 20 * ss, Len: 1, Times: 2}, 1,
			[]blockdev.Problem{{LBA: 20, Kind: blockdev.KindIO, Transient: true}}, blockdev.RunStats{Blocks: blocks, OK: blocks, Transient: 1}},
		{"fault=eio-always/rereads=2", faultdev.Fault{Kind: faultdev.FailRead, Off: 20*ss + 7, Len: ss + 1}, 2,
			[]blockdev.Problem{{LBA: 20, Kind: blockdev.KindIO}, {LBA: 21, Kind: blockdev.KindIO}}, blockdev.RunStats{Blocks: blocks, OK: blocks - 2, Failed: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := newFixture(t, "512+8", dif.Interleaved, blocks, nil, nil)
			s, fd := faultySource(t, x)
			if _, err := fd.Inject(c.fault); err != nil {
				t.Fatal(err)
			}
			var got []blockdev.Problem
			st, err := s.CheckRun(context.Background(), 0, blocks, make([]byte, s.ScratchSize(blocks)), blockdev.CheckOptions{Rereads: c.rereads}, func(p blockdev.Problem) {
				if p.Err == nil {
					t.Errorf("problem without cause: %+v", p)
				}
				got = append(got, blockdev.Problem{LBA: p.LBA, Kind: p.Kind, Transient: p.Transient})
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("problems %+v, want %+v", got, c.want)
			}
			if st != c.stats {
				t.Errorf("stats %+v, want %+v", st, c.stats)
			}
		})
	}
}

func TestSourceNoAllocs(t *testing.T) {
	if blocktest.RaceEnabled {
		t.Skip("allocation counts under the race detector are not meaningful")
	}
	for _, layout := range []dif.Layout{dif.Interleaved, dif.Separate} {
		t.Run("layout="+layoutName(layout), func(t *testing.T) {
			x := newFixture(t, "4096+8", layout, 256, []int{3}, nil)
			s := x.source(t, t.TempDir())
			scratch := make([]byte, s.ScratchSize(64))
			ctx := context.Background()
			report := func(blockdev.Problem) { t.Error("problem on a clean image") }
			allocs := testing.AllocsPerRun(20, func() {
				if _, err := s.CheckRun(ctx, 64, 64, scratch, blockdev.CheckOptions{}, report); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("%v allocations per clean run", allocs)
			}
		})
	}
}
