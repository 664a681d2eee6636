// Package poly1305 implements the Poly1305 one-time authenticator (RFC 8439
// section 2.5) and Bernstein's Poly1305-AES message authentication code,
// with a batch call that computes the tags of many equal-sized blocks at
// once, which is what keyed protection of a block device needs.
//
// # Parameters
//
// Poly1305 evaluates the message as a polynomial modulo the prime p =
// 2^130-5. The message is cut into 16-byte chunks; each chunk, read
// little-endian with one more byte 0x01 appended (2^128 for a full chunk,
// 2^(8n) for a final chunk of n < 16 bytes), is added to an accumulator h,
// and h is multiplied by r: h = (h + chunk)·r mod p. The tag is (h + s) mod
// 2^128, written little-endian. r is 16 bytes "clamped" (r &=
// 0x0ffffffc0ffffffc0ffffffc0fffffff, so its 32-bit words are below 2^28 and
// the top three are multiples of 4); s is 16 bytes. The one-time key of Sum
// and New is r || s, 32 bytes, as in RFC 8439.
//
// Poly1305-AES (Bernstein, "The Poly1305-AES message-authentication code",
// 2005) takes s from a block cipher: tag = (Poly1305_r(m) + AES_k(n)) mod
// 2^128 for a 16-byte nonce n. Key holds r and the AES key k (16, 24 or 32
// bytes: AES-128 as in the paper, or AES-192/256), and uses the standard
// library's AES (AES-NI on amd64, the AES instructions on arm64).
//
// # Security
//
// Poly1305 alone is a one-time authenticator: a key r || s must never
// authenticate two messages, or an attacker who sees both tags can solve for
// r and forge. Poly1305-AES reuses r for every message, which is safe only
// because each message's s = AES_k(n) is a fresh pseudo-random mask: the
// security bound holds as long as no nonce n is ever used twice under one
// key (r, k). The caller must guarantee that; repeating a nonce with two
// different messages lets an attacker recover r, and from then on forge the
// tag of any message under any nonce whose mask it has seen. Nonces need
// not be secret or random, only unique: a counter works. Blocks uses
// nonce, nonce+1, ..., nonce+len(dst)-1 (a 128-bit big-endian counter,
// wrapping as AES-CTR does), so runs of blocks must not overlap in counter
// space either. Compare tags with Equal (constant time), never with ==.
//
// Poly1305 does not hide anything and does not bind a message to its
// context: a tag covers exactly the bytes given. Blocks lets the caller
// prefix each block with per-block associated data (an address, a write
// generation, a volume identity) without copying the block.
//
// # Tags of a copy
//
// BlocksADCopy copies blocks out of a buffer another party may be writing
// (a page-cache mapping of a device) and returns the tags of the bytes it
// wrote, in one pass on amd64: a verified read compares them with the
// stored tags, and what it verified is exactly what the caller got, however
// the source changed meanwhile. Its tags equal BlocksAD's over the copy,
// bit for bit.
//
// # Implementations
//
// The batch calls evaluate many blocks side by side under one r, sharing
// its powers: the AVX2 and NEON kernels take four chunks per step, h' = (h +
// m1)·r^4 + m2·r^3 + m3·r^2 + m4·r (the eight-chunk AVX2 kernels eight,
// under r^8..r), lanesIFMA four too, so that one carry chain serves
// several chunks and most products do not wait for h. The registry
// (kernels/internal/impl, package name "poly1305") lists them best first,
// lets tests and benchmarks force each, and DIFCTL_KERNELS=poly1305=NAME
// picks one:
//
//   - avx512ifma: eight blocks in the 64-bit lanes of ZMM registers, radix
//     2^44, VPMADD52LUQ/VPMADD52HUQ (AVX512F and AVX512IFMA), the default
//     where the CPU has them; checked in kernels/_asm's emulator, and run
//     natively by the package tests on such a CPU. Blocks of whole 64-byte
//     rows (512 bytes, 4 KiB: blockdev's) go through the stream kernels
//     (lanesIFMAS, and for BlocksADCopy lanesIFMASCopy, which stores each
//     row to the copy as it loads it): a pair of blocks at a time, four
//     chunk streams each, with no gathers and no 512-bit memory operands
//     on the multiplies (kernels/_asm/poly1305 has the design). Other
//     blocks, and the associated data, go through lanesIFMA, which gathers
//     a chunk of each of eight blocks; BlocksADCopy of such blocks copies a
//     group of eight and then hashes the copy, a one-pass form of
//     lanesIFMA having lost to the two passes (eight blocks 4 KiB apart
//     share one set of the 8-way L1, and so do their copies). Both kernels
//     prefetch the blocks as one sequential stream at least 8 KiB ahead,
//     whole groups (groupsIFMA), so that the hash's arithmetic overlaps the
//     memory's latency and a copy reads the source from the cache.
//   - hybrid8 (the default without AVX-512 IFMA): hybrid with eight chunks
//     per carry chain, h' = (h + m1)·r^8 + m2·r^7 + ... + m8·r under the
//     powers r..r^8 (laneKey8; the bounds are in poly1305_lanes.go), and
//     each product's add two multiplies behind it.
//   - hybrid: four blocks in YMM registers (radix 2^26, VPMULUDQ) and two
//     more in general registers with MULX (AVX2 and BMI2), their
//     instructions interleaved by the generator, for CPUs whose vector
//     multiplier is the bottleneck while the integer one idles (AMD Zen 2).
//     Its scalar lanes cost dispatch slots (23.9 instructions per chunk of
//     a block, avx2's 18.75), so under heavy load from other processes it
//     can fall behind avx2.
//   - avx2r8: the four YMM lanes alone, eight chunks per carry chain.
//   - avx2: the four YMM lanes alone, four chunks per carry chain.
//   - neon (arm64): two blocks in the 64-bit lanes of the 128-bit vector
//     registers, radix 2^26, UMULL/UMLAL by element. Go's arm64 assembler
//     has no UMULL or UMLAL, so the kernel is generated by
//     kernels/_asm/poly1305neon, which emits those two as WORD directives
//     encoded from the architecture's field layout (and checks them against
//     llvm-mc). Tested under qemu-aarch64; llvm-mca models its loop at 1.65
//     times the generic code on Cortex-A72 and Neoverse N1, 2.9 times on
//     Apple M1, and level with it on the in-order Cortex-A53 (kernels/_mca).
//   - generic: 64-bit limbs with bits.Mul64, one block at a time; every
//     other architecture and purego builds.
//
// BlocksADCopy runs copying kernels of its own on amd64: lanesAVX2R8Copy
// (avx2r8's lanes, copying each step's next 128 bytes of four blocks while
// it absorbs the current step from the copy, and prefetching the group it
// will be called for next) under both hybrid8 and avx2r8, and
// lanesIFMASCopy under avx512ifma (above); the other implementations copy
// a run of blocks and then hash the copy. lanesAVX2R8Copy also absorbs the
// blocks' associated data and ends with the carries that leave its limbs
// ready to pack; for blocks of whole chunks the Go side of each group of
// four is one loop without calls (blocksAVX2R8CopyWhole).
//
// docs/perf/poly1305-generator.md has the measurements behind these
// choices: each kernel against the others, x/crypto and HMAC-SHA256, and
// the forms tried and not kept.
//
// The assembly is generated by kernels/_asm/poly1305 (amd64, avo) and
// kernels/_asm/poly1305neon (arm64); the math of each lane kernel is also
// written in pure Go (poly1305_lanes.go, poly1305_lanes44.go,
// poly1305_neon.go) and tested against the generic code, and each kernel
// is tested against its model word for word. The one-message calls Sum,
// New and Key.Tag use the generic code everywhere. The masks of a run of
// blocks come from one AES-CTR keystream (AES-NI or the ARMv8 AES
// instructions in the standard library); a MaskStream keeps it across
// calls, for a caller that tags a run in pieces.
package poly1305

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/layout"
)

