package poly1305

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/difctl/difctl/kernels/internal/kerneltest"
	//lint:ignore SA1019 x/crypto's Poly1305 is the peer these tests check against
	xpoly "golang.org/x/crypto/poly1305"
)

// BenchmarkRatio measures Key.Blocks (the active implementation, impl=NAME)
// and its two peers alternately within every iteration, each over the same
// 256 KiB of blocks, and reports how many times faster Blocks is:
// x-xcrypto against x/crypto's Poly1305 once per block plus the AES mask,
// x-hmac against HMAC-SHA256 once per block. The times are thread CPU
// times, and the alternation puts both sides of a ratio under the same load;
// the ratios reported are the medians of the per-iteration ratios, so that
// the iterations another process disturbed (its time slices on this core,
// the caches it leaves cold) do not move them, and they hold up on a shared
// machine better than ns/op do. MB/cpu-s is over all iterations. Two modes:
//
//   - mode=interleaved: the three sides run one after the other, 256 KiB
//     each, in a fixed order, with nothing else between: each side starts
//     right after the others' code. This is the cold figure, what a
//     process that alternates the three methods every 256 KiB would see.
//   - mode=steady: before each timed side, the same side runs untimed for
//     at least ratioWarmup of thread CPU time, then four runs of 256 KiB
//     are timed; the order of the sides rotates every iteration. This is
//     each side in its steady state, as a volume that uses one method sees
//     it.
//
// Why the modes differ, on the build machine (AMD EPYC, Zen 2; the
// experiments are BenchmarkWarmup and BenchmarkDutyCycle, figures below):
// 256-bit vector code (VPMULUDQ on YMM registers) that runs after about
// 2 ms without any runs slowly, and ramps back to full speed over the
// next 1.3-2.1 ms of its own running; short bursts of it between other
// work never ramp. In mode=interleaved Blocks runs 35-40 us per iteration
// at 4 KiB (60-70 us at 512 B) between about 0.3 ms of x/crypto and HMAC,
// a duty cycle of about 10% in bursts of four calls of the kernel's size:
// the case where BenchmarkDutyCycle measures the kernels 1.4-1.6 times
// slower than in a long run. (So at 4 KiB the interleaved ratios barely
// moved with this branch's faster kernels: 2.8-3.0 before and after.) A
// volume that tags continuously sees mode=steady; one that tags a 256 KiB
// batch now and then, between other work, sees something near
// mode=interleaved for its tags (HMAC-SHA256 and x/crypto, scalar and
// SHA-NI code, do not slow down).
//
// # Warm-up
//
// BenchmarkWarmup, 25 iterations per case, quiet machine (load average
// 0.4). Per gap length: first-x (the first call after the gap over the
// steady call) / u64-x (the mean of the first 64 calls, about 0.6 ms),
// and the ramp (the probe's own running time until its calls came within
// 5% of steady and stayed there) where there was one:
//
//	probe   gap    200 us      1 ms              2 ms                   5 ms
//	ymm     sha    1.00/1.00   1.00/1.01         1.28/1.31 ramp 1.6 ms  1.34/1.33 ramp 1.5 ms
//	ymm     spin   1.00/1.00   1.00/1.01         1.18/1.21 ramp 1.5 ms  1.35/1.26 ramp 1.4 ms
//	ymm8    sha    1.00/1.00   1.00/1.00         1.04/1.19 ramp 1.3 ms  1.49/1.42 ramp 1.5 ms
//	ymm8    spin   1.00/1.00   1.00/1.00         1.01/1.13              1.60/1.39 ramp 1.6 ms
//	hybrid  sha    1.01/1.00   1.22/1.01 (20 us) 1.09/1.51 ramp 1.9 ms  1.95/1.88 ramp 2.1 ms
//	hybrid  spin   1.01/1.00   1.33/1.02 (20 us) 1.06/1.44 ramp 1.8 ms  1.81/1.70 ramp 2.1 ms
//	scalar  either 1.00/1.00   1.00/1.00         1.01/1.00              1.03/1.00
//	xmm     sha    1.00/1.00   1.16/0.92 (10 us) 1.72/1.02 (18 us)      1.36/1.01 (12 us)
//	xmm     spin   1.00/1.00   1.00/1.00         1.55/1.01 (13 us)      1.27/1.00 (6 us)
//
// (An earlier run at load average 3-4 agreed: ymm8 after 5 ms of SHA-256
// 1.84 on its first call, the hybrid kernel 2.36, ramps of 1.1-2.1 ms.) So:
// the slow state is entered after 1-2 ms without YMM code, whatever runs
// instead (SHA-NI or a plain integer loop alike), and costs 1.3-2.1 ms of
// slow running to leave; after a gap of about 2 ms the first calls are
// still fast and the slowdown comes a few hundred microseconds into the
// burst (u64-x above first-x): the switch is decided by a timer of about
// 2 ms, not by the next instruction. The hybrid kernel, whose scalar MULX
// lanes wait on the same instruction stream, suffers most (its 1 ms
// figure is a short wake-up only); scalar code (the generic Go Poly1305:
// MULQ, ADC; MULX alone has no probe here, it runs only inside the hybrid
// kernel) is unaffected; 128-bit PCLMULQDQ code pays only its first call
// or two (6-18 us), no ramp. After sleeping rather than computing (load 3-4
// run), the YMM kernels' first call was 1.1-1.5x and the ramp mostly
// shorter (under 0.1 ms, once 1 ms).
//
// BenchmarkDutyCycle, the periodic case, quiet machine (5 iterations):
// slow-x, the probe's mean call over its steady call, for bursts of 4, 16
// and 64 calls (about 40, 150 and 600 us) and gaps of 30, 100, 300 and
// 1000 us:
//
//	probe   gap    4 calls: 30  100   300   1000   16: 30  100   300   1000   64: 30  100   300   1000
//	ymm8    sha        1.03 1.12  1.47  1.59       0.98 1.02  1.11  1.42       1.02 1.01  1.00  1.08
//	ymm8    spin       1.02 1.03  1.20  1.32       1.00 1.01  1.01  1.22       1.02 0.99  1.00  1.06
//	hybrid  sha        0.97 1.42  1.73  1.72       0.99 1.04  1.34  1.55       1.00 0.99  1.00  1.17
//	hybrid  spin       1.05 1.40  1.40  1.64       1.00 1.02  1.31  1.50       0.99 1.00  1.02  1.14
//
// So the kernels keep their speed while YMM code holds more than about
// half of the time (bursts of 150 us with 100 us gaps, or of 600 us with
// 300 us gaps); at a third (150 us bursts, 300 us gaps) they run 1.1-1.3
// times slower, and in 40 us bursts a few hundred microseconds apart
// 1.2-1.7 times, the hybrid kernel most; SHA-NI gaps cost more than
// integer ones of the same length. (Two earlier runs at load average 5-7 agreed within their
// noise.)
//
// Commands: go test ./kernels/poly1305 -run '^$' -bench 'Keyed|Ratio'
// (both modes); -bench Warmup -benchtime 25x and -bench DutyCycle
// -benchtime 5x for the experiments.
func BenchmarkRatio(b *testing.B) {
	aesKey, r := kerneltest.SeedBytes(16), kerneltest.SeedBytes(32)[16:]
	k, err := NewKey(aesKey, r)
	if err != nil {
		b.Fatal(err)
	}
	blk, err := aes.NewCipher(aesKey)
	if err != nil {
		b.Fatal(err)
	}
	p := kerneltest.SeedBytes(benchSpan)
	var nonce Nonce
	kerneltest.ForEachB(b, pkgName, func(b *testing.B) {
		for _, bl := range benchBlocks {
			for _, mode := range []string{"interleaved", "steady"} {
				b.Run("block="+kerneltest.SizeName(bl)+"/mode="+mode, func(b *testing.B) {
					ratioRun(b, k, blk, aesKey, r, &nonce, p, bl, mode == "steady")
				})
			}
		}
	})
}

