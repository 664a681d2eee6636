//go:build !purego

package poly1305

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"reflect"
	"testing"

	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// TestBlocksCopyRegistry checks which copying kernel each implementation
// selects: the one-pass lanesAVX2R8Copy glue under hybrid8 and avx2r8,
// copy-then-blocks under the others. A registration that left the
// one-pass kernel out (or left it active after switching away) would
// still give the right tags, so only this test sees it.
func TestBlocksCopyRegistry(t *testing.T) {
	defer impl.Reset(pkgName)
	want := map[string]any{
		"hybrid8": blocksAVX2R8Copy, "avx2r8": blocksAVX2R8Copy,
		"hybrid": copyThenBlocks, "avx2": copyThenBlocks, "avx512ifma": blocksIFMACopy, "generic": copyThenBlocks,
	}
	// Twice over the list, so that every implementation is selected after
	// one that sets another copying kernel.
	for range 2 {
		for _, im := range impl.List(pkgName) {
			if !im.Available {
				continue
			}
			if err := impl.Select(pkgName, im.Name); err != nil {
				t.Fatal(err)
			}
			w, ok := want[im.Name]
			if !ok {
				t.Fatalf("no expectation for %s", im.Name)
			}
			if reflect.ValueOf(blocksCopy).Pointer() != reflect.ValueOf(w).Pointer() {
				t.Errorf("impl=%s: the copying kernel is not the expected one", im.Name)
			}
		}
	}
}

// TestPrefetchAhead checks lanesAVX2R8Copy's prefetch distance: the next
// group, or the first one at least 4 KiB on, and never beyond p.
func TestPrefetchAhead(t *testing.T) {
	for _, c := range []struct{ plen, stride, chunks, want int }{
		{64 << 10, 512, 32, 4096},       // 512-byte blocks: two groups on
		{64 << 10, 4096, 256, 16 << 10}, // 4 KiB blocks: the next group
		{64 << 10, 1024, 64, 4096},      // exactly one group of 4 KiB
		{64 << 10, 520, 32, 2080 * 2},   // the first multiple of 2080 >= 4096
		{6 << 10, 512, 32, 4096},        // the group 4 KiB on ends p exactly
		{6<<10 - 1, 512, 32, 0},         // and one byte less: no prefetch ahead
		{16 << 10, 4096, 256, 0},        // no next group
		{0, 0, 0, 0},                    // empty blocks
	} {
		got := prefetchAhead(c.plen, lanes, c.stride, c.chunks)
		if got != c.want {
			t.Errorf("prefetchAhead(%d, %d, %d, %d) = %d, want %d", c.plen, lanes, c.stride, c.chunks, got, c.want)
		}
		if got+3*c.stride+16*c.chunks > c.plen && got != 0 {
			t.Errorf("prefetchAhead(%d, ...) = %d reaches beyond p", c.plen, got)
		}
	}
}

// TestGroupAhead checks that blocksAVX2R8CopyWhole's per-group distance,
// groupAhead from the call's first prefetchAhead, is prefetchAhead of each
// group's own rest of p.
func TestGroupAhead(t *testing.T) {
	for _, stride := range []int{0, 16, 512, 520, 1024, 4096} {
		for _, chunks := range []int{1, 32, 256} {
			if 16*chunks > stride && stride != 0 {
				continue
			}
			span := 3*stride + 16*chunks
			for _, plen := range []int{span, 4<<10 + span, 6<<10 - 1, 6 << 10, 64 << 10, 64<<10 + 100} {
				ahead := prefetchAhead(plen, lanes, stride, chunks)
				for off := 0; off+span <= plen; off += lanes * max(stride, 1) {
					got := groupAhead(ahead, span, plen-off)
					if want := prefetchAhead(plen-off, lanes, stride, chunks); got != want {
						t.Fatalf("stride %d chunks %d plen %d, group at %d: groupAhead = %d, prefetchAhead = %d", stride, chunks, plen, off, got, want)
					}
					if stride == 0 {
						break
					}
				}
			}
		}
	}
}

