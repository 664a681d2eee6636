//go:build !purego

package crc32c

import (
	"golang.org/x/sys/cpu"

	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/foldgo"
	"github.com/difctl/difctl/kernels/internal/impl"
)

// arm64 implementations, best first:
//
//   - pmull4way: inputs of at least fourWayMin bytes are cut into chunks of
//     four stripes that run as four independent CRC32C instruction streams,
//     merged with PMULL (crc4way); Go loops over the chunks. One stream is
//     bound by the latency of CRC32CX (2 to 3 cycles for 8 bytes); four keep
//     the CRC unit busy every cycle. Needs the CRC32 and PMULL extensions.
//   - crc: one stream of CRC32C instructions, unrolled (crcHW). Needs CRC32.
//
// Both run Blocks four blocks at a time on four streams (crcBlocks), where
// no merge is needed.
func registerArch() {
	hasCRC := cpu.ARM64.HasCRC32
	impl.Register(pkgName, "pmull4way", hasCRC && cpu.ARM64.HasPMULL, func() {
		update, blocks = updatePMULL4way, blocksPMULL4way
	})
	impl.Register(pkgName, "crc", hasCRC, func() {
		update, blocks = updateCRC, blocksCRC
	})
}

const (
	// fourWayMin is the smallest input, and the smallest chunk, taken by the
	// 4-way path; it is also the smallest chunk stripes of stripeUnit allow.
	// Modelled with llvm-mca (kernels/_mca/crc_nvme.sh), one stream costs
	// 0.38 c/B on Cortex-A53 and A72 and 0.25 on Apple M1; four streams 0.19,
	// 0.13 and 0.13 c/B plus about 50, 38 and 38 cycles of pipeline fill and
	// merge per chunk: the break-even is near 270, 150 and 300 bytes.
	fourWayMin = 4 * stripeUnit
	// stripeUnit is the granule of the stripe length: crc4way's inner loop
	// runs 32 bytes per stream, and the merge table has one entry per 64.
	stripeUnit = 64
	// maxStripe bounds the stripe length, and so the merge table. Merging
	// every 16 KiB costs under 1% of the stream work.
	maxStripe = 4096
	maxChunk  = 4 * maxStripe
	// blocksMin is the smallest block length run four blocks at a time.
	blocksMin = 32
)

// fourWayK[j] holds the merge constants of stripes of s = stripeUnit·(j+1)
// bytes: fourWayK[j][i-1] = Reflect(x^(8·i·s - 33) mod P, 32) shifts a CRC
// register forward by i stripes (see crc4way); [3] is padding.
var fourWayK = makeFourWayK()

func makeFourWayK() *[maxStripe / stripeUnit][4]uint64 {
	t := new([maxStripe / stripeUnit][4]uint64)
	p := Params
	for i := uint64(1); i <= 3; i++ {
		// k(j) = x^(8·i·64·(j+1) - 33): start at j = 0, then multiply by
		// x^(8·i·64) per entry (normal form, reflected when stored).
		step := crcmath.XPowMod(p, 8*i*stripeUnit)
		k := crcmath.XPowMod(p, 8*i*stripeUnit-33)
		for j := range t {
			t[j][i-1] = crcmath.Reflect(k, 32)
			k = crcmath.MulMod(p, k, step)
		}
	}
	return t
}

// crcHW returns the CRC register crc advanced over p, any length, with one
// stream of CRC32C instructions.
//
//go:noescape
func crcHW(crc uint32, p []byte) uint32

// crc4way returns the CRC register crc advanced over the chunk p by the
// 4-way stripe kernel. Preconditions: stripe is a positive multiple of
// stripeUnit, at most maxStripe; len(p) == 4·stripe; k points at
// fourWayK[stripe/stripeUnit-1].
//
//go:noescape
func crc4way(crc uint32, p []byte, stripe int, k *[4]uint64) uint32

// crcBlocks sets dst[i] to the CRC-32C of the blockLen bytes at
// p[i·stride:] for every i, four blocks at a time on four CRC32C streams.
// Preconditions: len(dst) is a positive multiple of 4; blockLen is a
// multiple of 16 and at least 32; stride >= blockLen;
// len(p) >= (len(dst)-1)·stride + blockLen.
//
//go:noescape
func crcBlocks(dst []uint32, p []byte, blockLen, stride int)

func updateCRC(crc uint32, p []byte) uint32 { return ^crcHW(^crc, p) }

func updatePMULL4way(crc uint32, p []byte) uint32 {
	r := ^crc
	if len(p) >= fourWayMin {
		for len(p) >= maxChunk {
			r = crc4way(r, p[:maxChunk], maxStripe, &fourWayK[maxStripe/stripeUnit-1])
			p = p[maxChunk:]
		}
		if len(p) >= fourWayMin {
			s := (len(p) / 4) &^ (stripeUnit - 1)
			r = crc4way(r, p[:4*s], s, &fourWayK[s/stripeUnit-1])
			p = p[4*s:]
		}
	}
	// Fewer than fourWayMin bytes are left.
	return ^crcHW(r, p)
}

func blocksCRC(dst []uint32, p []byte, blockLen, stride int) {
	blocks4(dst, p, blockLen, stride, updateCRC)
}

func blocksPMULL4way(dst []uint32, p []byte, blockLen, stride int) {
	blocks4(dst, p, blockLen, stride, updatePMULL4way)
}

// blocks4 runs the blocks four at a time through crcBlocks (foldgo.Blocks,
// which it shares with the fold kernels), finishes each block's last
// blockLen%16 bytes with updateCRC, and the last len(dst)%4 blocks (or all
// of them when they are shorter than blocksMin) with upd.
func blocks4(dst []uint32, p []byte, blockLen, stride int, upd func(uint32, []byte) uint32) {
	foldgo.Blocks(dst, p, blockLen, stride, 16, 4, blocksMin, struct{}{}, crcBlocksGroup, updateCRC, upd)
}

// crcBlocksGroup is crcBlocks in foldgo.Blocks' kernel form (no table).
func crcBlocksGroup(dst []uint32, p []byte, blockLen, stride int, _ struct{}) {
	crcBlocks(dst, p, blockLen, stride)
}
