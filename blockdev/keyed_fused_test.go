package blockdev

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/blockdev/internal/keyed"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/kernels"
	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/kernels/keyedcopy"
	"github.com/difctl/difctl/store"
)

// Keyed reads from a file's mapping, where the keyed tags are computed from
// the partials of the fused copy (internal/keyed's fused.go), with every keyedcopy
// implementation: a clean volume reads clean, in reads large enough to be
// split over two goroutines and in small ones; a block altered by an
// attacker who recomputed its tuple and sector sum, and a block copied from
// another LBA, fail the keyed check of a ReadAt with their LBAs; and the
// reads took the fused path when the implementation is fused.
func TestKeyedFusedRead(t *testing.T) {
	for _, format := range []string{"512+8", "4096+8"} {
		t.Run("format="+format, func(t *testing.T) {
			f := dif.MustFormat(format)
			bs := f.BlockSize()
			const blocks = 1024 // 512 KiB of 512-byte blocks: a split read
			path := filepath.Join(t.TempDir(), "img")
			if err := os.WriteFile(path, blocktest.Pattern(blocks*bs, 5), 0o644); err != nil {
				t.Fatal(err)
			}
			dev, err := device.OpenFile(path, device.FileOptions{BlockSize: bs})
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			kv := store.NewMem()
			defer kv.Close()
			key := testKey(t, 4)
			v, err := Create(context.Background(), dev, kv, CreateOptions{Format: f, Options: Options{Key: key}})
			if err != nil {
				t.Fatal(err)
			}
			// A second generation for some blocks: runs of two generations.
			if _, err := v.WriteAt(blocktest.Pattern(40*bs, 6), 100*int64(bs)); err != nil {
				t.Fatal(err)
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			open := func() *Volume {
				v, err := Open(context.Background(), dev, kv, Options{Key: key, Rereads: -1, KeyedCRC: true})
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			buf := device.AlignedBuffer(blocks * bs)
			kerneltestForEach(t, func(t *testing.T, fused bool) {
				v := open()
				defer v.Close()
				before := keyed.FusedRuns()
				if _, err := v.ReadAt(buf, 0); err != nil {
					t.Fatalf("clean volume: %v", err)
				}
				if _, err := v.ReadAt(buf[:8*bs], 98*int64(bs)); err != nil {
					t.Fatalf("clean volume, small read: %v", err)
				}
				if got := keyed.FusedRuns() > before; got != fused {
					t.Fatalf("fused path taken: %v, want %v", got, fused)
				}
			})
			// The attacker: block 7 altered, block 300 a copy of block 301,
			// each with its tuple and sector sum recomputed.
			attack := func(lba int64, data []byte) {
				if _, err := dev.WriteAt(data, lba*int64(bs)); err != nil {
					t.Fatal(err)
				}
				tp, err := store.OpenTuples(kv, DefaultVolumeName, nil)
				if err != nil {
					t.Fatal(err)
				}
				m := tp.Manifest()
				tuple := make([]byte, f.TupleSize())
				if err := f.WithLayout(dif.Separate).Generate(data, tuple, dif.Params{RefTag: m.InitialRefTag + uint64(lba), LBA: lba}); err != nil {
					t.Fatal(err)
				}
				if err := tp.WriteRange(lba, tuple, []uint32{crc32c.Checksum(data)}, true); err != nil {
					t.Fatal(err)
				}
			}
			b := make([]byte, bs)
			dev.ReadAt(b, 7*int64(bs))
			b[100] ^= 0x10
			attack(7, b)
			dev.ReadAt(b, 301*int64(bs))
			attack(300, b)
			kerneltestForEach(t, func(t *testing.T, fused bool) {
				v := open()
				defer v.Close()
				// Reads of 256 blocks (split for 4 KiB blocks) and, for
				// 512-byte blocks, of 512 (split), each failing with the
				// mismatches in its range (and the tuple page's MAC, which
				// the attacker's tuple edits broke). A read stops at its
				// first failing run, so each range is one run.
				ranges := [][2]int{{0, 256}, {256, 256}}
				if bs == 512 {
					ranges = append(ranges, [2]int{0, 512})
				}
				for _, r := range ranges {
					_, err := v.ReadAt(buf[:r[1]*bs], int64(r[0]*bs))
					var ie *IntegrityError
					if !errors.Is(err, ErrKeyedTag) || !errors.As(err, &ie) {
						t.Fatalf("tampered volume: %v, want a keyed-tag IntegrityError", err)
					}
					var lbas []int64
					for _, p := range ie.Problems {
						var ke *KeyedTagError
						if p.Kind != KindKeyedTag || !errors.As(p.Err, &ke) {
							t.Fatalf("problem %v, want only keyed-tag ones", p)
						}
						if ke.Reason == "mismatch" {
							lbas = append(lbas, p.LBA)
						}
					}
					// Every block of the range fails (the tuple page's MAC),
					// and the error lists the first MaxListedProblems
					// problems: the mismatches among the blocks listed.
					if ie.Failed != int64(r[1]) {
						t.Fatalf("read of [%d, %d): %d blocks failed, want all %d (a page failing its MAC fails every block)", r[0], r[0]+r[1], ie.Failed, r[1])
					}
					listed := ie.Problems[len(ie.Problems)-1].LBA
					var want []int64
					for _, b := range []int64{7, 300} {
						if b >= int64(r[0]) && b < int64(r[0]+r[1]) && b <= listed {
							want = append(want, b)
						}
					}
					if !slices.Equal(lbas, want) {
						t.Fatalf("read of [%d, %d): keyed mismatches at %v, want %v", r[0], r[0]+r[1], lbas, want)
					}
				}
			})
		})
	}
}

// kerneltestForEach runs f with each keyedcopy implementation the CPU
// runs active, telling it whether that one is fused.
func kerneltestForEach(t *testing.T, f func(t *testing.T, fused bool)) {
	defer kernels.Reset("keyedcopy")
	for _, name := range []string{"avx", "generic"} {
		t.Run("impl="+name, func(t *testing.T) {
			if err := kernels.Select("keyedcopy", name); err != nil {
				t.Skip(err)
			}
			f(t, keyedcopy.Fused())
		})
	}
}
