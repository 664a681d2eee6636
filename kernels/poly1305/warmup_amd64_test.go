//go:build !purego

package poly1305

import (
	"crypto/sha256"
	"hash/crc32"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// BenchmarkWarmup is the experiment behind BenchmarkRatio's two modes
// (docs/perf/poly1305-generator.md has the results): how fast a kernel runs right after other work, as
// a function of how long it has been running. Each iteration runs the gap
// work for gapus microseconds, then the probe for warmupUnits calls of
// 64 KiB (72 KiB for the hybrid kernel), timing each call with the
// monotonic clock; per position in that burst, the median over the
// iterations is kept. Reported, per probe, gap and gap length:
//
//   - steady-ns/KiB: the median call among the last quarter of the burst,
//     the kernel in its steady state;
//   - first-x, u4-x, u16-x, u64-x: the first call, and the mean of the first
//     4, 16, 64 calls (a burst of that length after such a gap), over the
//     steady call;
//   - ramp-us: how long the burst ran (its calls' own time) before a call
//     came within 5% of the steady one and stayed within it for 8 calls.
//
// Probes: ymm (lanesAVX2: VPMULUDQ on YMM), ymm8 (lanesAVX2R8), hybrid
// (lanesHybridR8: YMM lanes and two MULX lanes interleaved), scalar (the
// generic Go code: MULQ, ADC, no vector instructions) and xmm
// (hash/crc32's IEEE polynomial: PCLMULQDQ and PXOR on XMM registers).
// Gaps: sha (SHA-256 of 4 KiB buffers, SHA-NI: HMAC-SHA256's code), spin
// (a dependent integer multiply-add loop: no vector instructions) and
// sleep (the thread sleeps; the core runs whatever else is runnable, or
// idles).
//
//	go test ./kernels/poly1305 -run '^$' -bench Warmup -benchtime 40x
func BenchmarkWarmup(b *testing.B) {
	probes, gaps, done := warmupWork()
	defer done()
	for _, pr := range probes {
		for _, gp := range gaps {
			for _, us := range []int{20, 200, 1000, 2000, 5000} {
				b.Run("probe="+pr.name+"/gap="+gp.name+"/gapus="+strconv.Itoa(us), func(b *testing.B) {
					warmupRun(b, pr.run, gp.run, time.Duration(us)*time.Microsecond, pr.bytes)
				})
			}
		}
	}
}

// BenchmarkDutyCycle is the periodic form of BenchmarkWarmup: the probe
// runs for calls calls (about 10 us each), then the gap work for gapus
// microseconds, over and over; after 20 ms of that pattern (its steady
// state), 50 periods are timed (the probe's thread CPU time). slow-x is the
// probe's mean call time then
// over its time in a long run (measured in the same iteration: 64 calls
// timed after 1.7 ms of the probe alone); duty is the probe's share of the
// period.
//
//	go test ./kernels/poly1305 -run '^$' -bench DutyCycle -benchtime 5x
func BenchmarkDutyCycle(b *testing.B) {
	probes, gaps, done := warmupWork()
	defer done()
	for _, pr := range probes {
		if pr.name != "ymm8" && pr.name != "hybrid" && pr.name != "xmm" {
			continue
		}
		for _, gp := range gaps[:2] {
			for _, calls := range []int{4, 16, 64} {
				for _, us := range []int{30, 100, 300, 1000} {
					b.Run("probe="+pr.name+"/gap="+gp.name+"/calls="+strconv.Itoa(calls)+"/gapus="+strconv.Itoa(us), func(b *testing.B) {
						dutyRun(b, pr.run, gp.run, calls, time.Duration(us)*time.Microsecond)
					})
				}
			}
		}
	}
}

func dutyRun(b *testing.B, probe func(), gap func(time.Duration), calls int, gapLen time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var slow []float64
	var tProbe, tPeriod time.Duration
	for b.Loop() {
		for t0 := time.Now(); time.Since(t0) < 1700*time.Microsecond; {
			probe()
		}
		c0 := kerneltest.ThreadCPU()
		for range 64 {
			probe()
		}
		steady := float64(kerneltest.ThreadCPU()-c0) / 64
		for t0 := time.Now(); time.Since(t0) < 20*time.Millisecond; {
			for range calls {
				probe()
			}
			gap(gapLen)
		}
		var tp time.Duration
		p0 := time.Now()
		for range 50 {
			c := kerneltest.ThreadCPU()
			for range calls {
				probe()
			}
			tp += kerneltest.ThreadCPU() - c
			gap(gapLen)
		}
		tProbe += tp
		tPeriod += time.Since(p0)
		slow = append(slow, float64(tp)/float64(50*calls)/steady)
	}
	b.ReportMetric(median(slow), "slow-x")
	b.ReportMetric(float64(tProbe)/float64(tPeriod), "duty")
}

type warmupProbe struct {
	name  string
	bytes int
	run   func()
}

type warmupGap struct {
	name string
	run  func(d time.Duration)
}

// warmupWork returns the probes and gaps of BenchmarkWarmup, and a func to
// call at the end (it keeps the results live).
func warmupWork() ([]warmupProbe, []warmupGap, func()) {
	p := kerneltest.SeedBytes(6 * 4096 * 3)
	k := newPolyKey(kerneltest.SeedBytes(16))
	var h laneBuf
	var crc uint32
	probes := []warmupProbe{
		{"ymm", 64 << 10, func() {
			for i := range 4 {
				lanesAVX2Kernel(laneState26(&h), p[i*4*4096:], 4096, 256, &k.lanes)
			}
		}},
		{"ymm8", 64 << 10, func() {
			for i := range 4 {
				lanesAVX2R8((*[20]uint64)(h[:20]), p[i*4*4096:], 4096, 256, (*[322]uint64)(&k.lanes8))
			}
		}},
		{"hybrid", 72 << 10, func() {
			for i := range 3 {
				lanesHybridR8((*[26]uint64)(&h), p[i*6*4096:], 4096, 256, (*[322]uint64)(&k.lanes8))
			}
		}},
		{"scalar", 64 << 10, func() {
			s := state{r0: k.r0, r1: k.r1}
			s.chunks(p[:64<<10])
			h[20] += s.h0
		}},
		{"xmm", 64 << 10, func() { crc = crc32.Update(crc, crc32.IEEETable, p[:64<<10]) }},
	}
	gaps := []warmupGap{
		{"sha", func(d time.Duration) {
			for t0 := time.Now(); time.Since(t0) < d; {
				sinkSHA = sha256.Sum256(p[:4096])
			}
		}},
		{"spin", func(d time.Duration) {
			x := uint64(1)
			for t0 := time.Now(); time.Since(t0) < d; {
				for range 1000 {
					x = x*0x9e3779b97f4a7c15 + 1
				}
			}
			h[21] += x
		}},
		{"sleep", time.Sleep},
	}
	return probes, gaps, func() { sinkTag[0] = byte(h[0] + h[20] + h[21] + uint64(crc)) }
}

var sinkSHA [32]byte

// warmupUnits is the number of probe calls per burst: with about 10 us per
// call, bursts of 2.5 ms or more, longer than the ramp.
const warmupUnits = 256

func warmupRun(b *testing.B, probe func(), gap func(time.Duration), gapLen time.Duration, bytes int) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	per := make([][]float64, warmupUnits)
	for b.Loop() {
		gap(gapLen)
		t := time.Now()
		for i := range warmupUnits {
			probe()
			n := time.Now()
			per[i] = append(per[i], float64(n.Sub(t)))
			t = n
		}
	}
	med := make([]float64, warmupUnits)
	for i, v := range per {
		slices.Sort(v)
		med[i] = v[len(v)/2]
	}
	tail := slices.Clone(med[3*warmupUnits/4:])
	slices.Sort(tail)
	steady := tail[len(tail)/2]
	mean := func(n int) float64 {
		s := 0.0
		for _, v := range med[:n] {
			s += v
		}
		return s / float64(n) / steady
	}
	ramp, run := 0.0, 0
	for i, v := range med {
		if v <= 1.05*steady {
			run++
			if run == 8 {
				break
			}
			continue
		}
		run = 0
		ramp = 0
		for _, w := range med[:i+1] {
			ramp += w
		}
	}
	b.ReportMetric(steady/float64(bytes>>10), "steady-ns/KiB")
	b.ReportMetric(med[0]/steady, "first-x")
	b.ReportMetric(mean(4), "u4-x")
	b.ReportMetric(mean(16), "u16-x")
	b.ReportMetric(mean(64), "u64-x")
	b.ReportMetric(ramp/1e3, "ramp-us")
}
