package poly1305

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// copyAligns are the {p, q} alignments of the BlocksADCopy tests: both
// aligned, and p and q misaligned differently.
var copyAligns = [][2]int{{0, 0}, {3, 0}, {0, 5}, {7, 33}}

// TestBlocksADCopy runs the Blocks cases through BlocksADCopy under every
// implementation: the tags against the x/crypto oracle over p, and against
// BlocksAD over q afterwards; q's blocks equal p's and nothing else of q
// is written; nothing past dst.
func TestBlocksADCopy(t *testing.T) {
	kerneltest.ForEach(t, pkgName, checkBlocksADCopy)
}

// TestBlocksADCopyLaneModels runs the cases through blocksLanesCopy over
// the pure-Go lane models (copy, then the model over q), on any machine:
// the copying glue (groups, partial chunks, the blocks left over).
func TestBlocksADCopyLaneModels(t *testing.T) {
	defer impl.Reset(pkgName)
	for _, m := range []struct {
		name string
		kern laneKernel
	}{{"lanes26", modelKernel26}, {"lanes26x8", modelKernel8}, {"lanes44", modelKernel44}, {"neon", modelKernelNEON}} {
		t.Run("model="+m.name, func(t *testing.T) {
			kern := m.kern
			kern.absorbCopy = modelCopy(&kern)
			blocks = blocksGeneric
			blocksCopy = func(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, q, p []byte, blockLen, stride int) {
				blocksLanesCopy(&kern, k, acc, h, ad, adLen, q, p, blockLen, stride, copyGeneric)
			}
			checkBlocksADCopy(t)
		})
	}
}

func checkBlocksADCopy(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	counts := []int{1, 2, 3, 4, 5, 6, 7, 9, 12, 13, 17, 64, 65, 70}
	if testing.Short() {
		counts = []int{1, 4, 6, 9, 17, 65}
	}
	for _, c := range blockCases {
		bl, st := c[0], c[1]
		for ci, n := range counts {
			if (n-1)*st+bl > 300<<10 {
				continue
			}
			for _, adLen := range []int{0, 16, 32} {
				align := copyAligns[(ci+adLen/16)%len(copyAligns)]
				aesKey, rb := randBytes(r, 16), randBytes(r, 16)
				var nonce Nonce
				copy(nonce[:], randBytes(r, 16))
				k, err := NewKey(aesKey, rb)
				if err != nil {
					t.Fatal(err)
				}
				span := (n-1)*st + bl
				p := randBytes(r, align[0]+span)[align[0]:]
				pc := bytes.Clone(p)
				q := kerneltest.NewCopyDest(span, align[1])
				ad := randBytes(r, n*adLen+adLen)
				dst := make([]Tag, n+1)
				sentinel := Tag{0x5a}
				dst[n] = sentinel
				what := fmt.Sprintf("block=%d stride=%d n=%d ad=%d align=%v", bl, st, n, adLen, align)
				if err := k.BlocksADCopy(dst[:n], &nonce, ad, adLen, q[:span], p, bl, st); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				want := wantTags(t, aesKey, rb, nonce, ad, adLen, p, n, bl, st)
				after := make([]Tag, n)
				if err := k.BlocksAD(after, &nonce, ad, adLen, q, bl, st); err != nil {
					t.Fatal(err)
				}
				for i := range n {
					if dst[i] != want[i] {
						t.Fatalf("%s: dst[%d] = %x, want %x", what, i, dst[i], want[i])
					}
					if dst[i] != after[i] {
						t.Fatalf("%s: dst[%d] = %x, BlocksAD over the copy %x", what, i, dst[i], after[i])
					}
				}
				if dst[n] != sentinel {
					t.Fatalf("%s: wrote past dst", what)
				}
				if d := kerneltest.CheckCopy(q, p, n, bl, st); d != "" {
					t.Fatalf("%s: %s", what, d)
				}
				if !bytes.Equal(p, pc) {
					t.Fatalf("%s: p changed", what)
				}
			}
		}
	}
}

