//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/difctl/difctl/blockdev/nvme"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/internal/guest"
	"golang.org/x/sys/unix"
)

// fmtNS is one namespace of TestGuestDeviceFormats: its QEMU settings, the
// dif format difctl must read from it, and who writes its PI.
type fmtNS struct {
	ns     guest.Namespace
	format string // dif text form
	// kernel: the guest's kernel writes the blocks and generates their PI
	// (or has the controller insert it, PRACT, for extended LBAs whose
	// metadata is the tuple) and checks guard and ref tag on its reads.
	// Otherwise Linux 6.1 cannot do either (a tuple it cannot place, or
	// extended LBAs with more metadata than the tuple) and the test
	// writes through passthrough with PRACT: the controller (QEMU)
	// generates the PI.
	kernel bool
	// profile is the kernel's integrity profile of the namespace
	// (/sys/block/NAME/integrity/format), as inspect reports it.
	profile string
}

const (
	fmtBlocks  = 64
	fmtWritten = 48
)

// fmtNamespaces cover what QEMU 7.2 offers: PI Types 1, 2 and 3, PI first
// and last, separate metadata (mset=0, DIX) and extended LBAs (mset=1),
// the 16- and the 64-bit guard (pif=0, 2), 512- and 4096-byte blocks,
// metadata equal to the tuple and larger.
var fmtNamespaces = []fmtNS{
	{guest.Namespace{LBASize: 512, MS: 8, PI: 1}, "512+8:dix", true, "T10-DIF-TYPE1-CRC"},
	{guest.Namespace{LBASize: 4096, MS: 16, PI: 2, PIL: 1}, "4096+16:type2:pi-first:dix", true, "T10-DIF-TYPE1-CRC"},
	{guest.Namespace{LBASize: 4096, MS: 16, PI: 3, PIL: 1, PIF: 2}, "4096+16:crc64:type3:pi-first:dix", true, "EXT-DIF-TYPE3-CRC64"},
	{guest.Namespace{LBASize: 512, MS: 8, PI: 3, PIL: 1, MSet: 1}, "512+8:type3:pi-first", true, "none"},
	{guest.Namespace{LBASize: 4096, MS: 16, PI: 1, PIF: 2, MSet: 1}, "4096+16:crc64", true, "none"},
	{guest.Namespace{LBASize: 4096, MS: 64, PI: 2, PIF: 2, MSet: 1}, "4096+64:crc64:type2", false, "none"},
	{guest.Namespace{LBASize: 512, MS: 16, PI: 1}, "512+16:dix", false, "nop"},
}

