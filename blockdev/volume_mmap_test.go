package blockdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/kernels/crct10dif"
	"github.com/difctl/difctl/store"
)

// fileVol protects an image file of the given blocks with a random pattern.
func fileVol(t *testing.T, format string, blocks int, opts Options) (*Volume, string, []byte) {
	t.Helper()
	f := dif.MustFormat(format)
	model := blocktest.Pattern(blocks*f.BlockSize(), uint64(blocks)+3)
	p := blocktest.WriteImage(t, t.TempDir(), model)
	dev, err := device.OpenFile(p, device.FileOptions{BlockSize: f.BlockSize()})
	if err != nil {
		t.Fatal(err)
	}
	kv := store.NewMem()
	v, err := Create(context.Background(), dev, kv, CreateOptions{Format: f, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close(); kv.Close(); dev.Close() })
	return v, p, model
}

// TestVolumeMapped checks that reads through the mapping verify what they
// return exactly as reads through ReadAt do: same data, same errors.
func TestVolumeMapped(t *testing.T) {
	blocktest.SkipNoMmap(t)
	for _, format := range volFormats {
		for _, split := range []string{"on", "off"} {
			t.Run("format="+format+"/split="+split, func(t *testing.T) {
				const blocks = 600 // more than one 1 MiB chunk at 512 bytes
				// split=off: the caller's goroutine alone, which reads a run
				// from the mapping in one call (readSerial).
				opts := Options{}
				if split == "off" {
					opts.VerifyWorkers = -1
				}
				vm, pm, model := fileVol(t, format, blocks, opts)
				opts.NoMap = true
				vr, pr, _ := fileVol(t, format, blocks, opts)
				if vm.mapper == nil || vr.mapper != nil {
					t.Fatal("the volume over a File does not map it, or maps it with NoMap")
				}
				bs := vm.BlockSize()
				got := make([]byte, len(model))
				for _, v := range []*Volume{vm, vr} {
					if n, err := v.ReadAt(got, 0); err != nil || n != len(got) || !bytes.Equal(got, model) {
						t.Fatalf("ReadAt of the whole volume: %d, %v, equal %v", n, err, bytes.Equal(got, model))
					}
				}
				// Writes go through the page cache that the mapping shows.
				w := blocktest.Pattern(3*bs, 9)
				for _, v := range []*Volume{vm, vr} {
					if _, err := v.WriteAt(w, int64(5*bs+17)); err != nil {
						t.Fatal(err)
					}
					if err := v.Sync(); err != nil {
						t.Fatal(err)
					}
				}
				copy(model[5*bs+17:], w)
				for _, v := range []*Volume{vm, vr} {
					if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, model) {
						t.Fatalf("ReadAt after a write: %v, equal %v", err, bytes.Equal(got, model))
					}
				}
				// Corrupt two blocks behind both volumes' backs.
				for _, p := range []string{pm, pr} {
					f, err := os.OpenFile(p, os.O_RDWR, 0)
					if err != nil {
						t.Fatal(err)
					}
					for _, b := range []int{7, blocks - 2} {
						if _, err := f.WriteAt([]byte{^model[b*bs+11]}, int64(b*bs+11)); err != nil {
							t.Fatal(err)
						}
					}
					f.Close()
				}
				var errs [2]string
				var ns [2]int
				for i, v := range []*Volume{vm, vr} {
					n, err := v.ReadAt(got[bs:], int64(bs))
					if !errors.Is(err, dif.ErrIntegrity) {
						t.Fatalf("ReadAt over a corrupt block: %v", err)
					}
					var ie *IntegrityError
					if !errors.As(err, &ie) || ie.LBA != 7 {
						t.Fatalf("error %v, want block 7", err)
					}
					errs[i], ns[i] = err.Error(), n
				}
				if errs[0] != errs[1] || ns[0] != ns[1] || ns[0] != 6*bs {
					t.Errorf("mapped: %d bytes, %s\nReadAt: %d bytes, %s", ns[0], errs[0], ns[1], errs[1])
				}
				// The scrub's CheckRun (which checks the mapping in place) finds
				// both, with the same problems as through ReadAt.
				var probs [2]string
				for i, v := range []*Volume{vm, vr} {
					var lbas []int64
					sc := make([]byte, v.ScratchSize(blocks))
					for lba := int64(0); lba < blocks; lba += int64(v.chunk) {
						n := min(v.chunk, blocks-int(lba))
						if _, err := v.CheckRun(context.Background(), lba, n, sc, CheckOptions{}, func(p Problem) {
							if len(lbas) == 0 || lbas[len(lbas)-1] != p.LBA {
								lbas = append(lbas, p.LBA)
							}
							probs[i] += fmt.Sprintf("%d %v %x %x; ", p.LBA, p.Kind, p.Expected, p.Actual)
						}); err != nil {
							t.Fatal(err)
						}
					}
					if fmt.Sprint(lbas) != fmt.Sprint([]int64{7, blocks - 2}) {
						t.Errorf("CheckRun found blocks %v, want 7 and %d", lbas, blocks-2)
					}
				}
				if probs[0] != probs[1] {
					t.Errorf("CheckRun problems, mapped: %s\nthrough ReadAt: %s", probs[0], probs[1])
				}
				if s := vm.Stats(); s.MapFaults != 0 {
					t.Errorf("%d map faults", s.MapFaults)
				}
			})
		}
	}
}

