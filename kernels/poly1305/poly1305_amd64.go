//go:build !purego

package poly1305

import (
	"unsafe"

	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/layout"
	"golang.org/x/sys/cpu"
)

//go:generate go run -C ../_asm ./poly1305 -out ../poly1305/zblocks_amd64.s -stubs ../poly1305/zblocks_amd64.go

var (
	hasAVX2   = cpu.X86.HasAVX2
	hasHybrid = cpu.X86.HasAVX2 && cpu.X86.HasBMI2
	hasIFMA   = cpu.X86.HasAVX512F && cpu.X86.HasAVX512IFMA
)

// registerArch registers the lane kernels of zblocks_amd64.s, best first:
// eight blocks in the 64-bit lanes of ZMM registers with 52-bit multiplies
// (avx512ifma); four in YMM registers plus two in general registers
// (hybrid: the vector multiplier is the bottleneck of the YMM lanes, and the
// integer one is idle), with eight chunks per carry chain (hybrid8) or four
// (hybrid); four in YMM registers alone, eight chunks per carry chain
// (avx2r8) or four (avx2).
func registerArch() {
	impl.Register(pkgName, "avx512ifma", hasIFMA, func() { blocks, blocksCopy, partialGroups = blocksIFMA, blocksIFMACopy, partialsIFMA })
	impl.Register(pkgName, "hybrid8", hasHybrid, func() { blocks, blocksCopy, partialGroups = blocksHybrid8, blocksAVX2R8Copy, nil })
	impl.Register(pkgName, "hybrid", hasHybrid, func() { blocks, blocksCopy, partialGroups = blocksHybrid, copyThenBlocks, nil })
	impl.Register(pkgName, "avx2r8", hasAVX2, func() { blocks, blocksCopy, partialGroups = blocksAVX2R8, blocksAVX2R8Copy, nil })
	impl.Register(pkgName, "avx2", hasAVX2, func() { blocks, blocksCopy, partialGroups = blocksAVX2, copyThenBlocks, nil })
}

// blocksAVX2R8Copy is BlocksADCopy under avx2r8 and hybrid8: groups of
// four through lanesAVX2R8Copy, the rest copied and hashed by the generic
// code. hybrid8 has no copying kernel of its own (kernels/_asm/poly1305,
// lanesAVX2Copy, says why): with source and copy in the cache this runs
// level with copy-then-BlocksAD under hybrid8, and over a source in memory
// faster (BenchmarkBlocksADCopy).
//
// Blocks of whole chunks (512 bytes, 4 KiB: blockdev's) take a loop of
// their own, blocksAVX2R8CopyWhole; the others blocksLanesCopy.
func blocksAVX2R8Copy(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, q, p []byte, blockLen, stride int) {
	if blockLen > 0 && blockLen%16 == 0 {
		blocksAVX2R8CopyWhole(k, acc, h, ad, adLen, q, p, blockLen, stride)
		return
	}
	blocksLanesCopy(&kernelAVX2R8, k, acc, h, ad, adLen, q, p, blockLen, stride, copyGeneric)
}