const (
	// KeySize is the size of a one-time Poly1305 key r || s.
	KeySize = 32
	// TagSize is the size of a tag.
	TagSize = 16
	// NonceSize is the size of a Poly1305-AES nonce (one AES block).
	NonceSize = 16
	// RSize is the size of r.
	RSize = 16
)

// Tag is a Poly1305 or Poly1305-AES tag.
type Tag [TagSize]byte

// Nonce is a Poly1305-AES nonce. Blocks treats it as a 128-bit big-endian
// counter.
type Nonce [NonceSize]byte

// Add returns n + i mod 2^128, n read as a big-endian integer: the nonce
// Blocks uses for the block i places after the one that gets n.
func (n Nonce) Add(i uint64) Nonce {
	lo := binary.BigEndian.Uint64(n[8:])
	hi := binary.BigEndian.Uint64(n[:8])
	s := lo + i
	if s < lo {
		hi++
	}
	var out Nonce
	binary.BigEndian.PutUint64(out[:8], hi)
	binary.BigEndian.PutUint64(out[8:], s)
	return out
}

var (
	// ErrLayout is returned by Blocks and BlocksAD when the buffers do not
	// hold the blocks described.
	ErrLayout = errors.New("poly1305: buffer too short for the block layout")
	// ErrKeySize is returned by NewKey for an r or AES key of the wrong
	// size.
	ErrKeySize = errors.New("poly1305: bad key size")
)

