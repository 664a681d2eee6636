//go:build linux

package nvme_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/difctl/difctl/blockdev/nvme"
	"github.com/difctl/difctl/blockdev/pisource"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/internal/guest"
	"golang.org/x/sys/unix"
)

// The namespace of TestGuestPI: 4096+8, Type 1, PI last, metadata in a
// separate buffer (mset=0), as QEMU formats it with pi=1.
const (
	nsBlocks    = 256 // blocks of the namespace
	nsWritten   = 64  // blocks 0..nsWritten-1 written by the guest's kernel
	lbaSize     = 4096
	mdSize      = 8
	damagedEnv  = "DIFCTL_TEST_DAMAGED" // LBA=field,... of the blocks the host damaged
	nsDevice    = "/dev/nvme0n1"
	chunkBlocks = 32 // blocks per passthrough read, within QEMU's MDTS (512 KiB)
)

// damages are what the host changes in the image between the boots of
// TestGuestPI: a byte of one block's data, and the app tag and the ref tag
// of two others in the metadata region.
var damages = []struct {
	lba   int
	field dif.Field
}{{20, dif.FieldAppTag}, {37, dif.FieldGuard}, {50, dif.FieldRefTag}}

// piFormat is the namespace's format in dif's terms (separate metadata).
var piFormat = dif.MustFormat("4096+8:type1:pi-last:dix")

