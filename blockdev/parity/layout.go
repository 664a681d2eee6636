package parity

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// Depth values with a meaning of their own (Options.Depth).
const (
	// DefaultDepth is the interleave depth of Options.Depth 0: 256 stripes
	// per group, so a run of up to 256·m bad blocks (2 MiB for 16+2 at
	// 4 KiB) is always rebuildable, and a write of k·256 aligned blocks
	// (16 MiB for 16+2 at 4 KiB) covers whole stripes.
	DefaultDepth = 256
	// Consecutive is the depth of the non-interleaved layout: a stripe is k
	// consecutive blocks. A run of more than m bad blocks inside one
	// stripe is lost.
	Consecutive = 1
	// WholeVolume interleaves over the whole volume, as dm-verity FEC does:
	// block i is in stripe i mod S, position i div S, with S = ceil(N/k).
	WholeVolume = -1
)

// MaxShards bounds k+m: the code works over GF(2^8).
const MaxShards = 256

// Options describe a layout.
type Options struct {
	// Data is k, the data blocks of a stripe: 1 to 255.
	Data int
	// Parity is m, the parity blocks of a stripe: 1 to k, with k+m at most
	// MaxShards. A stripe survives any m erasures.
	Parity int
	// BlockSize is the size in bytes of a block, data or parity: a power of
	// two from 512 to 65536 (the volume's block size).
	BlockSize int
	// Blocks is N, the data blocks of the volume, at least 1.
	Blocks int64
	// Depth is the interleave depth D, the stripes of a group: 0 means
	// DefaultDepth, Consecutive (1) no interleave, WholeVolume one group
	// over the whole volume. A depth above ceil(N/k) is clamped to it.
	Depth int64
}

// ErrInvalidLayout reports Options that do not describe a layout.
var ErrInvalidLayout = errors.New("parity: invalid layout")

// Layout maps the N data blocks of a volume to stripes of k data blocks
// and m parity blocks, and the parity blocks to offsets in the parity
// file. It is an immutable value; the zero Layout is not valid.
//
// # The math
//
// Blocks are cut into groups of G = k·D consecutive blocks, D being the
// depth. Inside a full group, the block r places from the group's start is
// at position r div D of the group's stripe r mod D: a stripe takes k
// blocks D apart, and D neighbouring blocks lie in D different stripes.
// Group g holds stripes g·D to g·D+D-1. With F = N div G full groups and
// R = N mod G blocks left, the last, partial group (if R > 0) has depth
//
//	Dt = min(D, ceil(R/m))
//
// and the same rule with Dt for D; positions past its end hold no block
// (a missing shard, which counts as zeros). So
//
//	block i: g = i div G, r = i mod G, d = D (g < F) or Dt (g = F),
//	         stripe = g·D + r mod d, position = r div d
//	S (stripes) = F·D + Dt
//	parity block j of stripe s at byte (s·m + j)·bs; file size S·m·bs
//
// Depth 1 (Consecutive) makes every stripe k consecutive blocks and depth
// ceil(N/k) (WholeVolume) is the one group i mod S, i div S; both have
// S = ceil(N/k), the parity file m/k of the data rounded up per stripe.
// An intermediate depth adds at most m·D parity blocks for its partial
// group (Dt stripes where ceil(R/k) would do).
//
// The burst guarantee: any run of at most m·D consecutive data blocks
// meets every stripe at most m times, so it is rebuildable. In a full
// group a run of L ≤ m·D blocks meets a stripe ceil(L/D) ≤ m times; in the
// partial group a run of L ≤ min(R, m·D) blocks meets one ceil(L/Dt) ≤ m
// times, since Dt ≥ min(D, R/m); a run across groups meets disjoint
// stripes in each. Dt is the smallest depth with that property, and the
// positions of the partial group are below ceil(R/Dt), which is at most k
// (Dt = D: R < k·D) or m (Dt = ceil(R/m)).
//
// The parity blocks of a stripe are adjacent, so a stripe's parity is read
// or written in one request, and the parity of a group (D·m blocks) is one
// sequential run.
type Layout struct {
	k, m    int
	bs      int
	n       int64 // N
	depth   int64 // D
	group   int64 // G = k·D
	full    int64 // F
	tail    int64 // R
	tailD   int64 // Dt (0 when R = 0)
	stripes int64 // S
}

