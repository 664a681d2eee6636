package blockdev

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// The mirror benchmarks measure what a mirror leg costs, legs=0 (today's
// single-copy volume) beside legs=1 (one mirror leg, an image file on the
// same file system), over a page-cached 64 MiB 4096+8 image:
//
//	go test -run '^$' -bench 'Mirror' -count 6 ./blockdev | benchstat -col /legs -
//
//   - read: sequential 1 MiB verified reads of an undamaged volume (the
//     target: legs=1 at least 0.97x legs=0; repair costs nothing when
//     nothing is wrong);
//   - write: sequential 1 MiB writes, a sync every 64 MiB (legs=1 at least
//     0.8x legs=0);
//   - scrub: a repairing check (CheckRun with Repair) of the mirrored
//     volume with 1% of its blocks rotted on leg 0, beside a plain check
//     of the same volume undamaged (repair=1pct at least 0.8x repair=none).

func benchMirrored(b testing.TB, format string, legs int) (*Volume, []*device.File, int64) {
	return benchMirroredOn(b, format, legs, "")
}

// benchMirroredOn is benchMirrored with the legs' images in legDir ("":
// the test's temporary directory, on the same file system as the image).
func benchMirroredOn(b testing.TB, format string, legs int, legDir string) (*Volume, []*device.File, int64) {
	p, size := volBenchImage(b)
	f := dif.MustFormat(format)
	dev, err := device.OpenFile(p, device.FileOptions{BlockSize: f.BlockSize()})
	if err != nil {
		b.Fatal(err)
	}
	kv, err := store.Open("pebble:" + filepath.Join(b.TempDir(), "store"))
	if err != nil {
		b.Fatal(err)
	}
	v, err := Create(context.Background(), dev, kv, CreateOptions{Format: f})
	if err != nil {
		b.Fatal(err)
	}
	devs := []*device.File{dev}
	for k := range legs {
		lp, _ := volBenchImage(b)
		if legDir != "" {
			moved := filepath.Join(legDir, fmt.Sprintf("difctl-bench-leg-%d-%d", os.Getpid(), k))
			if err := copyFile(lp, moved); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { os.Remove(moved) })
			lp = moved
		}
		l, err := device.OpenFile(lp, device.FileOptions{BlockSize: f.BlockSize()})
		if err != nil {
			b.Fatal(err)
		}
		devs = append(devs, l)
		if err := v.AddMirror(Mirror{Name: lp, Dev: l}); err != nil {
			b.Fatal(err)
		}
	}
	if legs > 0 {
		if _, err := v.Resync(context.Background(), ResyncOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		if err := v.Close(); err != nil {
			b.Error(err)
		}
		kv.Close()
		for _, d := range devs {
			d.Close()
		}
	})
	return v, devs, size
}

func BenchmarkMirror(b *testing.B) {
	const format = "4096+8"
	for _, legs := range []int{0, 1} {
		b.Run(fmt.Sprintf("op=read/legs=%d", legs), func(b *testing.B) {
			v, _, size := benchMirrored(b, format, legs)
			buf := device.AlignedBuffer(benchReq)
			var off int64
			b.SetBytes(benchReq)
			for b.Loop() {
				if _, err := v.ReadAt(buf, off); err != nil {
					b.Fatal(err)
				}
				if off += benchReq; off >= size {
					off = 0
				}
			}
		})
	}
	// The writes' syncs write the data back to the medium: a leg on the
	// same medium as the image doubles that; leg=shm puts the leg in
	// /dev/shm (another medium, as a mirror leg should be).
	writeCases := []struct {
		name string
		legs int
		dir  string
	}{{"legs=0", 0, ""}, {"legs=1", 1, ""}}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		writeCases = append(writeCases, struct {
			name string
			legs int
			dir  string
		}{"legs=1/leg=shm", 1, "/dev/shm"})
	}
	for _, c := range writeCases {
		b.Run("op=write/"+c.name, func(b *testing.B) {
			v, _, size := benchMirroredOn(b, format, c.legs, c.dir)
			buf := blocktest.Pattern(benchReq, 2)
			var off int64
			b.SetBytes(benchReq)
			for b.Loop() {
				if _, err := v.WriteAt(buf, off); err != nil {
					b.Fatal(err)
				}
				if off += benchReq; off%(64<<20) == 0 || off >= size {
					if err := v.Sync(); err != nil {
						b.Fatal(err)
					}
					if off >= size {
						off = 0
					}
				}
			}
		})
	}
	for _, damaged := range []bool{false, true} {
		name := "op=scrub/legs=1/repair=none"
		if damaged {
			name = "op=scrub/legs=1/repair=1pct"
		}
		b.Run(name, func(b *testing.B) {
			v, devs, size := benchMirrored(b, format, 1)
			bs := int64(v.BlockSize())
			blocks := int(size / bs)
			scratch := device.AlignedBuffer(v.ScratchSize(v.chunk))
			opt := CheckOptions{Repair: damaged}
			r := rand.New(rand.NewPCG(1, 2))
			zero := make([]byte, bs)
			b.SetBytes(size)
			for b.Loop() {
				if damaged {
					b.StopTimer()
					for range blocks / 100 {
						if _, err := devs[0].WriteAt(zero, r.Int64N(int64(blocks))*bs); err != nil {
							b.Fatal(err)
						}
					}
					b.StartTimer()
				}
				// One run of the whole image, as a scrub that repairs takes
				// runs of scrub.RepairRunBytes.
				if _, err := v.CheckRun(context.Background(), 0, blocks, scratch, opt, nil); err != nil {
					b.Fatal(err)
				}
			}
			if damaged && v.Stats().Repaired == 0 {
				b.Fatal("nothing repaired")
			}
		})
	}
}

// TestResyncBytes: a leg that missed 1% of its blocks is resynced by
// reading those blocks twice (the verified copy, the leg's) and writing
// them once, nothing more.
func TestResyncBytes(t *testing.T) {
	m := newMirrored(t, "4096+8", 1000, 1)
	bs := int64(m.v.BlockSize())
	m.faults[0].Inject(faultdevFailWrites())
	r := rand.New(rand.NewPCG(8, 9))
	for range 10 {
		lba := r.Int64N(1000)
		m.write(blocktest.Pattern(int(bs), uint64(lba)), lba*bs)
	}
	if err := m.v.Sync(); err != nil {
		t.Fatal(err)
	}
	m.faults[0].ClearFaults()
	m.reopen(Options{})
	stale := m.v.Legs()[1].StaleBlocks
	rep, err := m.v.Resync(context.Background(), ResyncOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leg missed %d of 1000 blocks: resync read %d bytes and wrote %d (volume %d bytes)", stale, rep.BytesRead, rep.BytesWritten, 1000*bs)
	if rep.BytesRead != 2*stale*bs || rep.BytesWritten != stale*bs || stale > 10 {
		t.Fatalf("resync of %d stale blocks: %+v", stale, rep)
	}
	m.same()
}

// copyFile copies the file src to dst.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o600)
}