const pkgName = "poly1305"

// blocks is the active batch kernel: acc[i] = Poly1305_r(ad_i || block_i)
// mod 2^130-5, low 128 bits (see blocksGeneric). The layout is valid and
// adLen is a multiple of 16; h is scratch space for the lane kernels.
var blocks func(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, p []byte, blockLen, stride int) = blocksGeneric

func init() {
	registerArch()
	impl.Register(pkgName, "generic", true, func() { blocks, blocksCopy, partialGroups = blocksGeneric, copyThenBlocks, nil })
}

// Sum writes the Poly1305 tag of m under the one-time key r || s to out
// (RFC 8439 section 2.5).
func Sum(out *[TagSize]byte, m []byte, key *[KeySize]byte) {
	r0, r1 := clampR(key[:16])
	h0, h1 := sumGeneric(r0, r1, m)
	addMask(out[:], h0, h1, binary.LittleEndian.Uint64(key[16:24]), binary.LittleEndian.Uint64(key[24:32]))
}

// Verify reports, in constant time, whether mac is the Poly1305 tag of m
// under the one-time key.
func Verify(mac *[TagSize]byte, m []byte, key *[KeySize]byte) bool {
	var t [TagSize]byte
	Sum(&t, m, key)
	return subtle.ConstantTimeCompare(t[:], mac[:]) == 1
}

// Equal reports, in constant time, whether two tags are equal.
func Equal(a, b Tag) bool { return subtle.ConstantTimeCompare(a[:], b[:]) == 1 }

// MAC computes a Poly1305 tag incrementally under a one-time key. Writing
// the message in pieces gives the tag of their concatenation.
type MAC struct {
	st     state
	s0, s1 uint64
	buf    [16]byte
	n      int // bytes in buf
	done   bool
}

// New returns a MAC for the one-time key r || s.
func New(key *[KeySize]byte) *MAC {
	m := &MAC{}
	m.st.r0, m.st.r1 = clampR(key[:16])
	m.s0, m.s1 = binary.LittleEndian.Uint64(key[16:24]), binary.LittleEndian.Uint64(key[24:32])
	return m
}

// Size returns TagSize.
func (m *MAC) Size() int { return TagSize }

