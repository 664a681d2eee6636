package nbd

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkServeRSS measures the server's memory against the volume's
// size: for each format and size it protects a sparse image, serves it
// from a server process of its own (this test binary, as difctl serve
// sizes it), writes the whole export with fio (1 MiB writes, queue depth
// 16, a flush at the end), reads it back with nbdcopy to null:, and
// reports the server's peak resident set (VmHWM), its anonymous and file
// pages at the end, and what the volume's tuple page cache holds and the
// Go heap when it stops. None of them may grow with the size. The sizes
// are 1, 4 and 16 GiB (DIFCTL_NBD_RSS_GIB=1,4,16 overrides):
//
//	go test ./blockdev/nbd -run '^$' -bench ServeRSS -benchtime 1x
//
// DIFCTL_NBD_RSS_FILL=1 fills the image with random data before protecting
// it, so that the writes overwrite written blocks (as in
// BenchmarkVsQemuNBD). DIFCTL_NBD_TEST_TUPLE_CACHE=N serves with Export.TupleCacheBytes N (for
// instance 67108864, the 64 MiB that difctl serve used to take).
func BenchmarkServeRSS(b *testing.B) {
	need(b, "nbdcopy", "fio")
	sizes := []int64{1, 4, 16}
	if s := os.Getenv("DIFCTL_NBD_RSS_GIB"); s != "" {
		sizes = nil
		for f := range strings.SplitSeq(s, ",") {
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil || n <= 0 {
				b.Fatalf("DIFCTL_NBD_RSS_GIB=%q: sizes in GiB, comma-separated", s)
			}
			sizes = append(sizes, n)
		}
	}
	for _, format := range []string{"512+8", "4096+8"} {
		for _, gib := range sizes {
			b.Run(fmt.Sprintf("format=%s/size=%dGiB", format, gib), func(b *testing.B) {
				size := gib << 30
				var st serveStats
				var hwm, anon, file, wpeak, rpeak int64
				for b.Loop() {
					dir := b.TempDir()
					img := filepath.Join(dir, "disk.img")
					if os.Getenv("DIFCTL_NBD_RSS_FILL") != "" {
						writeRandom(b, img, size) // every block written: the writes overwrite
					} else {
						if err := os.WriteFile(img, nil, 0o644); err != nil {
							b.Fatal(err)
						}
						if err := os.Truncate(img, size); err != nil {
							b.Fatal(err)
						}
					}
					protectImage(b, img, format)
					statsFile := filepath.Join(dir, "stats.json")
					pid, stop := startServeProcessStop(b, img, "DIFCTL_NBD_TEST_STATS="+statsFile)
					uri := "nbd+unix:///disk?socket=" + img + ".sock"
					wmax := sampleRSS(pid, func() {
						fioBW(b, uri, "--rw=write", "--bs=1m", "--iodepth=16", "--end_fsync=1")
					})
					rmax := sampleRSS(pid, func() { run(b, "nbdcopy", uri, "null:") })
					wpeak, rpeak = max(wpeak, wmax), max(rpeak, rmax)
					hwm, anon, file = peakRSS(b, pid), statusKB(pid, "RssAnon:")<<10, statusKB(pid, "RssFile:")<<10
					stop()
					js, err := os.ReadFile(statsFile)
					if err != nil {
						b.Fatal(err)
					}
					if err := json.Unmarshal(js, &st); err != nil {
						b.Fatal(err)
					}
				}
				const mib = 1 << 20
				b.ReportMetric(float64(hwm)/mib, "peak_rss_MiB")
				b.ReportMetric(float64(wpeak)/mib, "write_rss_MiB")
				b.ReportMetric(float64(rpeak)/mib, "read_rss_MiB")
				b.ReportMetric(float64(anon)/mib, "anon_MiB")
				b.ReportMetric(float64(file)/mib, "file_MiB")
				b.ReportMetric(float64(st.CacheBytes)/mib, "tuple_cache_MiB")
				b.ReportMetric(float64(st.HeapInuse)/mib, "heap_inuse_MiB")
			})
		}
	}
}

