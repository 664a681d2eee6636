package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// identitySize is the size of the test images: more tuple pages of 1,024
// blocks than checkData reads, unless -short.
func identitySize() int {
	if testing.Short() {
		return 3 << 20 // 6 pages
	}
	return 24 << 20 // 48 pages
}

// manifestDeviceID returns the device id inspect reports for image.
func manifestDeviceID(t *testing.T, url, image string) string {
	t.Helper()
	out := mustDifctl(t, exitOK, "--json", "inspect", "--store", url, image)
	var rec struct {
		DeviceID string `json:"device_id"`
	}
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatalf("inspect --json: %v: %s", err, out)
	}
	return rec.DeviceID
}

// A renamed image, or one reached through a symbolic link, is the image
// its store protects: with the store named, or with its own store moved
// along. The name was the identity before: these failed with exit 8.
func TestIdentityRenamedImage(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.img")
	randomImage(t, a, identitySize(), 1)
	mustDifctl(t, exitOK, "protect", "--quiet", a)
	url := "pebble:" + a + storeSuffix
	if id := manifestDeviceID(t, url, a); isStableID(id) || id != "a.img" {
		t.Errorf("protect of an image file recorded device id %q, want its base name (for older binaries), no stable id", id)
	}

	renamed := filepath.Join(dir, "renamed.img")
	if err := os.Rename(a, renamed); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"verify", "--store", url, renamed},
		{"scrub", "--quiet", "--store", url, renamed},
		{"inspect", "--store", url, renamed},
		{"inspect", "--store", url, "--lba", "5", renamed},
		{"protect", "--store", url, renamed}, // protected already
	} {
		mustDifctl(t, exitOK, cmd...)
	}
	link := filepath.Join(dir, "link.img")
	if err := os.Symlink(renamed, link); err != nil {
		t.Fatal(err)
	}
	mustDifctl(t, exitOK, "verify", "--store", url, link)
	// The store moved along, under the new name: the default store.
	if err := os.Rename(a+storeSuffix, renamed+storeSuffix); err != nil {
		t.Fatal(err)
	}
	mustDifctl(t, exitOK, "verify", renamed)
	mustDifctl(t, exitOK, "write", "--store", "pebble:"+renamed+storeSuffix, "--offset", "4096", renamed)
}