// Write adds p to the message. It never fails; it panics if called after
// Sum, like x/crypto's, since the key is one-time.
func (m *MAC) Write(p []byte) (int, error) {
	if m.done {
		panic("poly1305: Write after Sum")
	}
	n := len(p)
	if m.n > 0 {
		k := copy(m.buf[m.n:], p)
		m.n += k
		p = p[k:]
		if m.n < 16 {
			return n, nil
		}
		m.st.chunks(m.buf[:])
	}
	full := len(p) &^ 15
	m.st.chunks(p[:full])
	m.n = copy(m.buf[:], p[full:])
	return n, nil
}

// Sum appends the tag of the message written so far to b. After Sum the MAC
// takes no more input.
func (m *MAC) Sum(b []byte) []byte {
	m.done = true
	st := m.st
	if m.n > 0 {
		st.last(m.buf[:m.n])
	}
	h0, h1 := reduce(st.h0, st.h1, st.h2)
	var t [TagSize]byte
	addMask(t[:], h0, h1, m.s0, m.s1)
	return append(b, t[:]...)
}

// Verify reports, in constant time, whether mac is the tag of the message
// written so far.
func (m *MAC) Verify(mac []byte) bool {
	var t [TagSize]byte
	m.Sum(t[:0])
	return subtle.ConstantTimeCompare(t[:], mac) == 1
}

// polyKey is r in the forms the implementations use.
type polyKey struct {
	r0, r1 uint64
	lanes  laneKey  // radix 2^26, for the AVX2 kernels
	lanes8 laneKey8 // radix 2^26, r..r^8, for the eight-chunk AVX2 kernels
	ifma   ifmaKey  // radix 2^44, for the AVX-512 IFMA kernel
	neon   neonKey  // radix 2^26, r and r^2, for the NEON kernel
}

func newPolyKey(r []byte) polyKey {
	k := polyKey{}
	k.r0, k.r1 = clampR(r)
	k.lanes = makeLaneKey(k.r0, k.r1)
	k.lanes8 = makeLaneKey8(k.r0, k.r1)
	k.ifma = makeIFMAKey(k.r0, k.r1)
	k.neon = makeNeonKey(&k.lanes)
	return k
}

// Key is a Poly1305-AES key: r and an AES key k. It is safe for concurrent
// use.
type Key struct {
	poly  polyKey
	block cipher.Block
}

// NewKey returns the Poly1305-AES key (k, r): aesKey is the AES key (16, 24
// or 32 bytes) and r the 16 bytes of r (clamped here, as RFC 8439 clamps;
// Bernstein's paper requires r to be given clamped). It returns ErrKeySize
// for other sizes. Both keys must be secret and uniformly random, and r
// independent of aesKey.
func NewKey(aesKey, r []byte) (*Key, error) {
	if len(r) != RSize {
		return nil, fmt.Errorf("%w: r is %d bytes, want %d", ErrKeySize, len(r), RSize)
	}
	switch len(aesKey) {
	case 16, 24, 32:
	default:
		return nil, fmt.Errorf("%w: AES key is %d bytes, want 16, 24 or 32", ErrKeySize, len(aesKey))
	}
	b, err := aes.NewCipher(aesKey)
	if err != nil {
		return nil, fmt.Errorf("poly1305: %w", err)
	}
	return &Key{poly: newPolyKey(r), block: b}, nil
}

// Tag returns the Poly1305-AES tag of m under nonce: (Poly1305_r(m) +
// AES_k(nonce)) mod 2^128.
func (k *Key) Tag(nonce *Nonce, m []byte) Tag {
	var s [16]byte
	k.block.Encrypt(s[:], nonce[:])
	h0, h1 := sumGeneric(k.poly.r0, k.poly.r1, m)
	var t Tag
	addMask(t[:], h0, h1, binary.LittleEndian.Uint64(s[0:8]), binary.LittleEndian.Uint64(s[8:16]))
	return t
}

