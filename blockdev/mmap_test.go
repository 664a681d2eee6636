package blockdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/kernels/crct10dif"
	"github.com/difctl/difctl/store"
)

func skipNoMmap(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("File maps images on Linux only")
	}
}

func TestFileReadMapped(t *testing.T) {
	skipNoMmap(t)
	data := pattern(1<<20, 7)
	p := writeImage(t, t.TempDir(), data)
	d, err := OpenFile(p, FileOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ off, n int }{{0, 1 << 20}, {4096, 512}, {1, 3}, {1<<20 - 1, 1}, {100, 0}} {
		var got []byte
		if err := d.ReadMapped(int64(c.off), c.n, func(m []byte) error {
			got = append(got, m...)
			return nil
		}); err != nil {
			t.Fatalf("ReadMapped(%d, %d): %v", c.off, c.n, err)
		}
		if !bytes.Equal(got, data[c.off:c.off+c.n]) {
			t.Fatalf("ReadMapped(%d, %d) differs from the file", c.off, c.n)
		}
	}
	errFn := errors.New("from fn")
	if err := d.ReadMapped(0, 10, func([]byte) error { return errFn }); err != errFn {
		t.Errorf("fn's error came back as %v", err)
	}
	if err := d.ReadMapped(1<<20-4, 8, func([]byte) error { return nil }); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("ReadMapped past the end: %v, want ErrOutOfRange", err)
	}
	// A panic that is not a fault on the mapping goes on.
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the callback's panic", r)
			}
		}()
		d.ReadMapped(0, 1, func([]byte) error { panic("boom") })
	}()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.ReadMapped(0, 1, func([]byte) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("ReadMapped after Close: %v, want ErrClosed", err)
	}
}

