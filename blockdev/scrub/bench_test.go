package scrub

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// BenchmarkScrub compares a scrub of a page-cached image with a plain
// sequential read of the same file in 1 MiB requests (source=pread), in
// one run: the target is at least 80% of the read's throughput.
// Every iteration is a whole pass; the bytes are the data bytes of the
// image, for the read as for the scrub. The scrubs also report the ratio
// to a pread pass over the same file after each scrub, outside the timer,
// as "%baseline": runs minutes apart on a busy machine are not comparable.
//
//	go test ./blockdev -run '^$' -bench 'Scrub' -count 6 | benchstat -col /source -
func BenchmarkScrub(b *testing.B) {
	for _, format := range []string{"512+8", "4096+8", "4096+16:crc64"} {
		for _, source := range []string{"pread", "extended", "pread-data", "volume"} {
			b.Run(fmt.Sprintf("format=%s/source=%s", format, source), func(b *testing.B) {
				benchScrub(b, format, source)
			})
		}
	}
}

func benchScrub(b *testing.B, format, source string) {
	size := int64(64 << 20)
	if testing.Short() {
		size = 8 << 20
	}
	f := dif.MustFormat(format)
	blocks := int(size) / f.BlockSize()
	dir := b.TempDir()
	var path string
	var src blockdev.CheckSource
	switch source {
	case "pread", "extended":
		x := newFixture(b, format, dif.Interleaved, blocks, nil, nil)
		path, _ = x.write(b, dir)
		if source == "extended" {
			src = openSource(b, x.f, x.p, path, "")
		}
	case "pread-data", "volume":
		if f.MetadataSize() != f.TupleSize() {
			b.Skip("a volume's metadata is its tuple")
		}
		path = filepath.Join(dir, "image")
		if err := os.WriteFile(path, blocktest.Pattern(int(size), 7), 0o644); err != nil {
			b.Fatal(err)
		}
		if source == "volume" {
			dev, err := device.OpenFile(path, device.FileOptions{BlockSize: f.BlockSize()})
			if err != nil {
				b.Fatal(err)
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
			b.Cleanup(func() { v.Close() })
			src = v
		}
	}
	b.SetBytes(size)
	pass := preadPass(b, path)
	if src == nil {
		for b.Loop() {
			pass()
		}
		return
	}
	// Warm the page cache and check the image.
	rep, err := Run(context.Background(), src, Options{})
	if err != nil || rep.OK != int64(blocks) {
		b.Fatalf("%+v %v", rep, err)
	}
	// The baseline of the same run: after every scrub, outside the timer, a
	// plain 1 MiB pread pass over the same file, as source=pread does.
	var baseline time.Duration
	passes := 0
	var checked int64
	for b.Loop() {
		rep, err := Run(context.Background(), src, Options{})
		if err != nil {
			b.Fatal(err)
		}
		checked += rep.Blocks
		b.StopTimer()
		t0 := time.Now()
		pass()
		baseline += time.Since(t0)
		passes++
		b.StartTimer()
	}
	if e := b.Elapsed(); e > 0 && baseline > 0 {
		// Both do whole passes over the same bytes: the ratio of the
		// throughputs is that of the times per pass.
		b.ReportMetric(100*(float64(baseline)/float64(passes))/(float64(e)/float64(b.N)), "%baseline")
	}
	if checked == 0 {
		b.Fatal("nothing checked")
	}
}

// preadPass returns a function that reads the file at path from start to
// end in 1 MiB requests (benchReq), as a plain sequential reader would.
func preadPass(b *testing.B, path string) func() {
	fh, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fh.Close() })
	st, err := fh.Stat()
	if err != nil {
		b.Fatal(err)
	}
	buf := device.AlignedBuffer(benchReq)
	return func() {
		sum := 0
		for off := int64(0); off < st.Size(); off += benchReq {
			n, err := fh.ReadAt(buf[:min(benchReq, st.Size()-off)], off)
			if err != nil {
				b.Fatal(err)
			}
			sum += int(buf[n-1])
		}
		if sum < 0 {
			b.Fatal("unreachable")
		}
	}
}