// All-ones data, associated data and r through BlocksADCopy: the largest
// limbs and carries, as TestBlocksExtremes does for BlocksAD.
func TestBlocksADCopyExtremes(t *testing.T) {
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		aesKey := bytes.Repeat([]byte{0xff}, 16)
		rb := bytes.Repeat([]byte{0xff}, 16)
		k, err := NewKey(aesKey, rb)
		if err != nil {
			t.Fatal(err)
		}
		for _, bl := range []int{16, 48, 512, 4096} {
			for _, n := range []int{4, 6, 10} {
				p := bytes.Repeat([]byte{0xff}, n*bl)
				q := make([]byte, n*bl)
				ad := bytes.Repeat([]byte{0xff}, n*32)
				dst := make([]Tag, n)
				var nonce Nonce
				if err := k.BlocksADCopy(dst, &nonce, ad, 32, q, p, bl, bl); err != nil {
					t.Fatal(err)
				}
				want := wantTags(t, aesKey, rb, nonce, ad, 32, p, n, bl, bl)
				for i := range dst {
					if dst[i] != want[i] {
						t.Fatalf("block=%d n=%d: dst[%d] = %x, want %x", bl, n, i, dst[i], want[i])
					}
				}
			}
		}
	})
}

// The layout errors of kerneltest.CopyLayoutCases, and BlocksAD's
// associated-data errors: ErrLayout or ErrOverlap, nothing written.
func TestBlocksADCopyLayoutErrors(t *testing.T) {
	k, err := NewKey(make([]byte, 16), make([]byte, 16))
	if err != nil {
		t.Fatal(err)
	}
	var nonce Nonce
	for _, c := range kerneltest.CopyLayoutCases {
		t.Run("case="+c.Name, func(t *testing.T) {
			q, p := kerneltest.CopyBuffers(c)
			for i := range p {
				p[i] = byte(i)
			}
			qc := bytes.Clone(q)
			dst := make([]Tag, c.N)
			err := k.BlocksADCopy(dst, &nonce, nil, 0, q, p, c.BlockLen, c.Stride)
			want := ErrLayout
			if c.Overlap {
				want = ErrOverlap
			}
			if !errors.Is(err, want) {
				t.Fatalf("BlocksADCopy(n=%d, len(q)=%d, block=%d, stride=%d) = %v, want %v", c.N, len(q), c.BlockLen, c.Stride, err, want)
			}
			for i := range dst {
				if dst[i] != (Tag{}) {
					t.Fatal("an error wrote dst")
				}
			}
			if c.QOff < 0 && !bytes.Equal(q, qc) {
				t.Fatal("an error wrote q")
			}
		})
	}
	p, q := make([]byte, 4096), make([]byte, 4096)
	for _, c := range []struct {
		name      string
		n, adLen  int
		ad        []byte
		blockLen  int
		stride    int
		wantError error
	}{
		{"ad not a chunk multiple", 1, 8, make([]byte, 8), 512, 512, ErrLayout},
		{"negative ad", 1, -16, make([]byte, 16), 512, 512, ErrLayout},
		{"ad short", 2, 16, make([]byte, 16), 512, 512, ErrLayout},
		{"negative block", 1, 0, nil, -1, 0, ErrLayout},
	} {
		dst := make([]Tag, c.n)
		if err := k.BlocksADCopy(dst, &nonce, c.ad, c.adLen, q, p, c.blockLen, c.stride); !errors.Is(err, c.wantError) {
			t.Errorf("%s: %v, want %v", c.name, err, c.wantError)
		}
		if dst[0] != (Tag{}) || !bytes.Equal(q, make([]byte, len(q))) {
			t.Errorf("%s: an error wrote dst or q", c.name)
		}
	}
	if err := k.BlocksADCopy(nil, &nonce, nil, 0, nil, nil, 512, 512); err != nil {
		t.Errorf("zero blocks: %v", err)
	}
	// Disjoint parts of one allocation are fine, also when the slices
	// overlap beyond the blocks' spans (p's span is mem[:1536]).
	mem := make([]byte, 4096)
	if err := k.BlocksADCopy(make([]Tag, 2), &nonce, nil, 0, mem[2048:], mem[:2048], 512, 1024); err != nil {
		t.Errorf("BlocksADCopy between halves of one buffer = %v", err)
	}
}