// ratioWarmup is the untimed run of a side before it is timed in
// mode=steady: longer than the ramp BenchmarkWarmup measures (1.4-1.8 ms
// after a gap of 2 ms or more).
const ratioWarmup = 3 * time.Millisecond

// ratioRun is one BenchmarkRatio case: blocks of bl bytes over p, the
// sides interleaved or each in its steady state.
func ratioRun(b *testing.B, k *Key, blk cipher.Block, aesKey, r []byte, nonce *Nonce, p []byte, bl int, steady bool) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	n := benchSpan / bl
	dst := make([]Tag, n)
	ref := make([]Tag, n)
	h := hmac.New(sha256.New, aesKey)
	var sum []byte
	sides := [3]func(){
		func() {
			if err := k.Blocks(dst, nonce, p, bl, bl); err != nil {
				b.Fatal(err)
			}
		},
		func() {
			for i := range ref {
				var key [KeySize]byte
				copy(key[:16], r)
				ni := nonce.Add(uint64(i))
				blk.Encrypt(key[16:], ni[:])
				xpoly.Sum((*[16]byte)(&ref[i]), p[i*bl:(i+1)*bl], &key)
			}
		},
		func() {
			for i := range n {
				h.Reset()
				h.Write(p[i*bl : (i+1)*bl])
				sum = h.Sum(sum[:0])
			}
		},
	}
	runs := 1
	if steady {
		runs = 4
	}
	var tOurs time.Duration
	var rX, rH []float64
	b.SetBytes(int64(benchSpan * runs))
	for it := 0; b.Loop(); it++ {
		var t [3]time.Duration
		for j := range 3 {
			s := j
			if steady {
				s = (j + it) % 3
				for t0 := kerneltest.ThreadCPU(); kerneltest.ThreadCPU()-t0 < ratioWarmup; {
					sides[s]()
				}
			}
			t0 := kerneltest.ThreadCPU()
			for range runs {
				sides[s]()
			}
			t[s] = kerneltest.ThreadCPU() - t0
		}
		tOurs += t[0]
		if t[0] > 0 {
			rX = append(rX, float64(t[1])/float64(t[0]))
			rH = append(rH, float64(t[2])/float64(t[0]))
		}
	}
	if dst[n-1] != ref[n-1] {
		b.Fatal("Blocks and x/crypto disagree")
	}
	copy(sinkTag[:], sum)
	if tOurs > 0 && len(rX) > 0 {
		b.ReportMetric(median(rX), "x-xcrypto")
		b.ReportMetric(median(rH), "x-hmac")
		b.ReportMetric(float64(benchSpan*runs)*float64(b.N)/tOurs.Seconds()/1e6, "MB/cpu-s")
	}
}

// median returns the median of v, reordering it.
func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}