// TestVolumeMappedFault shrinks the image under a volume: the mapped read
// faults, the piece is read again with ReadAt, which reports the short
// read; nothing panics.
func TestVolumeMappedFault(t *testing.T) {
	blocktest.SkipNoMmap(t)
	for _, workers := range []int{0, -1} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			v, p, model := fileVol(t, "4096+8", 64, Options{VerifyWorkers: workers})
			if err := os.Truncate(p, 32*4096); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64*4096)
			n, err := v.ReadAt(buf, 0)
			var ioe *device.IOError
			if err == nil || !errors.As(err, &ioe) {
				t.Fatalf("ReadAt over a shrunk image: %d, %v, want an I/O error", n, err)
			}
			if s := v.Stats(); s.MapFaults == 0 {
				t.Errorf("stats %+v: no map fault counted", s)
			}
			if n, err := v.ReadAt(buf[:32*4096], 0); err != nil || n != 32*4096 || !bytes.Equal(buf[:n], model[:n]) {
				t.Errorf("ReadAt of the part still there: %d, %v", n, err)
			}
		})
	}
}

// A verified read through the mapping allocates no more than one through
// ReadAt (the store's reads allocate a little).
func TestVolumeMappedAllocs(t *testing.T) {
	blocktest.SkipNoMmap(t)
	if blocktest.RaceEnabled {
		t.Skip("allocation counts under the race detector are not meaningful")
	}
	for _, format := range []string{"512+8", "4096+16:crc64"} {
		t.Run("format="+format, func(t *testing.T) {
			var allocs [2]float64
			for i, noMap := range []bool{false, true} {
				v, _, _ := fileVol(t, format, 512, Options{NoMap: noMap})
				buf := make([]byte, 256*v.BlockSize())
				sc := make([]byte, v.ScratchSize(256))
				ctx := context.Background()
				allocs[i] = testing.AllocsPerRun(20, func() {
					if _, err := v.ReadAt(buf, int64(v.BlockSize())); err != nil {
						t.Fatal(err)
					}
					if _, err := v.CheckRun(ctx, 3, 256, sc, CheckOptions{}, nil); err != nil {
						t.Fatal(err)
					}
				})
				if s := v.Stats(); s.MapFaults != 0 || v.noMap.Load() {
					t.Errorf("the reads did not use the mapping: %+v", s)
				}
			}
			if allocs[0] > allocs[1] {
				t.Errorf("%v allocations per mapped read and check, %v through ReadAt", allocs[0], allocs[1])
			}
		})
	}
}

// refusedMap is a File whose mapping is refused, as a File reports it when
// the system refuses to map it (a 32-bit address space, a descriptor not
// open for reading; see device.TestMapRefused).
type refusedMap struct{ *device.File }

func (refusedMap) ReadMapped(int64, int, func([]byte) error) error {
	return fmt.Errorf("no mapping: %w", errors.ErrUnsupported)
}

