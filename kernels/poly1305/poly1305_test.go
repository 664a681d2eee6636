package poly1305

import (
	"bytes"
	"crypto/aes"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/kerneltest"

	//lint:ignore SA1019 x/crypto's Poly1305 is the peer these tests check against
	xpoly "golang.org/x/crypto/poly1305"
)

func unhex(s string) []byte {
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		panic(err)
	}
	return b
}

func key32(b []byte) *[KeySize]byte { return (*[KeySize]byte)(b) }

const ietfText = "Any submission to the IETF intended by the Contributor for publication as all or part of an IETF " +
	"Internet-Draft or RFC and any statement made within the context of an IETF activity is considered an " +
	"\"IETF Contribution\". Such statements include oral statements in IETF sessions, as well as written " +
	"and electronic communications made at any time or place, which are addressed to"

const jabberwocky = "'Twas brillig, and the slithy toves\nDid gyre and gimble in the wabe:\n" +
	"All mimsy were the borogoves,\nAnd the mome raths outgrabe."

// rfcVectors are RFC 8439's Poly1305 test vectors: the example of section
// 2.5.2 and the eleven of appendix A.3 (key r || s, message, tag).
var rfcVectors = []struct {
	name, key string
	msg       []byte
	tag       string
}{
	{"2.5.2", "85d6be7857556d337f4452fe42d506a8 0103808afb0db2fd4abff6af4149f51b",
		[]byte("Cryptographic Forum Research Group"), "a8061dc1305136c6c22b8baf0c0127a9"},
	{"A.3#1", strings.Repeat("00", 32), make([]byte, 64), strings.Repeat("00", 16)},
	{"A.3#2", strings.Repeat("00", 16) + "36e5f6b5c5e06070f0efca96227a863e",
		[]byte(ietfText), "36e5f6b5c5e06070f0efca96227a863e"},
	{"A.3#3", "36e5f6b5c5e06070f0efca96227a863e" + strings.Repeat("00", 16),
		[]byte(ietfText), "f3477e7cd95417af89a6b8794c310cf0"},
	{"A.3#4", "1c9240a5eb55d38af333888604f6b5f0 473917c1402b80099dca5cbc207075c0",
		[]byte(jabberwocky), "4541669a7eaaee61e708dc7cbcc5eb62"},
	{"A.3#5", "02" + strings.Repeat("00", 31), unhex(strings.Repeat("ff", 16)), "03" + strings.Repeat("00", 15)},
	{"A.3#6", "02" + strings.Repeat("00", 15) + strings.Repeat("ff", 16),
		unhex("02" + strings.Repeat("00", 15)), "03" + strings.Repeat("00", 15)},
	{"A.3#7", "01" + strings.Repeat("00", 31),
		unhex(strings.Repeat("ff", 16) + "f0" + strings.Repeat("ff", 15) + "11" + strings.Repeat("00", 15)),
		"05" + strings.Repeat("00", 15)},
	{"A.3#8", "01" + strings.Repeat("00", 31),
		unhex(strings.Repeat("ff", 16) + "fb" + strings.Repeat("fe", 15) + strings.Repeat("01", 16)),
		strings.Repeat("00", 16)},
	{"A.3#9", "02" + strings.Repeat("00", 31), unhex("fd" + strings.Repeat("ff", 15)), "fa" + strings.Repeat("ff", 15)},
	{"A.3#10", "0100000000000000 0400000000000000" + strings.Repeat("00", 16),
		unhex("e33594d7505e43b9 0000000000000000 3394d7505e4379cd 0100000000000000" +
			strings.Repeat("00", 16) + "01" + strings.Repeat("00", 15)),
		"1400000000000000 5500000000000000"},
	{"A.3#11", "0100000000000000 0400000000000000" + strings.Repeat("00", 16),
		unhex("e33594d7505e43b9 0000000000000000 3394d7505e4379cd 0100000000000000" + strings.Repeat("00", 16)),
		"13" + strings.Repeat("00", 15)},
}