// blocksAVX2R8CopyWhole is blocksLanesCopy over kernelAVX2R8 for blocks
// of whole chunks, without its per-lane generic code: lanesAVX2R8Copy
// called directly (no closure), and the four lanes' pack and reduce
// written out in one loop over the accumulators, with no calls; the pack
// without packLimbs's carries, which the kernel did (fullCarry). At
// 512-byte blocks that code runs once per 512 bytes, between kernel calls
// of about 100 ns, so its few ns a lane count (BenchmarkBlocksADCopy).
func blocksAVX2R8CopyWhole(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, q, p []byte, blockLen, stride int) {
	chunks := blockLen / 16
	key := (*[322]uint64)(&k.lanes8)
	hh := (*[20]uint64)(h[:20])
	n := len(acc) &^ (lanes - 1)
	// prefetchAhead's distance, its division once per call; per group
	// only its check that the blocks ahead are in p.
	ahead := prefetchAhead(len(p), lanes, stride, chunks)
	span := (lanes-1)*stride + blockLen
	for g := 0; g < n; g += lanes {
		pg := p[g*stride:]
		lanesAVX2R8Copy(hh, q[g*stride:], pg, stride, chunks, groupAhead(ahead, span, len(pg)), ad[g*adLen:], adLen, key)
		t := acc[g : g+lanes : g+lanes]
		for l := range lanes {
			// The kernel carried the limbs as packLimbs would
			// (fullCarry in kernels/_asm/poly1305): the pack is its
			// shifts and ors, then reduce mod 2^130-5.
			x0, x1, x2, x3, x4 := hh[l], hh[4+l], hh[8+l], hh[12+l], hh[16+l]
			t[l][0], t[l][1] = reduce(x0|x1<<26|x2<<52, x2>>12|x3<<14|x4<<40, x4>>24)
		}
	}
	if n < len(acc) {
		copyGeneric(k, acc[n:], h, ad[n*adLen:], adLen, q[n*stride:], p[n*stride:], blockLen, stride)
	}
}

// blocksHybrid8 is blocksHybrid with the eight-chunk kernels.
func blocksHybrid8(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, p []byte, blockLen, stride int) {
	m := hybridBlocks * hybridGroups(len(acc))
	blocksLanes(&kernelHybrid8, k, acc[:m], h, ad, adLen, p, blockLen, stride)
	if m < len(acc) {
		blocksAVX2R8(k, acc[m:], h, ad[m*adLen:], adLen, p[m*stride:], blockLen, stride)
	}
}

// kernelHybrid8 is kernelHybrid with eight chunks per step.
var kernelHybrid8 = laneKernel{
	lanes: hybridBlocks,
	absorb: func(h *laneBuf, p []byte, stride, chunks int, k *polyKey) {
		lanesHybridR8((*[26]uint64)(h), p, stride, chunks, (*[322]uint64)(&k.lanes8))
	},
	pack: kernelHybrid.pack,
}

func blocksAVX2R8(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, p []byte, blockLen, stride int) {
	blocksLanes(&kernelAVX2R8, k, acc, h, ad, adLen, p, blockLen, stride)
}

var kernelAVX2R8 = laneKernel{
	lanes: lanes,
	absorb: func(h *laneBuf, p []byte, stride, chunks int, k *polyKey) {
		lanesAVX2R8((*[20]uint64)(h[:20]), p, stride, chunks, (*[322]uint64)(&k.lanes8))
	},
	absorbCopyAD: func(h *laneBuf, q, p []byte, stride, chunks int, ad []byte, adLen int, k *polyKey) {
		lanesAVX2R8Copy((*[20]uint64)(h[:20]), q, p, stride, chunks, prefetchAhead(len(p), lanes, stride, chunks), ad, adLen, (*[322]uint64)(&k.lanes8))
	},
	pack: pack26,
}

// blocksHybrid runs groups of six blocks through the hybrid kernel and
// the rest through the AVX2 one (groups of four, then the generic code),
// splitting len(acc) as hybridGroups says.
func blocksHybrid(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, p []byte, blockLen, stride int) {
	m := hybridBlocks * hybridGroups(len(acc))
	blocksLanes(&kernelHybrid, k, acc[:m], h, ad, adLen, p, blockLen, stride)
	if m < len(acc) {
		blocksAVX2(k, acc[m:], h, ad[m*adLen:], adLen, p[m*stride:], blockLen, stride)
	}
}

// hybridBlocks is the number of blocks of one hybrid kernel call: four in
// vector lanes, two in general registers.
const hybridBlocks = lanes + 2

