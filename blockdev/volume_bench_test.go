package blockdev

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// The volume benchmarks run the same requests as BenchmarkFileRead and
// BenchmarkFileWrite (sequential 1 MiB over a page-cached 64 MiB image,
// a sync every 64 MiB for writes) through a Pebble-backed volume, so that
// one run gives the ratios:
//
//	go test -run '^$' -bench 'File(Read|Write)/via=device|Volume(Read|Write)' ./blockdev

var benchFormats = []string{"512+8", "4096+8"}

func benchVolume(b *testing.B, format string) (*Volume, int64) {
	p, size := benchImage(b)
	f := dif.MustFormat(format)
	dev, err := OpenFile(p, FileOptions{BlockSize: f.BlockSize()})
	if err != nil {
		b.Fatal(err)
	}
	kv, err := store.Open("pebble:" + filepath.Join(b.TempDir(), "store"))
	if err != nil {
		b.Fatal(err)
	}
	v, err := Create(context.Background(), dev, kv, CreateOptions{Format: f})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := v.Close(); err != nil {
			b.Error(err)
		}
		kv.Close()
		dev.Close()
	})
	return v, size
}

func BenchmarkVolumeRead(b *testing.B) {
	for _, format := range benchFormats {
		bs := dif.MustFormat(format).BlockSize()
		b.Run(fmt.Sprintf("block=%d/size=1MiB", bs), func(b *testing.B) {
			v, size := benchVolume(b, format)
			buf := AlignedBuffer(benchReq)
			var off int64
			sum := 0
			b.SetBytes(benchReq)
			for b.Loop() {
				n, err := v.ReadAt(buf, off)
				if err != nil {
					b.Fatal(err)
				}
				sum += n + int(buf[n-1])
				if off += benchReq; off >= size {
					off = 0
				}
			}
			if sum == 0 {
				b.Fatal("nothing read")
			}
		})
	}
}

func BenchmarkVolumeWrite(b *testing.B) {
	for _, format := range benchFormats {
		bs := dif.MustFormat(format).BlockSize()
		b.Run(fmt.Sprintf("block=%d/size=1MiB", bs), func(b *testing.B) {
			v, size := benchVolume(b, format)
			buf := pattern(benchReq, 2)
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
				}
				if off >= size {
					off = 0
				}
			}
		})
	}
}
