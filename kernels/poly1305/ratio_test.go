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
// Why the modes differ: on some CPUs (AMD Zen 2, where BenchmarkWarmup
// and BenchmarkDutyCycle measured it) 256-bit vector code (VPMULUDQ on YMM
// registers) that runs after about 2 ms without any runs slowly, and ramps
// back to full speed over the next 2 ms or so of its own running; short
// bursts of it between other work never ramp. In mode=interleaved Blocks
// runs in short bursts between x/crypto and HMAC, a duty cycle of about
// 10%, where the kernels run markedly slower than in a long run. A volume
// that tags continuously sees mode=steady; one that tags a 256 KiB batch
// now and then, between other work, sees something near mode=interleaved
// for its tags (HMAC-SHA256 and x/crypto, scalar and SHA-NI code, do not
// slow down). docs/perf/poly1305-generator.md has the two experiments'
// figures.
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
// mode=steady: longer than every ramp BenchmarkWarmup measured (up to
// 2.1 ms after a gap of 2 ms or more; docs/perf/poly1305-generator.md).
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