func TestRFC8439(t *testing.T) {
	if len(ietfText) != 375 || len(jabberwocky) != 127 {
		t.Fatalf("vector texts: %d and %d bytes, want 375 and 127", len(ietfText), len(jabberwocky))
	}
	for _, v := range rfcVectors {
		key := key32(unhex(v.key))
		want := unhex(v.tag)
		var got [TagSize]byte
		Sum(&got, v.msg, key)
		if !bytes.Equal(got[:], want) {
			t.Errorf("%s: Sum = %x, want %x", v.name, got, want)
		}
		if !Verify((*[TagSize]byte)(want), v.msg, key) {
			t.Errorf("%s: Verify failed", v.name)
		}
		m := New(key)
		for i := 0; i < len(v.msg); i += 7 {
			m.Write(v.msg[i:min(i+7, len(v.msg))])
		}
		if s := m.Sum(nil); !bytes.Equal(s, want) {
			t.Errorf("%s: MAC = %x, want %x", v.name, s, want)
		}
		var r, s [16]byte
		copy(r[:], key[:16])
		copy(s[:], key[16:])
		if ref := refTag(&r, &s, v.msg); !bytes.Equal(ref[:], want) {
			t.Errorf("%s: reference = %x, want %x", v.name, ref, want)
		}
	}
}

// aesVectors are the four examples of Bernstein's Poly1305-AES paper (AES
// key k, r, nonce n, message, tag).
var aesVectors = []struct{ k, r, n, msg, tag string }{
	{"75deaa25c09f208e1dc4ce6b5cad3fbf", "a0f3080000f46400d0c7e9076c834403", "61ee09218d29b0aaed7e154a2c5509cc",
		"", "dd3fab2251f11ac759f0887129cc2ee7"},
	{"ec074c835580741701425b623235add6", "851fc40c3467ac0be05cc20404f3f700", "fb447350c4e868c52ac3275cf9d4327e",
		"f3f6", "f4c633c3044fc145f84f335cb81953de"},
	{"6acb5f61a7176dd320c5c1eb2edcdc74", "48443d0bb0d21109c89a100b5ce2c208", "ae212a55399729595dea458bc621ff0e",
		"663cea190ffb83d89593f3f476b6bc24d7e679107ea26adb8caf6652d0656136", "0ee1c16bb73f0f4fd19881753c01cdbe"},
	{"e1a5668a4d5b66a5f68cc5424ed5982d", "12976a08c4426d0ce8a82407c4f48207", "9ae831e743978d3a23527c7128149e3a",
		"ab0812724a7f1e342742cbed374d94d136c6b8795d45b3819830f2c04491faf0990c62e48b8018b2c3e4a0fa3134cb67fa83e158c994d961c4cb21095c1bf9",
		"5154ad0d2cb26e01274fc51148491f1b"},
}

func TestPoly1305AESVectors(t *testing.T) {
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		for i, v := range aesVectors {
			k, err := NewKey(unhex(v.k), unhex(v.r))
			if err != nil {
				t.Fatal(err)
			}
			n := Nonce(unhex(v.n))
			msg, want := unhex(v.msg), Tag(unhex(v.tag))
			if got := k.Tag(&n, msg); got != want {
				t.Errorf("vector %d: Tag = %x, want %x", i, got, want)
			}
			// The same message as one block of a batch, and as each of
			// five equal blocks under consecutive nonces.
			dst := make([]Tag, 1)
			if err := k.Blocks(dst, &n, msg, len(msg), len(msg)); err != nil {
				t.Fatal(err)
			}
			if dst[0] != want {
				t.Errorf("vector %d: Blocks = %x, want %x", i, dst[0], want)
			}
			p := bytes.Repeat(msg, 5)
			dst = make([]Tag, 5)
			if err := k.Blocks(dst, &n, p, len(msg), len(msg)); err != nil {
				t.Fatal(err)
			}
			for j := range dst {
				nj := n.Add(uint64(j))
				if want := k.Tag(&nj, msg); dst[j] != want {
					t.Errorf("vector %d: Blocks[%d] = %x, want %x", i, j, dst[j], want)
				}
			}
		}
	})
}

func TestNewKeyErrors(t *testing.T) {
	for _, c := range []struct{ k, r int }{{16, 15}, {16, 17}, {15, 16}, {0, 16}, {33, 16}} {
		if _, err := NewKey(make([]byte, c.k), make([]byte, c.r)); !errors.Is(err, ErrKeySize) {
			t.Errorf("aes=%d r=%d: %v, want ErrKeySize", c.k, c.r, err)
		} else if !strings.HasPrefix(err.Error(), "poly1305: ") {
			t.Errorf("error %q lacks the package prefix", err)
		}
	}
	for _, n := range []int{16, 24, 32} {
		if _, err := NewKey(make([]byte, n), make([]byte, 16)); err != nil {
			t.Errorf("aes=%d: %v", n, err)
		}
	}
}