// NewLayout validates o and returns its layout.
func NewLayout(o Options) (Layout, error) {
	k, m := o.Data, o.Parity
	switch {
	case k < 1 || m < 1 || m > k || k+m > MaxShards:
		return Layout{}, fmt.Errorf("%w: %d+%d: want 1 ≤ m ≤ k and k+m ≤ %d", ErrInvalidLayout, k, m, MaxShards)
	case o.BlockSize < 512 || o.BlockSize > 1<<16 || bits.OnesCount(uint(o.BlockSize)) != 1:
		return Layout{}, fmt.Errorf("%w: block size %d is not a power of two from 512 to 65536", ErrInvalidLayout, o.BlockSize)
	case o.Blocks < 1:
		return Layout{}, fmt.Errorf("%w: %d blocks", ErrInvalidLayout, o.Blocks)
	case o.Blocks > math.MaxInt64/int64(o.BlockSize):
		return Layout{}, fmt.Errorf("%w: %d blocks of %d bytes overflow a 64-bit size", ErrInvalidLayout, o.Blocks, o.BlockSize)
	case o.Depth < WholeVolume:
		return Layout{}, fmt.Errorf("%w: depth %d", ErrInvalidLayout, o.Depth)
	}
	l := Layout{k: k, m: m, bs: o.BlockSize, n: o.Blocks}
	whole := ceilDiv(l.n, int64(k)) // ceil(N/k)
	switch d := o.Depth; {
	case d == 0:
		l.depth = DefaultDepth
	case d == WholeVolume:
		l.depth = whole
	default:
		l.depth = d
	}
	l.depth = min(l.depth, whole)
	l.group = int64(k) * l.depth // ≤ N+k-1: no overflow
	l.full, l.tail = l.n/l.group, l.n%l.group
	if l.tail > 0 {
		l.tailD = min(l.depth, ceilDiv(l.tail, int64(m)))
	}
	l.stripes = l.full*l.depth + l.tailD
	// The parity file: S·m·bs ≤ (ceil(N/k) + D)·m·bs ≤ 2·N·bs + k·bs.
	if l.stripes > math.MaxInt64/int64(m)/int64(l.bs) {
		return Layout{}, fmt.Errorf("%w: a parity file of %d stripes of %d blocks of %d bytes overflows a 64-bit size", ErrInvalidLayout, l.stripes, m, l.bs)
	}
	return l, nil
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// DataShards returns k.
func (l Layout) DataShards() int { return l.k }

// ParityShards returns m.
func (l Layout) ParityShards() int { return l.m }

// BlockSize returns the block size in bytes.
func (l Layout) BlockSize() int { return l.bs }

// Blocks returns N, the data blocks of the volume.
func (l Layout) Blocks() int64 { return l.n }

// Depth returns D, the interleave depth after defaults and clamping: 1 is
// not interleaved.
func (l Layout) Depth() int64 { return l.depth }

// Stripes returns S, the number of stripes.
func (l Layout) Stripes() int64 { return l.stripes }

// ParitySize returns the size in bytes of the parity file: S·m·bs.
func (l Layout) ParitySize() int64 { return l.stripes * int64(l.m) * int64(l.bs) }

// BurstTolerance returns m·D: every run of that many consecutive data
// blocks (or fewer) meets each stripe at most m times, so it is
// rebuildable when nothing else in those stripes is damaged.
func (l Layout) BurstTolerance() int64 { return int64(l.m) * l.depth }

// String describes the layout, for example "16+2 depth 256, 4096-byte
// blocks, 1000 blocks in 63 stripes".
func (l Layout) String() string {
	return fmt.Sprintf("%d+%d depth %d, %d-byte blocks, %d blocks in %d stripes", l.k, l.m, l.depth, l.bs, l.n, l.stripes)
}

// groupDepth returns the depth of group g.
func (l Layout) groupDepth(g int64) int64 {
	if g < l.full {
		return l.depth
	}
	return l.tailD
}

// Locate returns the stripe and the position in it (0 to k-1) of data
// block i, 0 ≤ i < N. It panics if i is out of range, as an index does.
func (l Layout) Locate(i int64) (stripe int64, pos int) {
	if i < 0 || i >= l.n {
		panic(fmt.Sprintf("parity: block %d out of range [0, %d)", i, l.n))
	}
	g, r := i/l.group, i%l.group
	d := l.groupDepth(g)
	return g*l.depth + r%d, int(r / d)
}

// Block returns the data block at position pos of stripe s, and false if
// that position holds no block (past the end of a partial group: a missing
// shard, which counts as zeros). It panics if s or pos is out of range.
func (l Layout) Block(s int64, pos int) (int64, bool) {
	if s < 0 || s >= l.stripes || pos < 0 || pos >= l.k {
		panic(fmt.Sprintf("parity: stripe %d position %d out of range (%d stripes of %d)", s, pos, l.stripes, l.k))
	}
	g, c := s/l.depth, s%l.depth
	off := int64(pos)*l.groupDepth(g) + c // from the group's start
	if g == l.full && off >= l.tail {
		return 0, false
	}
	return g*l.group + off, true
}

// StripeBlocks appends the k data blocks of stripe s to dst in position
// order, -1 for a position that holds no block, and returns the result.
func (l Layout) StripeBlocks(dst []int64, s int64) []int64 {
	for pos := range l.k {
		b, ok := l.Block(s, pos)
		if !ok {
			b = -1
		}
		dst = append(dst, b)
	}
	return dst
}

// StripeLen returns how many positions of stripe s hold a block: k, or
// fewer in a partial group.
func (l Layout) StripeLen(s int64) int {
	if s < 0 || s >= l.stripes {
		panic(fmt.Sprintf("parity: stripe %d out of range (%d stripes)", s, l.stripes))
	}
	g, c := s/l.depth, s%l.depth
	if g < l.full {
		return l.k
	}
	// Positions p with p·Dt + c < R: ceil((R-c)/Dt), and c < Dt ≤ R.
	return int(min(int64(l.k), ceilDiv(l.tail-c, l.tailD)))
}

// ParityOffset returns the byte offset in the parity file of parity block
// j (0 to m-1) of stripe s: (s·m + j)·bs. The m blocks of a stripe are
// adjacent. It panics if s or j is out of range.
func (l Layout) ParityOffset(s int64, j int) int64 {
	if s < 0 || s >= l.stripes || j < 0 || j >= l.m {
		panic(fmt.Sprintf("parity: stripe %d parity block %d out of range (%d stripes of %d)", s, j, l.stripes, l.m))
	}
	return (s*int64(l.m) + int64(j)) * int64(l.bs)
}
