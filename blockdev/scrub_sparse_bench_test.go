package blockdev

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// BenchmarkScrubSparse scrubs a protected sparse image: 64 MiB (8 MiB with
// -short), one MiB of data in every eight, the rest holes adopted by Create
// as unwritten. The bytes are the image's size, holes included.
//
//	go test ./blockdev -run '^$' -bench 'ScrubSparse' -count 6
func BenchmarkScrubSparse(b *testing.B) {
	for _, format := range []string{"512+8", "4096+8"} {
		b.Run(fmt.Sprintf("format=%s", format), func(b *testing.B) {
			size := int64(64 << 20)
			if testing.Short() {
				size = 8 << 20
			}
			f := dif.MustFormat(format)
			dir := b.TempDir()
			dev, err := CreateImage(filepath.Join(dir, "image"), size, FileOptions{BlockSize: f.BlockSize()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { dev.Close() })
			for off := int64(0); off < size; off += 8 << 20 {
				if _, err := dev.WriteAt(pattern(1<<20, uint64(off)), off); err != nil {
					b.Fatal(err)
				}
			}
			kv, err := store.Open("pebble:" + filepath.Join(dir, "db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { kv.Close() })
			v, err := Create(context.Background(), dev, kv, CreateOptions{Format: f})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { v.Close() })
			b.SetBytes(size)
			for b.Loop() {
				rep, err := Scrub(context.Background(), v, ScrubOptions{})
				if err != nil || rep.Failed != 0 || rep.Unwritten != (size-size/8)/int64(f.BlockSize()) {
					b.Fatalf("%+v %v", rep, err)
				}
			}
		})
	}
}