func TestNonceAdd(t *testing.T) {
	for _, c := range []struct {
		n    string
		i    uint64
		want string
	}{
		{"000000000000000000000000000000ff", 1, "00000000000000000000000000000100"},
		{"0000000000000000ffffffffffffffff", 1, "00000000000000010000000000000000"},
		{"ffffffffffffffffffffffffffffffff", 2, "00000000000000000000000000000001"},
		{"0102030405060708090a0b0c0d0e0f10", 0, "0102030405060708090a0b0c0d0e0f10"},
	} {
		if got := Nonce(unhex(c.n)).Add(c.i); got != Nonce(unhex(c.want)) {
			t.Errorf("%s + %d = %x, want %s", c.n, c.i, got, c.want)
		}
	}
}

func randKey(r *rand.Rand) *[KeySize]byte {
	var k [KeySize]byte
	for i := range k {
		k[i] = byte(r.Uint32())
	}
	return &k
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Sum and MAC against x/crypto at every length 0..1100 and beyond, every
// alignment 0..63, and streamed splits.
func TestAgainstXCrypto(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := randBytes(r, 8192+64)
	lens := []int{}
	for n := 0; n <= 1100; n++ {
		lens = append(lens, n)
	}
	lens = append(lens, 4095, 4096, 4097, 8191, 8192)
	for _, n := range lens {
		key := randKey(r)
		align := n % 64
		m := buf[align : align+n]
		var got, want [16]byte
		Sum(&got, m, key)
		xpoly.Sum(&want, m, key)
		if got != want {
			t.Fatalf("len=%d align=%d: Sum %x, x/crypto %x", n, align, got, want)
		}
	}
	for align := range 64 {
		for _, n := range []int{0, 1, 15, 16, 17, 100, 512, 1000} {
			key := randKey(r)
			m := buf[align : align+n]
			var got, want [16]byte
			Sum(&got, m, key)
			xpoly.Sum(&want, m, key)
			if got != want {
				t.Fatalf("align=%d len=%d: Sum %x, x/crypto %x", align, n, got, want)
			}
		}
	}
	for _, n := range []int{0, 1, 16, 33, 100, 1000} {
		key := randKey(r)
		m := buf[:n]
		var want [16]byte
		xpoly.Sum(&want, m, key)
		for _, piece := range []int{1, 3, 15, 16, 17, 31, 64} {
			mac := New(key)
			for i := 0; i < n; i += piece {
				mac.Write(m[i:min(i+piece, n)])
			}
			if !mac.Verify(want[:]) {
				t.Fatalf("len=%d pieces of %d: streamed MAC differs from x/crypto", n, piece)
			}
		}
		// Random splits.
		for range 20 {
			mac := New(key)
			for i := 0; i < n; {
				k := min(n-i, r.IntN(40))
				mac.Write(m[i : i+k])
				i += k
			}
			if got := mac.Sum(nil); !bytes.Equal(got, want[:]) {
				t.Fatalf("len=%d random split: %x, want %x", n, got, want)
			}
		}
	}
}

// Accumulators with every limb at its maximum: all-ones data and r.
func TestExtremes(t *testing.T) {
	var key [KeySize]byte
	for i := range key {
		key[i] = 0xff
	}
	for _, n := range []int{16, 32, 48, 64, 512, 4096} {
		m := bytes.Repeat([]byte{0xff}, n)
		var got, want [16]byte
		Sum(&got, m, &key)
		xpoly.Sum(&want, m, &key)
		if got != want {
			t.Fatalf("all ones len=%d: %x, x/crypto %x", n, got, want)
		}
	}
}

// wantTags computes the expected tags of a BlocksAD call one block at a
// time: AES of the counter nonce plus x/crypto's Poly1305 of ad || block
// (x/crypto with key r || AES_k(n) is exactly Poly1305-AES).
func wantTags(t testing.TB, aesKey, r []byte, nonce Nonce, ad []byte, adLen int, p []byte, n, blockLen, stride int) []Tag {
	b, err := aes.NewCipher(aesKey)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]Tag, n)
	for i := range out {
		var key [KeySize]byte
		copy(key[:16], r)
		ni := nonce.Add(uint64(i))
		b.Encrypt(key[16:], ni[:])
		msg := append(append([]byte(nil), ad[i*adLen:(i+1)*adLen]...), p[i*stride:i*stride+blockLen]...)
		var tag [16]byte
		xpoly.Sum(&tag, msg, &key)
		out[i] = tag
	}
	return out
}

