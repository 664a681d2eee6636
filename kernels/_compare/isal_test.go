//go:build isal

package compare

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/difctl/difctl/kernels"
	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/kernels/crc64nvme"
	"github.com/difctl/difctl/kernels/crct10dif"
	"github.com/difctl/difctl/kernels/t10crc32c"
)

func init() {
	impls16 = append(impls16, impl[uint16]{name: "isal", repeat: isalRepeat[uint16](kindDispatch), blocks: isalBlocks[uint16](kindDispatch)})
	impls32 = append(impls32, impl[uint32]{name: "isal", repeat: isalRepeat[uint32](kindDispatch), blocks: isalBlocks[uint32](kindDispatch)})
	impls64 = append(impls64, impl[uint64]{name: "isal", repeat: isalRepeat[uint64](kindDispatch), blocks: isalBlocks[uint64](kindDispatch)})
	if hasISALAVX2 {
		impls16 = append(impls16, impl[uint16]{name: "isal-avx2", repeat: isalRepeat[uint16](kindAVX2), blocks: isalBlocks[uint16](kindAVX2)})
		impls32 = append(impls32, impl[uint32]{name: "isal-avx2", repeat: isalRepeat[uint32](kindAVX2), blocks: isalBlocks[uint32](kindAVX2)})
		impls64 = append(impls64, impl[uint64]{name: "isal-avx2", repeat: isalRepeat[uint64](kindAVX2), blocks: isalBlocks[uint64](kindAVX2)})
	}
	if hasISALAVX512 {
		impls16 = append(impls16, impl[uint16]{name: "isal-by16_10", repeat: isalRepeat[uint16](kindBy16_10), blocks: isalBlocks[uint16](kindBy16_10)})
		impls32 = append(impls32, impl[uint32]{name: "isal-by16_10", repeat: isalRepeat[uint32](kindBy16_10), blocks: isalBlocks[uint32](kindBy16_10)})
		impls64 = append(impls64, impl[uint64]{name: "isal-by16_10", repeat: isalRepeat[uint64](kindBy16_10), blocks: isalBlocks[uint64](kindBy16_10)})
	}
	anchorPeer = anchorName()
	anchorPeerTier = anchorTier()
	anchorSetClock = isalSetClock
	anchorSelectTier = isalSelectTier
	anchorT10DIF.isalBlocks = isalTimeBlocks[uint16]
	anchorT10DIF.isalChecksum = sinkChecksum(isalTimeChecksum[uint16])
	anchorCRC32C.isalBlocks = isalTimeBlocks[uint32]
	anchorCRC32C.isalChecksum = sinkChecksum(isalTimeChecksum[uint32])
	anchorCRC64.isalBlocks = isalTimeBlocks[uint64]
	anchorCRC64.isalChecksum = sinkChecksum(isalTimeChecksum[uint64])
	anchorT10DIFCopy = isalTimeT10DIFCopy
	anchorPair = isalTimePair
}

// sinkChecksum adds the checksums of an ISA-L timer to sink.
func sinkChecksum(f func([]byte, int) (time.Duration, uint64)) func([]byte, int) time.Duration {
	return func(p []byte, reps int) time.Duration {
		d, s := f(p, reps)
		sink += s
		return d
	}
}

// TestISALConventions pins the calling conventions the wrappers assume, on
// the check value "123456789": every kernel continues the standard CRC
// value (crc32_iscsi's register is inverted by the wrapper), and
// crc64_rocksoft_refl from 0 is CRC-64/NVME.
func TestISALConventions(t *testing.T) {
	check := []byte("123456789")
	for _, kind := range []struct {
		name string
		k    isalKind
	}{{"dispatch", kindDispatch}, {"avx2", kindAVX2}, {"by16_10", kindBy16_10}} {
		if kind.k == kindAVX2 && !hasISALAVX2 {
			t.Logf("ISA-L's AVX2 kernels not checked: the CPU lacks AVX2 or VPCLMULQDQ")
			continue
		}
		if kind.k == kindBy16_10 && !hasISALAVX512 {
			t.Logf("ISA-L's AVX-512 kernels not checked: its dispatcher does not pick them on this CPU")
			continue
		}
		if got := isalRepeat[uint16](kind.k)(0, check, 1); got != 0xD0DB {
			t.Errorf("%s: crc16_t10dif(0, 123456789) = %#x, want 0xd0db", kind.name, got)
		}
		if got := isalRepeat[uint32](kind.k)(0, check, 1); got != 0xE3069283 {
			t.Errorf("%s: ^crc32_iscsi(123456789, ^0) = %#x, want 0xe3069283", kind.name, got)
		}
		if got := isalRepeat[uint64](kind.k)(0, check, 1); got != 0xAE8B14860A799888 {
			t.Errorf("%s: crc64_rocksoft_refl(0, 123456789) = %#x, want 0xae8b14860a799888", kind.name, got)
		}
	}
}