// A store that difctl recorded with the image's base name as its device
// id (as protect did before) opens under any name: the name is not
// compared, the data decides.
func TestIdentityLegacyBaseName(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.img")
	randomImage(t, a, identitySize(), 2)
	url := "pebble:" + a + storeSuffix
	dev, err := device.OpenFile(a, device.FileOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := store.OpenWith(url, store.OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	vol, err := blockdev.Create(context.Background(), dev, kv, blockdev.CreateOptions{
		Options: blockdev.Options{DeviceID: "a.img"}, Format: dif.MustFormat("512+8"), Tool: toolName,
	})
	if err != nil {
		t.Fatal(err)
	}
	vol.Close()
	kv.Close()
	dev.Close()

	b := filepath.Join(dir, "b.img")
	if err := os.Rename(a, b); err != nil {
		t.Fatal(err)
	}
	out := mustDifctl(t, exitOK, "verify", "--store", url, b)
	if !strings.Contains(out, "ok, 0 failed") {
		t.Errorf("verify: %s", out)
	}
	// protect resumes or finds it protected with the id it recorded.
	mustDifctl(t, exitOK, "protect", "--store", url, b)
	if id := manifestDeviceID(t, url, b); id != "a.img" {
		t.Errorf("device id %q after protect, want the recorded a.img", id)
	}
}

// copyStore copies the store directory src to dst (which must not exist).
func copyStore(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst, 0o700); err != nil {
		t.Fatal(err)
	}
}

// Another image's store (an image of the same size and format holding
// other data, its store copied over the image's own) is refused as foreign
// with exit 8 by every command, before anything reads or writes through
// it; and an image with a few damaged blocks is still reported by verify
// as integrity failures (exit 4), not as foreign.
func TestIdentityForeignStore(t *testing.T) {
	dir := t.TempDir()
	size := identitySize()
	a, b := filepath.Join(dir, "a.img"), filepath.Join(dir, "b.img")
	randomImage(t, a, size, 3)
	randomImage(t, b, size, 4)
	mustDifctl(t, exitOK, "protect", "--quiet", a)
	mustDifctl(t, exitOK, "protect", "--quiet", b)
	if err := os.RemoveAll(b + storeSuffix); err != nil {
		t.Fatal(err)
	}
	copyStore(t, a+storeSuffix, b+storeSuffix)

	const want = "does not match its store pebble:"
	const foreign = "the store describes other data: 64 of 64 sampled written blocks fail"
	for _, cmd := range [][]string{
		{"verify", b},
		{"scrub", "--quiet", b},
		{"inspect", b},
		{"write", "--offset", "0", b},
		{"discard", "--lba", "0", "--count", "8", b},
		{"inject", "--field", "guard", "--lba", "3", "--bit", "0", b},
		{"remap", "--quiet", "--new-ref-tag", "7", b},
		{"protect", b},
		{"convert", "--to", "interleaved", b, filepath.Join(dir, "b.dump")},
	} {
		code, out := difctl(t, cmd...)
		if code != exitOperational || !strings.Contains(out, want) || !strings.Contains(out, foreign) {
			t.Errorf("difctl %s: exit %d, want %d and %q:\n%s", strings.Join(cmd, " "), code, exitOperational, foreign, out)
		}
	}
	// Nothing was changed: the store still verifies its own image.
	mustDifctl(t, exitOK, "verify", "--store", "pebble:"+b+storeSuffix, a)
	if _, err := os.Stat(filepath.Join(dir, "b.dump")); err == nil {
		t.Error("convert of a foreign store left an output")
	}
}

// flipBlocks flips one bit in each of the given blocks of 512 bytes of
// image.
func flipBlocks(t *testing.T, image string, lbas ...int64) {
	t.Helper()
	f, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	for _, lba := range lbas {
		off := lba*512 + 100
		if _, err := f.ReadAt(b, off); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0x04
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
}

// Damaged images are reported as such (exit 4): a few bad blocks, and even
// most of the image, as long as one sampled block still verifies.
func TestIdentityDamagedImage(t *testing.T) {
	dir := t.TempDir()
	size := identitySize()
	blocks := int64(size / 512)
	a := filepath.Join(dir, "a.img")
	randomImage(t, a, size, 5)
	mustDifctl(t, exitOK, "protect", "--quiet", a)

	// A few blocks, among them the first and the last, which the sample
	// reads.
	flipBlocks(t, a, 0, 1, 7, blocks/2, blocks-1)
	code, out := difctl(t, "verify", a)
	if code != exitUncorrected || !strings.Contains(out, "5 failed") {
		t.Fatalf("verify of 5 damaged blocks: exit %d, want %d and 5 failed:\n%s", code, exitUncorrected, out)
	}
	mustDifctl(t, exitUncorrected, "scrub", "--quiet", a)

	// Every block but the first, which the sample always reads (the first
	// written block of the first page): one good block in the sample is
	// enough.
	randomImage(t, a, size, 5)
	var lbas []int64
	for lba := int64(1); lba < blocks; lba++ {
		lbas = append(lbas, lba)
	}
	flipBlocks(t, a, lbas...)
	code, out = difctl(t, "verify", a)
	if code != exitUncorrected || strings.Contains(out, "other data") || !strings.Contains(out, fmt.Sprintf("1 ok, %d failed", blocks-1)) {
		t.Fatalf("verify of a mostly damaged image: exit %d, want %d:\n%s", code, exitUncorrected, out)
	}
	// And with that one damaged too, the image is no longer told from
	// another's: the store describes other data.
	flipBlocks(t, a, 0)
	code, out = difctl(t, "verify", a)
	if code != exitOperational || !strings.Contains(out, "the store describes other data: 64 of 64") {
		t.Fatalf("verify of an image damaged everywhere: exit %d, want %d:\n%s", code, exitOperational, out)
	}
}

// Fewer than blockdev.SampleMin written blocks cannot decide: another sparse
// image's store is then checked block by block, and its blocks fail
// (exit 4).
func TestIdentityFewWrittenBlocks(t *testing.T) {
	dir := t.TempDir()
	size := 4 << 20
	mk := func(name string, seed uint64) string {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Truncate(int64(size)); err != nil {
			t.Fatal(err)
		}
		r := rand.NewChaCha8([32]byte{byte(seed)})
		b := make([]byte, 4096)
		for _, off := range []int64{0, 2 << 20} { // 16 written blocks, in two pages the sample reads
			r.Read(b)
			if _, err := f.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	a, b := mk("a.img", 6), mk("b.img", 7)
	mustDifctl(t, exitOK, "protect", "--quiet", a)
	mustDifctl(t, exitOK, "protect", "--quiet", b)
	// 16 written blocks: the sample decides.
	code, out := difctl(t, "verify", "--store", "pebble:"+a+storeSuffix, b)
	if code != exitOperational || !strings.Contains(out, "16 of 16 sampled written blocks fail") {
		t.Fatalf("verify of 16 foreign blocks: exit %d, want %d:\n%s", code, exitOperational, out)
	}
	// All but 7 of them discarded from a's store: no longer. Its blocks
	// are checked one by one, and fail (the discarded ones as data in
	// unwritten blocks).
	url := "pebble:" + a + storeSuffix
	mustDifctl(t, exitOK, "discard", "--lba", "0", "--count", "8", a)
	mustDifctl(t, exitOK, "discard", "--lba", "4096", "--count", "1", a)
	if n := writtenBlocks(t, url, a); n != 7 {
		t.Fatalf("%d written blocks, want 7", n)
	}
	code, out = difctl(t, "verify", "--store", url, b)
	if code != exitUncorrected || strings.Contains(out, "other data") || !strings.Contains(out, "16 failed") {
		t.Fatalf("verify of 7 foreign blocks: exit %d, want %d and 16 failed:\n%s", code, exitUncorrected, out)
	}
}

// writtenBlocks returns the written blocks inspect reports.
func writtenBlocks(t *testing.T, url, image string) int64 {
	t.Helper()
	out := mustDifctl(t, exitOK, "--json", "inspect", "--store", url, image)
	var rec struct {
		Written int64 `json:"written"`
	}
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatalf("inspect --json: %v: %s", err, out)
	}
	return rec.Written
}
