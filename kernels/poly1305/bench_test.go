package poly1305

import (
	"crypto/aes"
	"crypto/hmac"
	"crypto/sha256"
	"hash"
	"testing"

	"github.com/difctl/difctl/kernels/internal/kerneltest"
	//lint:ignore SA1019 x/crypto's Poly1305 is the peer these tests check against
	xpoly "golang.org/x/crypto/poly1305"
)

// benchSpan is the bytes of blocks per benchmark operation: 256 KiB, in
// the L2 cache, so that the figures are of the computation; 64 or 512
// blocks per call, as a volume's batched I/O would give.
const benchSpan = 256 << 10

var benchBlocks = []int{512, 4096}

var sinkTag Tag

// BenchmarkKeyed compares, per block size, Poly1305-AES tags of a run of
// blocks: Key.Blocks under every implementation (impl=NAME), x/crypto's
// Poly1305 called once per block with the block's AES mask as s
// (impl=xcrypto: AES-encrypt the nonce, then poly1305.Sum with r || mask),
// and HMAC-SHA256 per block (impl=hmac-sha256, dm-integrity's
// internal_hash:hmac(sha256)). Names: impl=NAME/block=N, for benchstat.
func BenchmarkKeyed(b *testing.B) {
	aesKey, r := kerneltest.SeedBytes(16), kerneltest.SeedBytes(32)[16:]
	k, err := NewKey(aesKey, r)
	if err != nil {
		b.Fatal(err)
	}
	p := kerneltest.SeedBytes(benchSpan)
	var nonce Nonce
	kerneltest.ForEachB(b, pkgName, func(b *testing.B) {
		for _, bl := range benchBlocks {
			b.Run("block="+kerneltest.SizeName(bl), func(b *testing.B) {
				dst := make([]Tag, benchSpan/bl)
				b.SetBytes(benchSpan)
				for b.Loop() {
					if err := k.Blocks(dst, &nonce, p, bl, bl); err != nil {
						b.Fatal(err)
					}
				}
				sinkTag = dst[len(dst)-1]
			})
		}
	})
	b.Run("impl=xcrypto", func(b *testing.B) {
		blk, err := aes.NewCipher(aesKey)
		if err != nil {
			b.Fatal(err)
		}
		for _, bl := range benchBlocks {
			b.Run("block="+kerneltest.SizeName(bl), func(b *testing.B) {
				dst := make([]Tag, benchSpan/bl)
				b.SetBytes(benchSpan)
				for b.Loop() {
					for i := range dst {
						var key [KeySize]byte
						copy(key[:16], r)
						ni := nonce.Add(uint64(i))
						blk.Encrypt(key[16:], ni[:])
						xpoly.Sum((*[16]byte)(&dst[i]), p[i*bl:(i+1)*bl], &key)
					}
				}
				sinkTag = dst[len(dst)-1]
			})
		}
	})
	b.Run("impl=hmac-sha256", func(b *testing.B) {
		for _, bl := range benchBlocks {
			b.Run("block="+kerneltest.SizeName(bl), func(b *testing.B) {
				h := hmac.New(sha256.New, aesKey)
				dst := make([][]byte, benchSpan/bl)
				for i := range dst {
					dst[i] = make([]byte, 0, sha256.Size)
				}
				b.SetBytes(benchSpan)
				for b.Loop() {
					for i := range dst {
						h.Reset()
						h.Write(p[i*bl : (i+1)*bl])
						dst[i] = h.Sum(dst[i][:0])
					}
				}
				copy(sinkTag[:], dst[len(dst)-1])
			})
		}
	})
}

var _ hash.Hash = hmac.New(sha256.New, nil)
