package scrub

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// BenchmarkScrubRepair measures what repairing costs a scrub: whole passes
// of a scrub with the store's findings log over a page-cached 256 MiB
// 4096+8 volume with one mirror leg (an image file on the same file
// system), in three cases:
//
//   - damage=0/repair=no: the volume undamaged, a plain scrub;
//   - damage=1pct/repair=no: 1% of the blocks rotted on the image (leg 0),
//     a plain scrub, which finds them and records them (again: the same
//     blocks every pass, as a volume with 1% damaged blocks is scrubbed
//     pass after pass);
//   - damage=1pct/repair=yes: 1% of the blocks rotted afresh before every
//     pass (the pass before repaired the others), a scrub that repairs
//     them from the other leg (writes, syncs and records every repair);
//   - the same three with cache=cold: both images' pages are written back
//     and dropped from the page cache before every pass (outside the
//     timer), so the scrub reads the medium, as a scrub of a device or of
//     an image larger than memory does.
//
// The target (issue 40): repair=yes at least 0.8x the plain scrub of the
// same damaged volume. The damage is made outside the timer.
//
//	go test ./blockdev/scrub -run '^$' -bench 'ScrubRepair' -count 6 | benchstat -col /repair -
func BenchmarkScrubRepair(b *testing.B) {
	for _, cold := range []bool{false, true} {
		for _, c := range []struct {
			damage, repair bool
		}{{false, false}, {true, false}, {true, true}} {
			name := fmt.Sprintf("damage=0/repair=%s", yesNo(c.repair))
			if c.damage {
				name = fmt.Sprintf("damage=1pct/repair=%s", yesNo(c.repair))
			}
			if cold {
				name += "/cache=cold"
			}
			b.Run(name, func(b *testing.B) { benchScrubRepair(b, c.damage, c.repair, cold) })
		}
	}
}

func yesNo(v bool) string {
	if v {
		return "yes"
	}
	return "no"
}

func benchScrubRepair(b *testing.B, damage, repair, cold bool) {
	size := int64(256 << 20)
	if testing.Short() {
		size = 32 << 20
	}
	f := dif.MustFormat("4096+8")
	bs := int64(f.BlockSize())
	blocks := size / bs
	dir := b.TempDir()
	var devs []*device.File
	var paths []string
	for k := range 2 {
		p := filepath.Join(dir, fmt.Sprintf("leg%d", k))
		paths = append(paths, p)
		if err := os.WriteFile(p, blocktest.Pattern(int(size), 7), 0o644); err != nil {
			b.Fatal(err)
		}
		dev, err := device.OpenFile(p, device.FileOptions{BlockSize: f.BlockSize()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { dev.Close() })
		devs = append(devs, dev)
	}
	kv, err := store.Open("pebble:" + filepath.Join(dir, "db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { kv.Close() })
	v, err := blockdev.Create(context.Background(), devs[0], kv, blockdev.CreateOptions{Format: f})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { v.Close() })
	if err := v.AddMirror(blockdev.Mirror{Name: filepath.Join(dir, "leg1"), Dev: devs[1]}); err != nil {
		b.Fatal(err)
	}
	if _, err := v.Resync(context.Background(), blockdev.ResyncOptions{}); err != nil {
		b.Fatal(err)
	}
	st, err := NewStoreState(v.Tuples(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	opts := Options{State: st, Check: blockdev.CheckOptions{Repair: repair}}
	r := rand.New(rand.NewPCG(1, 2))
	zero := make([]byte, bs)
	var rotted []int64
	b.SetBytes(size)
	for b.Loop() {
		b.StopTimer()
		if damage && (repair || len(rotted) == 0) {
			rotted = rotted[:0]
			seen := map[int64]bool{}
			for len(rotted) < int(blocks/100) {
				lba := r.Int64N(blocks)
				if seen[lba] {
					continue
				}
				seen[lba] = true
				rotted = append(rotted, lba)
				if _, err := devs[0].WriteAt(zero, lba*bs); err != nil {
					b.Fatal(err)
				}
			}
		}
		if cold {
			for _, p := range paths {
				dropCache(b, p)
			}
		}
		b.StartTimer()
		rep, err := Run(context.Background(), v, opts)
		if err != nil {
			b.Fatal(err)
		}
		found := rep.RepairedFailures[blockdev.KindGuard] + rep.Failures[blockdev.KindGuard]
		if rep.Blocks != blocks || found != int64(len(rotted)) || repair && rep.RepairedFailures[blockdev.KindGuard] != found {
			b.Fatalf("pass over %d blocks with %d rotted: %+v", blocks, len(rotted), rep)
		}
	}
}