// TestISALCopy checks crc16_t10dif_copy per block against difctl's
// BlocksCopy: the same guards and the same bytes copied.
func TestISALCopy(t *testing.T) {
	for _, c := range [][2]int{{512, 512}, {512, 520}, {4096, 4096}, {4096, 4104}, {520, 520}} {
		n := (len(buf) - c[0]) / c[1]
		got, want := make([]uint16, n), make([]uint16, n)
		q1, q2 := make([]byte, len(buf)), make([]byte, len(buf))
		isalT10DIFCopy(got, q1, buf, c[0], c[1])
		if err := crct10dif.BlocksCopy(want, q2, buf, c[0], c[1]); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			b := q1[i*c[1]:][:c[0]]
			if got[i] != want[i] || string(b) != string(buf[i*c[1]:][:c[0]]) || string(b) != string(q2[i*c[1]:][:c[0]]) {
				t.Fatalf("block=%d stride=%d: block %d: crc16_t10dif_copy %#x, BlocksCopy %#x (or the copies differ)", c[0], c[1], i, got[i], want[i])
			}
		}
	}
}

// TestAnchorPair checks the C loop of the op=pair cases against
// t10crc32c: the same guards and sums, and with q the same bytes copied.
func TestAnchorPair(t *testing.T) {
	for _, c := range [][2]int{{512, 512}, {512, 520}, {4096, 4104}} {
		n := (len(buf) - c[0]) / c[1]
		g1, g2 := make([]uint16, n), make([]uint16, n)
		s1, s2 := make([]uint32, n), make([]uint32, n)
		for _, copying := range []bool{false, true} {
			var q []byte
			if copying {
				q = make([]byte, len(buf))
			}
			isalTimePair(g1, s1, q, buf, c[0], c[1], 1)
			if err := t10crc32c.Blocks(g2, s2, buf, c[0], c[1]); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if g1[i] != g2[i] || s1[i] != s2[i] || copying && string(q[i*c[1]:][:c[0]]) != string(buf[i*c[1]:][:c[0]]) {
					t.Fatalf("block=%d stride=%d copy=%v: block %d: ISA-L %#x %#x, t10crc32c %#x %#x (or the copy differs)",
						c[0], c[1], copying, i, g1[i], s1[i], g2[i], s2[i])
				}
			}
		}
	}
}