// blockCases are (blockLen, stride) pairs around every cutoff: empty, partial
// and odd chunk counts, the pair step of the lane kernel, every step of the
// eight-chunk kernels (2048 + 16·7 + 5: the eight-chunk loop, then the
// four, two and one steps and a partial chunk), and the sizes of real
// sectors with extended-LBA gaps.
var blockCases = [][2]int{
	{0, 0}, {0, 8}, {1, 1}, {15, 15}, {16, 16}, {17, 17}, {31, 40}, {32, 32}, {33, 33}, {48, 48},
	{63, 64}, {64, 64}, {65, 80}, {80, 96}, {96, 96}, {100, 128}, {512, 512}, {512, 520},
	{520, 520}, {1024, 1024}, {2047, 2047}, {2048, 2056}, {2048 + 16*7 + 5, 2048 + 16*8},
	{4095, 4096}, {4096, 4096}, {4096, 4104}, {4096 + 15, 4096 + 64},
}

func TestBlocks(t *testing.T) {
	kerneltest.ForEach(t, pkgName, checkBlocks)
}

// TestBlocksLaneModels runs the Blocks cases through the batch glue over the
// pure-Go lane models (of the AVX2, the IFMA and the NEON kernels), on any
// machine.
func TestBlocksLaneModels(t *testing.T) {
	defer impl.Reset(pkgName)
	for _, m := range []struct {
		name string
		kern *laneKernel
	}{{"lanes26", &modelKernel26}, {"lanes26x8", &modelKernel8}, {"lanes44", &modelKernel44}, {"neon", &modelKernelNEON}} {
		t.Run("model="+m.name, func(t *testing.T) {
			blocks = func(k *polyKey, acc [][2]uint64, h *laneBuf, ad []byte, adLen int, p []byte, blockLen, stride int) {
				blocksLanes(m.kern, k, acc, h, ad, adLen, p, blockLen, stride)
			}
			checkBlocks(t)
		})
	}
}

func checkBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	counts := []int{1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 16, 17, 64, 65, 70}
	if testing.Short() {
		counts = []int{1, 3, 4, 5, 9, 17, 65}
	}
	for _, c := range blockCases {
		bl, st := c[0], c[1]
		for _, n := range counts {
			if (n-1)*st+bl > 300<<10 {
				continue
			}
			for _, adLen := range []int{0, 16, 32} {
				aesKey, rb := randBytes(r, 16), randBytes(r, 16)
				var nonce Nonce
				copy(nonce[:], randBytes(r, 16))
				if n > 3 {
					// Cross a 2^64 boundary of the counter.
					for i := 8; i < 16; i++ {
						nonce[i] = 0xff
					}
				}
				k, err := NewKey(aesKey, rb)
				if err != nil {
					t.Fatal(err)
				}
				align := r.IntN(64)
				p := randBytes(r, align+(n-1)*st+bl)[align:]
				ad := randBytes(r, n*adLen+adLen)
				dst := make([]Tag, n+1)
				sentinel := Tag{0x5a}
				dst[n] = sentinel
				if err := k.BlocksAD(dst[:n], &nonce, ad, adLen, p, bl, st); err != nil {
					t.Fatal(err)
				}
				want := wantTags(t, aesKey, rb, nonce, ad, adLen, p, n, bl, st)
				for i := range n {
					if dst[i] != want[i] {
						t.Fatalf("block=%d stride=%d n=%d ad=%d: dst[%d] = %x, want %x", bl, st, n, adLen, i, dst[i], want[i])
					}
				}
				if dst[n] != sentinel {
					t.Fatalf("block=%d stride=%d n=%d: wrote past dst", bl, st, n)
				}
			}
		}
	}
}

