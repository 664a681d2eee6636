package parity

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/klauspost/reedsolomon"
)

// ErrTooManyErasures reports a stripe with more erasures than parity
// blocks: it cannot be rebuilt, and nothing was.
var ErrTooManyErasures = errors.New("parity: too many erasures in the stripe")

// ErrShards reports shards of the wrong number or size given to a Codec.
var ErrShards = errors.New("parity: bad shards")

// cacheBudget bounds the memory of the inverted matrices a Codec keeps
// (the library's inversion cache: per erasure pattern a k×k matrix, its k
// row headers and a tree node of up to k+m children). Past
// cacheBudget/(that size) distinct patterns, maxPatterns (3912 for 32+4),
// the Codec starts a fresh encoder, with an empty cache.
const cacheBudget = 8 << 20

// patternBytes estimates the cache's memory per pattern of a k+m code.
func patternBytes(k, m int) int { return k*k + 24*k + 8*(k+m) + 64 }

// Codec encodes, updates and rebuilds the stripes of one k+m geometry
// and block size with github.com/klauspost/reedsolomon. A stripe is given
// as the library takes it, shards: k data blocks then m parity blocks,
// each a slice of the caller's buffers, never copied: parity is computed,
// and lost shards are rebuilt, in place. It is safe for concurrent use;
// every call runs on the caller's goroutine.
type Codec struct {
	k, m, bs int
	zero     []byte // bs zero bytes, never written: a missing data block
	enc      atomic.Pointer[reedsolomon.Encoder]
	scratch  sync.Pool // *codecScratch

	mu          sync.Mutex
	patterns    map[erasureSet]struct{} // the patterns the current encoder has seen
	maxPatterns int
	resets      int // encoders replaced, for tests
}

// erasureSet is a set of shard indices (below MaxShards).
type erasureSet [MaxShards / 64]uint64

type codecScratch struct {
	shards   [][]byte // k+m headers handed to the library
	required []bool   // k+m
}

// NewCodec returns a Codec for stripes of k data and m parity blocks of
// blockSize bytes, with the limits of Options.
func NewCodec(k, m, blockSize int) (*Codec, error) {
	if k < 1 || m < 1 || m > k || k+m > MaxShards {
		return nil, fmt.Errorf("%w: %d+%d: want 1 ≤ m ≤ k and k+m ≤ %d", ErrInvalidLayout, k, m, MaxShards)
	}
	if blockSize < 1 {
		return nil, fmt.Errorf("%w: block size %d", ErrInvalidLayout, blockSize)
	}
	c := &Codec{
		k: k, m: m, bs: blockSize,
		zero:        make([]byte, blockSize),
		patterns:    make(map[erasureSet]struct{}),
		maxPatterns: max(16, cacheBudget/patternBytes(k, m)),
	}
	enc, err := c.newEncoder()
	if err != nil {
		return nil, err
	}
	c.enc.Store(&enc)
	c.scratch.New = func() any {
		return &codecScratch{shards: make([][]byte, k+m), required: make([]bool, k+m)}
	}
	return c, nil
}

// NewCodec returns a Codec for l's stripes.
func (l Layout) NewCodec() (*Codec, error) { return NewCodec(l.k, l.m, l.bs) }

func (c *Codec) newEncoder() (reedsolomon.Encoder, error) {
	// The default (Vandermonde-derived, systematic) matrix is part of the
	// parity file's format: see TestEncodeGolden. One goroutine: the
	// caller's.
	enc, err := reedsolomon.New(c.k, c.m, reedsolomon.WithMaxGoroutines(1))
	if err != nil {
		return nil, fmt.Errorf("parity: %d+%d: %w", c.k, c.m, err)
	}
	return enc, nil
}

// DataShards returns k.
func (c *Codec) DataShards() int { return c.k }

// ParityShards returns m.
func (c *Codec) ParityShards() int { return c.m }

// BlockSize returns the shard size in bytes.
func (c *Codec) BlockSize() int { return c.bs }

