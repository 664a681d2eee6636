package nbd

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/store"
)

// TestKernelExt4Parity is ext4 through nbdfuse and a loop device on an
// export with 16+2 parity (depth 64: a burst of 128 neighbouring 4 KiB
// blocks is rebuildable). While files are copied onto the filesystem
// (each fsynced, so that its blocks reach the server), a burst of 128
// neighbouring blocks of the image is zeroed behind the server's back, at
// the start of the image, where ext4 keeps its superblock, group
// descriptors and inode tables; after the copy a second burst is zeroed
// over a file, in another group of stripes. Read back through a fresh nbdfuse and loop
// device, every file has its checksum, e2fsck -fn is clean, no request
// failed (no EIO for the client), and the findings are the blocks the
// reads repaired, from the parity. A repair of the whole volume then
// leaves nothing failing, and the parity checks clean.
func TestKernelExt4Parity(t *testing.T) {
	needKernel(t)
	size, files, fileSize := int64(64<<20), 8, 1<<20
	if testing.Short() {
		size, files = 32<<20, 4
	}
	// Depth 64: groups of 1,024 blocks (4 MiB), bursts of 128 blocks.
	const depth, burst, group = 64, 128, 1024
	dir := t.TempDir()
	tv := newTestVolume(t, dir, size, "4096+8")
	ppath := filepath.Join(dir, "disk.img.difpar")
	spec := blockdev.ParitySpec{Data: 16, Parity: 2, Depth: depth, Path: ppath}
	psize, err := tv.vol.ParityFileSize(spec)
	if err != nil {
		t.Fatal(err)
	}
	pdev, err := device.CreateImage(ppath, psize, device.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The volume first (it syncs the parity as it closes), then the file.
	t.Cleanup(func() { tv.close(); pdev.Close() })
	spec.Dev = pdev
	if err := tv.vol.AddParity(spec); err != nil {
		t.Fatal(err)
	}
	if _, err := tv.vol.ComputeParity(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	st, _, err := tv.vol.Parity()
	if err != nil || st.Layout.BurstTolerance() < burst {
		t.Fatalf("parity %+v, %v: want bursts of %d blocks healed", st, err, burst)
	}

	var fl failures
	ts := startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}}, Options{OnFailure: fl.add})
	loop, undo := fuseFile(t, dir, ts.sock)
	defer func() { undo() }()
	run(t, "mkfs.ext4", "-q", "-F", "-b", "4096", loop)
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "mount", loop, mnt)
	mounted := true
	defer func() {
		if mounted {
			run(t, "umount", mnt)
		}
	}()
	img, err := os.OpenFile(tv.path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	zero := func(first int64) {
		if _, err := img.WriteAt(make([]byte, burst*4096), first*4096); err != nil {
			t.Fatal(err)
		}
	}

	sums := map[string][32]byte{}
	r := rand.New(rand.NewPCG(41, 1))
	for i := range files {
		if i == files/2 {
			zero(16) // past the first block: the superblock at byte 1024, the group descriptors, the inode tables
		}
		b := make([]byte, fileSize)
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		name := fmt.Sprintf("f%d", i)
		sums[name] = sha256.Sum256(b)
		f, err := os.Create(filepath.Join(mnt, name))
		if err == nil {
			_, err = f.Write(b)
		}
		if err == nil {
			err = f.Sync()
		}
		if f != nil {
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			t.Fatalf("copying %s: %v", name, err)
		}
	}
	run(t, "umount", mnt)
	mounted = false
	// The second burst, from the first block of a file that starts in
	// another group of stripes than the first burst's; then a fresh nbdfuse
	// and loop device: no cache holds a block, every read reaches the
	// server.
	second := int64(group + 300)
	for name := range sums {
		out := run(t, "debugfs", "-R", "blocks /"+name, loop)
		f := strings.Fields(lastLine(out))
		if len(f) == 0 {
			t.Fatalf("debugfs blocks /%s: %q", name, out)
		}
		b, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			t.Fatalf("debugfs blocks /%s: %q", name, out)
		}
		if b >= group && b/group == (b+burst-1)/group {
			second = b
			break
		}
	}
	undo()
	undo = func() {}
	zero(second)
	loop, undo = fuseFile(t, dir, ts.sock)
	checkCopied(t, loop, mnt, sums, &mounted)
	if f := fl.get(); len(f) != 0 {
		t.Errorf("%d requests failed, the first: %+v", len(f), f[0])
	}
	repaired := 0
	for _, f := range tv.findings(t) {
		if f.State != store.FindingRepaired || f.Source != blockdev.ParitySource {
			t.Errorf("finding %+v, want one repaired from parity", f)
		}
		repaired++
	}
	if repaired == 0 {
		t.Error("no finding repaired: the reads met no bad block")
	}
	// Whatever the reads did not meet, a repair of the whole volume heals.
	rep, err := tv.vol.Repair(context.Background(), nil, blockdev.RepairOptions{})
	if err != nil || rep.Unrepairable != 0 {
		t.Fatalf("repair: %+v, %v", rep, err)
	}
	sr, err := tv.vol.ScrubParity(context.Background(), false)
	if err != nil || sr.Damaged != 0 || sr.Unrecorded != 0 {
		t.Fatalf("parity after the repair: %+v, %v", sr, err)
	}
	t.Logf("second burst at block %d; %d findings repaired from parity by reads, %d more blocks by the repair", second, repaired, rep.Repaired)
}