// p, q and the associated data each end against a PROT_NONE page: an
// over-read of p or ad, or an over-write of q, faults.
func TestBlocksADCopyGuardPage(t *testing.T) {
	getP, getQ, getAD := kerneltest.GuardedBuffer(t), kerneltest.GuardedBuffer(t), kerneltest.GuardedBuffer(t)
	aesKey, rb := bytes.Repeat([]byte{7}, 16), bytes.Repeat([]byte{9}, 16)
	k, err := NewKey(aesKey, rb)
	if err != nil {
		t.Fatal(err)
	}
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		for _, c := range blockCases {
			bl, st := c[0], c[1]
			for _, n := range []int{1, 3, 4, 5, 6, 8, 9, 12} {
				size := (n-1)*st + bl
				if size > 70<<10 {
					continue
				}
				for _, adLen := range []int{0, 32} {
					p, q, ad := getP(size), getQ(size), getAD(n*adLen)
					dst := make([]Tag, n)
					var nonce Nonce
					if err := k.BlocksADCopy(dst, &nonce, ad, adLen, q, p, bl, st); err != nil {
						t.Fatal(err)
					}
					want := wantTags(t, aesKey, rb, nonce, ad, adLen, p, n, bl, st)
					for i := range dst {
						if dst[i] != want[i] {
							t.Fatalf("block=%d stride=%d n=%d ad=%d at page end: dst[%d] = %x, want %x", bl, st, n, adLen, i, dst[i], want[i])
						}
						if !bytes.Equal(q[i*st:i*st+bl], p[i*st:i*st+bl]) {
							t.Fatalf("block=%d stride=%d n=%d at page end: block %d of q differs", bl, st, n, i)
						}
					}
				}
			}
		}
	})
}

// TestBlocksADCopyTOCTOU runs BlocksADCopy while another goroutine keeps
// rewriting p (as a writer of a shared mapping could): every tag must
// still be the tag of the bytes the call left in q. An implementation
// that hashed a second load of p instead of what it stored to q would, now
// and then, tag bytes that differ from q's. The writer stores words with
// sync/atomic, but the kernels' loads are plain: a data race by design,
// so the test does not run under the race detector.
func TestBlocksADCopyTOCTOU(t *testing.T) {
	if raceEnabled {
		t.Skip("p is written concurrently on purpose")
	}
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two threads")
	}
	r := rand.New(rand.NewPCG(23, 24))
	k, err := NewKey(randBytes(r, 16), randBytes(r, 16))
	if err != nil {
		t.Fatal(err)
	}
	calls := 3000
	if testing.Short() {
		calls = 600
	}
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		for _, c := range []struct{ bl, st, n int }{{512, 512, 12}, {4096, 4096, 6}, {520, 528, 10}, {100, 112, 16}} {
			t.Run(fmt.Sprintf("block=%d/stride=%d", c.bl, c.st), func(t *testing.T) {
				span := (c.n-1)*c.st + c.bl
				words := make([]uint64, (span+7)/8)
				p := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), span)
				copy(p, randBytes(r, span))
				q := make([]byte, span)
				ad := randBytes(r, 32*c.n)
				var stop atomic.Bool
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					x := uint64(0x9e3779b97f4a7c15)
					for i := 0; !stop.Load(); i++ {
						// Flip the bits of a word, walking p with a
						// stride coprime to its length so that every
						// word is hit between two calls.
						w := &words[(i*97)%len(words)]
						atomic.StoreUint64(w, atomic.LoadUint64(w)^x)
						x = x<<1 | x>>63
					}
				}()
				defer func() { stop.Store(true); wg.Wait() }()
				dst := make([]Tag, c.n)
				var nonce Nonce
				for call := range calls {
					nonce[15] = byte(call)
					if err := k.BlocksADCopy(dst, &nonce, ad, 32, q, p, c.bl, c.st); err != nil {
						t.Fatal(err)
					}
					for i := range dst {
						ni := nonce.Add(uint64(i))
						m := append(bytes.Clone(ad[32*i:32*i+32]), q[i*c.st:i*c.st+c.bl]...)
						if want := k.Tag(&ni, m); !Equal(dst[i], want) {
							t.Fatalf("call %d: the tag of block %d is not that of q's block", call, i)
						}
					}
				}
			})
		}
	})
}

