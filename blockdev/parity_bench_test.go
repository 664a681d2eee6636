package blockdev

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/blockdev/parity"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// The parity benchmarks measure what Reed-Solomon parity costs a volume,
// parity=none beside parity=16+2 at several interleave depths, over a
// page-cached 64 MiB 4096+8 image with its parity file on the same file
// system:
//
//	go test -run '^$' -bench 'Parity' ./blockdev
//
//   - seqwrite: sequential 1 MiB writes, a sync every 64 MiB (target: at
//     least 0.6x parity=none);
//   - randwrite: random 4 KiB writes, a sync every 4 MiB written: each
//     is a read-modify-write of its stripe's delta (the old block and the
//     m parity blocks read, the block and the m parity blocks written);
//   - read: sequential 1 MiB verified reads of an undamaged volume
//     (target: at least 0.97x; the parity is not read);
//   - compute: the parity of the whole written image (parity add),
//     beside op=protect, a plain protect of the same image (target: at
//     least 0.7x);
//   - protectparity: protect with the parity computed in its pass (protect
//     --parity), beside op=protect.

// parityBenchCase is a parity shape of the benchmarks ("none": without).
type parityBenchCase struct {
	name  string
	k, m  int
	depth int64
}

var parityBenchCases = []parityBenchCase{
	{"none", 0, 0, 0},
	{"16+2/depth=256", 16, 2, 0},
	{"16+2/depth=1", 16, 2, parity.Consecutive},
	{"16+2/depth=whole", 16, 2, parity.WholeVolume},
	{"8+1/depth=256", 8, 1, 0},
	{"32+4/depth=256", 32, 4, 0},
}

// benchParityVol protects the benchmark image and gives it parity c
// (computed), its parity file beside it.
func benchParityVol(b *testing.B, c parityBenchCase, opts Options) (*Volume, int64) {
	p, size := volBenchImage(b)
	f := dif.MustFormat("4096+8")
	dev, err := device.OpenFile(p, device.FileOptions{BlockSize: f.BlockSize()})
	if err != nil {
		b.Fatal(err)
	}
	kv, err := store.Open("pebble:" + filepath.Join(b.TempDir(), "store"))
	if err != nil {
		b.Fatal(err)
	}
	v, err := Create(context.Background(), dev, kv, CreateOptions{Format: f, Options: opts})
	if err != nil {
		b.Fatal(err)
	}
	var pdev *device.File
	if c.k > 0 {
		pdev, _ = benchParityFile(b, v, c)
	}
	b.Cleanup(func() {
		if err := v.Close(); err != nil {
			b.Error(err)
		}
		kv.Close()
		dev.Close()
		if pdev != nil {
			pdev.Close()
		}
	})
	return v, size
}