func (c *Codec) getScratch() *codecScratch { return c.scratch.Get().(*codecScratch) }

func (c *Codec) putScratch(s *codecScratch) {
	clear(s.shards) // hold no caller's buffer
	c.scratch.Put(s)
}

// checkShards checks that shards holds k+m shards of BlockSize bytes, a
// data shard possibly nil (a missing block); it returns whether one is.
func (c *Codec) checkShards(shards [][]byte) (missing bool, err error) {
	if len(shards) != c.k+c.m {
		return false, fmt.Errorf("%w: %d shards, want %d", ErrShards, len(shards), c.k+c.m)
	}
	for i, sh := range shards {
		switch {
		case sh == nil && i < c.k:
			missing = true
		case len(sh) != c.bs:
			return false, fmt.Errorf("%w: shard %d has %d bytes, want %d", ErrShards, i, len(sh), c.bs)
		}
	}
	return missing, nil
}

// Encode computes the parity of a stripe: shards holds its k data blocks,
// then its m parity blocks, each of BlockSize bytes, except that a data
// block may be nil: a missing block, which counts as zeros. The parity
// blocks are overwritten; the data is only read, and must not overlap
// them. shards goes to the library as it is unless a block is missing.
func (c *Codec) Encode(shards [][]byte) error {
	missing, err := c.checkShards(shards)
	if err != nil {
		return err
	}
	if missing {
		s := c.getScratch()
		defer c.putScratch(s)
		for i, sh := range shards {
			if sh == nil {
				sh = c.zero
			}
			s.shards[i] = sh
		}
		shards = s.shards
	}
	if err := (*c.enc.Load()).Encode(shards); err != nil {
		return fmt.Errorf("parity: encode: %w", err)
	}
	return nil
}

// EncodeRuns computes the parity of n stripes at once: shards holds k data
// runs, then m parity runs, each of n·BlockSize bytes, where stripe i's
// block at each position is block i of that position's run. The code works
// byte by byte, so this is n Encodes, in one call over long shards (the
// library's fast path; an interleaved group's stripes are laid out so,
// see Layout). No run may be missing; the parity runs are overwritten.
func (c *Codec) EncodeRuns(shards [][]byte) error {
	if len(shards) != c.k+c.m {
		return fmt.Errorf("%w: %d shards, want %d", ErrShards, len(shards), c.k+c.m)
	}
	n := len(shards[0])
	for i, sh := range shards {
		if len(sh) != n || n == 0 || n%c.bs != 0 {
			return fmt.Errorf("%w: run %d has %d bytes, want %d, a multiple of %d", ErrShards, i, len(sh), n, c.bs)
		}
	}
	if err := (*c.enc.Load()).Encode(shards); err != nil {
		return fmt.Errorf("parity: encode: %w", err)
	}
	return nil
}

// Update brings a stripe's parity up to date after some of its data blocks
// change, from the change alone: for each changed block i, the parity
// gains the Reed-Solomon contribution of old XOR new (the code is linear),
// so the rest of the stripe is not read. shards holds the stripe's k old
// data blocks, nil for each that does not change, then its m parity
// blocks, which are updated in place; newData (k entries) holds the new
// data of each block that changes, nil for the others. Both are passed to
// the library as they are.
//
// The old data of each changed block is overwritten with old XOR new (the
// library's Update works in place: pass a copy to keep it). A block past
// the end of a partial stripe never changes: it is always zeros.
func (c *Codec) Update(shards, newData [][]byte) error {
	if len(shards) != c.k+c.m || len(newData) != c.k {
		return fmt.Errorf("%w: %d shards and %d new data blocks, want %d and %d", ErrShards, len(shards), len(newData), c.k+c.m, c.k)
	}
	changed := false
	for i, nb := range newData {
		old := shards[i]
		if (old == nil) != (nb == nil) {
			return fmt.Errorf("%w: data block %d: old and new must both be given or both nil", ErrShards, i)
		}
		if nb == nil {
			continue
		}
		if len(old) != c.bs || len(nb) != c.bs {
			return fmt.Errorf("%w: data block %d has %d old and %d new bytes, want %d", ErrShards, i, len(old), len(nb), c.bs)
		}
		changed = true
	}
	for j, p := range shards[c.k:] {
		if len(p) != c.bs {
			return fmt.Errorf("%w: parity block %d has %d bytes, want %d", ErrShards, j, len(p), c.bs)
		}
	}
	if !changed {
		return nil
	}
	if err := (*c.enc.Load()).Update(shards, newData); err != nil {
		return fmt.Errorf("parity: update: %w", err)
	}
	return nil
}