// Blocks of all-ones data under an all-ones r: the largest limbs and
// carries the lane kernel can see.
func TestBlocksExtremes(t *testing.T) {
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		aesKey := bytes.Repeat([]byte{0xff}, 16)
		rb := bytes.Repeat([]byte{0xff}, 16)
		k, err := NewKey(aesKey, rb)
		if err != nil {
			t.Fatal(err)
		}
		for _, bl := range []int{16, 32, 48, 512, 4096} {
			p := bytes.Repeat([]byte{0xff}, 8*bl)
			ad := bytes.Repeat([]byte{0xff}, 8*16)
			dst := make([]Tag, 8)
			var nonce Nonce
			if err := k.BlocksAD(dst, &nonce, ad, 16, p, bl, bl); err != nil {
				t.Fatal(err)
			}
			want := wantTags(t, aesKey, rb, nonce, ad, 16, p, 8, bl, bl)
			for i := range dst {
				if dst[i] != want[i] {
					t.Fatalf("block=%d: dst[%d] = %x, want %x", bl, i, dst[i], want[i])
				}
			}
		}
	})
}

func TestBlocksLayoutErrors(t *testing.T) {
	k, err := NewKey(make([]byte, 16), make([]byte, 16))
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 4096)
	var nonce Nonce
	cases := []struct {
		name                          string
		n                             int
		ad                            []byte
		adLen, blockLen, stride, pLen int
	}{
		{"short", 2, nil, 0, 4096, 4096, 4096},
		{"negative block", 1, nil, 0, -1, 0, 4096},
		{"stride below block", 2, nil, 0, 512, 256, 4096},
		{"block beyond p", 1, nil, 0, 4097, 4097, 4096},
		{"ad not a chunk multiple", 1, make([]byte, 8), 8, 512, 512, 4096},
		{"negative ad", 1, make([]byte, 16), -16, 512, 512, 4096},
		{"ad short", 2, make([]byte, 16), 16, 512, 512, 4096},
		{"overflow", 3, nil, 0, 1, math.MaxInt / 2, 4096},
	}
	for _, c := range cases {
		dst := make([]Tag, c.n)
		err := k.BlocksAD(dst, &nonce, c.ad, c.adLen, p[:c.pLen], c.blockLen, c.stride)
		if !errors.Is(err, ErrLayout) {
			t.Errorf("%s: %v, want ErrLayout", c.name, err)
			continue
		}
		for i := range dst {
			if dst[i] != (Tag{}) {
				t.Errorf("%s: wrote dst[%d] on error", c.name, i)
			}
		}
	}
	if err := k.Blocks(nil, &nonce, nil, 512, 512); err != nil {
		t.Errorf("zero blocks: %v", err)
	}
}

// Buffers that end against a PROT_NONE page: an over-read of the data or of
// the associated data faults.
func TestGuardPage(t *testing.T) {
	getP, getAD := kerneltest.GuardedBuffer(t), kerneltest.GuardedBuffer(t)
	aesKey, rb := bytes.Repeat([]byte{7}, 16), bytes.Repeat([]byte{9}, 16)
	k, err := NewKey(aesKey, rb)
	if err != nil {
		t.Fatal(err)
	}
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		for _, c := range blockCases {
			bl, st := c[0], c[1]
			for _, n := range []int{1, 3, 4, 5, 8, 9} {
				size := (n-1)*st + bl
				if size > 70<<10 {
					continue
				}
				for _, adLen := range []int{0, 16} {
					p, ad := getP(size), getAD(n*adLen)
					dst := make([]Tag, n)
					var nonce Nonce
					if err := k.BlocksAD(dst, &nonce, ad, adLen, p, bl, st); err != nil {
						t.Fatal(err)
					}
					want := wantTags(t, aesKey, rb, nonce, ad, adLen, p, n, bl, st)
					for i := range dst {
						if dst[i] != want[i] {
							t.Fatalf("block=%d stride=%d n=%d ad=%d at page end: dst[%d] = %x, want %x", bl, st, n, adLen, i, dst[i], want[i])
						}
					}
				}
			}
		}
	})
	get := getP
	for n := 0; n <= 300; n++ {
		m := get(n)
		key := key32(bytes.Repeat([]byte{3}, 32))
		var got, want [16]byte
		Sum(&got, m, key)
		xpoly.Sum(&want, m, key)
		if got != want {
			t.Fatalf("Sum len=%d at page end: %x, want %x", n, got, want)
		}
	}
}