// pattern is the data the guest writes to block lba.
func pattern(lba int) []byte {
	b := make([]byte, lbaSize)
	r := rand.New(rand.NewPCG(uint64(lba), 42))
	for i := 0; i < len(b); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// TestGuestPI boots a guest twice with one PI namespace. The first boot
// writes blocks through the kernel, which generates their PI, and checks
// them with passthrough reads and Identify Namespace (TestInGuestWrite);
// between the boots the host checks the image's layout with dif and damages
// three blocks (damages); the second boot must find those blocks, and only
// them, failing the field damaged, and the kernel's own reads of them must
// fail where the kernel checks that field (TestInGuestDamaged).
func TestGuestPI(t *testing.T) {
	if guest.InGuest() {
		t.Skip("the host's side")
	}
	img := filepath.Join(t.TempDir(), "ns1.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, nsBlocks*(lbaSize+mdSize)); err != nil {
		t.Fatal(err)
	}
	cfg := guest.Config{Namespaces: []guest.Namespace{{Image: img, LBASize: lbaSize, MS: mdSize, MSet: 0, PI: 1}}}
	guest.Boot(t, cfg, "^TestInGuestWrite$")

	// QEMU keeps the data of every block first, then the metadata of every
	// block: the tuples the kernel generated must verify there.
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	data := raw[:nsWritten*lbaSize]
	md := raw[nsBlocks*lbaSize:][:nsWritten*mdSize]
	for lba := range nsWritten {
		if !bytes.Equal(data[lba*lbaSize:][:lbaSize], pattern(lba)) {
			t.Fatalf("image: block %d's data is not what the guest wrote", lba)
		}
	}
	sum, err := piFormat.VerifyFunc(data, md, dif.Params{AppMask: 0xffff}, func(e *dif.CheckError) error {
		t.Errorf("image: the tuples the guest's kernel wrote: %v", e)
		return nil
	})
	if err != nil || sum.OK != nsWritten {
		t.Fatalf("image: verify: %+v, %v; want %d blocks ok", sum, err, nsWritten)
	}

	// Damage the blocks behind the guest's back: a data byte for the guard,
	// tuple bytes 2-3 (app tag) and 4-7 (ref tag) in the metadata region.
	f, err := os.OpenFile(img, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, d := range damages {
		off := int64(nsBlocks*lbaSize + d.lba*mdSize)
		switch d.field {
		case dif.FieldGuard:
			off = int64(d.lba*lbaSize + 100)
		case dif.FieldAppTag:
			off += 2
		case dif.FieldRefTag:
			off += 7
		}
		raw[off] ^= 0x5a
		if _, err := f.WriteAt(raw[off:][:1], off); err != nil {
			t.Fatal(err)
		}
		env = append(env, fmt.Sprintf("%d=%d", d.lba, d.field))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.Env = map[string]string{damagedEnv: strings.Join(env, ",")}
	guest.Boot(t, cfg, "^TestInGuestDamaged$")
}

func inGuestOnly(t *testing.T) {
	t.Helper()
	if !guest.InGuest() {
		t.Skip("runs inside the guest of TestGuestPI")
	}
}

// TestInGuestWrite (in the guest): the kernel sees a Type 1 namespace;
// Identify Namespace reports the format QEMU was given; blocks written
// through the block device come back through passthrough with PI that
// verifies.
func TestInGuestWrite(t *testing.T) {
	inGuestOnly(t)
	if b, err := os.ReadFile("/sys/block/nvme0n1/integrity/format"); err != nil || strings.TrimSpace(string(b)) != "T10-DIF-TYPE1-CRC" {
		t.Errorf("sysfs integrity format = %q, %v; want T10-DIF-TYPE1-CRC", b, err)
	}
	f, err := os.OpenFile(nsDevice, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ns, err := nvme.IdentifyNamespace(f)
	if err != nil {
		t.Fatal(err)
	}
	want := nvme.Namespace{ID: 1, Blocks: nsBlocks, LBASize: lbaSize, MetadataSize: mdSize, PIType: 1, Guard: nvme.Guard16}
	if ns != want {
		t.Errorf("IdentifyNamespace = %+v, want %+v", ns, want)
	}
	for lba := range nsWritten {
		if _, err := f.WriteAt(pattern(lba), int64(lba)*lbaSize); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	problems := readAndVerify(t, f)
	for _, p := range problems {
		t.Errorf("LBA %d: %v", p.LBA, p)
	}
}

// TestInGuestDamaged (in the guest): each block the host damaged fails the
// check of the field damaged, and no other check of any block fails. The
// kernel's read of a block with a bad guard or ref tag fails with EILSEQ (a
// protection error); its read of a block with a changed app tag succeeds,
// since the kernel checks no app tag of a Type 1 namespace; the reads of
// the blocks before them succeed.
func TestInGuestDamaged(t *testing.T) {
	inGuestOnly(t)
	want := map[int64]dif.Field{}
	for _, kv := range strings.Split(os.Getenv(damagedEnv), ",") {
		var lba int64
		var field dif.Field
		if _, err := fmt.Sscanf(kv, "%d=%d", &lba, &field); err != nil {
			t.Fatalf("%s=%q: %v", damagedEnv, os.Getenv(damagedEnv), err)
		}
		want[lba] = field
	}
	f, err := os.OpenFile(nsDevice, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[int64]dif.Field{}
	for _, p := range readAndVerify(t, f) {
		if _, dup := got[p.LBA]; dup {
			t.Errorf("LBA %d: more than one failed check: %v", p.LBA, p)
		}
		got[p.LBA] = p.Field
	}
	if !maps.Equal(got, want) {
		t.Errorf("failed checks (LBA: field) = %v, want %v", got, want)
	}

	d, err := os.OpenFile(nsDevice, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	buf, err := unix.Mmap(-1, 0, lbaSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	for lba, field := range want {
		if _, err := d.ReadAt(buf, (lba-1)*lbaSize); err != nil {
			t.Errorf("kernel read of LBA %d: %v", lba-1, err)
		}
		// The controller fails the kernel's read (the kernel sets PRCHK
		// for the guard and the ref tag), and the block layer reports
		// BLK_STS_PROTECTION as EILSEQ.
		_, err := d.ReadAt(buf, lba*lbaSize)
		if field == dif.FieldAppTag {
			if err != nil {
				t.Errorf("kernel read of LBA %d (app tag changed): %v, want success", lba, err)
			}
		} else if !errors.Is(err, unix.EILSEQ) {
			t.Errorf("kernel read of LBA %d (%v damaged): %v, want EILSEQ", lba, field, err)
		}
	}
}

// readAndVerify reads blocks 0..nsWritten-1 with their metadata through
// passthrough, checks the data against pattern where the tuple verifies, and
// returns every failed check.
func readAndVerify(t *testing.T, f *os.File) []*dif.CheckError {
	t.Helper()
	nsid, err := nvme.NamespaceID(f)
	if err != nil {
		t.Fatal(err)
	}
	var problems []*dif.CheckError
	data := make([]byte, chunkBlocks*lbaSize)
	md := make([]byte, chunkBlocks*mdSize)
	for lba := 0; lba < nsWritten; lba += chunkBlocks {
		if err := nvme.Read(f, nsid, uint64(lba), chunkBlocks, data, md); err != nil {
			t.Fatal(err)
		}
		bad := map[int64]bool{}
		sum, err := piFormat.VerifyFunc(data, md, dif.Params{RefTag: uint64(lba), LBA: int64(lba), AppMask: 0xffff}, func(e *dif.CheckError) error {
			problems = append(problems, e)
			bad[e.LBA] = true
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if sum.OK+sum.Failed != chunkBlocks {
			t.Errorf("LBAs %d to %d: %+v: blocks neither ok nor failed (escaped or unwritten)", lba, lba+chunkBlocks-1, sum)
		}
		for i := range chunkBlocks {
			if !bad[int64(lba+i)] && !bytes.Equal(data[i*lbaSize:][:lbaSize], pattern(lba+i)) {
				t.Errorf("LBA %d: passthrough data differs from what was written, and its tuple verifies", lba+i)
			}
		}
	}
	return problems
}

// TestGuestFormats runs in a guest of its own (guest.Run) with two more
// formats, and checks that Identify Namespace reports what QEMU was given and
// that the PI another producer wrote verifies with dif:
//
//   - nvme0n1, 512+8 Type 3 with extended LBAs (mset=1) and the tuple first
//     (pil=1). The kernel's PCIe driver carries metadata only in a separate
//     buffer: it gives the namespace no integrity profile, and its block I/O
//     sets PRACT, so the controller (QEMU) generates the tuples of the
//     kernel's writes, and the block device has the namespace's full size.
//   - nvme0n2, 4096+16 Type 1 with the 64-bit guard (pif=2, mset=0): the
//     kernel generates the tuples (CRC-64/NVME guard, 48-bit ref tag).
func TestGuestFormats(t *testing.T) {
	const blocks, written = 64, 8
	var img1, img2 string
	if !guest.InGuest() {
		dir := t.TempDir()
		img1, img2 = filepath.Join(dir, "ns1.img"), filepath.Join(dir, "ns2.img")
		if err := os.WriteFile(img1, make([]byte, blocks*(512+8)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(img2, make([]byte, blocks*(4096+16)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !guest.Run(t, guest.Config{Namespaces: []guest.Namespace{
		{Image: img1, LBASize: 512, MS: 8, MSet: 1, PI: 3, PIL: 1},
		{Image: img2, LBASize: 4096, MS: 16, MSet: 0, PI: 1, PIF: 2},
	}}) {
		return
	}
	for _, tc := range []struct {
		dev    string
		sysfs  map[string]string
		ns     nvme.Namespace
		format dif.Format
	}{
		{
			dev:    "nvme0n1",
			sysfs:  map[string]string{"integrity/format": "none", "size": strconv.Itoa(blocks)},
			ns:     nvme.Namespace{ID: 1, Blocks: blocks, LBASize: 512, MetadataSize: 8, Extended: true, PIType: 3, PIFirst: true, Guard: nvme.Guard16},
			format: dif.MustFormat("512+8:type3:pi-first"),
		},
		{
			dev:    "nvme0n2",
			sysfs:  map[string]string{"integrity/format": "EXT-DIF-TYPE1-CRC64", "size": strconv.Itoa(blocks * 8)},
			ns:     nvme.Namespace{ID: 2, Blocks: blocks, LBASize: 4096, MetadataSize: 16, PIType: 1, Guard: nvme.Guard64},
			format: dif.MustFormat("4096+16:crc64:dix"),
		},
	} {
		t.Run("ns="+tc.dev, func(t *testing.T) {
			for attr, want := range tc.sysfs {
				if b, err := os.ReadFile("/sys/block/" + tc.dev + "/" + attr); err != nil || strings.TrimSpace(string(b)) != want {
					t.Errorf("sysfs %s = %q, %v; want %s", attr, b, err, want)
				}
			}
			f, err := os.OpenFile("/dev/"+tc.dev, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			ns, err := nvme.IdentifyNamespace(f)
			if err != nil {
				t.Fatal(err)
			}
			if ns != tc.ns {
				t.Errorf("IdentifyNamespace = %+v, want %+v", ns, tc.ns)
			}
			bs := tc.ns.LBASize
			for lba := range written {
				if _, err := f.WriteAt(pattern(lba)[:bs], int64(lba*bs)); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			var data, md []byte
			if tc.ns.Extended {
				data = make([]byte, written*(bs+tc.ns.MetadataSize))
			} else {
				data, md = make([]byte, written*bs), make([]byte, written*tc.ns.MetadataSize)
			}
			if err := nvme.Read(f, tc.ns.ID, 0, written, data, md); err != nil {
				t.Fatal(err)
			}
			// Every block must verify, none pass as escaped or unwritten.
			sum, err := tc.format.VerifyFunc(data, md, dif.Params{AppMask: 0xffff}, func(e *dif.CheckError) error {
				t.Errorf("the tuples of the kernel's writes: %v", e)
				return nil
			})
			if err != nil || sum.OK != written {
				t.Errorf("verify: %+v, %v; want %d blocks ok", sum, err, written)
			}
			stride := bs
			if tc.ns.Extended {
				stride += tc.ns.MetadataSize
			}
			for lba := range written {
				if !bytes.Equal(data[lba*stride:][:bs], pattern(lba)[:bs]) {
					t.Errorf("LBA %d: passthrough data differs from what was written", lba)
				}
			}
			checkedWrites(t, "/dev/"+tc.dev, tc.format)
		})
	}
}

// checkedWrites (in the guest) writes through Device.WriteData, PI
// generated by dif and checked by the device (QEMU), and reads it back;
// then forges one field of one block of a run of four and writes the run
// with WriteBlocks: the device must refuse that block with the field's
// end-to-end error, a *WriteCheckError matching dif.ErrIntegrity, having
// written the block before it and none after.
func checkedWrites(t *testing.T, dev string, f dif.Format) {
	d, err := nvme.Open(dev, true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Format() != f {
		t.Fatalf("Open: format %v, want %v", d.Format(), f)
	}
	bs, ms := f.BlockSize(), f.MetadataSize()
	p := dif.Params{AppTag: 0x0a0b, AppMask: 0xffff}
	// Blocks 10 to 13 whole, then 100 bytes across the end of block 14
	// and the start of block 15 (read, checked and rewritten).
	want := slices.Concat(pattern(10)[:bs], pattern(11)[:bs], pattern(12)[:bs], pattern(13)[:bs], make([]byte, 2*bs))
	copy(want[5*bs-50:], bytes.Repeat([]byte{0xee}, 100))
	if err := d.WriteData(want[:4*bs], int64(10*bs), p, p); err != nil {
		t.Fatalf("WriteData: %v", err)
	}
	if err := d.WriteData(make([]byte, 2*bs), int64(14*bs), p, p); err != nil {
		t.Fatalf("WriteData: %v", err)
	}
	if err := d.WriteData(want[5*bs-50:][:100], int64(15*bs-50), p, p); err != nil {
		t.Fatalf("WriteData across blocks 14 and 15: %v", err)
	}
	src, err := pisource.NewReaderSource(d, f, p)
	if err != nil {
		t.Fatal(err)
	}
	ext := f.Layout() == dif.Interleaved
	buf := func(n int) (data, md []byte) {
		if ext {
			return make([]byte, n*(bs+ms)), nil
		}
		return make([]byte, n*bs), make([]byte, n*ms)
	}
	data, md := buf(6)
	if err := src.ReadBlocks(10, 6, data, md); err != nil {
		t.Fatal(err)
	}
	if err := f.Verify(data, md, f.ParamsAt(p, 10)); err != nil {
		t.Errorf("blocks 10 to 15 as written by WriteData: %v", err)
	}
	got := data
	if ext {
		got = make([]byte, 6*bs)
		if err := f.Strip(got, data, md, f.ParamsAt(p, 10)); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Errorf("blocks 10 to 15 read back differ from what WriteData wrote")
	}

	fields := []dif.Field{dif.FieldGuard, dif.FieldAppTag}
	if f.Type() != dif.Type3 {
		fields = append(fields, dif.FieldRefTag) // Type 3 has no ref tag check
	}
	for i, field := range fields {
		lba := int64(20 + 8*i)
		before, beforeMD := buf(4)
		if err := src.ReadBlocks(lba, 4, before, beforeMD); err != nil {
			t.Fatal(err)
		}
		data, md := buf(4)
		fs := f.WithLayout(dif.Separate)
		sd, smd := make([]byte, 4*bs), make([]byte, 4*ms)
		for j := range 4 {
			copy(sd[j*bs:], pattern(int(lba) + j + 1000)[:bs])
		}
		if err := fs.Generate(sd, smd, fs.ParamsAt(p, lba)); err != nil {
			t.Fatal(err)
		}
		if err := fs.Inject(sd, smd, 1, field, 3); err != nil {
			t.Fatal(err)
		}
		if ext {
			if err := fs.ToInterleaved(data, sd, smd); err != nil {
				t.Fatal(err)
			}
		} else {
			data, md = sd, smd
		}
		err := d.WriteBlocks(lba, 4, data, md, p)
		var wce *nvme.WriteCheckError
		if !errors.As(err, &wce) || wce.LBA != lba+1 || wce.Field != field || !errors.Is(err, dif.ErrIntegrity) {
			t.Errorf("a forged %v at LBA %d: %v, want the device's %v check error there", field, lba+1, err, field)
			continue
		}
		after, afterMD := buf(4)
		if err := src.ReadBlocks(lba, 4, after, afterMD); err != nil {
			t.Fatal(err)
		}
		n := len(after) / 4
		if !bytes.Equal(after[:n], data[:n]) || !bytes.Equal(after[n:], before[n:]) {
			t.Errorf("a forged %v at LBA %d: the block before it is not written, or a block from it on is", field, lba+1)
		}
	}
}

// TestNotNVMe: a file that is no NVMe namespace refuses the ioctls with
// ErrNotNVMe (on the host: no guest needed).
func TestNotNVMe(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "plain"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := nvme.NamespaceID(f); !errors.Is(err, nvme.ErrNotNVMe) {
		t.Errorf("NamespaceID of a plain file: %v, want ErrNotNVMe", err)
	}
	if _, err := nvme.IdentifyNamespace(f); !errors.Is(err, nvme.ErrNotNVMe) {
		t.Errorf("IdentifyNamespace of a plain file: %v, want ErrNotNVMe", err)
	}
	if err := nvme.Read(f, 1, 0, 1, make([]byte, 4096), make([]byte, 8)); !errors.Is(err, nvme.ErrNotNVMe) {
		t.Errorf("Read of a plain file: %v, want ErrNotNVMe", err)
	}
}
