package scrub

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/faultdev"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/blockdev/pisource"
	"github.com/difctl/difctl/dif"
)

// The fixtures of the scrub tests: generated PI images with injected
// corruptions, as files or over a fault device. They mirror the fixtures
// of package blockdev/pisource's own tests, which a test of another
// package cannot reach.

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
func (x *piFixture) badSet() []Finding {
	var out []Finding
	for _, h := range x.hits {
		out = append(out, Finding{LBA: int64(h.lba), Kind: h.kind()})
	}
	slices.SortFunc(out, cmpFinding)
	return slices.CompactFunc(out, func(a, b Finding) bool { return cmpFinding(a, b) == 0 })
}

func cmpFinding(a, b Finding) int {
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

// keys strips findings to (LBA, Kind), keeping their order.
func keys(fs []Finding) []Finding {
	out := make([]Finding, len(fs))
	for i, f := range fs {
		out[i] = Finding{LBA: f.LBA, Kind: f.Kind}
	}
	return out
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

// source writes the fixture to files and opens a pisource.Source over them.
func (x *piFixture) source(t testing.TB, dir string) *pisource.Source {
	t.Helper()
	dp, mp := x.write(t, dir)
	return openSource(t, x.f, x.p, dp, mp)
}

func openSource(t testing.TB, f dif.Format, p dif.Params, dp, mp string) *pisource.Source {
	t.Helper()
	var s *pisource.Source
	if mp == "" {
		img, err := pisource.OpenExtendedImage(dp, f.BlockSize(), f.MetadataSize())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { img.Close() })
		if s, err = pisource.NewExtendedSource(img, f, p); err != nil {
			t.Fatal(err)
		}
	} else {
		pair, err := pisource.OpenDIXPair(dp, mp, f.BlockSize(), f.MetadataSize())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pair.Close() })
		if s, err = pisource.NewDIXSource(pair, f, p); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// faultySource returns a pisource.Source over x held in a faultdev.Device, for
// transient and permanent read faults.
func faultySource(t *testing.T, x *piFixture) (*pisource.Source, *faultdev.Device) {
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
	img, err := pisource.NewExtendedImage(fd, fd.Size(), x.f.BlockSize(), x.f.MetadataSize())
	if err != nil {
		t.Fatal(err)
	}
	s, err := pisource.NewExtendedSource(img, x.f, x.p)
	if err != nil {
		t.Fatal(err)
	}
	return s, fd
}

func layoutName(l dif.Layout) string { return l.String() }

// benchReq is the request size of the pread baseline.
const benchReq = 1 << 20
