//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// loopDev is a loop device a test attached.
type loopDev struct {
	path, file string
	attached   bool
}

// attachLoop attaches file to the first free loop device, and detaches it
// when the test ends unless the test did. It skips the test where loop
// devices cannot be attached.
func attachLoop(t *testing.T, file string) *loopDev {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a loop device")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("no losetup")
	}
	out, err := exec.Command("losetup", "-f", "--show", file).CombinedOutput()
	if err != nil {
		t.Skipf("losetup -f --show %s: %v: %s", file, err, out)
	}
	l := &loopDev{path: strings.TrimSpace(string(out)), file: file, attached: true}
	t.Cleanup(func() { l.detach(t) })
	return l
}

// detach detaches the loop device, once, and only while it still holds
// the test's file.
func (l *loopDev) detach(t *testing.T) {
	t.Helper()
	if !l.attached {
		return
	}
	l.attached = false
	out, err := exec.Command("losetup", "-n", "-O", "BACK-FILE", l.path).Output()
	if err != nil || strings.TrimSpace(string(out)) != l.file {
		t.Errorf("%s no longer holds %s (%q, %v): not detached", l.path, l.file, out, err)
		return
	}
	if out, err := exec.Command("losetup", "-d", l.path).CombinedOutput(); err != nil {
		t.Errorf("losetup -d %s: %v: %s", l.path, err, out)
	}
}

// loopImage writes a random image of size bytes (from seed) to a new
// temporary directory and attaches it as a loop device, with a fake udev
// directory that gives it no stable identifier yet; it returns the udev
// directory, the temporary directory, the device and the URL of a store
// in that directory.
func loopImage(t *testing.T, size int, seed uint64) (disk, dir string, l *loopDev, url string) {
	t.Helper()
	disk = fakeDiskDir(t)
	dir = t.TempDir()
	img := filepath.Join(dir, "disk.img")
	randomImage(t, img, size, seed)
	return disk, dir, attachLoop(t, img), "pebble:" + filepath.Join(dir, "st")
}

// reattach detaches l and attaches its file again under another name, as
// a reboot may: a filler takes the freed device first.
func reattach(t *testing.T, l *loopDev) *loopDev {
	t.Helper()
	l.detach(t)
	filler := filepath.Join(t.TempDir(), "filler.img")
	if err := os.WriteFile(filler, make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	attachLoop(t, filler)
	m := attachLoop(t, l.file)
	if m.path == l.path {
		t.Fatalf("%s attached again as %s: want another device", l.file, m.path)
	}
	return m
}

// fakeDiskDir points diskDir at an empty directory of the test with by-id
// and by-partuuid in it, and returns it.
func fakeDiskDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"by-id", "by-partuuid"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := diskDir
	diskDir = dir
	t.Cleanup(func() { diskDir = old })
	return dir
}

