package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/store"
)

// Identity: how a command knows that a store describes the image it was
// given. A name is not an identity (an image is renamed or reached through
// a symbolic link, a block device comes back as loop1 or sdc after a
// reboot), so none is compared. What moves with the data is:
//
//   - the size, and the format every check reads the data with;
//   - for a block device, the stable identifiers the kernel reports: udev's
//     links in diskDir/by-id (WWN, NVMe EUI, serial, ...) and
//     diskDir/by-partuuid that resolve to its device number. protect
//     records the preferred one in the manifest's DeviceID as
//     "by-id:NAME" or "by-partuuid:UUID"; a device that reports stable
//     identifiers must report that one, and then no data is sampled (a
//     device proven by its WWN whose every block fails is damaged, exit 4,
//     not foreign);
//   - otherwise (image files, loop devices, systems without udev, and
//     stores whose DeviceID is a base name, as difctl recorded it before):
//     a sample of written blocks checked against their tuples (checkData).

// diskDir is where udev keeps the stable names of block devices; tests
// point it at a directory of their own links.
var diskDir = "/dev/disk"

// The stable identifier kinds, as DeviceID prefixes, in the order
// deviceID prefers them.
var stableKinds = []struct{ dir, prefix string }{
	{"by-id", "by-id:"},
	{"by-partuuid", "by-partuuid:"},
}

// deviceID is the identity protect records for image: the preferred stable
// identifier of a block device; otherwise (an image file, or a device that
// reports none) the data identifies the image, and its base name is
// recorded only for older difctl binaries, which compare it (so that a
// store made by this one still opens there, as before): this one treats
// it as no identifier (isStableID) and samples the data.
func deviceID(image string) string {
	if ids := stableIDs(image); len(ids) > 0 {
		return ids[0]
	}
	return filepath.Base(image)
}

// isStableID tells whether a manifest's DeviceID is a stable identifier
// (not "", nor the base name difctl recorded before).
func isStableID(id string) bool {
	for _, k := range stableKinds {
		if strings.HasPrefix(id, k.prefix) && len(id) > len(k.prefix) {
			return true
		}
	}
	return false
}

// stableIDs returns the stable identifiers of the block device image (a
// path to it, through symbolic links or not), most preferred first: the
// names in diskDir/by-id, then diskDir/by-partuuid, whose links resolve to
// its device number. Names an administrator chooses (dm-name-, md-name-)
// are not identities and are left out. An image file, or a device without
// any, has none.
func stableIDs(image string) []string {
	fi, err := os.Stat(image)
	if err != nil {
		return nil
	}
	rdev, ok := blockDevNumber(fi)
	if !ok {
		return nil
	}
	var ids []string
	for _, k := range stableKinds {
		dir := filepath.Join(diskDir, k.dir)
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		var names []string
		for _, e := range entries {
			name := e.Name()
			if strings.HasPrefix(name, "dm-name-") || strings.HasPrefix(name, "md-name-") {
				continue
			}
			ti, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				continue
			}
			if r, ok := blockDevNumber(ti); ok && r == rdev {
				names = append(names, name)
			}
		}
		slices.SortFunc(names, func(a, b string) int {
			return cmp.Or(cmp.Compare(byIDRank(a), byIDRank(b)), strings.Compare(a, b))
		})
		for _, n := range names {
			ids = append(ids, k.prefix+n)
		}
	}
	return ids
}

// byIDRank orders the names of /dev/disk/by-id: identifiers the device
// itself carries worldwide (WWN, NAA, NVMe EUI/NGUID) first, then the
// UUIDs of device-mapper, md and LVM, then the rest (bus, model and serial).
func byIDRank(name string) int {
	for i, ps := range [][]string{
		{"wwn-", "scsi-3", "nvme-eui."},
		{"dm-uuid-", "md-uuid-", "lvm-pv-uuid-"},
	} {
		for _, p := range ps {
			if strings.HasPrefix(name, p) {
				return i
			}
		}
	}
	return 2
}

// blockDevNumber returns the device number of a block device.
func blockDevNumber(fi os.FileInfo) (uint64, bool) {
	if fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Rdev), true
}

// checkIdentity refuses a store whose manifest describes another device
// than image, from what image reports without reading its data: another
// size (size < 0 skips it), or a stable identifier it does not report
// while it reports others. checkImage samples the data too.
func checkIdentity(image, url string, m store.Manifest, size int64) error {
	_, err := checkStable(image, url, m, size)
	return err
}

// checkStable is checkIdentity, also telling whether image proved its
// identity by the stable identifier recorded in the manifest.
func checkStable(image, url string, m store.Manifest, size int64) (proven bool, err error) {
	if size >= 0 && size != m.DeviceSize {
		return false, &identityError{fmt.Errorf("%s does not match its store %s: the store protects %d bytes, the image has %d (another image's store, or truncated or grown since protect?)",
			image, url, m.DeviceSize, size)}
	}
	if !isStableID(m.DeviceID) {
		return false, nil
	}
	ids := stableIDs(image)
	switch {
	case len(ids) == 0:
		return false, nil // the data decides
	case slices.Contains(ids, m.DeviceID):
		return true, nil
	}
	return false, &identityError{fmt.Errorf("%s does not match its store %s: the store protects the device %s, and %s is %s (another device's store?)",
		image, url, printable(m.DeviceID), image, printable(ids[0]))}
}

// checkImage refuses a store that does not describe image, opened as dev:
// checkIdentity, then, unless a stable identifier proved the device,
// checkData.
func checkImage(ctx context.Context, image, url string, t *store.Tuples, dev *device.File) error {
	proven, err := checkStable(image, url, t.Manifest(), dev.Size())
	if err != nil || proven {
		return err
	}
	return checkData(ctx, image, url, t, dev)
}

// checkOpenImage is checkImage for a volume about to be opened from kv:
// anything that keeps it from deciding (a manifest that does not open or
// parse, another size) is left to blockdev.Open to report in its words.
// It runs before Open, so that crash recovery never resolves one image's
// intents against another's data.
func checkOpenImage(ctx context.Context, image, url string, kv store.KV, dev *device.File) error {
	t, err := store.OpenTuples(kv, blockdev.DefaultVolumeName, nil)
	if err != nil || t.Manifest().DeviceSize != dev.Size() {
		return nil
	}
	return checkImage(ctx, image, url, t, dev)
}

// checkData refuses a store that describes other data than dev's: a
// sample of its written blocks checked against their tuples
// (blockdev.SampleData) in which every block fails. An image with some
// bad blocks is for verify and scrub to report as integrity failures
// (exit 4); a sample too small to decide passes.
func checkData(ctx context.Context, image, url string, t *store.Tuples, dev *device.File) error {
	s, err := blockdev.SampleData(ctx, t, dev, dev.Size())
	if err != nil {
		return inspectError(image, url, err)
	}
	if s.Foreign() {
		return &identityError{fmt.Errorf("%s does not match its store %s: the store describes other data: %d of %d sampled written blocks fail (another image's store, or the image overwritten since protect?)",
			image, url, s.Failed, s.Checked)}
	}
	return nil
}