func TestFileReadMappedDirect(t *testing.T) {
	skipNoMmap(t)
	p := writeImage(t, t.TempDir(), pattern(1<<16, 1))
	d, err := OpenFile(p, FileOptions{Direct: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if !d.DirectIO() {
		t.Skipf("the filesystem refuses O_DIRECT: %v", d.DirectIOError())
	}
	if err := d.ReadMapped(0, 512, func([]byte) error { return nil }); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("ReadMapped of a direct-I/O file: %v, want ErrUnsupported", err)
	}
}

// TestFileReadMappedFault shrinks the file under the mapping: touching the
// pages past the new end raises SIGBUS, which must come back as an error.
func TestFileReadMappedFault(t *testing.T) {
	skipNoMmap(t)
	p := writeImage(t, t.TempDir(), pattern(1<<20, 2))
	d, err := OpenFile(p, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.ReadMapped(0, 1<<20, func([]byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 1<<19); err != nil {
		t.Fatal(err)
	}
	var sink byte
	err = d.ReadMapped(1<<19, 1<<19, func(m []byte) error {
		for _, b := range m {
			sink ^= b
		}
		return nil
	})
	var ioe *IOError
	if !errors.Is(err, ErrMapFault) || !errors.As(err, &ioe) || ioe.Off != 1<<19 {
		t.Fatalf("ReadMapped past the shrunk end: %v (sink %d), want an *IOError wrapping ErrMapFault", err, sink)
	}
	// The part still in the file reads fine.
	if err := d.ReadMapped(0, 1<<19, func(m []byte) error { sink ^= m[len(m)-1]; return nil }); err != nil {
		t.Errorf("ReadMapped of the remaining part: %v", err)
	}
}

// fileVol protects an image file of the given blocks with a random pattern.
func fileVol(t *testing.T, format string, blocks int, opts Options) (*Volume, string, []byte) {
	t.Helper()
	f := dif.MustFormat(format)
	model := pattern(blocks*f.BlockSize(), uint64(blocks)+3)
	p := writeImage(t, t.TempDir(), model)
	dev, err := OpenFile(p, FileOptions{BlockSize: f.BlockSize()})
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
	skipNoMmap(t)
	for _, format := range volFormats {
		t.Run("format="+format, func(t *testing.T) {
			const blocks = 600 // more than one 1 MiB chunk at 512 bytes
			vm, pm, model := fileVol(t, format, blocks, Options{})
			vr, pr, _ := fileVol(t, format, blocks, Options{NoMap: true})
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
			w := pattern(3*bs, 9)
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

// TestVolumeMappedFault shrinks the image under a volume: the mapped read
// faults, the piece is read again with ReadAt, which reports the short
// read; nothing panics.
func TestVolumeMappedFault(t *testing.T) {
	skipNoMmap(t)
	v, p, _ := fileVol(t, "4096+8", 64, Options{})
	if err := os.Truncate(p, 32*4096); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64*4096)
	n, err := v.ReadAt(buf, 0)
	var ioe *IOError
	if err == nil || !errors.As(err, &ioe) {
		t.Fatalf("ReadAt over a shrunk image: %d, %v, want an I/O error", n, err)
	}
	if s := v.Stats(); s.MapFaults == 0 {
		t.Errorf("stats %+v: no map fault counted", s)
	}
	if n, err := v.ReadAt(buf[:32*4096], 0); err != nil || n != 32*4096 {
		t.Errorf("ReadAt of the part still there: %d, %v", n, err)
	}
}

func TestFileUnmapOnClose(t *testing.T) {
	skipNoMmap(t)
	p := filepath.Join(t.TempDir(), "img")
	d, err := CreateImage(p, 1<<16, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.ReadMapped(0, 1<<16, func([]byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if d.mp.m != nil {
		t.Error("Close left the mapping")
	}
}

// TestPISourceMappedFault shrinks an extended image under a source: the
// mapped check faults and the run is read instead, which reports the
// missing sectors as unreadable.
func TestPISourceMappedFault(t *testing.T) {
	skipNoMmap(t)
	const blocks = 64
	x := newFixture(t, "4096+8", dif.Interleaved, blocks, nil, nil)
	path, _ := x.write(t, t.TempDir())
	src := openSource(t, x.f, x.p, path, "")
	sc := make([]byte, src.ScratchSize(blocks))
	if st, err := src.CheckRun(context.Background(), 0, blocks, sc, CheckOptions{}, nil); err != nil || st.OK != blocks {
		t.Fatalf("CheckRun of the whole image: %+v, %v", st, err)
	}
	if err := os.Truncate(path, 40*4104); err != nil {
		t.Fatal(err)
	}
	var nio int
	st, err := src.CheckRun(context.Background(), 0, blocks, sc, CheckOptions{}, func(p Problem) {
		if p.Kind == KindIO {
			nio++
		}
	})
	if err != nil || st.OK != 40 || st.Failed != blocks-40 || nio != blocks-40 {
		t.Fatalf("CheckRun of a shrunk image: %+v, %v, %d I/O problems", st, err, nio)
	}
}

// A verified read through the mapping allocates no more than one through
// ReadAt (the store's reads allocate a little).
func TestVolumeMappedAllocs(t *testing.T) {
	skipNoMmap(t)
	if raceEnabled {
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

// rssFile returns the process's resident file-backed memory
// (/proc/self/status RssFile).
func rssFile(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		var kb int64
		if _, err := fmt.Sscanf(l, "RssFile: %d kB", &kb); err == nil {
			return kb << 10
		}
	}
	t.Skip("no RssFile in /proc/self/status")
	return 0
}

// TestFileMapBudget sweeps a 160 MiB image through the mapping: what stays
// mapped (and counts in the resident set) is bounded by mapBudget.
func TestFileMapBudget(t *testing.T) {
	skipNoMmap(t)
	if testing.Short() {
		t.Skip("sweeps 160 MiB")
	}
	p := filepath.Join(t.TempDir(), "img")
	const size = 160 << 20
	d, err := CreateImage(p, size, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	before := rssFile(t)
	var sink byte
	for off := int64(0); off < size; off += 1 << 20 {
		if err := d.ReadMapped(off, 1<<20, func(m []byte) error {
			for i := 0; i < len(m); i += 4096 {
				sink ^= m[i]
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	grew := rssFile(t) - before
	if grew > mapBudget+16<<20 {
		t.Errorf("the resident set grew by %d MiB sweeping %d MiB (budget %d MiB, sink %d)", grew>>20, size>>20, mapBudget>>20, sink)
	}
	if d.mp.held > mapBudget {
		t.Errorf("%d bytes held, budget %d", d.mp.held, mapBudget)
	}
}

// TestMapRefused makes every mapping fail (as a 32-bit address space or a
// descriptor not open for reading would): reads and scrubs fall back to
// ReadAt and give the same results.
func TestMapRefused(t *testing.T) {
	skipNoMmap(t)
	defer func(f func(*os.File, int64) ([]byte, error)) { mapFile = f }(mapFile)
	mapFile = func(*os.File, int64) ([]byte, error) { return nil, os.NewSyscallError("mmap", syscall.ENOMEM) }
	v, _, model := fileVol(t, "512+8", 600, Options{})
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
	x := newFixture(t, "4096+8", dif.Interleaved, 64, nil, nil)
	path, _ := x.write(t, t.TempDir())
	src := openSource(t, x.f, x.p, path, "")
	if st, err := src.CheckRun(context.Background(), 0, 64, make([]byte, src.ScratchSize(64)), CheckOptions{}, nil); err != nil || st.OK != 64 {
		t.Errorf("PISource.CheckRun with the mapping refused: %+v, %v", st, err)
	}
}

// TestVolumeSectorSumOnly changes a block so that its T10-DIF guard still
// matches (the XOR of a multiple of the guard polynomial, which CRC-16
// cannot see) but its CRC-32C does not: only the sector checksum catches
// it, through the mapping, through ReadAt and in a CheckRun.
func TestVolumeSectorSumOnly(t *testing.T) {
	skipNoMmap(t)
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
