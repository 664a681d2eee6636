//go:build linux

package device

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"golang.org/x/sys/unix"
)

// pageSize is the size of the pages mincore reports on.
var pageSize = os.Getpagesize()

// loopDevice attaches a new image of size bytes to a loop device with the
// given logical sector size and returns the device path, or skips the test
// when loop devices cannot be set up here (no root, no /dev/loop-control,
// no losetup).
func loopDevice(t *testing.T, size int64, sector int) (dev, img string) {
	t.Helper()
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("no loop devices: %v", err)
	}
	losetup, err := exec.LookPath("losetup")
	if err != nil {
		t.Skip("losetup not installed")
	}
	img = filepath.Join(t.TempDir(), "loop.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	var out []byte
	for range 5 { // another process may take the free device first
		out, err = exec.Command(losetup, "--find", "--show", "--sector-size", strconv.Itoa(sector), img).CombinedOutput()
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Skipf("cannot set up a loop device (needs root): %v: %s", err, bytes.TrimSpace(out))
	}
	dev = strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command(losetup, "--detach", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup --detach %s: %v: %s", dev, err, out)
		}
	})
	return dev, img
}

// sysfsInt reads /sys/block/NAME/FILE as an integer.
func sysfsInt(t *testing.T, dev, file string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), file))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestBlockDevice(t *testing.T) {
	size := testSize()
	for _, sector := range []int{512, 4096} {
		for _, direct := range []bool{false, true} {
			t.Run(fmt.Sprintf("sector=%d/direct=%v", sector, direct), func(t *testing.T) {
				dev, img := loopDevice(t, size, sector)
				d, err := OpenFile(dev, FileOptions{Direct: direct})
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				if !d.IsBlockDevice() || d.Size() != size || d.LogicalBlockSize() != sector {
					t.Fatalf("block %v size %d lbs %d; want true %d %d", d.IsBlockDevice(), d.Size(), d.LogicalBlockSize(), size, sector)
				}
				// The ioctls agree with sysfs.
				if got, want := d.Size(), sysfsInt(t, dev, "size")*512; got != want {
					t.Errorf("size %d, sysfs says %d", got, want)
				}
				if got, want := d.PhysicalBlockSize(), sysfsInt(t, dev, "queue/physical_block_size"); int64(got) != want {
					t.Errorf("physical block size %d, sysfs says %d", got, want)
				}
				if direct && !d.DirectIO() {
					t.Fatalf("direct I/O refused on a block device: %v", d.DirectIOError())
				}
				want := blocktest.Pattern(int(size), uint64(sector))
				if _, err := d.WriteAt(want, 0); err != nil {
					t.Fatal(err)
				}
				if err := d.Sync(); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, sector*3+5)
				if _, err := d.ReadAt(got, int64(sector)-3); err != nil || !bytes.Equal(got, want[sector-3:sector*4+2]) {
					t.Fatalf("unaligned read: %v", err)
				}
				if _, err := d.ReadAt(got[:sector], size); !errors.Is(err, ErrOutOfRange) {
					t.Fatalf("read past the end: %v", err)
				}
				if direct {
					if _, err := d.WriteAt(got[:100], 0); !errors.Is(err, ErrUnaligned) {
						t.Fatalf("unaligned direct write: %v", err)
					}
				}
				// A block device is data throughout.
				if e, err := d.NextData(4096); err != nil || e != (Extent{Off: 4096, Len: size - 4096}) {
					t.Fatalf("NextData: %v, %v", e, err)
				}
				// The backing image holds the data (loop devices write through
				// to it once synced).
				raw, err := os.ReadFile(img)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(raw, want) {
					t.Fatal("backing image differs from what was written")
				}
				// Discard: fallocate(PUNCH_HOLE) on a loop device (a
				// write-zeroes request) punches a hole in the image; the
				// range reads as zeros, as a Discarder promises.
				if err := d.Discard(int64(sector), int64(sector)*4); err != nil {
					if errors.Is(err, errors.ErrUnsupported) {
						t.Logf("discard unsupported: %v", err)
						return
					}
					t.Fatal(err)
				}
				zeros := make([]byte, 4*sector)
				if _, err := d.ReadAt(zeros, int64(sector)); err != nil || !bytes.Equal(zeros, make([]byte, len(zeros))) {
					t.Fatalf("discarded range does not read as zeros (%v)", err)
				}
				if err := d.Discard(1, 512); !errors.Is(err, ErrUnaligned) {
					t.Fatalf("misaligned discard: %v", err)
				}
			})
		}
	}
}