// The pure-Go lane models (four and eight chunks per step) against the
// generic code: the radix-2^26 math and its bounds (32-bit multiply
// operands, no 64-bit overflow: the model flags laneBoundsBroken), with
// random and all-ones data, every remainder of the chunk count mod 8.
func TestLaneModel(t *testing.T) {
	for _, pw := range []int{4, 8} {
		t.Run("powers="+strconv.Itoa(pw), func(t *testing.T) { testLaneModel(t, pw) })
	}
}

func testLaneModel(t *testing.T, pw int) {
	laneBoundsBroken = false
	defer func() { laneBoundsBroken = false }()
	r := rand.New(rand.NewPCG(5, 6))
	for trial := range 200 {
		var rb []byte
		var p []byte
		chunks := trial % 37
		stride := 16*chunks + 16*(trial%3)
		if trial%5 == 0 {
			rb = bytes.Repeat([]byte{0xff}, 16)
			p = bytes.Repeat([]byte{0xff}, 3*stride+16*chunks)
		} else {
			rb = randBytes(r, 16)
			p = randBytes(r, 3*stride+16*chunks)
		}
		k := newPolyKey(rb)
		var h laneState
		if pw == 8 {
			laneModel8(&h, p, stride, chunks, &k.lanes8)
		} else {
			laneModel(&h, p, stride, chunks, &k.lanes)
		}
		if laneBoundsBroken {
			t.Fatalf("trial %d chunks=%d: a multiply operand or a sum out of bounds", trial, chunks)
		}
		for l := range lanes {
			s := laneToState(&h, l, k.r0, k.r1)
			g0, g1 := reduce(s.h0, s.h1, s.h2)
			ws := state{r0: k.r0, r1: k.r1}
			ws.chunks(p[l*stride : l*stride+16*chunks])
			w0, w1 := reduce(ws.h0, ws.h1, ws.h2)
			if g0 != w0 || g1 != w1 {
				t.Fatalf("trial %d chunks=%d lane %d: model %x%x, generic %x%x", trial, chunks, l, g1, g0, w1, w0)
			}
		}
	}
}

// The pure-Go NEON lane model against the generic code, every chunk count
// (every remainder mod 4: the quad, pair and single steps), largest limbs
// included.
func TestNeonModel(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for trial := range 200 {
		var rb, p []byte
		chunks := trial % 37
		stride := 16*chunks + 16*(trial%3)
		if trial%5 == 0 {
			rb = bytes.Repeat([]byte{0xff}, 16)
			p = bytes.Repeat([]byte{0xff}, stride+16*chunks)
		} else {
			rb = randBytes(r, 16)
			p = randBytes(r, stride+16*chunks)
		}
		k := newPolyKey(rb)
		var h neonState
		neonModel(&h, p, stride, chunks, &k.lanes)
		for l := range neonLanes {
			s := neonToState(&h, l, k.r0, k.r1)
			g0, g1 := reduce(s.h0, s.h1, s.h2)
			ws := state{r0: k.r0, r1: k.r1}
			ws.chunks(p[l*stride : l*stride+16*chunks])
			w0, w1 := reduce(ws.h0, ws.h1, ws.h2)
			if g0 != w0 || g1 != w1 {
				t.Fatalf("trial %d chunks=%d lane %d: model %x%x, generic %x%x", trial, chunks, l, g1, g0, w1, w0)
			}
		}
	}
}

// neonKey packs the laneKey's limbs of r..r^4 where the generator's keyWord
// looks for them.
func TestNeonKeyLayout(t *testing.T) {
	k := newPolyKey(kerneltest.SeedBytes(16))
	word := func(w int) uint64 { return k.neon[w/2] >> (32 * (w % 2)) & 0xffffffff }
	for j := range 4 {
		for i := range 5 {
			if got, want := word(9*j+i), k.lanes[4*(5*j+i)]; got != want {
				t.Errorf("R(%d,%d) = %#x, want %#x", j, i, got, want)
			}
			if i > 0 {
				if got, want := word(9*j+4+i), 5*k.lanes[4*(5*j+i)]; got != want {
					t.Errorf("S(%d,%d) = %#x, want %#x", j, i, got, want)
				}
			}
		}
	}
}

