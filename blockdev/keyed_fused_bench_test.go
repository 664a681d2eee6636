//go:build linux

package blockdev

import (
	"slices"
	"testing"
	"time"

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
// every iteration reads the same 1 MiB request through the volume opened
// with the key and through the same volume opened without it, alternately,
// and the metric %unkeyed-cpu is the median over the iterations of the
// unkeyed read's process CPU time (all threads: the second goroutine of a
// split read included) as a percentage of the keyed one's. On a machine
// shared with other work the CPU times move much less than the wall clock
// (another process's time slices are not counted), though a busy SMT
// sibling still slows both sides:
//
//	go test -run '^$' -bench VolumeReadKeyedCPU -benchtime 640x ./blockdev
func BenchmarkVolumeReadKeyedCPU(b *testing.B) {
	for _, format := range benchFormats {
		b.Run(benchName(format), func(b *testing.B) {
			keyed, plain, size := keyedBenchVolumes(b, format, false)
			buf := AlignedBuffer(benchReq)
			var ratios []float64
			var off int64
			b.SetBytes(benchReq)
			for b.Loop() {
				t0 := processCPU(b)
				if _, err := keyed.ReadAt(buf, off); err != nil {
					b.Fatal(err)
				}
				t1 := processCPU(b)
				if _, err := plain.ReadAt(buf, off); err != nil {
					b.Fatal(err)
				}
				t2 := processCPU(b)
				if t1 > t0 {
					ratios = append(ratios, 100*float64(t2-t1)/float64(t1-t0))
				}
				if off += benchReq; off >= size {
					off = 0
				}
			}
			if len(ratios) > 0 {
				slices.Sort(ratios)
				b.ReportMetric(ratios[len(ratios)/2], "%unkeyed-cpu")
			}
		})
	}
}