// TestMapRefused checks a volume whose device refuses every mapping: reads
// and scrubs fall back to ReadAt and give the same results.
func TestMapRefused(t *testing.T) {
	blocktest.SkipNoMmap(t)
	model := blocktest.Pattern(600*512, 603)
	dev, err := device.OpenFile(blocktest.WriteImage(t, t.TempDir(), model), device.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	kv := store.NewMem()
	defer kv.Close()
	v, err := Create(context.Background(), refusedMap{dev}, kv, CreateOptions{Format: dif.MustFormat("512+8")})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	got := make([]byte, len(model))
	if n, err := v.ReadAt(got, 0); err != nil || n != len(got) || !bytes.Equal(got, model) {
		t.Fatalf("ReadAt with the mapping refused: %d, %v, equal %v", n, err, bytes.Equal(got, model))
	}
	if !v.noMap.Load() {
		t.Error("the volume did not note that the device cannot be mapped")
	}
	sc := make([]byte, v.ScratchSize(600))
	if st, err := v.CheckRun(context.Background(), 0, 600, sc, CheckOptions{}, nil); err != nil || st.OK != 600 {
		t.Errorf("CheckRun with the mapping refused: %+v, %v", st, err)
	}
}

// TestVolumeSectorSumOnly changes a block so that its T10-DIF guard still
// matches (the XOR of a multiple of the guard polynomial, which CRC-16
// cannot see) but its CRC-32C does not: only the sector checksum catches
// it, through the mapping, through ReadAt and in a CheckRun.
func TestVolumeSectorSumOnly(t *testing.T) {
	blocktest.SkipNoMmap(t)
	for _, format := range []string{"512+8", "4096+8"} {
		t.Run("format="+format, func(t *testing.T) {
			const blocks, bad = 64, 37
			vm, pm, model := fileVol(t, format, blocks, Options{})
			vr, pr, _ := fileVol(t, format, blocks, Options{NoMap: true})
			if !vm.sums {
				t.Fatal("the volume has no sector checksums")
			}
			bs := vm.BlockSize()
			// x^16 + 0x8BB7, the T10-DIF polynomial, as bytes 01 8b b7.
			blk := bytes.Clone(model[bad*bs : (bad+1)*bs])
			for i, x := range []byte{0x01, 0x8b, 0xb7} {
				blk[100+i] ^= x
			}
			f := dif.MustFormat(format)
			if crct10dif.Checksum(blk) != crct10dif.Checksum(model[bad*bs:(bad+1)*bs]) || f.Guard() != dif.Guard16 {
				t.Fatal("the change is not invisible to the guard")
			}
			for _, p := range []string{pm, pr} {
				fh, err := os.OpenFile(p, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := fh.WriteAt(blk, int64(bad*bs)); err != nil {
					t.Fatal(err)
				}
				fh.Close()
			}
			got := make([]byte, len(model))
			for _, v := range []*Volume{vm, vr} {
				n, err := v.ReadAt(got, 0)
				if !errors.Is(err, ErrSectorSum) || errors.Is(err, dif.ErrGuard) {
					t.Fatalf("ReadAt: %v, want a sector checksum mismatch alone", err)
				}
				var ie *IntegrityError
				if !errors.As(err, &ie) || ie.LBA != bad || n != bad*bs {
					t.Fatalf("ReadAt: %d bytes, %v; want %d bytes, block %d", n, err, bad*bs, bad)
				}
				var probs []Problem
				sc := make([]byte, v.ScratchSize(blocks))
				st, err := v.CheckRun(context.Background(), 0, blocks, sc, CheckOptions{}, func(p Problem) { probs = append(probs, p) })
				if err != nil {
					t.Fatal(err)
				}
				if st.Failed != 1 || len(probs) != 1 || probs[0].LBA != bad || probs[0].Kind != KindSectorSum {
					t.Errorf("CheckRun: %+v, problems %+v", st, probs)
				}
			}
		})
	}
}

// A small verified read from the tuple cache allocates nothing (the
// volume's per-operation bookkeeping included).
func TestVolumeReadAllocs(t *testing.T) {
	if blocktest.RaceEnabled {
		t.Skip("allocation counts under the race detector are not meaningful")
	}
	for _, format := range []string{"512+8", "4096+16:crc64"} {
		t.Run("format="+format, func(t *testing.T) {
			v, _, _ := fileVol(t, format, 64, Options{})
			buf := make([]byte, 8*v.BlockSize())
			if _, err := v.ReadAt(buf, 0); err != nil {
				t.Fatal(err)
			}
			if a := testing.AllocsPerRun(50, func() {
				if _, err := v.ReadAt(buf, int64(v.BlockSize())); err != nil {
					t.Fatal(err)
				}
			}); a != 0 {
				t.Errorf("%v allocations per read", a)
			}
		})
	}
}
