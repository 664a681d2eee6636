package pisource

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
)

func TestExtendedImage(t *testing.T) {
	for _, l := range []struct{ data, meta int }{{512, 8}, {4096, 8}, {4096, 16}, {4096, 64}} {
		for _, bufSectors := range []int{1, 3, 64} {
			t.Run(fmt.Sprintf("data=%d/meta=%d/buf=%d", l.data, l.meta, bufSectors), func(t *testing.T) {
				ss := l.data + l.meta
				const sectors = 37
				raw := blocktest.Pattern(ss*sectors, uint64(ss))
				p := blocktest.WriteImage(t, t.TempDir(), raw)
				x, err := OpenExtendedImage(p, l.data, l.meta)
				if err != nil {
					t.Fatal(err)
				}
				defer x.Close()
				if x.Sectors() != sectors || x.SectorSize() != ss || x.DataSize() != l.data || x.MetaSize() != l.meta {
					t.Fatalf("geometry %d %d", x.Sectors(), x.SectorSize())
				}
				buf := make([]byte, bufSectors*ss)
				next := int64(5)
				for run, err := range x.Runs(5, 30, buf) {
					if err != nil {
						t.Fatal(err)
					}
					if run.LBA != next || run.N < 1 || run.N > bufSectors || len(run.Buf) != run.N*ss {
						t.Fatalf("run %+v after LBA %d", run, next)
					}
					if !bytes.Equal(run.Buf, raw[run.LBA*int64(ss):][:run.N*ss]) {
						t.Fatalf("run at %d differs", run.LBA)
					}
					// The metadata of each sector sits after its data.
					meta := run.Buf[l.data:ss]
					if !bytes.Equal(meta, raw[run.LBA*int64(ss)+int64(l.data):][:l.meta]) {
						t.Fatal("metadata misplaced")
					}
					next += int64(run.N)
				}
				if next != 35 {
					t.Fatalf("runs ended at %d, want 35", next)
				}
				if err := x.ReadSectors(sectors-1, 1, buf); err != nil {
					t.Fatal(err)
				}
				for _, c := range []struct {
					lba int64
					n   int
				}{{-1, 1}, {sectors, 1}, {sectors - 1, 2}, {0, -1}, {1 << 62, 1}} {
					if err := x.ReadSectors(c.lba, c.n, buf); !errors.Is(err, device.ErrOutOfRange) {
						t.Errorf("ReadSectors(%d, %d): %v", c.lba, c.n, err)
					}
				}
				if err := x.ReadSectors(0, bufSectors+1, buf); err == nil {
					t.Error("ReadSectors into a small buffer succeeded")
				}
			})
		}
	}
}

func TestExtendedImageErrors(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x")
	if err := os.WriteFile(p, make([]byte, 520*3+1), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := OpenExtendedImage(p, 512, 8)
	var se *SizeError
	if !errors.As(err, &se) || se.Size != 520*3+1 || se.Unit != 520 {
		t.Fatalf("odd size: %v, want *SizeError", err)
	}
	for _, l := range [][2]int{{500, 8}, {512, 0}, {512, -8}, {0, 8}} {
		if _, err := NewExtendedImage(bytes.NewReader(nil), 0, l[0], l[1]); err == nil {
			t.Errorf("layout %v accepted", l)
		}
	}
	// A source shorter than it claims is an I/O error, not a short read.
	x, err := NewExtendedImage(bytes.NewReader(make([]byte, 520)), 1040, 512, 8)
	if err != nil {
		t.Fatal(err)
	}
	var ioe *device.IOError
	if err := x.ReadSectors(0, 2, make([]byte, 1040)); !errors.As(err, &ioe) {
		t.Fatalf("short source: %v, want *IOError", err)
	}
	for _, err := range x.Runs(0, 2, make([]byte, 100)) {
		if err == nil {
			t.Fatal("runs with a buffer smaller than a sector")
		}
	}
}

func TestDIXPair(t *testing.T) {
	for _, l := range []struct{ data, meta int }{{512, 8}, {4096, 8}, {4096, 16}} {
		t.Run(fmt.Sprintf("data=%d/meta=%d", l.data, l.meta), func(t *testing.T) {
			const blocks = 29
			dir := t.TempDir()
			data := blocktest.Pattern(blocks*l.data, 1)
			meta := blocktest.Pattern(blocks*l.meta, 2)
			dp, mp := filepath.Join(dir, "data"), filepath.Join(dir, "meta")
			if err := os.WriteFile(dp, data, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(mp, meta, 0o644); err != nil {
				t.Fatal(err)
			}
			x, err := OpenDIXPair(dp, mp, l.data, l.meta)
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			if x.Blocks() != blocks || x.BlockSize() != l.data || x.MetaSize() != l.meta {
				t.Fatal("geometry")
			}
			db, mb := make([]byte, 4*l.data), make([]byte, 3*l.meta) // runs of 3
			next := int64(2)
			for run, err := range x.Runs(2, 25, db, mb) {
				if err != nil {
					t.Fatal(err)
				}
				if run.LBA != next || run.N > 3 || len(run.Data) != run.N*l.data || len(run.Meta) != run.N*l.meta {
					t.Fatalf("run %d/%d after %d", run.LBA, run.N, next)
				}
				if !bytes.Equal(run.Data, data[run.LBA*int64(l.data):][:run.N*l.data]) ||
					!bytes.Equal(run.Meta, meta[run.LBA*int64(l.meta):][:run.N*l.meta]) {
					t.Fatalf("run at %d differs", run.LBA)
				}
				next += int64(run.N)
			}
			if next != 27 {
				t.Fatalf("runs ended at %d", next)
			}
			if err := x.ReadBlocks(blocks-1, 2, db, mb); !errors.Is(err, device.ErrOutOfRange) {
				t.Fatalf("ReadBlocks past the end: %v", err)
			}
			for _, err := range x.Runs(0, blocks+1, db, mb) {
				if !errors.Is(err, device.ErrOutOfRange) {
					t.Fatalf("Runs past the end: %v", err)
				}
			}
		})
	}
}

func TestDIXPairSizes(t *testing.T) {
	for _, c := range []struct {
		name          string
		dlen, mlen    int64
		wantUnit      int64
		wantWant      int64
		wantMetaError bool
	}{
		{"data-not-multiple", 4096 + 100, 64, 4096, 0, false},
		{"meta-short", 8192, 8, 0, 16, true},
		{"meta-long", 8192, 24, 0, 16, true},
		{"meta-without-data", 0, 8, 0, 0, true},
	} {
		t.Run("case="+c.name, func(t *testing.T) {
			_, err := NewDIXPair(bytes.NewReader(nil), c.dlen, bytes.NewReader(nil), c.mlen, 4096, 8)
			var se *SizeError
			if !errors.As(err, &se) {
				t.Fatalf("%v, want *SizeError", err)
			}
			if se.Unit != c.wantUnit || se.Want != c.wantWant || (se.Name == "metadata") != c.wantMetaError {
				t.Fatalf("%+v", se)
			}
		})
	}
	if _, err := OpenDIXPair(filepath.Join(t.TempDir(), "none"), "/dev/null", 512, 8); err == nil {
		t.Fatal("missing data file accepted")
	}
}