// FuzzBlocksADCopy compares every implementation's BlocksADCopy with the
// math/big reference on fuzzed keys, data, layouts and alignments, and
// checks the copy.
func FuzzBlocksADCopy(f *testing.F) {
	f.Add(bytes.Repeat([]byte{1}, 32), []byte("nonce-0123456789"), kerneltest.SeedBytes(4096), uint16(512), uint16(512), uint8(2), uint8(0))
	f.Add(bytes.Repeat([]byte{0xff}, 32), bytes.Repeat([]byte{0xff}, 16), bytes.Repeat([]byte{0xff}, 3000), uint16(100), uint16(112), uint8(1), uint8(5))
	f.Add(kerneltest.SeedBytes(32), kerneltest.SeedBytes(16), kerneltest.SeedBytes(9000), uint16(1029), uint16(1040), uint8(0), uint8(33))
	f.Fuzz(fuzzBlocksADCopy)
}

func fuzzBlocksADCopy(t *testing.T, keys, nonceB, data []byte, blockLen, stride uint16, adChunks, qAlign uint8) {
	if len(keys) < 32 || len(nonceB) < 16 {
		return
	}
	bl, st, adLen := int(blockLen)%1100, int(stride)%1200, 16*int(adChunks%3)
	if st < bl {
		st = bl
	}
	var n int
	if bl <= len(data) {
		n = 1
		if st > 0 {
			n += (len(data) - bl) / st
		}
	}
	n = min(n, 24)
	span := 0
	if n > 0 {
		span = (n-1)*st + bl
	}
	ad := make([]byte, n*adLen)
	copy(ad, keys)
	var nonce Nonce
	copy(nonce[:], nonceB)
	k, err := NewKey(keys[:16], keys[16:32])
	if err != nil {
		t.Fatal(err)
	}
	var rk [16]byte
	copy(rk[:], keys[16:32])
	defer impl.Reset(pkgName)
	for _, im := range impl.List(pkgName) {
		if !im.Available {
			continue
		}
		if err := impl.Select(pkgName, im.Name); err != nil {
			t.Fatal(err)
		}
		q := kerneltest.NewCopyDest(span, int(qAlign%64))
		dst := make([]Tag, n)
		if err := k.BlocksADCopy(dst, &nonce, ad, adLen, q, data, bl, st); err != nil {
			t.Fatalf("impl=%s: %v", im.Name, err)
		}
		for i := range dst {
			ni := nonce.Add(uint64(i))
			var s [16]byte
			k.block.Encrypt(s[:], ni[:])
			msg := append(append([]byte(nil), ad[i*adLen:(i+1)*adLen]...), data[i*st:i*st+bl]...)
			if want := refTag(&rk, &s, msg); dst[i] != Tag(want) {
				t.Fatalf("impl=%s block=%d stride=%d ad=%d: dst[%d] = %x, reference %x", im.Name, bl, st, adLen, i, dst[i], want)
			}
		}
		if d := kerneltest.CheckCopy(q, data, n, bl, st); d != "" {
			t.Fatalf("impl=%s block=%d stride=%d n=%d: %s", im.Name, bl, st, n, d)
		}
	}
}
