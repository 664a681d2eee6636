//go:build linux

package blockdev

import (
	"slices"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/split"
	"golang.org/x/sys/unix"
)

// processCPU is the CPU time of every thread of the process so far.
func processCPU(tb testing.TB) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

// BenchmarkVolumeReadKeyedCPU is BenchmarkVolumeReadKeyed in CPU time:
// every iteration reads the next 1 MiB request through the volume opened
// with the key (timed), and after each pass over the image the same image
// is read through the volume opened without it (not timed). The metric
// %unkeyed-cpu is the median over the passes of the unkeyed pass's
// process CPU time (all threads) as a percentage of the keyed one's, the
// second goroutine of a split read included: a keyed pass ends when the
// split helper has exited, its spin after the last piece (once per pass,
// as in any stream of requests) counted with the keyed read rather than
// with the unkeyed one. On a machine shared with other work the CPU times
// move much less than the wall clock (another process's time slices are
// not counted), though a busy SMT sibling still slows both sides:
//
//	go test -run '^$' -bench VolumeReadKeyedCPU -benchtime 640x ./blockdev
func BenchmarkVolumeReadKeyedCPU(b *testing.B) {
	for _, format := range benchFormats {
		b.Run(benchName(format), func(b *testing.B) {
			keyed, plain, size := keyedBenchVolumes(b, format, false)
			buf := device.AlignedBuffer(benchReq)
			var ratios []float64
			var off int64
			b.SetBytes(benchReq)
			t0 := processCPU(b)
			for b.Loop() {
				if _, err := keyed.ReadAt(buf, off); err != nil {
					b.Fatal(err)
				}
				if off += benchReq; off < size {
					continue
				}
				off = 0
				b.StopTimer()
				for split.HelperAlive() {
					time.Sleep(20 * time.Microsecond)
				}
				t1 := processCPU(b)
				for o := int64(0); o < size; o += benchReq {
					if _, err := plain.ReadAt(buf, o); err != nil {
						b.Fatal(err)
					}
				}
				t2 := processCPU(b)
				if t1 > t0 {
					ratios = append(ratios, 100*float64(t2-t1)/float64(t1-t0))
				}
				b.StartTimer()
				t0 = processCPU(b)
			}
			if len(ratios) > 0 {
				slices.Sort(ratios)
				b.ReportMetric(ratios[len(ratios)/2], "%unkeyed-cpu")
			}
		})
	}
}
