package scrub

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// BenchmarkScrubSparse scrubs a protected sparse image: 64 MiB (8 MiB with
// -short), one MiB of data in every eight, the rest holes adopted by Create
// as unwritten. The bytes are the image's size, holes included.
//
// holes=skip is a scrub as it runs on an image file; holes=read hides
// SEEK_DATA from the volume (the device reports it unsupported), so that
// every unwritten block is read and compared with zeros: the cost of the
// rule where the device cannot tell holes.
//
//	go test ./blockdev -run '^$' -bench 'ScrubSparse' -count 6
func BenchmarkScrubSparse(b *testing.B) {
	for _, format := range []string{"512+8", "4096+8"} {
		for _, holes := range []string{"skip", "read"} {
			b.Run(fmt.Sprintf("format=%s/holes=%s", format, holes), func(b *testing.B) {
				benchScrubSparse(b, format, holes)
			})
		}
	}
}

// noSeekData is a File whose SEEK_DATA is unsupported.
type noSeekData struct{ *device.File }

func (noSeekData) NextData(int64) (device.Extent, error) {
	return device.Extent{}, fmt.Errorf("blockdev: seek data: %w", errors.ErrUnsupported)
}

func benchScrubSparse(b *testing.B, format, holes string) {
	size := int64(64 << 20)
	if testing.Short() {
		size = 8 << 20
	}
	f := dif.MustFormat(format)
	dir := b.TempDir()
	dev, err := device.CreateImage(filepath.Join(dir, "image"), size, device.FileOptions{BlockSize: f.BlockSize()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { dev.Close() })
	for off := int64(0); off < size; off += 8 << 20 {
		if _, err := dev.WriteAt(blocktest.Pattern(1<<20, uint64(off)), off); err != nil {
			b.Fatal(err)
		}
	}
	kv, err := store.Open("pebble:" + filepath.Join(dir, "db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { kv.Close() })
	v, err := blockdev.Create(context.Background(), dev, kv, blockdev.CreateOptions{Format: f})
	if err != nil {
		b.Fatal(err)
	}
	if holes == "read" {
		if err := v.Close(); err != nil {
			b.Fatal(err)
		}
		if v, err = blockdev.Open(context.Background(), noSeekData{dev}, kv, blockdev.Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { v.Close() })
	b.SetBytes(size)
	for b.Loop() {
		rep, err := Run(context.Background(), v, Options{})
		if err != nil || rep.Failed != 0 || rep.Unwritten != (size-size/8)/int64(f.BlockSize()) {
			b.Fatalf("%+v %v", rep, err)
		}
	}
}
