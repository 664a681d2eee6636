//go:build linux

package nvme

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/difctl/difctl/dif"
	"golang.org/x/sys/unix"
)

// sysfs is the mount point of sysfs (a variable for the tests).
var sysfs = "/sys"

// blockName returns the kernel's name of the device f is open on
// ("nvme0n1", or "ng0n1" for the generic character device), from its
// device number, so that a symlink or another node of the same device
// finds the same sysfs directory.
func blockName(f *os.File) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", fmt.Errorf("nvme: stat %s: %w", f.Name(), err)
	}
	kind := "block"
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFBLK:
	case unix.S_IFCHR:
		kind = "char"
	default:
		return "", fmt.Errorf("%w: %s is not a device", ErrNotNVMe, f.Name())
	}
	link, err := os.Readlink(filepath.Join(sysfs, "dev", kind, fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))))
	if err != nil {
		return "", fmt.Errorf("nvme: the sysfs entry of %s: %w", f.Name(), err)
	}
	return filepath.Base(link), nil
}

// ReadIntegrity reads the integrity profile of the block device name
// ("nvme0n1") from /sys/block/NAME/integrity; a device without that
// directory has Present false.
func ReadIntegrity(name string) (Integrity, error) {
	dir := filepath.Join(sysfs, "block", name, "integrity")
	var in Integrity
	b, err := os.ReadFile(filepath.Join(dir, "format"))
	if errors.Is(err, fs.ErrNotExist) {
		return in, nil
	}
	if err != nil {
		return in, fmt.Errorf("nvme: %w", err)
	}
	in.Present, in.Format = true, strings.TrimSpace(string(b))
	for _, a := range []struct {
		name string
		v    *int
	}{{"tuple_size", &in.TupleSize}, {"protection_interval_bytes", &in.IntervalBytes}} {
		b, err := os.ReadFile(filepath.Join(dir, a.name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return in, fmt.Errorf("nvme: %w", err)
		}
		if *a.v, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			return in, fmt.Errorf("nvme: %s/%s: %q is not a number", dir, a.name, b)
		}
	}
	return in, nil
}

// defaultMaxBytes bounds a command's transfer where sysfs gives no limit.
const defaultMaxBytes = 128 << 10

// maxBlocks returns the blocks of one command on the device name: within
// the kernel's limit of the queue (max_hw_sectors_kb, which the NVMe driver
// derives from the controller's MDTS) and its segment count (a user buffer
// maps one segment per page: max_segments less one for an unaligned
// start), at least one block and at most 65536 (the 16-bit NLB field).
func maxBlocks(name string, f dif.Format) int {
	limit := defaultMaxBytes
	q := filepath.Join(sysfs, "block", name, "queue")
	if kb, err := readInt(filepath.Join(q, "max_hw_sectors_kb")); err == nil && kb > 0 {
		limit = kb << 10
		if segs, err := readInt(filepath.Join(q, "max_segments")); err == nil && segs > 1 {
			limit = min(limit, (segs-1)*os.Getpagesize())
		}
	}
	per := f.BlockSize()
	if f.Layout() == dif.Interleaved {
		per += f.MetadataSize()
	}
	return max(1, min(limit/per, 1<<16))
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