// hybridGroups returns how many groups of six of n blocks go to the hybrid
// kernel: the a that minimises the cost of 6a blocks there, then groups of
// four through the AVX2 kernel and the rest through the generic code, at
// relative costs per block of 65, 78 and 160: the hybrid and AVX2 kernels'
// cycles per 16-byte chunk of a block, in tenths, as measured on AMD Zen 2
// (the CPU the hybrid kernel is for; docs/perf/poly1305-generator.md), and
// the generic code at about half the AVX2 speed. So 64 blocks go as ten
// groups of six and one of four, 16 as two of six and one of four, 8 as two
// of four.
func hybridGroups(n int) int {
	best, bestCost := 0, -1
	for a := n / hybridBlocks; a >= 0 && a >= n/hybridBlocks-4; a-- {
		rem := n - hybridBlocks*a
		cost := 65*hybridBlocks*a + 78*4*(rem/4) + 160*(rem%4)
		if bestCost < 0 || cost < bestCost {
			best, bestCost = a, cost
		}
	}
	return best
}

// kernelHybrid: lanes 0..3 in radix 2^26 at h[0:20], lanes 4 and 5 in the
// generic form at h[20:23] and h[23:26].
var kernelHybrid = laneKernel{
	lanes: hybridBlocks,
	absorb: func(h *laneBuf, p []byte, stride, chunks int, k *polyKey) {
		lanesHybridAVX2((*[26]uint64)(h), p, stride, chunks, (*[162]uint64)(&k.lanes))
	},
	pack: func(h *laneBuf, l int) (h0, h1, h2 uint64) {
		if l >= lanes {
			w := 20 + 3*(l-lanes)
			return h[w], h[w+1], h[w+2]
		}
		return pack26(h, l)
	},
}

// blocksIFMA is Blocks and BlocksAD under avx512ifma: groups of eight
// through lanesIFMA. Blocks of whole
// chunks (512 bytes, 4 KiB: blockdev's) take a loop of their own, with
// the pack and reduce of the eight lanes written out (packReduce44)
// rather than blocksLanes's calls through kernelIFMA.pack, which cost a
// large share of the kernel's own time at 512-byte blocks (a CPU profile of
// BenchmarkBlocksADCopy; docs/perf/poly1305-generator.md). Their last
// one to seven blocks go through blocksAVX2R8 (groups of four, then the
// generic code); other blocks through blocksLanes (the rest generic).
func blocksIFMA(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, p []byte, blockLen, stride int) {
	if blockLen%16 != 0 {
		blocksLanes(&kernelIFMA, k, acc, h, ad, adLen, p, blockLen, stride)
		return
	}
	n := groupsIFMA(k, acc, h, ad, adLen, nil, p, blockLen, stride)
	if n < len(acc) && hasAVX2 {
		blocksAVX2R8(k, acc[n:], h, ad[n*adLen:], adLen, p[n*stride:], blockLen, stride)
	} else if n < len(acc) {
		blocksGeneric(k, acc[n:], nil, ad[n*adLen:], adLen, p[n*stride:], blockLen, stride)
	}
}

// blocksIFMACopy is BlocksADCopy under avx512ifma: the groups of eight
// blocks through groupsIFMA, which copies them to q as it hashes them.
func blocksIFMACopy(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, q, p []byte, blockLen, stride int) {
	if blockLen%16 != 0 {
		copyThenBlocks(k, acc, h, ad, adLen, q, p, blockLen, stride)
		return
	}
	n := groupsIFMA(k, acc, h, ad, adLen, q, p, blockLen, stride)
	if n < len(acc) {
		layout.Copy(q[n*stride:], p[n*stride:], len(acc)-n, blockLen, stride)
		blocksIFMA(k, acc[n:], h, ad[n*adLen:], adLen, q[n*stride:], blockLen, stride)
	}
}