// Rebuild reconstructs the erased shards of a stripe. shards holds its k
// data blocks then its m parity blocks; erased (k+m entries) marks the
// shards that are lost. Each erased shard of BlockSize bytes is rebuilt in
// place (its old contents are ignored); an erased shard that is nil is
// lost but not wanted (a caller that needs only the data, say). A data
// shard that is nil and not erased is a missing block (zeros); every other
// shard that is not erased must be BlockSize bytes and is only read.
//
// More than m erasures is an error matching ErrTooManyErasures, and no
// shard is written. The rebuilt shards are what the surviving shards
// determine: if one of those was bad without being marked erased, the
// rebuilt data is wrong, so the caller verifies every rebuilt data block
// (against its tuple) before it uses it.
func (c *Codec) Rebuild(shards [][]byte, erased []bool) error {
	n := c.k + c.m
	if len(shards) != n || len(erased) != n {
		return fmt.Errorf("%w: %d shards and %d erasure flags, want %d", ErrShards, len(shards), len(erased), n)
	}
	var set erasureSet
	nErased, wanted := 0, false
	for i, e := range erased {
		sh := shards[i]
		switch {
		case e:
			nErased++
			set[i/64] |= 1 << (i % 64)
			if sh != nil {
				wanted = true
				if len(sh) != c.bs {
					return fmt.Errorf("%w: erased shard %d has %d bytes, want %d", ErrShards, i, len(sh), c.bs)
				}
			}
		case i < c.k && sh == nil:
			// a missing block: zeros
		case len(sh) != c.bs:
			return fmt.Errorf("%w: shard %d has %d bytes, want %d", ErrShards, i, len(sh), c.bs)
		}
	}
	if nErased > c.m {
		return fmt.Errorf("parity: %d erasures in a %d+%d stripe: %w", nErased, c.k, c.m, ErrTooManyErasures)
	}
	if !wanted {
		return nil
	}
	s := c.getScratch()
	defer c.putScratch(s)
	for i, e := range erased {
		sh := shards[i]
		switch {
		case e:
			// The library rebuilds a shard of length 0 into its capacity.
			s.shards[i], s.required[i] = sh[:0:len(sh)], sh != nil
		case i < c.k && sh == nil:
			s.shards[i], s.required[i] = c.zero, false
		default:
			s.shards[i], s.required[i] = sh, false
		}
	}
	if err := c.encoderFor(set).ReconstructSome(s.shards, s.required); err != nil {
		return fmt.Errorf("parity: rebuild: %w", err)
	}
	for i, e := range erased {
		if e && shards[i] != nil && &s.shards[i][0] != &shards[i][0] {
			// The library allocated instead of using the capacity given.
			copy(shards[i], s.shards[i])
		}
	}
	return nil
}

// encoderFor returns the encoder to rebuild the erasure pattern set with,
// replacing the current one (and the inverted matrices it caches) when set
// would be its c.maxPatterns+1st pattern.
func (c *Codec) encoderFor(set erasureSet) reedsolomon.Encoder {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.patterns[set]; !ok {
		if len(c.patterns) >= c.maxPatterns {
			// New succeeded for these arguments once: it cannot fail now.
			if enc, err := c.newEncoder(); err == nil {
				c.enc.Store(&enc)
				clear(c.patterns)
				c.resets++
			}
		}
		c.patterns[set] = struct{}{}
	}
	return *c.enc.Load()
}