// BenchmarkTupleCache compares two tuple cache sizes on the same 1 GiB
// volume (DIFCTL_NBD_BENCH_MIB overrides), two server processes on two
// copies of the protected image, side by side in each iteration: fio
// random 4 KiB reads at queue depth 16 (5 s each) and nbdcopy of the
// whole export to null:. Side a has DIFCTL_NBD_CACHE_A bytes (default
// 64 MiB, what difctl serve took before), side b DIFCTL_NBD_CACHE_B
// (default 0: the server's DefaultTupleCacheBytes). x_a is b's speed over
// a's.
//
//	go test ./blockdev/nbd -run '^$' -bench TupleCache -benchtime 3x
func BenchmarkTupleCache(b *testing.B) {
	need(b, "nbdcopy", "fio")
	mib := 1024
	if s := os.Getenv("DIFCTL_NBD_BENCH_MIB"); s != "" {
		mib, _ = strconv.Atoi(s)
	}
	ca, cb := "67108864", "0"
	if s := os.Getenv("DIFCTL_NBD_CACHE_A"); s != "" {
		ca = s
	}
	if s := os.Getenv("DIFCTL_NBD_CACHE_B"); s != "" {
		cb = s
	}
	size := int64(mib) << 20
	for _, format := range []string{"512+8", "4096+8"} {
		b.Run("format="+format, func(b *testing.B) {
			dir := b.TempDir()
			imgA := filepath.Join(dir, "a", "disk.img")
			imgB := filepath.Join(dir, "b", "disk.img")
			for _, d := range []string{filepath.Dir(imgA), filepath.Dir(imgB)} {
				if err := os.Mkdir(d, 0o755); err != nil {
					b.Fatal(err)
				}
			}
			writeRandom(b, imgA, size)
			protectImage(b, imgA, format)
			run(b, "cp", "-a", imgA, imgA+".difdb", filepath.Dir(imgB))
			startServeProcess(b, imgA, "DIFCTL_NBD_TEST_TUPLE_CACHE="+ca)
			startServeProcess(b, imgB, "DIFCTL_NBD_TEST_TUPLE_CACHE="+cb)
			ua, ub := "nbd+unix:///disk?socket="+imgA+".sock", "nbd+unix:///disk?socket="+imgB+".sock"
			run(b, "nbdcopy", ua, "null:") // warm both
			run(b, "nbdcopy", ub, "null:")
			b.Run("op=randread/bs=4k/iodepth=16", func(b *testing.B) {
				var ia, ib float64
				i := 0
				for b.Loop() {
					args := []string{"--rw=randread", "--bs=4k", "--iodepth=16", "--runtime=5", "--time_based"}
					// Alternate which side goes first.
					if i%2 == 0 {
						ia += fioIOPS(b, ua, args...)
						ib += fioIOPS(b, ub, args...)
					} else {
						ib += fioIOPS(b, ub, args...)
						ia += fioIOPS(b, ua, args...)
					}
					i++
				}
				b.ReportMetric(ia/float64(b.N), "a_iops")
				b.ReportMetric(ib/float64(b.N), "b_iops")
				b.ReportMetric(ib/ia, "x_a")
			})
			b.Run("op=seqread", func(b *testing.B) {
				b.SetBytes(size)
				var ta, tb time.Duration
				i := 0
				for b.Loop() {
					if i%2 == 0 {
						ta += timed(b, "nbdcopy", ua, "null:")
						tb += timed(b, "nbdcopy", ub, "null:")
					} else {
						tb += timed(b, "nbdcopy", ub, "null:")
						ta += timed(b, "nbdcopy", ua, "null:")
					}
					i++
				}
				n := float64(b.N)
				b.ReportMetric(ta.Seconds()/n, "a_s")
				b.ReportMetric(tb.Seconds()/n, "b_s")
				b.ReportMetric(ta.Seconds()/tb.Seconds(), "x_a")
			})
		})
	}
}

// sampleRSS runs f and returns the largest resident set (VmRSS) of the
// process pid seen while it ran, sampled every 20 ms.
func sampleRSS(pid int, f func()) int64 {
	done := make(chan struct{})
	peak := make(chan int64)
	go func() {
		var m int64
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			m = max(m, statusKB(pid, "VmRSS:")<<10)
			select {
			case <-done:
				peak <- max(m, statusKB(pid, "VmRSS:")<<10)
				return
			case <-t.C:
			}
		}
	}()
	f()
	close(done)
	return <-peak
}