// groupsIFMA is blocksIFMA's and blocksIFMACopy's loop over the whole
// groups of eight of len(acc) blocks of whole chunks: each group's
// associated data through lanesIFMA, its blocks through lanesIFMAS
// (hashed from p) or, when q is not nil, lanesIFMASCopy (copied from p to
// q as they are hashed, each row loaded once), and its eight lanes packed
// and reduced into acc. It returns how many blocks it took. Blocks of
// whole chunks but not of whole 64-byte rows go through lanesIFMA, from p
// or from a copy made first.
//
// The stream kernels (blocks of whole rows: 512 bytes, 4 KiB) replaced
// lanesIFMA there, and lanesIFMANext, which copied the next group of
// blocks while it hashed this one from q: the stream kernels' loads feed
// the multiplies directly, where lanesIFMANext's copies were off their
// path. Over a source in memory BlocksADCopy at 512 bytes measured
// slower than with lanesIFMANext, but blockdev's keyed read did not: its
// 512-byte figures stayed level and its 4 KiB ones rose. Prefetch
// distances of 8 to 32 KiB run level there. Two variants were measured
// and not kept: hashing from q while copying the next group, as
// lanesIFMANext did (no faster), and absorbing associated data whose
// chunks but the last are the same in every block (blockdev's uid, then
// LBA and generation) once per call, each lane seeded with their Horner
// value (checking the prefixes and the seed cost what it saved).
//
// The stream kernels' key operands are broadcasts and registers, not
// memory vectors (kernels/_asm/poly1305): that made Blocks faster, but not
// blockdev's keyed read of 512-byte blocks, whose kernel time there is
// the source's, read from the page cache, more than the multiplies'.
// docs/perf/poly1305-generator.md has the figures.
func groupsIFMA(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, q, p []byte, blockLen, stride int) int {
	chunks := blockLen / 16
	key := (*[key44Words]uint64)(&k.ifma)
	hh := (*[3 * lanes44]uint64)(h[:3*lanes44])
	n := len(acc) &^ (lanes44 - 1)
	stream := chunks > 0 && chunks%4 == 0
	pf := ifmaPrefetch(p, stride)
	for g := 0; g < n; g += lanes44 {
		src := p[g*stride:]
		*hh = [3 * lanes44]uint64{}
		if adLen > 0 {
			lanesIFMA(hh, ad[g*adLen:], adLen, adLen/16, key, pf)
		}
		gpf := pf + uintptr(g*stride)
		switch {
		case stream && q != nil:
			lanesIFMASCopy(hh, src, stride, chunks, key, gpf, &q[g*stride])
		case stream:
			lanesIFMAS(hh, src, stride, chunks, key, gpf)
		case q != nil:
			layout.Copy(q[g*stride:], src, lanes44, blockLen, stride)
			lanesIFMA(hh, q[g*stride:], stride, chunks, key, gpf)
		case chunks > 0:
			lanesIFMA(hh, src, stride, chunks, key, gpf)
		}
		packReduce44(hh, acc[g:g+lanes44:g+lanes44])
	}
	return n
}

// ifmaAhead is how far ahead groupsIFMA prefetches, at least: whole
// groups.
const ifmaAhead = 8 << 10

// ifmaPrefetch is the start of the IFMA kernels' prefetch stream for the
// first group of blocks stride bytes apart at p: ifmaAhead bytes on,
// rounded up to whole groups of eight blocks (the stream of group g
// starts g*stride bytes further). The associated data's calls, of two
// chunks, issue none. (Addresses only: prefetches never fault, and those
// past p are hints.)
func ifmaPrefetch(p []byte, stride int) uintptr {
	ahead := ifmaAhead
	if span := lanes44 * stride; span > 0 {
		ahead = (ifmaAhead + span - 1) / span * span
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(p))) + uintptr(ahead)
}

// packReduce44 sets t[l] to the reduced accumulator of lane l of the IFMA
// kernels' h. Their last carry chain (combine44) leaves limbs 0 and 2
// below 2^44 and 2^42 and limb 1 below 2^44 + 2^4: one carry of limb 1
// into limb 2 makes the pack its shifts and ors, exactly (limb 1 at 2^44
// with limb 2 odd would lose a bit otherwise: laneToState44).
func packReduce44(hh *[3 * lanes44]uint64, t [][2]uint64) {
	t = t[:lanes44]
	for l := range lanes44 {
		x0, x1, x2 := hh[l], hh[lanes44+l], hh[2*lanes44+l]
		x2 += x1 >> 44
		x1 &= mask44
		t[l][0], t[l][1] = reduce(x0|x1<<44, x1>>20|x2<<24, x2>>40)
	}
}