// The pure-Go IFMA lane model against the generic code.
func TestLaneModel44(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for trial := range 200 {
		chunks := trial % 37
		stride := 16*chunks + 16*(trial%3)
		rb, p := randBytes(r, 16), randBytes(r, 7*stride+16*chunks)
		if trial%5 == 0 {
			rb = bytes.Repeat([]byte{0xff}, 16)
			p = bytes.Repeat([]byte{0xff}, 7*stride+16*chunks)
		}
		k := newPolyKey(rb)
		var h laneState44
		laneModel44(&h, p, stride, chunks, &k.ifma)
		for l := range lanes44 {
			s := laneToState44(&h, l, k.r0, k.r1)
			g0, g1 := reduce(s.h0, s.h1, s.h2)
			ws := state{r0: k.r0, r1: k.r1}
			ws.chunks(p[l*stride : l*stride+16*chunks])
			w0, w1 := reduce(ws.h0, ws.h1, ws.h2)
			if g0 != w0 || g1 != w1 {
				t.Fatalf("trial %d chunks=%d lane %d: model %x%x, generic %x%x", trial, chunks, l, g1, g0, w1, w0)
			}
		}
	}
}

// The generic code against the math/big reference of RFC 8439 2.5.1.
func TestGenericAgainstReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for n := 0; n <= 300; n++ {
		var rk, s [16]byte
		copy(rk[:], randBytes(r, 16))
		copy(s[:], randBytes(r, 16))
		m := randBytes(r, n)
		var key [KeySize]byte
		copy(key[:16], rk[:])
		copy(key[16:], s[:])
		var got [16]byte
		Sum(&got, m, &key)
		if want := refTag(&rk, &s, m); got != want {
			t.Fatalf("len=%d: %x, reference %x", n, got, want)
		}
	}
}

// FuzzBlocks compares every implementation's BlocksAD, and the tags it
// makes from Partials, with the math/big reference on fuzzed keys, data
// and layouts.
func FuzzBlocks(f *testing.F) {
	f.Add(bytes.Repeat([]byte{1}, 32), []byte("nonce-0123456789"), kerneltest.SeedBytes(4096), uint16(512), uint16(512), uint8(1))
	f.Add(bytes.Repeat([]byte{0xff}, 32), bytes.Repeat([]byte{0xff}, 16), bytes.Repeat([]byte{0xff}, 2000), uint16(100), uint16(112), uint8(0))
	f.Add(kerneltest.SeedBytes(32), kerneltest.SeedBytes(16), kerneltest.SeedBytes(700), uint16(33), uint16(40), uint8(2))
	f.Fuzz(func(t *testing.T, keys, nonceB, data []byte, blockLen, stride uint16, adChunks uint8) {
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
		ad := data[:min(len(data), n*adLen)]
		if len(ad) < n*adLen {
			ad = append(ad, make([]byte, n*adLen-len(ad))...)
		}
		var nonce Nonce
		copy(nonce[:], nonceB)
		k, err := NewKey(keys[:16], keys[16:32])
		if err != nil {
			t.Fatal(err)
		}
		b, _ := aes.NewCipher(keys[:16])
		var rk [16]byte
		copy(rk[:], keys[16:32])
		for _, im := range impl.List(pkgName) {
			if !im.Available {
				continue
			}
			if err := impl.Select(pkgName, im.Name); err != nil {
				t.Fatal(err)
			}
			dst := make([]Tag, n)
			if err := k.BlocksAD(dst, &nonce, ad, adLen, data, bl, st); err != nil {
				t.Fatalf("impl=%s: %v", im.Name, err)
			}
			// And the tags made from Partials (which run the
			// implementation's lane kernel where it has one for them).
			parts, fromParts := make([]Partial, n), make([]Tag, n)
			if err := k.Partials(parts, data[:min(len(data), max(0, (n-1)*st+bl))], bl, st); err != nil {
				t.Fatalf("impl=%s: Partials: %v", im.Name, err)
			}
			if err := k.TagsFromPartials(fromParts, &nonce, ad, adLen, parts, bl); err != nil {
				t.Fatalf("impl=%s: TagsFromPartials: %v", im.Name, err)
			}
			for i := range dst {
				var s [16]byte
				ni := nonce.Add(uint64(i))
				b.Encrypt(s[:], ni[:])
				msg := append(append([]byte(nil), ad[i*adLen:(i+1)*adLen]...), data[i*st:i*st+bl]...)
				if want := refTag(&rk, &s, msg); dst[i] != Tag(want) || fromParts[i] != Tag(want) {
					t.Fatalf("impl=%s block=%d stride=%d ad=%d: dst[%d] = %x, from the partial %x, reference %x", im.Name, bl, st, adLen, i, dst[i], fromParts[i], want)
				}
			}
		}
		impl.Reset(pkgName)
	})
}