// benchParityFile adds parity c to v in a new file and computes it, and
// returns the file and its directory.
func benchParityFile(b *testing.B, v *Volume, c parityBenchCase) (*device.File, string) {
	dir := b.TempDir()
	spec := ParitySpec{Data: c.k, Parity: c.m, Depth: c.depth, Path: filepath.Join(dir, "difpar")}
	size, err := v.ParityFileSize(spec)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(spec.Path, nil, 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.Truncate(spec.Path, size); err != nil {
		b.Fatal(err)
	}
	pdev, err := device.OpenFile(spec.Path, device.FileOptions{BlockSize: v.BlockSize()})
	if err != nil {
		b.Fatal(err)
	}
	spec.Dev = pdev
	if err := v.AddParity(spec); err != nil {
		b.Fatal(err)
	}
	if _, err := v.ComputeParity(context.Background(), nil); err != nil {
		b.Fatal(err)
	}
	return pdev, dir
}

// benchProtect times protect of the benchmark image as protect does it:
// each iteration opens the image and a new store (untimed), runs protect
// (timed; dir is the iteration's own directory, size the image's), then
// closes and removes what it made (untimed).
func benchProtect(b *testing.B, protect func(dev *device.File, kv store.KV, f dif.Format, dir string, size int64) error) {
	p, size := volBenchImage(b)
	f := dif.MustFormat("4096+8")
	b.SetBytes(size)
	for b.Loop() {
		b.StopTimer()
		dev, err := device.OpenFile(p, device.FileOptions{BlockSize: f.BlockSize()})
		if err != nil {
			b.Fatal(err)
		}
		dir := b.TempDir()
		kv, err := store.Open("pebble:" + filepath.Join(dir, "store"))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		err = protect(dev, kv, f, dir, size)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		kv.Close()
		dev.Close()
		removeIterFiles(b, dir)
		b.StartTimer()
	}
}

// removeIterFiles removes the files an iteration of a benchmark made in
// dir, so that the page cache they took is free for the next: on the
// virtual machines the benchmarks run on, writing into pages the guest
// never used before costs several times what writing into recycled ones
// does, which would charge every iteration for the growth of the page
// cache rather than for its work.
func removeIterFiles(b *testing.B, dir string) {
	if err := os.RemoveAll(dir); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkParity(b *testing.B) {
	for _, c := range parityBenchCases {
		b.Run("op=seqwrite/parity="+c.name, func(b *testing.B) {
			v, size := benchParityVol(b, c, Options{})
			buf := blocktest.Pattern(benchReq, 2)
			var off int64
			b.SetBytes(benchReq)
			for b.Loop() {
				if _, err := v.WriteAt(buf, off); err != nil {
					b.Fatal(err)
				}
				if off += benchReq; off%(64<<20) == 0 || off >= size {
					if err := v.Sync(); err != nil {
						b.Fatal(err)
					}
					if off >= size {
						off = 0
					}
				}
			}
		})
	}
	for _, c := range parityBenchCases {
		b.Run("op=randwrite/parity="+c.name, func(b *testing.B) {
			v, size := benchParityVol(b, c, Options{})
			const bs = 4096
			blocks := size / bs
			buf := blocktest.Pattern(bs, 3)
			r := rand.New(rand.NewPCG(4, 5))
			n := 0
			b.SetBytes(bs)
			for b.Loop() {
				if _, err := v.WriteAt(buf, r.Int64N(blocks)*bs); err != nil {
					b.Fatal(err)
				}
				if n++; n%1024 == 0 {
					if err := v.Sync(); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := v.Sync(); err != nil {
				b.Fatal(err)
			}
		})
	}
	for _, c := range parityBenchCases[:2] {
		b.Run("op=read/parity="+c.name, func(b *testing.B) {
			v, size := benchParityVol(b, c, Options{})
			buf := device.AlignedBuffer(benchReq)
			var off int64
			b.SetBytes(benchReq)
			for b.Loop() {
				if _, err := v.ReadAt(buf, off); err != nil {
					b.Fatal(err)
				}
				if off += benchReq; off >= size {
					off = 0
				}
			}
		})
	}
	b.Run("op=protect", func(b *testing.B) {
		benchProtect(b, func(dev *device.File, kv store.KV, f dif.Format, _ string, _ int64) error {
			v, err := Create(context.Background(), dev, kv, CreateOptions{Format: f})
			if err == nil {
				err = v.Close()
			}
			return err
		})
	})
	for _, c := range parityBenchCases[1:] {
		b.Run(fmt.Sprintf("op=protectparity/parity=%s", c.name), func(b *testing.B) {
			benchProtect(b, func(dev *device.File, kv store.KV, f dif.Format, dir string, size int64) error {
				// As difctl protect --parity: the parity file made, protect
				// with the parity computed in its pass, then ComputeParity
				// for what the pass left (nothing unless the groups are
				// larger than its windows).
				spec := ParitySpec{Data: c.k, Parity: c.m, Depth: c.depth, Path: filepath.Join(dir, "difpar")}
				l, err := ParityLayout(spec, f.BlockSize(), size/int64(f.BlockSize()))
				if err != nil {
					return err
				}
				if err := os.WriteFile(spec.Path, nil, 0o600); err != nil {
					return err
				}
				if err := os.Truncate(spec.Path, l.FileSize()); err != nil {
					return err
				}
				pdev, err := device.OpenFile(spec.Path, device.FileOptions{BlockSize: f.BlockSize()})
				if err != nil {
					return err
				}
				defer pdev.Close()
				spec.Dev = pdev
				v, err := Create(context.Background(), dev, kv, CreateOptions{Format: f, Parity: &spec})
				if err == nil {
					_, err = v.ComputeParity(context.Background(), nil)
				}
				if err == nil {
					err = v.Close()
				}
				return err
			})
		})
	}
	for _, c := range parityBenchCases[1:] {
		b.Run(fmt.Sprintf("op=compute/parity=%s", c.name), func(b *testing.B) {

			v, size := benchParityVol(b, parityBenchCase{name: "none"}, Options{})
			b.SetBytes(size)
			for b.Loop() {
				b.StopTimer()
				if _, ok, _ := v.Parity(); ok {
					if err := v.RemoveParity(); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				pdev, dir := benchParityFile(b, v, c)
				b.StopTimer()
				if err := v.RemoveParity(); err != nil {
					b.Fatal(err)
				}
				pdev.Close()
				removeIterFiles(b, dir)
				b.StartTimer()
			}
		})
	}
}

// BenchmarkParityRebuild rebuilds a block of a stripe with m erasures
// (the block and another data block of its stripe rotted) from the
// stripe's other k-1 data blocks and parity, each read and verified: one
// op is one block rebuilt, so the rate is of rebuilt data.
func BenchmarkParityRebuild(b *testing.B) {
	for _, c := range parityBenchCases[1:3] {
		b.Run("parity="+c.name, func(b *testing.B) {
			v, _ := benchParityVol(b, c, Options{})
			pv := v.par
			bs := v.BlockSize()
			s := pv.l.Stripes() / 2
			x, _ := pv.l.Block(s, 3)
			y, _ := pv.l.Block(s, 9)
			for _, lba := range []int64{x, y} {
				if _, err := v.Device().WriteAt(make([]byte, bs), lba*int64(bs)); err != nil {
					b.Fatal(err)
				}
			}
			dst := device.AlignedBuffer(bs)
			b.SetBytes(int64(bs))
			for b.Loop() {
				ok, err := pv.rebuildBlock(x, dst, false)
				if err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		})
	}
}