func TestBlockDeviceOptions(t *testing.T) {
	dev, _ := loopDevice(t, 1<<20, 4096)
	if d, err := OpenFile(dev, FileOptions{BlockSize: 512}); err == nil {
		d.Close()
		t.Fatal("opened a 4096-byte-sector device with BlockSize 512")
	}
	d, err := OpenFile(dev, FileOptions{BlockSize: 4096, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.WriteAt(make([]byte, 4096), 0); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("write on read-only block device: %v", err)
	}
	d.Close()
	// An exclusive open excludes another.
	d, err = OpenFile(dev, FileOptions{Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d2, err := OpenFile(dev, FileOptions{Exclusive: true}); err == nil {
		d2.Close()
		t.Fatal("second exclusive open succeeded")
	} else if !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("second exclusive open: %v, want EBUSY", err)
	}
}

// TestExistingBlockDevices checks the ioctl path read-only against sysfs on
// whatever block devices the machine has, without reading or writing data.
func TestExistingBlockDevices(t *testing.T) {
	entries, err := os.ReadDir("/sys/block")
	if err != nil {
		t.Skipf("no /sys/block: %v", err)
	}
	tested := 0
	for _, e := range entries {
		dev := "/dev/" + e.Name()
		st, err := os.Stat(dev)
		if err != nil || st.Mode()&os.ModeDevice == 0 || st.Mode()&os.ModeCharDevice != 0 {
			continue
		}
		if sysfsInt(t, dev, "size") == 0 {
			continue // unattached loop or unconfigured zram
		}
		t.Run("dev="+e.Name(), func(t *testing.T) {
			d, err := OpenFile(dev, FileOptions{ReadOnly: true})
			if err != nil {
				t.Skipf("cannot open: %v", err)
			}
			defer d.Close()
			if got, want := d.Size(), sysfsInt(t, dev, "size")*512; got != want {
				t.Errorf("size %d, sysfs says %d", got, want)
			}
			if got, want := d.LogicalBlockSize(), sysfsInt(t, dev, "queue/logical_block_size"); int64(got) != want {
				t.Errorf("logical block size %d, sysfs says %d", got, want)
			}
			if got, want := d.PhysicalBlockSize(), sysfsInt(t, dev, "queue/physical_block_size"); int64(got) != want {
				t.Errorf("physical block size %d, sysfs says %d", got, want)
			}
		})
		tested++
	}
	if tested == 0 {
		t.Skip("no block device with a size")
	}
}

// TestDirectTmpfs opens an image on /dev/shm with O_DIRECT. Kernels before
// 6.6 refuse O_DIRECT on tmpfs and the open must fall back; later ones
// accept it and the direct path must work there.
func TestDirectTmpfs(t *testing.T) {
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err != nil || st.Type != 0x01021994 {
		t.Skip("/dev/shm is not a tmpfs")
	}
	dir, err := os.MkdirTemp("/dev/shm", "blockdev-test-")
	if err != nil {
		t.Skip(err)
	}
	defer os.RemoveAll(dir)
	want := blocktest.Pattern(16384, 6)
	p := blocktest.WriteImage(t, dir, want)
	d, err := OpenFile(p, FileOptions{Direct: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	t.Logf("tmpfs direct I/O: %v (%v)", d.DirectIO(), d.DirectIOError())
	if !d.DirectIO() && !errors.Is(d.DirectIOError(), syscall.EINVAL) {
		t.Fatalf("fallback without EINVAL: %v", d.DirectIOError())
	}
	got := make([]byte, 1000)
	if _, err := d.ReadAt(got, 3); err != nil || !bytes.Equal(got, want[3:1003]) {
		t.Fatalf("read: %v", err)
	}
}

// TestDropCacheMapped checks that DropCache still drops pages that
// ReadMapped left mapped (the kernel keeps mapped pages in the cache), so
// re-reads around the cache reach the medium: on a File, and on a Reader
// of a file (the images of package pisource, whose re-reads drop the
// failing sector from the cache first).
func TestDropCacheMapped(t *testing.T) {
	blocktest.SkipNoMmap(t)
	p := blocktest.WriteImage(t, t.TempDir(), blocktest.Pattern(1<<20, 5))
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil { // dirty pages cannot be dropped
		t.Fatal(err)
	}
	f.Close()
	type mappedDropper interface {
		Mapper
		CacheDropper
		io.Closer
	}
	for _, tc := range []struct {
		name string
		open func() (mappedDropper, *fileMap, error)
	}{
		{"file", func() (mappedDropper, *fileMap, error) {
			d, err := OpenFile(p, FileOptions{})
			if err != nil {
				return nil, nil, err
			}
			return d, &d.mp, nil
		}},
		{"reader", func() (mappedDropper, *fileMap, error) {
			r, err := OpenReader(p)
			if err != nil {
				return nil, nil, err
			}
			return r, &r.mp, nil
		}},
	} {
		t.Run("dev="+tc.name, func(t *testing.T) {
			d, mp, err := tc.open()
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			var sink byte
			if err := d.ReadMapped(0, 1<<20, func(m []byte) error {
				for i := 0; i < len(m); i += 4096 {
					sink ^= m[i]
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := d.DropCache(0, 0); err != nil {
				t.Skipf("DropCache: %v", err)
			}
			vec := make([]byte, (1<<20)/pageSize)
			if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mp.m[0])), uintptr(len(mp.m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
				t.Skipf("mincore: %v", e)
			}
			resident := 0
			for _, v := range vec {
				resident += int(v & 1)
			}
			if resident > len(vec)/8 {
				t.Errorf("%d of %d pages still cached after DropCache (sink %d)", resident, len(vec), sink)
			}
		})
	}
}

// TestStartWriteback starts the writeback of a range written to a file's
// page cache: it succeeds (and promises nothing a Sync does not), and a
// closed file says so.
func TestStartWriteback(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile(p, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{7}, 64<<10), 128<<10); err != nil {
		t.Fatal(err)
	}
	var wb WritebackStarter = f
	if err := wb.StartWriteback(128<<10, 64<<10); err != nil {
		t.Fatalf("StartWriteback: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := wb.StartWriteback(0, 4096); !errors.Is(err, ErrClosed) {
		t.Fatalf("StartWriteback of a closed file: %v, want ErrClosed", err)
	}
}
