package poly1305

import (
	"testing"

	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// BenchmarkKeyedDRAM is BenchmarkKeyed's Blocks over kerneltest.DRAMSize
// bytes, twice the L3 cache, so that the blocks come from memory, as those
// of a keyed check of a page-cached image do (BlocksADCopy's source from
// memory: BenchmarkBlocksADCopy, src=64MiB). Names:
// impl=NAME/block=N/mem=64MiB.
func BenchmarkKeyedDRAM(b *testing.B) {
	aesKey, r := kerneltest.SeedBytes(16), kerneltest.SeedBytes(32)[16:]
	k, err := NewKey(aesKey, r)
	if err != nil {
		b.Fatal(err)
	}
	p := kerneltest.SeedBytes(kerneltest.DRAMSize)
	var nonce Nonce
	kerneltest.ForEachB(b, pkgName, func(b *testing.B) {
		for _, bl := range benchBlocks {
			b.Run("block="+kerneltest.SizeName(bl)+"/mem="+kerneltest.SizeName(len(p)), func(b *testing.B) {
				dst := make([]Tag, len(p)/bl)
				b.SetBytes(int64(len(p)))
				for b.Loop() {
					if err := k.Blocks(dst, &nonce, p, bl, bl); err != nil {
						b.Fatal(err)
					}
				}
				sinkTag = dst[len(dst)-1]
			})
		}
	})
}