func ExampleKey_BlocksAD() {
	k, err := NewKey(bytes.Repeat([]byte{1}, 16), bytes.Repeat([]byte{2}, 16))
	if err != nil {
		panic(err)
	}
	// Four 512-byte sectors, each tagged with its LBA and write generation
	// as associated data; the nonce counts (generation, LBA).
	data := make([]byte, 4*512)
	ad := make([]byte, 4*16)
	for i := range 4 {
		ad[16*i+7] = byte(100 + i) // LBA, big-endian
		ad[16*i+15] = 1            // generation
	}
	var nonce Nonce
	nonce[7], nonce[15] = 1, 100 // generation 1, LBA 100
	tags := make([]Tag, 4)
	if err := k.BlocksAD(tags, &nonce, ad, 16, data, 512, 512); err != nil {
		panic(err)
	}
	n1 := nonce.Add(1)
	fmt.Println(Equal(tags[1], k.Tag(&n1, append(ad[16:32:32], data[512:1024]...))))
	// Output: true
}

// The bytes between blocks (stride > blockLen) are not part of any tag.
func TestBlocksIgnoreGaps(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	k, err := NewKey(randBytes(r, 16), randBytes(r, 16))
	if err != nil {
		t.Fatal(err)
	}
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		const bl, st, n = 512, 520, 17
		p := randBytes(r, (n-1)*st+bl)
		var nonce Nonce
		a, b := make([]Tag, n), make([]Tag, n)
		if err := k.Blocks(a, &nonce, p, bl, st); err != nil {
			t.Fatal(err)
		}
		for i := range n - 1 {
			for j := i*st + bl; j < (i+1)*st; j++ {
				p[j] ^= 0xff
			}
		}
		if err := k.Blocks(b, &nonce, p, bl, st); err != nil {
			t.Fatal(err)
		}
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("block %d: the gap bytes changed the tag", i)
			}
		}
	})
}

// A Key serves concurrent calls (run with -race): every goroutine gets the
// tags a sequential call gives.
func TestConcurrentBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	k, err := NewKey(randBytes(r, 32), randBytes(r, 16))
	if err != nil {
		t.Fatal(err)
	}
	p := randBytes(r, 70*512)
	var nonce Nonce
	want := make([]Tag, 70)
	if err := k.Blocks(want, &nonce, p, 512, 512); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			for range 20 {
				got := make([]Tag, 70)
				if err := k.Blocks(got, &nonce, p, 512, 512); err != nil {
					errs <- err
					return
				}
				for i := range got {
					if got[i] != want[i] {
						errs <- fmt.Errorf("tag %d differs under concurrency", i)
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestReduceFull: h mod 2^130-5 with all 130 bits, for h < 2p, at the
// edges: below p, p itself, and h - p at and past 2^128 (where a top
// taken as 0 after the subtraction, as reduceFull did at first, is wrong).
func TestReduceFull(t *testing.T) {
	p := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 130), big.NewInt(5))
	two128 := new(big.Int).Lsh(big.NewInt(1), 128)
	cases := []*big.Int{
		big.NewInt(0),
		new(big.Int).Sub(p, big.NewInt(1)),
		new(big.Int).Set(p),
		new(big.Int).Add(p, big.NewInt(4)),
		new(big.Int).Add(p, two128),
		new(big.Int).Add(new(big.Int).Add(p, two128), big.NewInt(3)),
		new(big.Int).Sub(new(big.Int).Lsh(p, 1), big.NewInt(1)),
	}
	mask := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 64), big.NewInt(1))
	word := func(x *big.Int, i uint) uint64 { return new(big.Int).And(new(big.Int).Rsh(x, 64*i), mask).Uint64() }
	for _, h := range cases {
		g0, g1, g2 := reduceFull(word(h, 0), word(h, 1), word(h, 2))
		got := new(big.Int).SetUint64(g2)
		got.Lsh(got, 64).Or(got, new(big.Int).SetUint64(g1))
		got.Lsh(got, 64).Or(got, new(big.Int).SetUint64(g0))
		if want := new(big.Int).Mod(h, p); got.Cmp(want) != 0 {
			t.Errorf("reduceFull(%#x) = %#x, want %#x", h, got, want)
		}
	}
}
