package poly1305

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"runtime"
	"slices"
	"strconv"
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
// machine better than ns/op do. MB/cpu-s is over all iterations.
//
// rounds=N is how many times each side runs back to back in an iteration.
// With rounds=1 the three alternate every 256 KiB, and on the build machine
// (AMD EPYC, Zen 2) the vector kernels then run about 1.3 times slower than
// alone: after SHA-NI code (HMAC-SHA256's SHA256RNDS2) the next tens of
// microseconds of AVX2 code run slowly, while integer code and the clock do
// not change (measured with a dependent IMUL chain), and a plain SSE loop
// has no such effect. rounds=32 (about 1.3 ms of Blocks, 6 ms of HMAC)
// leaves each side mostly in its own steady state, as a volume that uses
// one method would be.
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
			for _, rounds := range []int{1, 32} {
				b.Run("block="+kerneltest.SizeName(bl)+"/rounds="+strconv.Itoa(rounds), func(b *testing.B) {
					ratioRun(b, k, blk, aesKey, r, &nonce, p, bl, rounds)
				})
			}
		}
	})
}

// ratioRun is one BenchmarkRatio case: blocks of bl bytes over p, each
// side run rounds times back to back per iteration.
func ratioRun(b *testing.B, k *Key, blk cipher.Block, aesKey, r []byte, nonce *Nonce, p []byte, bl, rounds int) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	n := benchSpan / bl
	dst := make([]Tag, n)
	ref := make([]Tag, n)
	h := hmac.New(sha256.New, aesKey)
	var sum []byte
	var tOurs time.Duration
	var rX, rH []float64
	b.SetBytes(int64(benchSpan * rounds))
	for b.Loop() {
		t0 := kerneltest.ThreadCPU()
		for range rounds {
			if err := k.Blocks(dst, nonce, p, bl, bl); err != nil {
				b.Fatal(err)
			}
		}
		t1 := kerneltest.ThreadCPU()
		for range rounds {
			for i := range ref {
				var key [KeySize]byte
				copy(key[:16], r)
				ni := nonce.Add(uint64(i))
				blk.Encrypt(key[16:], ni[:])
				xpoly.Sum((*[16]byte)(&ref[i]), p[i*bl:(i+1)*bl], &key)
			}
		}
		t2 := kerneltest.ThreadCPU()
		for range rounds {
			for i := range n {
				h.Reset()
				h.Write(p[i*bl : (i+1)*bl])
				sum = h.Sum(sum[:0])
			}
		}
		t3 := kerneltest.ThreadCPU()
		tOurs += t1 - t0
		if t1 > t0 {
			rX = append(rX, float64(t2-t1)/float64(t1-t0))
			rH = append(rH, float64(t3-t2)/float64(t1-t0))
		}
	}
	if dst[n-1] != ref[n-1] {
		b.Fatal("Blocks and x/crypto disagree")
	}
	copy(sinkTag[:], sum)
	if tOurs > 0 && len(rX) > 0 {
		b.ReportMetric(median(rX), "x-xcrypto")
		b.ReportMetric(median(rH), "x-hmac")
		b.ReportMetric(float64(benchSpan*rounds)*float64(b.N)/tOurs.Seconds()/1e6, "MB/cpu-s")
	}
}

// median returns the median of v, reordering it.
func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}