// carryKey is TestBlocksADCopyCarry's key: every bit of r the clamp
// allows, so that the products, and the carries out of limb 0, are large.
func carryKey(t *testing.T) *Key {
	rb := []byte{0xff, 0xff, 0xff, 0x0f, 0xfc, 0xff, 0xff, 0x0f, 0xfc, 0xff, 0xff, 0x0f, 0xfc, 0xff, 0xff, 0x0f}
	k, err := NewKey(kerneltest.SeedBytes(16), rb)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// carryGroup returns group i of TestBlocksADCopyCarry's search: four
// one-chunk blocks from a PCG seeded with i, and whether a lane of them
// leaves the lane kernel's carry chain (laneModel8, limb for limb the
// kernel's) with limb 1 at 2^26 or more.
func carryGroup(k *Key, i uint64) ([]byte, bool) {
	rng := rand.New(rand.NewPCG(1, i))
	g := make([]byte, lanes*16)
	for j := 0; j < len(g); j += 8 {
		binary.LittleEndian.PutUint64(g[j:], rng.Uint64())
	}
	var h laneState
	laneModel8(&h, g, 16, 1, &k.poly.lanes8)
	for l := range lanes {
		if h[4+l] >= 1<<26 {
			return g, true
		}
	}
	return g, false
}

// carryGroups are the first groups of carryGroup with a lane over (about
// one group in 2^21), found by TestCarryGroupsSearch.
var carryGroups = []uint64{1499464, 4262384, 4701203, 9035494, 12223896, 12771034, 15069144, 16730411}

// TestBlocksADCopyCarry checks BlocksADCopy on blocks whose accumulators
// leave the lane kernel's carry chain with limb 1 at 2^26 or more: the
// pack of blocksAVX2R8CopyWhole (shifts and ors, no carries) relies on the
// copying kernel's fullCarry for them. The tags of the groups of
// carryGroups (each checked to have such a lane), under every
// implementation, must be those of Key.Tag.
func TestBlocksADCopyCarry(t *testing.T) {
	k := carryKey(t)
	var p []byte
	for _, i := range carryGroups {
		g, over := carryGroup(k, i)
		if !over {
			t.Fatalf("group %d has no lane with limb 1 over 2^26", i)
		}
		p = append(p, g...)
	}
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		n := len(p) / 16
		tags := make([]Tag, n)
		q := make([]byte, len(p))
		var nonce Nonce
		if err := k.BlocksADCopy(tags, &nonce, nil, 0, q, p, 16, 16); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			nn := nonce.Add(uint64(i))
			if w := k.Tag(&nn, p[16*i:][:16]); tags[i] != w {
				t.Fatalf("block %d: tag %x, want %x", i, tags[i], w)
			}
		}
	})
}

// ifmaCarryBlock is three chunks that leave the IFMA kernels' last carry
// chain with limb 1 at exactly 2^44 and limb 2 odd, under r = 1 (so r^2 =
// 1 and every product is the limb itself): the pair step gives limbs
// 2^44-1, 0 and 3.5·2^40 (chunks 1 and 2 added); the single step adds
// chunk 3's 2^44-1, 2^44-2 and 2^40+1, and its carries take limb 1 to
// 2^44.
func ifmaCarryBlock() []byte {
	// chunk is the chunk whose limbs are a0, a1 and a2 + 2^40 (the pad).
	chunk := func(a0, a1, a2 uint64) []byte {
		b := binary.LittleEndian.AppendUint64(nil, a0|a1<<44)
		return binary.LittleEndian.AppendUint64(b, a1>>20|a2<<24)
	}
	b := chunk(1<<44-1, 0, 1<<39|1<<38)
	b = append(b, chunk(0, 0, 1<<39|1<<38)...)
	return append(b, chunk(1<<44-1, 1<<44-2, 1)...)
}

// TestBlocksCarry44 checks BlocksAD and BlocksADCopy, under every
// implementation, on eight blocks of ifmaCarryBlock under r = 1, whose
// lanes (laneModel44 says, limb for limb the IFMA kernel's) leave the
// kernel with limb 1 at 2^44 and limb 2 odd: the pack of packReduce44
// (shifts and ors) is exact only after its carry of limb 1.
func TestBlocksCarry44(t *testing.T) {
	k, err := NewKey(kerneltest.SeedBytes(16), []byte{1, 15: 0})
	if err != nil {
		t.Fatal(err)
	}
	blk := ifmaCarryBlock()
	p := bytes.Repeat(blk, lanes44)
	var h laneState44
	laneModel44(&h, p, len(blk), len(blk)/16, &k.poly.ifma)
	if h[lanes44] != 1<<44 || h[2*lanes44]&1 == 0 {
		t.Fatalf("the model leaves limb 1 at %#x, limb 2 at %#x: not the edge", h[lanes44], h[2*lanes44])
	}
	var nonce Nonce
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		for _, cp := range []bool{false, true} {
			tags := make([]Tag, lanes44)
			q := make([]byte, len(p))
			if cp {
				err = k.BlocksADCopy(tags, &nonce, nil, 0, q, p, len(blk), len(blk))
			} else {
				err = k.BlocksAD(tags, &nonce, nil, 0, p, len(blk), len(blk))
			}
			if err != nil {
				t.Fatal(err)
			}
			for i := range tags {
				nn := nonce.Add(uint64(i))
				if w := k.Tag(&nn, blk); tags[i] != w {
					t.Fatalf("copy=%v block %d: tag %x, want %x", cp, i, tags[i], w)
				}
			}
		}
	})
}

// TestCarryGroupsSearch redoes the search for carryGroups (about 12 s, so
// only with POLY1305_CARRY_SEARCH=1 in the environment): it logs the first
// eight.
func TestCarryGroupsSearch(t *testing.T) {
	if os.Getenv("POLY1305_CARRY_SEARCH") != "1" {
		t.Skip("the search for carryGroups: set POLY1305_CARRY_SEARCH=1")
	}
	k := carryKey(t)
	var found []uint64
	for i := uint64(0); len(found) < 8; i++ {
		if _, over := carryGroup(k, i); over {
			found = append(found, i)
		}
	}
	t.Logf("carryGroups = %v", found)
}