// fmtDamage is what the host changes in namespace i's image between the
// boots: a data byte of block 3 (the guard fails), the app tag of block
// 11, and for Types 1 and 2 the ref tag of block 7. It returns the
// findings verify must report, as "LBA:kind".
func fmtDamage(t *testing.T, img string, n fmtNS) []string {
	t.Helper()
	f := dif.MustFormat(n.format)
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	bs, ms := n.ns.LBASize, n.ns.MS
	// QEMU keeps every block's data first, then every block's metadata.
	tuple := func(lba int) int {
		return fmtBlocks*bs + lba*ms + f.PIOffset()
	}
	appOff, refEnd := 2, 8 // 16-bit guard: guard 0-1, app 2-3, ref 4-7
	if f.Guard() == dif.Guard64 {
		appOff, refEnd = 8, 16 // guard 0-7, app 8-9, ref 10-15
	}
	offs := map[int]byte{3*bs + 17: 0x40, tuple(11) + appOff + 1: 0x01}
	want := []string{"3:guard", "11:app-tag"}
	if f.Type() != dif.Type3 {
		offs[tuple(7)+refEnd-1] = 0x02
		want = append(want, "7:ref-tag")
	}
	// Only the damaged bytes are written: the holes of the blocks never
	// written stay holes, which QEMU reads as unwritten.
	w, err := os.OpenFile(img, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for off, x := range offs {
		if _, err := w.WriteAt([]byte{raw[off] ^ x}, int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(want)
	return want
}

// TestGuestDeviceFormats boots a guest twice with a namespace of every
// format above. The first boot writes blocks 0 to 47 of each (the
// kernel, or the controller under PRACT) and verifies each clean with
// difctl, which must read the right format from the device. Between the
// boots the host damages three blocks of each image behind the guest's
// back (fmtDamage); the second boot must report exactly those blocks, with
// their fields, and the kernel's own reads of them must fail (EILSEQ, the
// block layer's protection error) where the kernel checks that field.
func TestGuestDeviceFormats(t *testing.T) {
	if guest.InGuest() {
		t.Skip("the host's side")
	}
	dir := t.TempDir()
	cfg := guest.Config{Env: map[string]string{}}
	for i, n := range fmtNamespaces {
		n.ns.Image = filepath.Join(dir, fmt.Sprintf("ns%d.img", i+1))
		if err := os.WriteFile(n.ns.Image, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(n.ns.Image, int64(fmtBlocks*(n.ns.LBASize+n.ns.MS))); err != nil {
			t.Fatal(err)
		}
		cfg.Namespaces = append(cfg.Namespaces, n.ns)
	}
	guest.Boot(t, cfg, "^TestInGuestFormatsWrite$")
	for i, n := range fmtNamespaces {
		cfg.Env[fmt.Sprintf("DIFCTL_TEST_DAMAGED_%d", i+1)] = strings.Join(fmtDamage(t, cfg.Namespaces[i].Image, n), ",")
	}
	guest.Boot(t, cfg, "^TestInGuestFormatsDamaged$")
}

func inFormatsGuest(t *testing.T) {
	t.Helper()
	if !guest.InGuest() {
		t.Skip("runs inside the guests of TestGuestDeviceFormats")
	}
}

// TestInGuestFormatsWrite (in the guest): each namespace's format as
// difctl reads it, its blocks written by the kernel or under PRACT, and a
// clean verify.
func TestInGuestFormatsWrite(t *testing.T) {
	inFormatsGuest(t)
	for i, n := range fmtNamespaces {
		dev := fmt.Sprintf("/dev/nvme0n%d", i+1)
		t.Run("format="+n.format, func(t *testing.T) {
			recs := records(t, mustDifctl(t, 0, "--json", "inspect", "--device-pi", dev))
			img := recordsOf(recs, "image")
			if len(img) != 1 || img[0]["format"] != n.format || img[0]["blocks"] != float64(fmtBlocks) {
				t.Fatalf("inspect: %v, want format %s", recs, n.format)
			}
			if d, _ := img[0]["device"].(map[string]any); d["kernel_integrity"] != n.profile {
				t.Errorf("inspect: the kernel's profile %v, want %s", d["kernel_integrity"], n.profile)
			}
			f, err := os.OpenFile(dev, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			bs := n.ns.LBASize
			if n.kernel {
				for lba := range fmtWritten {
					if _, err := f.WriteAt(blockPattern(lba, bs), int64(lba*bs)); err != nil {
						t.Fatal(err)
					}
				}
				if err := f.Sync(); err != nil {
					t.Fatal(err)
				}
			} else {
				writePRACT(t, f, n)
			}
			recs = records(t, mustDifctl(t, 0, "--json", "verify", dev))
			sum := recordsOf(recs, "summary")
			if len(sum) != 1 || sum[0]["ok"] != float64(fmtWritten) || sum[0]["unwritten"] != float64(fmtBlocks-fmtWritten) {
				t.Errorf("verify: %v, want %d blocks ok and %d unwritten", sum, fmtWritten, fmtBlocks-fmtWritten)
			}

			// difctl as the producer: blocks 48 to 55 with PI it
			// generates and the device checks; then verify, and the
			// kernel's own checked read where it checks.
			const first, count = fmtWritten, 8
			payload := blockPattern(first+1000, count*bs)
			in := filepath.Join(t.TempDir(), "in")
			if err := os.WriteFile(in, payload, 0o644); err != nil {
				t.Fatal(err)
			}
			mustDifctl(t, 0, "write", "--device-pi", dev, "--offset", strconv.Itoa(first*bs), in)
			recs = records(t, mustDifctl(t, 0, "--json", "verify", dev))
			if sum := recordsOf(recs, "summary"); len(sum) != 1 || sum[0]["ok"] != float64(fmtWritten+count) {
				t.Errorf("verify after difctl write: %v, want %d blocks ok", sum, fmtWritten+count)
			}
			if n.kernel {
				got := kernelRead(t, dev, first*bs, count*bs)
				if !bytes.Equal(got, payload) {
					t.Error("the kernel reads back other data than difctl wrote")
				}
			}
		})
	}
}

// kernelRead reads n bytes at off of dev with O_DIRECT: through the
// kernel's own PI checks, around the page cache.
func kernelRead(t *testing.T, dev string, off, n int) []byte {
	t.Helper()
	d, err := os.OpenFile(dev, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	buf, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	if _, err := d.ReadAt(buf, int64(off)); err != nil {
		t.Fatalf("the kernel's read of %d bytes at %d: %v", n, off, err)
	}
	return bytes.Clone(buf)
}

// writePRACT writes blocks 0 to fmtWritten-1 through passthrough with
// PRACT: the controller generates their PI (the app tag 0, the ref tags
// from the LBA), and keeps the other metadata bytes the test sends.
func writePRACT(t *testing.T, f *os.File, n fmtNS) {
	t.Helper()
	nsid, err := nvme.NamespaceID(f)
	if err != nil {
		t.Fatal(err)
	}
	bs, ms := n.ns.LBASize, n.ns.MS
	for lba := range fmtWritten {
		var data, md []byte
		if n.ns.MSet == 1 {
			data = append(blockPattern(lba, bs), make([]byte, ms)...)
		} else {
			data, md = blockPattern(lba, bs), make([]byte, ms)
		}
		if err := nvme.Write(f, nsid, uint64(lba), 1, data, md, nvme.Protection{Act: true, Ref: uint64(lba)}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestInGuestFormatsDamaged (in the guest): verify reports each damaged
// block with its field and no other; the kernel's reads of the blocks with
// a bad guard or ref tag fail with EILSEQ where the kernel checks them,
// and those of the app tag's block and of the blocks before each succeed.
func TestInGuestFormatsDamaged(t *testing.T) {
	inFormatsGuest(t)
	for i, n := range fmtNamespaces {
		dev := fmt.Sprintf("/dev/nvme0n%d", i+1)
		t.Run("format="+n.format, func(t *testing.T) {
			want := strings.Split(os.Getenv(fmt.Sprintf("DIFCTL_TEST_DAMAGED_%d", i+1)), ",")
			recs := records(t, mustDifctl(t, 4, "--json", "verify", "--app-tag", "0", dev))
			if got := findingSet(recs); !slices.Equal(got, want) {
				t.Errorf("verify findings %v, want %v", got, want)
			}
			if !n.kernel {
				return
			}
			d, err := os.OpenFile(dev, os.O_RDONLY|unix.O_DIRECT, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			bs := n.ns.LBASize
			buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Munmap(buf)
			for _, w := range want {
				lbaText, kind, _ := strings.Cut(w, ":")
				lba, _ := strconv.Atoi(lbaText)
				if _, err := d.ReadAt(buf[:bs], int64((lba-1)*bs)); err != nil {
					t.Errorf("kernel read of LBA %d: %v", lba-1, err)
				}
				_, err := d.ReadAt(buf[:bs], int64(lba*bs))
				switch {
				case kind == "app-tag" && err != nil:
					t.Errorf("kernel read of LBA %d (app tag changed, which the kernel does not check): %v", lba, err)
				case kind != "app-tag" && !errors.Is(err, unix.EILSEQ):
					t.Errorf("kernel read of LBA %d (%s damaged): %v, want EILSEQ", lba, kind, err)
				}
			}
		})
	}
}
