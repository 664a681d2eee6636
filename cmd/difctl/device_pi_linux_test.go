//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/difctl/difctl/blockdev/nvme"
	"github.com/difctl/difctl/internal/guest"
	"golang.org/x/sys/unix"
)

// records parses difctl's JSON Lines output into its records.
func records(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// recordsOf returns the records of one type.
func recordsOf(recs []map[string]any, typ string) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		if r["type"] == typ {
			out = append(out, r)
		}
	}
	return out
}

// findingSet renders the finding records as sorted "LBA:kind" strings.
func findingSet(recs []map[string]any) []string {
	var out []string
	for _, r := range recordsOf(recs, "finding") {
		out = append(out, fmt.Sprintf("%v:%v", r["lba"], r["kind"]))
	}
	slices.Sort(out)
	return out
}

// blockPattern is the data of block lba of bs bytes as the tests write it.
func blockPattern(lba, bs int) []byte {
	b := make([]byte, bs)
	r := rand.New(rand.NewPCG(uint64(lba), 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// withoutSysAdmin runs fn on a thread of its own whose effective and
// permitted capabilities lack CAP_SYS_ADMIN (capabilities are per thread on
// Linux). The goroutine keeps the thread locked, so the thread ends with
// it and no other goroutine runs without the capability.
func withoutSysAdmin(t *testing.T, fn func()) {
	t.Helper()
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			done <- err
			return
		}
		data[0].Effective &^= 1 << unix.CAP_SYS_ADMIN
		data[0].Permitted &^= 1 << unix.CAP_SYS_ADMIN
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			done <- err
			return
		}
		fn()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestGuestDevicePI (one guest) checks NVMe namespaces that carry PI with
// no store, through the CLI (docs/device-pi.md):
//
//   - nvme0n1, 4096+8 Type 1, separate metadata: the guest's kernel writes
//     blocks and their PI; verify, scrub and inspect find the namespace on
//     their own (a block device, no store) and report it clean; blocks
//     whose guard, ref tag and app tag are then rewritten wrong through
//     passthrough with the controller's checks off are each reported with
//     their LBA and field (exit 4), by verify and by scrub, whose findings
//     go to its state store;
//   - nvme0n2 has no metadata and nvme0n3 metadata but no PI: --device-pi
//     refuses each with its reason (exit 8); without it nvme0n2 is
//     checked against its store, like any block device;
//   - /dev/ram0 (brd) is no NVMe namespace: --device-pi refuses it, and
//     without it it falls back to its store;
//   - without CAP_SYS_ADMIN the kernel refuses passthrough: exit 8 naming
//     the capability;
//   - nvme0n7, 4096+8 Type 1, separate metadata: a store-backed volume
//     whose tuples are the device's PI (volumeDevicePI).
func TestGuestDevicePI(t *testing.T) {
	const blocks, written, bs = 256, 200, 4096
	var imgs [7]string
	if !guest.InGuest() {
		dir := t.TempDir()
		// Sparse images: QEMU reads the metadata of blocks never written
		// (holes) as all ones, as a formatted namespace holds it.
		for i, size := range []int{blocks * (bs + 8), blocks * bs, blocks * (bs + 8), convBlocks * (bs + 8), convBlocks * (bs + 8), convBlocks * (512 + 8), volBlocks * (bs + 8)} {
			imgs[i] = filepath.Join(dir, fmt.Sprintf("ns%d.img", i+1))
			if err := os.WriteFile(imgs[i], nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(imgs[i], int64(size)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !guest.Run(t, guest.Config{
		Namespaces: []guest.Namespace{
			{Image: imgs[0], LBASize: bs, MS: 8, PI: 1},
			{Image: imgs[1], LBASize: bs},
			{Image: imgs[2], LBASize: bs, MS: 8},
			{Image: imgs[3], LBASize: bs, MS: 8, PI: 1},
			{Image: imgs[4], LBASize: bs, MS: 8, PI: 1},
			{Image: imgs[5], LBASize: 512, MS: 8, PI: 3, PIL: 1, MSet: 1},
			{Image: imgs[6], LBASize: bs, MS: 8, PI: 1},
		},
		Modules: []string{"brd"},
	}) {
		return
	}
	const ns1 = "/dev/nvme0n1"
	f, err := os.OpenFile(ns1, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for lba := range written {
		if _, err := f.WriteAt(blockPattern(lba, bs), int64(lba*bs)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}

	t.Run("clean", func(t *testing.T) {
		recs := records(t, mustDifctl(t, 0, "--json", "verify", ns1))
		sums := recordsOf(recs, "summary")
		if len(sums) != 1 || sums[0]["blocks"] != float64(blocks) || sums[0]["ok"] != float64(written) || sums[0]["unwritten"] != float64(blocks-written) {
			t.Errorf("verify summary %v, want %d blocks, %d ok, the rest unwritten", sums, blocks, written)
		}
		recs = records(t, mustDifctl(t, 0, "--json", "inspect", ns1))
		img := recordsOf(recs, "image")
		if len(img) != 1 || img[0]["format"] != "4096+8:dix" || img[0]["layout"] != "dix" || img[0]["blocks"] != float64(blocks) {
			t.Fatalf("inspect: %v", recs)
		}
		if d, _ := img[0]["device"].(map[string]any); d["namespace_id"] != float64(1) || d["kernel_integrity"] != "T10-DIF-TYPE1-CRC" {
			t.Errorf("inspect: device %v", img[0]["device"])
		}
		mustDifctl(t, 0, "scrub", "--device-pi", "--store", "/tmp/clean.difdb", ns1)
	})

	// Damage three blocks through passthrough with no check: a data byte
	// (the guard fails), the ref tag, and the app tag (checked with
	// --app-tag 0, what the kernel writes).
	nsid, err := nvme.NamespaceID(f)
	if err != nil {
		t.Fatal(err)
	}
	damage := map[int]func(data, md []byte){
		5:   func(data, md []byte) { data[100] ^= 1 },
		9:   func(data, md []byte) { md[7] ^= 0x10 },
		120: func(data, md []byte) { md[3] ^= 1 },
	}
	for lba, fn := range damage {
		data, md := make([]byte, bs), make([]byte, 8)
		if err := nvme.Read(f, nsid, uint64(lba), 1, data, md); err != nil {
			t.Fatal(err)
		}
		fn(data, md)
		if err := nvme.Write(f, nsid, uint64(lba), 1, data, md, nvme.Protection{}); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"120:app-tag", "5:guard", "9:ref-tag"}

	t.Run("damaged", func(t *testing.T) {
		recs := records(t, mustDifctl(t, 4, "--json", "verify", "--app-tag", "0", ns1))
		if got := findingSet(recs); !slices.Equal(got, want) {
			t.Errorf("verify findings %v, want %v", got, want)
		}
		// The generic character device of the same namespace: the same
		// findings (no sysfs integrity directory to cross-check).
		recs = records(t, mustDifctl(t, 4, "--json", "verify", "--device-pi", "--app-tag", "0", "/dev/ng0n1"))
		if got := findingSet(recs); !slices.Equal(got, want) {
			t.Errorf("verify of /dev/ng0n1: findings %v, want %v", got, want)
		}
		recs = records(t, mustDifctl(t, 4, "--json", "scrub", "--device-pi", "--app-tag", "0", "--store", "/tmp/scrub.difdb", ns1))
		if got := findingSet(recs); !slices.Equal(got, want) {
			t.Errorf("scrub findings %v, want %v", got, want)
		}
		// The findings went to the state store: an errors-only pass
		// rechecks them and finds them still failing.
		out := mustDifctl(t, 4, "--json", "scrub", "--device-pi", "--app-tag", "0", "--errors-only", "--store", "/tmp/scrub.difdb", ns1)
		if sc := recordsOf(records(t, out), "scrub"); len(sc) != 1 || sc[0]["still_open"] != float64(3) {
			t.Errorf("errors-only scrub: %s", out)
		}
		recs = records(t, mustDifctl(t, 0, "--json", "inspect", ns1, "--lba", "5"))
		if tu := recordsOf(recs, "tuple"); len(tu) != 1 || fmt.Sprint(tu[0]["failed"]) != "[guard]" {
			t.Errorf("inspect --lba 5: %v", recs)
		}
	})

	t.Run("write", func(t *testing.T) {
		// 3 blocks and a half from the middle of block 150, with app tag
		// 0x77: difctl generates the PI, the device checks it; then the
		// kernel reads the blocks back through its own PI checks.
		in := filepath.Join(t.TempDir(), "in")
		payload := blockPattern(9999, 3*bs+bs/2)
		if err := os.WriteFile(in, payload, 0o644); err != nil {
			t.Fatal(err)
		}
		off := 150*bs + 1000
		recs := records(t, mustDifctl(t, 0, "--json", "write", "--device-pi", "--app-tag", "0x77", ns1, "--offset", fmt.Sprint(off), in))
		if w := recordsOf(recs, "write"); len(w) != 1 || w[0]["bytes"] != float64(len(payload)) {
			t.Errorf("write: %v", recs)
		}
		// Bytes 1000 to 15335 of block 150 on: blocks 150 to 153 carry app
		// tag 0x77 (150 and 153 covered in part, read, checked and
		// rewritten).
		mustDifctl(t, 0, "verify", "--app-tag", "0x77", "--range", "150:154", ns1)
		if out := mustDifctl(t, 4, "--json", "verify", "--app-tag", "0", "--range", "149:156", ns1); !slices.Equal(findingSet(records(t, out)), []string{"150:app-tag", "151:app-tag", "152:app-tag", "153:app-tag"}) {
			t.Errorf("verify --app-tag 0 around the write: %s", out)
		}
		got := make([]byte, 5*bs)
		d, err := os.OpenFile(ns1, os.O_RDONLY|unix.O_DIRECT, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		direct, err := unix.Mmap(-1, 0, len(got), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Munmap(direct)
		if _, err := d.ReadAt(direct, 150*bs); err != nil {
			t.Fatalf("the kernel's read of the blocks difctl wrote: %v", err)
		}
		copy(got, direct)
		want := slices.Concat(blockPattern(150, bs), blockPattern(151, bs), blockPattern(152, bs), blockPattern(153, bs), blockPattern(154, bs))
		copy(want[1000:], payload)
		if !slices.Equal(got, want) {
			t.Error("the kernel reads back other data than difctl wrote")
		}
		// Without --device-pi the namespace is found as for verify; a
		// write over a block that fails its check is refused whole.
		mustDifctl(t, 0, "write", ns1, "--offset", fmt.Sprint(160*bs), in)
		if out := mustDifctl(t, 4, "write", ns1, "--offset", fmt.Sprint(5*bs+10), in); !strings.Contains(out, "LBA 5") {
			t.Errorf("a write over LBA 5, which fails its guard: %q", out)
		}
		if out := mustDifctl(t, 16, "write", "--store", "/tmp/x.difdb", "--app-tag", "1", ns1, "--offset", "0", in); !strings.Contains(out, "--device-pi") {
			t.Errorf("--app-tag on a store-backed write: %q", out)
		}
	})

	t.Run("convert", func(t *testing.T) { convertDevice(t) })

	t.Run("volume", func(t *testing.T) { volumeDevicePI(t) })

	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct{ dev, msg string }{
			{"/dev/nvme0n2", "no metadata"},
			{"/dev/nvme0n3", "no protection information"},
			{"/dev/ram0", "not an NVMe namespace"},
		} {
			if out := mustDifctl(t, 8, "verify", "--device-pi", tc.dev); !strings.Contains(out, tc.msg) {
				t.Errorf("verify --device-pi %s: %q, want it to say %q", tc.dev, out, tc.msg)
			}
		}
		if out := mustDifctl(t, 16, "scrub", ns1); !strings.Contains(out, "--store") {
			t.Errorf("scrub of a namespace with PI and no state store: %q", out)
		}
		var code int
		var out string
		withoutSysAdmin(t, func() { code, out = difctl(t, "verify", "--device-pi", ns1) })
		if code != 8 || !strings.Contains(out, "CAP_SYS_ADMIN") {
			t.Errorf("verify --device-pi without CAP_SYS_ADMIN: exit %d, %q", code, out)
		}
	})

	t.Run("fallback", func(t *testing.T) {
		// No store, no PI to read: the store-backed mode, which finds no
		// store; with one, it checks against it.
		for _, dev := range []string{"/dev/ram0", "/dev/nvme0n2"} {
			out := mustDifctl(t, 8, "verify", dev)
			if !strings.Contains(out, "store") || strings.Contains(out, "NVMe") || strings.Contains(out, "device-pi") {
				t.Errorf("verify %s with no store: %q, want the store-backed mode's error", dev, out)
			}
			st := "/tmp/" + filepath.Base(dev) + ".difdb"
			mustDifctl(t, 0, "protect", "--store", st, "--block-size", "4096", dev)
			mustDifctl(t, 0, "verify", "--store", st, dev)
		}
	})
}

// convBlocks are the blocks of the namespaces of convertDevice.
const convBlocks = 64

// convertDevice (in the guest of TestGuestDevicePI) converts a protected
// image onto nvme0n4 (4096+8 Type 1, DIX) and the same data written by the
// kernel on nvme0n5 back into a store: the tuples difctl writes from its
// store are those the kernel generates, byte for byte, and the kernel
// reads the converted namespace through its own checks; the store made
// from nvme0n5 holds its tuples. A 512+8 Type 3 image goes onto the
// extended-LBA nvme0n6; a namespace of another format is refused.
func convertDevice(t *testing.T) {
	const bs = 4096
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	var data []byte
	for lba := range convBlocks {
		data = append(data, blockPattern(lba, bs)...)
	}
	if err := os.WriteFile(img, data, 0o644); err != nil {
		t.Fatal(err)
	}
	mustDifctl(t, 0, "protect", "--block-size", "4096", img)
	mustDifctl(t, 0, "convert", "--to", "device", img, "/dev/nvme0n4")

	k, err := os.OpenFile("/dev/nvme0n5", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if _, err := k.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := k.Sync(); err != nil {
		t.Fatal(err)
	}
	read := func(dev string) (d, md []byte) {
		f, err := os.Open(dev)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		nsid, err := nvme.NamespaceID(f)
		if err != nil {
			t.Fatal(err)
		}
		d, md = make([]byte, convBlocks*bs), make([]byte, convBlocks*8)
		for lba := 0; lba < convBlocks; lba += 16 {
			if err := nvme.Read(f, nsid, uint64(lba), 16, d[lba*bs:(lba+16)*bs], md[lba*8:(lba+16)*8]); err != nil {
				t.Fatal(err)
			}
		}
		return d, md
	}
	cd, cmd := read("/dev/nvme0n4")
	kd, kmd := read("/dev/nvme0n5")
	if !slices.Equal(cd, data) || !slices.Equal(kd, data) {
		t.Fatal("a namespace does not hold the data written")
	}
	if !slices.Equal(cmd, kmd) {
		t.Errorf("the tuples converted from the store differ from the kernel's:\nstore  %x\nkernel %x", cmd[:64], kmd[:64])
	}
	if got := kernelRead(t, "/dev/nvme0n4", 0, convBlocks*bs); !slices.Equal(got, data) {
		t.Error("the kernel reads back other data from the converted namespace")
	}
	recs := records(t, mustDifctl(t, 0, "--json", "verify", "/dev/nvme0n4"))
	if sum := recordsOf(recs, "summary"); len(sum) != 1 || sum[0]["ok"] != float64(convBlocks) {
		t.Errorf("verify of the converted namespace: %v", sum)
	}

	// The kernel's PI into a store, and out again as a DIX pair: the
	// same tuples.
	cp := filepath.Join(dir, "copy.img")
	mustDifctl(t, 0, "convert", "--from", "device", "--to", "store", "/dev/nvme0n5", cp)
	mustDifctl(t, 0, "verify", cp)
	if b, err := os.ReadFile(cp); err != nil || !slices.Equal(b, data) {
		t.Errorf("the imported image's data differs: %v", err)
	}
	mustDifctl(t, 0, "convert", "--to", "dix", cp, cp+".data", cp+".md")
	if b, err := os.ReadFile(cp + ".md"); err != nil || !slices.Equal(b, kmd) {
		t.Errorf("the imported store's tuples differ from the device's: %v", err)
	}
	// Dumped as they are (a DIX namespace to a DIX pair) and in the other
	// layout (to an extended-LBA image).
	mustDifctl(t, 0, "convert", "--from", "device", "--to", "dix", "/dev/nvme0n5", cp+".d2", cp+".m2")
	if b, err := os.ReadFile(cp + ".m2"); err != nil || !slices.Equal(b, kmd) {
		t.Errorf("the tuples of the DIX dump differ from the device's: %v", err)
	}
	mustDifctl(t, 0, "convert", "--from", "device", "--to", "interleaved", "/dev/nvme0n5", cp+".ext")
	mustDifctl(t, 0, "verify", "--interleaved", "4096+8", cp+".ext")

	// Extended LBAs, Type 3, PI first.
	img512 := filepath.Join(dir, "img512")
	if err := os.WriteFile(img512, data[:convBlocks*512], 0o644); err != nil {
		t.Fatal(err)
	}
	mustDifctl(t, 0, "protect", "--block-size", "512", "--type", "3", "--pi-first", img512)
	mustDifctl(t, 0, "convert", "--to", "device", img512, "/dev/nvme0n6")
	recs = records(t, mustDifctl(t, 0, "--json", "verify", "/dev/nvme0n6"))
	if sum := recordsOf(recs, "summary"); len(sum) != 1 || sum[0]["ok"] != float64(convBlocks) {
		t.Errorf("verify of the converted extended-LBA namespace: %v", sum)
	}
	mustDifctl(t, 0, "convert", "--from", "device", "--to", "interleaved", "/dev/nvme0n6", img512+".ext")
	recs = records(t, mustDifctl(t, 0, "--json", "verify", "--interleaved", "512+8:type3:pi-first", img512+".ext"))
	if sum := recordsOf(recs, "summary"); len(sum) != 1 || sum[0]["ok"] != float64(convBlocks) {
		t.Errorf("verify of the extended-LBA dump of nvme0n6: %v", sum)
	}
	mustDifctl(t, 0, "convert", "--from", "device", "--to", "dix", "/dev/nvme0n6", img512+".d", img512+".m")
	mustDifctl(t, 0, "verify", "--dix", img512+".m", "--format", "512+8:type3:pi-first", img512+".d")
	if out := mustDifctl(t, 16, "convert", "--to", "device", img, "/dev/nvme0n6"); !strings.Contains(out, "formatted") {
		t.Errorf("convert onto a namespace of another format: %q", out)
	}
}