// Blocks computes the Poly1305-AES tags of len(dst) blocks of blockLen bytes
// each, the i-th starting at p[i*stride], under the nonces nonce,
// nonce.Add(1), ...: dst[i] = k.Tag(nonce.Add(i), p[i*stride:][:blockLen]).
// A stride larger than blockLen skips the bytes between blocks. It returns
// ErrLayout, and writes nothing, unless blockLen >= 0, stride >= blockLen
// (when there is more than one block) and len(p) >= (len(dst)-1)*stride +
// blockLen.
func (k *Key) Blocks(dst []Tag, nonce *Nonce, p []byte, blockLen, stride int) error {
	return k.BlocksAD(dst, nonce, nil, 0, p, blockLen, stride)
}

// BlocksAD is Blocks with adLen bytes of associated data before each block:
// dst[i] = k.Tag(nonce.Add(i), ad[i*adLen:][:adLen] || p[i*stride:][:blockLen]),
// computed without copying either. adLen must be a multiple of 16 (so the
// block starts on a Poly1305 chunk boundary) and len(ad) >= len(dst)*adLen,
// else it returns ErrLayout and writes nothing; the rules for p are those of
// Blocks. With a fixed adLen and blockLen per key, the concatenation is
// unambiguous: put what the tag must bind (a volume identity, the block's
// address and write generation) in ad.
func (k *Key) BlocksAD(dst []Tag, nonce *Nonce, ad []byte, adLen int, p []byte, blockLen, stride int) error {
	return k.blocksAD(nil, dst, nonce, ad, adLen, p, blockLen, stride)
}

// blocksAD is BlocksAD with the masks from ms, or from a keystream of its
// own if ms is nil (and so are blocksADCopy and tagsFromPartials).
func (k *Key) blocksAD(ms *MaskStream, dst []Tag, nonce *Nonce, ad []byte, adLen int, p []byte, blockLen, stride int) error {
	n := len(dst)
	if !layout.Valid(n, len(p), blockLen, stride) {
		return ErrLayout
	}
	if adLen < 0 || adLen%16 != 0 || adLen > 0 && n > len(ad)/adLen {
		return fmt.Errorf("%w: %d bytes of associated data for %d blocks of %d", ErrLayout, len(ad), n, adLen)
	}
	if n == 0 {
		return nil
	}
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	ctr := k.masks(ms, nonce, n, sc)
	for i := 0; i < n; i += run {
		m := min(run, n-i)
		blocks(&k.poly, sc.acc[:m], &sc.h, ad[i*adLen:], adLen, p[i*stride:], blockLen, stride)
		ctr.XORKeyStream(sc.mask[:16*m], zeros[:16*m])
		for j := range m {
			addMask(dst[i+j][:], sc.acc[j][0], sc.acc[j][1],
				binary.LittleEndian.Uint64(sc.mask[16*j:]), binary.LittleEndian.Uint64(sc.mask[16*j+8:]))
		}
	}
	return nil
}

// scratch is the working memory of one BlocksAD call, pooled so that a
// call allocates only its keystream: the accumulators and masks of a run,
// and the lane kernels' accumulators.
type scratch struct {
	acc  [run][2]uint64
	mask [run * 16]byte
	h    laneBuf
	iv   [16]byte // the keystream's first counter block
}

// maskStream returns the AES-CTR keystream of the masks from nonce on,
// its counter block in sc: so the caller's nonce does not escape to the
// heap (the stream keeps its IV slice), which cost a keyed read an
// allocation per call.
func (k *Key) maskStream(nonce *Nonce, sc *scratch) cipher.Stream {
	sc.iv = *nonce
	return cipher.NewCTR(k.block, sc.iv[:])
}

// masks returns the keystream of the masks of n blocks from nonce on: ms's
// (MaskStream.from), or a new one if ms is nil. The caller takes exactly
// 16*n bytes of it, in pieces of whole masks.
func (k *Key) masks(ms *MaskStream, nonce *Nonce, n int, sc *scratch) cipher.Stream {
	if ms == nil {
		return k.maskStream(nonce, sc)
	}
	return ms.from(nonce, n)
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// run is the number of blocks of one kernel call and one keystream piece.
const run = 64

var zeros [run * 16]byte