// partialsIFMA is Partials' lane kernel under avx512ifma: the whole groups
// of eight blocks of whole 64-byte rows (lanesIFMAS, from h = 0 and no
// associated data), each lane's accumulator turned into a Partial. It
// returns how many blocks it took (the rest take the generic code).
func partialsIFMA(k *polyKey, parts []Partial, p []byte, blockLen, stride int) int {
	chunks := blockLen / 16
	if blockLen%64 != 0 || chunks == 0 {
		return 0
	}
	key := (*[key44Words]uint64)(&k.ifma)
	var hh [3 * lanes44]uint64
	n := len(parts) &^ (lanes44 - 1)
	pf := ifmaPrefetch(p, stride)
	for g := 0; g < n; g += lanes44 {
		hh = [3 * lanes44]uint64{}
		lanesIFMAS(&hh, p[g*stride:], stride, chunks, key, pf+uintptr(g*stride))
		for l := range lanes44 {
			parts[g+l] = partial44(hh[l], hh[lanes44+l], hh[2*lanes44+l])
		}
	}
	return n
}

// partial44 is the Partial of a lane accumulator of the IFMA kernels, as
// combine44 leaves it (limbs 0 and 2 below 2^44 and 2^42, limb 1 below
// 2^44 + 2^4; see packReduce44): the same value, x0 + x1·2^44 + x2·2^88,
// below 2^131, cut into 26-bit limbs (the top one below 2^27), with no
// reduction, so congruent to the polynomial as the lanes were.
func partial44(x0, x1, x2 uint64) Partial {
	x2 += x1 >> 44
	x1 &= mask44
	// 128 low bits and the top bits of the value.
	lo := x0 | x1<<44
	hi := x1>>20 | x2<<24
	top := x2 >> 40
	const m26 = 1<<26 - 1
	return Partial{
		lo & m26,
		lo >> 26 & m26,
		(lo>>52 | hi<<12) & m26,
		hi >> 14 & m26,
		hi>>40 | top<<24,
	}
}

var kernelIFMA = laneKernel{
	lanes: lanes44,
	absorb: func(h *laneBuf, p []byte, stride, chunks int, k *polyKey) {
		lanesIFMA((*[24]uint64)(h[:24]), p, stride, chunks, (*[key44Words]uint64)(&k.ifma), ifmaPrefetch(p, stride))
	},
	pack: pack44,
}

func blocksAVX2(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, p []byte, blockLen, stride int) {
	blocksLanes(&kernelAVX2, k, acc, h, ad, adLen, p, blockLen, stride)
}

var kernelAVX2 = laneKernel{
	lanes: lanes,
	absorb: func(h *laneBuf, p []byte, stride, chunks int, k *polyKey) {
		lanesAVX2Kernel(laneState26(h), p, stride, chunks, &k.lanes)
	},
	pack: pack26,
}

// lanesAVX2Kernel is lanesAVX2 with the package's types.
func lanesAVX2Kernel(h *laneState, p []byte, stride, chunks int, key *laneKey) {
	lanesAVX2((*[20]uint64)(h), p, stride, chunks, (*[162]uint64)(key))
}

// groupAhead is prefetchAhead(plen, lanes, stride, chunks) for a group
// plen bytes from the end of p, given ahead, prefetchAhead for the first
// group of the call, and span, the bytes of a group's blocks: the same
// distance while the blocks ahead are in p, then 0.
func groupAhead(ahead, span, plen int) int {
	if ahead+span > plen {
		return 0
	}
	return ahead
}

// prefetchAhead is how far on in p lanesAVX2R8Copy prefetches, for a
// group of n blocks in the len(p) bytes from the group's start: the next
// group's blocks, or (for groups under 4 KiB) the first group at least 4
// KiB on, so that the lines come from memory in the time of a group or
// more; 0 (the group itself: no prefetch beyond it) where that group is
// not in p.
func prefetchAhead(plen, n, stride, chunks int) int {
	g := n * stride
	if g == 0 {
		return 0
	}
	a := g * max(1, (4096+g-1)/g)
	if a+(n-1)*stride+16*chunks > plen {
		return 0
	}
	return a
}
