package poly1305

import (
	"crypto/aes"
	"crypto/hmac"
	"crypto/sha256"
	"runtime"
	"testing"
	"time"

	"github.com/difctl/difctl/kernels/internal/kerneltest"
	//lint:ignore SA1019 x/crypto's Poly1305 is the peer these tests check against
	xpoly "golang.org/x/crypto/poly1305"
)

// BenchmarkRatio measures Key.Blocks (the active implementation, impl=NAME)
// and its two peers alternately within every iteration, each over the same
// 64 KiB of blocks, and reports how many times faster Blocks is:
// x-xcrypto against x/crypto's Poly1305 once per block plus the AES mask,
// x-hmac against HMAC-SHA256 once per block. The times are thread CPU
// times, and the alternation puts both sides of a ratio under the same load,
// so the ratios hold up on a shared machine better than ns/op do.
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
			b.Run("block="+kerneltest.SizeName(bl), func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				n := benchSpan / bl
				dst := make([]Tag, n)
				ref := make([]Tag, n)
				h := hmac.New(sha256.New, aesKey)
				var sum []byte
				var tOurs, tX, tH time.Duration
				b.SetBytes(benchSpan)
				for b.Loop() {
					t0 := kerneltest.ThreadCPU()
					if err := k.Blocks(dst, &nonce, p, bl, bl); err != nil {
						b.Fatal(err)
					}
					t1 := kerneltest.ThreadCPU()
					for i := range ref {
						var key [KeySize]byte
						copy(key[:16], r)
						ni := nonce.Add(uint64(i))
						blk.Encrypt(key[16:], ni[:])
						xpoly.Sum((*[16]byte)(&ref[i]), p[i*bl:(i+1)*bl], &key)
					}
					t2 := kerneltest.ThreadCPU()
					for i := range n {
						h.Reset()
						h.Write(p[i*bl : (i+1)*bl])
						sum = h.Sum(sum[:0])
					}
					t3 := kerneltest.ThreadCPU()
					tOurs += t1 - t0
					tX += t2 - t1
					tH += t3 - t2
				}
				if dst != nil && dst[n-1] != ref[n-1] {
					b.Fatal("Blocks and x/crypto disagree")
				}
				copy(sinkTag[:], sum)
				if tOurs > 0 {
					b.ReportMetric(float64(tX)/float64(tOurs), "x-xcrypto")
					b.ReportMetric(float64(tH)/float64(tOurs), "x-hmac")
					b.ReportMetric(float64(benchSpan)*float64(b.N)/tOurs.Seconds()/1e6, "MB/cpu-s")
				}
			})
		}
	})
}