// setLinks makes the links of sub (by-id, by-partuuid) exactly names,
// each pointing to target, as udev keeps them.
func setLinks(t *testing.T, disk, sub, target string, names ...string) {
	t.Helper()
	dir := filepath.Join(disk, sub)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := os.Symlink(target, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
}

// The stable identifiers of a device are the links that resolve to its
// device number, preferred first; names an administrator chooses, links to
// other devices and dangling links are not among them.
func TestStableIDs(t *testing.T) {
	disk := fakeDiskDir(t)
	img := filepath.Join(t.TempDir(), "disk.img")
	randomImage(t, img, 1<<20, 10)
	other := filepath.Join(t.TempDir(), "other.img")
	randomImage(t, other, 1<<20, 11)
	l := attachLoop(t, img)
	o := attachLoop(t, other)
	setLinks(t, disk, "by-id", l.path, "ata-ST4000_Z1234", "wwn-0x5000c500a1b2c3d4", "dm-name-data", "usb-Disk_42", "nvme-eui.0025388b71b0a2c1")
	setLinks(t, disk, "by-partuuid", l.path, "4f3c2a10-01")
	for _, n := range []string{"wwn-0x5000c500ffffffff", "scsi-3500"} {
		if err := os.Symlink(o.path, filepath.Join(disk, "by-id", n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/nonexistent", filepath.Join(disk, "by-id", "wwn-0xdangling")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", filepath.Join(disk, "by-id", "wwn-0xchar")); err != nil {
		t.Fatal(err)
	}
	want := []string{"by-id:nvme-eui.0025388b71b0a2c1", "by-id:wwn-0x5000c500a1b2c3d4", "by-id:ata-ST4000_Z1234", "by-id:usb-Disk_42", "by-partuuid:4f3c2a10-01"}
	if got := stableIDs(l.path); !slices.Equal(got, want) {
		t.Errorf("stableIDs(%s) = %q, want %q", l.path, got, want)
	}
	// Through a link to it, the same.
	if got := stableIDs(filepath.Join(disk, "by-id", "ata-ST4000_Z1234")); !slices.Equal(got, want) {
		t.Errorf("stableIDs through a link = %q, want %q", got, want)
	}
	if got := deviceID(o.path); got != "by-id:scsi-3500" {
		t.Errorf("deviceID(%s) = %q, want by-id:scsi-3500", o.path, got)
	}
	if got := stableIDs(img); got != nil {
		t.Errorf("stableIDs of an image file = %q, want none", got)
	}
}

// A loop device protected as loopN and attached again as loopM is the
// same volume: it reports no stable identifier, so its data identifies it.
// The name was the identity before: this failed with exit 8.
func TestIdentityLoopReattached(t *testing.T) {
	_, dir, l, url := loopImage(t, 4<<20, 12) // no stable ids, as here without udev
	mustDifctl(t, exitOK, "protect", "--quiet", "--store", url, l.path)
	if id := manifestDeviceID(t, url, l.path); isStableID(id) {
		t.Errorf("device id %q recorded for a loop device without stable ids, want its base name", id)
	}
	m := reattach(t, l)
	out := mustDifctl(t, exitOK, "verify", "--store", url, m.path)
	if !strings.Contains(out, "8192 ok, 0 failed") {
		t.Errorf("verify %s: %s", m.path, out)
	}
	mustDifctl(t, exitOK, "scrub", "--quiet", "--store", url, m.path)
	mustDifctl(t, exitOK, "protect", "--store", url, m.path) // protected already

	// Another device of the same size: its data tells it apart.
	other := filepath.Join(dir, "other.img")
	randomImage(t, other, 4<<20, 13)
	o := attachLoop(t, other)
	code, out := difctl(t, "verify", "--store", url, o.path)
	if code != exitOperational || !strings.Contains(out, "the store describes other data: 64 of 64 sampled written blocks fail") {
		t.Errorf("verify of another device: exit %d, want %d:\n%s", code, exitOperational, out)
	}
}

// A device with stable identifiers is known by them: protect records the
// preferred one; the device verifies under another name and through its
// by-id link; a device reporting other identifiers is refused, naming both;
// one reporting none falls back to its data. A device proven by its
// identifier whose every block fails is damaged (exit 4), not foreign.
func TestIdentityLoopByID(t *testing.T) {
	size := 4 << 20
	disk, dir, l, url := loopImage(t, size, 14)
	const wwn, serial = "wwn-0x5000c500a1b2c3d4", "ata-ST4000_Z1234"
	setLinks(t, disk, "by-id", l.path, serial, wwn, "dm-name-data")
	mustDifctl(t, exitOK, "protect", "--quiet", "--store", url, l.path)
	if id := manifestDeviceID(t, url, l.path); id != "by-id:"+wwn {
		t.Fatalf("device id %q, want by-id:%s", id, wwn)
	}

	// After a reboot: another name, the links moved along.
	m := reattach(t, l)
	setLinks(t, disk, "by-id", m.path, serial, wwn)
	mustDifctl(t, exitOK, "verify", "--store", url, m.path)
	mustDifctl(t, exitOK, "verify", "--store", url, filepath.Join(disk, "by-id", wwn))

	// Another device's store: the device is another WWN.
	setLinks(t, disk, "by-id", m.path, "wwn-0x5000c500deadbeef")
	code, out := difctl(t, "verify", "--store", url, m.path)
	want := "the store protects the device by-id:" + wwn + ", and " + m.path + " is by-id:wwn-0x5000c500deadbeef (another device's store?)"
	if code != exitOperational || !strings.Contains(out, want) {
		t.Errorf("verify under another WWN: exit %d, want %d and %q:\n%s", code, exitOperational, want, out)
	}
	for _, cmd := range []string{"scrub", "inspect", "protect"} {
		if code, out := difctl(t, cmd, "--store", url, m.path); code != exitOperational || !strings.Contains(out, want) {
			t.Errorf("%s under another WWN: exit %d, want %d and %q:\n%s", cmd, code, exitOperational, want, out)
		}
	}
	// No stable identifiers at all (udev gone): the data decides.
	setLinks(t, disk, "by-id", m.path)
	mustDifctl(t, exitOK, "verify", "--store", url, m.path)

	// Every block overwritten: damage on the device its WWN proves...
	setLinks(t, disk, "by-id", m.path, wwn)
	f, err := os.OpenFile(m.path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.img")
	randomImage(t, junk, size, 15)
	b, err := os.ReadFile(junk)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	code, out = difctl(t, "verify", "--store", url, m.path)
	if code != exitUncorrected || !strings.Contains(out, "0 ok, 8192 failed") {
		t.Errorf("verify of the overwritten device under its WWN: exit %d, want %d:\n%s", code, exitUncorrected, out)
	}
	// ...and, without the WWN, other data.
	setLinks(t, disk, "by-id", m.path)
	code, out = difctl(t, "verify", "--store", url, m.path)
	if code != exitOperational || !strings.Contains(out, "the store describes other data") {
		t.Errorf("verify of the overwritten device without ids: exit %d, want %d:\n%s", code, exitOperational, out)
	}
}

// An identifier is printed escaped: a link name (and so a recorded device
// id) may hold control characters.
func TestIdentityLoopByIDEscaped(t *testing.T) {
	disk, _, l, url := loopImage(t, 1<<20, 16)
	setLinks(t, disk, "by-partuuid", l.path, "uuid\x1b[2J\x07")
	mustDifctl(t, exitOK, "protect", "--quiet", "--store", url, l.path)
	setLinks(t, disk, "by-partuuid", l.path, "other")
	code, out := difctl(t, "verify", "--store", url, l.path)
	if want := `the store protects the device "by-partuuid:uuid\x1b[2J\a", and ` + l.path + " is by-partuuid:other"; code != exitOperational || !strings.Contains(out, want) {
		t.Errorf("exit %d, want %d and %q:\n%s", code, exitOperational, want, out)
	}
	if strings.ContainsAny(out, "\x1b\x07") {
		t.Errorf("raw control characters printed: %q", out)
	}
}