// TestAnchorTimers checks that the C loops BenchmarkAnchor times compute
// what difctl computes: the per-block guards of timeBlocks, the checksums
// XORed into timeChecksum's sink.
func TestAnchorTimers(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 7))
	for _, c := range [][2]int{{512, 520}, {4096, 4112}} {
		n := (len(buf) - c[0]) / c[1]
		d16, d32, d64 := make([]uint16, n), make([]uint32, n), make([]uint64, n)
		isalTimeBlocks(d16, buf, c[0], c[1], 1)
		isalTimeBlocks(d32, buf, c[0], c[1], 1)
		isalTimeBlocks(d64, buf, c[0], c[1], 1)
		for i := range n {
			b := buf[i*c[1]:][:c[0]]
			if d16[i] != crct10dif.Checksum(b) || d32[i] != crc32c.Checksum(b) || d64[i] != crc64nvme.Checksum(b) {
				t.Fatalf("block=%d stride=%d: block %d: ISA-L %#x %#x %#x, difctl %#x %#x %#x", c[0], c[1], i,
					d16[i], d32[i], d64[i], crct10dif.Checksum(b), crc32c.Checksum(b), crc64nvme.Checksum(b))
			}
		}
	}
	for range 200 {
		p := buf[:r.IntN(5000)]
		if _, got := isalTimeChecksum[uint64](p, 1); got != crc64nvme.Checksum(p) {
			t.Fatalf("len=%d: timeChecksum %#x, crc64nvme %#x", len(p), got, crc64nvme.Checksum(p))
		}
		if _, got := isalTimeChecksum[uint32](p, 1); got != uint64(crc32c.Checksum(p)) {
			t.Fatalf("len=%d: timeChecksum %#x, crc32c %#x", len(p), got, crc32c.Checksum(p))
		}
		if _, got := isalTimeChecksum[uint16](p, 1); got != uint64(crct10dif.Checksum(p)) {
			t.Fatalf("len=%d: timeChecksum %#x, crct10dif %#x", len(p), got, crct10dif.Checksum(p))
		}
		// Three checksums XOR to zero when two are equal.
		if _, got := isalTimeChecksum[uint16](p, 3); got != uint64(crct10dif.Checksum(p)) {
			t.Fatalf("len=%d: 3 reps: timeChecksum %#x, want one checksum %#x", len(p), got, crct10dif.Checksum(p))
		}
	}
}

// isalSelectTier makes BenchmarkAnchor compare tier on both sides: for
// "avx2", ISA-L's AVX2 kernels (called by name, as on a CPU with
// VPCLMULQDQ but not ISA-L's AVX-512 set) against difctl's avx2 kernels,
// selected through the registry. restore goes back to the dispatchers'
// picks.
func isalSelectTier(tier string) (restore func(), err error) {
	if tier != "avx2" {
		return nil, fmt.Errorf("-anchor.tier=%q: want avx2 (or no flag for the tier ISA-L's dispatcher picks)", tier)
	}
	if !hasISALAVX2 {
		return nil, fmt.Errorf("-anchor.tier=avx2: this CPU does not run ISA-L's AVX2 kernels (AVX2 and VPCLMULQDQ)")
	}
	pkgs := []string{"crct10dif", "crc32c", "crc64nvme", "t10crc32c"}
	kind, peer, peerTier := anchorKind, anchorPeer, anchorPeerTier
	restore = func() {
		for _, p := range pkgs {
			kernels.Reset(p)
		}
		anchorKind, anchorPeer, anchorPeerTier = kind, peer, peerTier
	}
	for _, p := range pkgs {
		if err := kernels.Select(p, "avx2"); err != nil {
			restore()
			return nil, err
		}
	}
	anchorKind = kindAVX2
	anchorPeer, anchorPeerTier = anchorName(), anchorTier()
	return restore, nil
}

// TestSelectTier: -anchor.tier=avx2 puts ISA-L's AVX2 kernels and
// difctl's avx2 kernels side by side, and its restore goes back to both
// dispatchers' picks; an unknown tier is refused.
func TestSelectTier(t *testing.T) {
	if _, err := isalSelectTier("avx3"); err == nil {
		t.Error("-anchor.tier=avx3 accepted")
	}
	if !hasISALAVX2 {
		t.Skip("the CPU does not run ISA-L's AVX2 kernels")
	}
	before := activeImpls()
	kind := anchorKind
	restore, err := isalSelectTier("avx2")
	if err != nil {
		t.Fatal(err)
	}
	if got := activeImpls(); anchorKind != kindAVX2 || anchorPeerTier != "AVX2" ||
		!strings.Contains(got, "crct10dif=avx2,crc32c=avx2,crc64nvme=avx2,t10crc32c=avx2") {
		t.Errorf("after -anchor.tier=avx2: peer tier %s, difctl %s", anchorPeerTier, got)
	}
	restore()
	if got := activeImpls(); got != before || anchorKind != kind {
		t.Errorf("after restore: difctl %s, want %s", got, before)
	}
}
