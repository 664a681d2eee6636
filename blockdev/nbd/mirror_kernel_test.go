package nbd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/nbdclient"
	"github.com/difctl/difctl/store"
)

// The real clients on a mirrored export: ext4 through nbdfuse and a loop
// device, with leg 0 rotting behind the server's back, and a mirror leg
// that is an image file or an export of qemu-nbd in another process.

// mirrorVolume is a testVolume (leg 0, disk.img) with one mirror leg on
// the image file leg.raw: opened directly (leg "file"), or served by
// qemu-nbd (leg "qemu-nbd") and reached through blockdev/nbdclient.
type mirrorVolume struct {
	*testVolume
	legPath string // the mirror leg's image file
	legName string // as the store records it: the path, or the NBD URL
	legDev  device.Device
}

func newMirrorVolume(t *testing.T, dir string, size int64, leg string) *mirrorVolume {
	t.Helper()
	tv := newTestVolume(t, dir, size, "4096+8")
	m := &mirrorVolume{testVolume: tv, legPath: filepath.Join(dir, "leg.raw")}
	var err error
	switch leg {
	case "file":
		m.legName = m.legPath
		m.legDev, err = device.CreateImage(m.legPath, size, device.FileOptions{})
	case "qemu-nbd":
		if err := os.WriteFile(m.legPath, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(m.legPath, size); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(dir, "leg.sock")
		startQemuNBD(t, sock, m.legPath)
		m.legName = "nbd+unix:///?socket=" + sock
		m.legDev, err = nbdclient.Open(context.Background(), m.legName, nbdclient.Options{})
	default:
		t.Fatalf("no leg kind %q", leg)
	}
	if err != nil {
		t.Fatal(err)
	}
	// The volume first (it syncs its legs as it closes), then the leg,
	// then (its cleanup was registered earlier) qemu-nbd.
	t.Cleanup(func() { tv.close(); m.legDev.Close() })
	if err := tv.vol.AddMirror(blockdev.Mirror{Name: m.legName, Dev: m.legDev}); err != nil {
		t.Fatal(err)
	}
	if _, err := tv.vol.Resync(context.Background(), blockdev.ResyncOptions{}); err != nil {
		t.Fatal(err)
	}
	return m
}

// legBlocks returns the blocks of both legs' files as they are now.
func (m *mirrorVolume) legBlocks(t *testing.T) (leg0, leg1 func(lba int64) []byte) {
	t.Helper()
	if err := m.vol.Sync(); err != nil {
		t.Fatal(err)
	}
	var b [2][]byte
	for k, p := range []string{m.path, m.legPath} {
		var err error
		if b[k], err = os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	bs := int64(m.vol.BlockSize())
	return func(lba int64) []byte { return b[0][lba*bs : (lba+1)*bs] },
		func(lba int64) []byte { return b[1][lba*bs : (lba+1)*bs] }
}

// same checks that both legs' files hold what the volume reads.
func (m *mirrorVolume) same(t *testing.T) {
	t.Helper()
	if err := m.vol.Sync(); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, m.vol.Size())
	if _, err := m.vol.ReadAt(want, 0); err != nil {
		t.Fatalf("reading the volume: %v", err)
	}
	for leg, p := range []string{m.path, m.legPath} {
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if i := firstDiff(got, want); i >= 0 {
			t.Errorf("leg %d (%s) differs from what the volume reads from byte %d (block %d)", leg, p, i, i/int64(m.vol.BlockSize()))
		}
	}
}

func firstDiff(a, b []byte) int64 {
	if len(a) != len(b) {
		return int64(min(len(a), len(b)))
	}
	for i := range a {
		if a[i] != b[i] {
			return int64(i)
		}
	}
	return -1
}

// rot overwrites 4 KiB blocks of the image file at path with garbage,
// through the page cache, behind the server's back.
type rot struct {
	f    *os.File
	r    *rand.Rand
	mu   sync.Mutex
	hits map[int64]bool // blocks overwritten
}

func newRot(t *testing.T, path string, seed uint64) *rot {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &rot{f: f, r: rand.New(rand.NewPCG(seed, 40)), hits: map[int64]bool{}}
}

// block overwrites block b (of 4 KiB) with garbage.
func (r *rot) block(t *testing.T, b int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := make([]byte, 4096)
	for i := range g {
		g[i] = byte(r.r.Uint32())
	}
	if _, err := r.f.WriteAt(g, b*4096); err != nil {
		t.Error(err)
	}
	r.hits[b] = true
}

// while overwrites a random block of the first blocks every interval
// until stop, which returns how many it overwrote.
func (r *rot) while(t *testing.T, blocks int64, interval time.Duration) (stop func() int) {
	done, ended := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				ended <- n
				return
			case <-tick.C:
				r.mu.Lock()
				b := r.r.Int64N(blocks)
				r.mu.Unlock()
				r.block(t, b)
				n++
			}
		}
	}()
	return func() int { close(done); return <-ended }
}

// TestKernelExt4Mirror is ext4 through nbdfuse and a loop device on a
// mirrored export (leg 0 the image, leg 1 an image file or a qemu-nbd
// export in another process): random 4 KiB blocks of leg 0 are
// overwritten with garbage behind the server's back while files are
// copied onto the filesystem (each file fsynced, so that its blocks
// reach the server during the rot), and some blocks of each file once it
// is written. Read back through a fresh nbdfuse and loop device, every
// file has its checksum, e2fsck -fn is clean, no request failed (no EIO
// for the client), and the findings are the blocks the reads repaired,
// from leg 1. A repair of the whole volume then leaves both legs holding
// what the volume reads. With the qemu-nbd leg, the leg's file then rots
// behind qemu-nbd and a repair mends it from leg 0.
func TestKernelExt4Mirror(t *testing.T) {
	needKernel(t)
	for _, leg := range []string{"file", "qemu-nbd"} {
		t.Run("leg="+leg, func(t *testing.T) {
			if leg == "qemu-nbd" {
				need(t, "qemu-nbd")
			}
			testKernelExt4Mirror(t, leg)
		})
	}
}

func testKernelExt4Mirror(t *testing.T, leg string) {
	size, files, fileSize := int64(64<<20), 8, 1<<20
	if testing.Short() {
		size, files = 32<<20, 4
	}
	blocks := size / 4096
	dir := t.TempDir()
	m := newMirrorVolume(t, dir, size, leg)
	var fl failures
	ts := startServer(t, dir, []Export{{Name: "disk", Volume: m.vol}}, Options{OnFailure: fl.add})
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

	// Copy the files while leg 0 rots, a block a millisecond.
	rt := newRot(t, m.path, uint64(size))
	stop := rt.while(t, blocks, time.Millisecond)
	sums := map[string][32]byte{}
	r := rand.New(rand.NewPCG(40, 1))
	for i := range files {
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
			stop()
			t.Fatalf("copying %s: %v", name, err)
		}
	}
	run(t, "umount", mnt)
	mounted = false
	during := stop()

	// Some blocks of every file rot too, so that reading the files meets
	// bad blocks whatever the rot above hit.
	var fileBlocks []int64
	for name := range sums {
		out := run(t, "debugfs", "-R", "blocks /"+name, loop)
		var bs []int64
		for _, f := range strings.Fields(lastLine(out)) {
			b, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				t.Fatalf("debugfs blocks /%s: %q", name, out)
			}
			bs = append(bs, b)
		}
		if len(bs) != fileSize/4096 {
			t.Fatalf("debugfs blocks /%s: %d blocks, want %d", name, len(bs), fileSize/4096)
		}
		for range 4 {
			fileBlocks = append(fileBlocks, bs[r.IntN(len(bs))])
		}
	}
	// A fresh nbdfuse and loop device: no cache holds a block, every read
	// reaches the server.
	undo()
	undo = func() {}
	for _, b := range fileBlocks {
		rt.block(t, b)
	}
	loop, undo = fuseFile(t, dir, ts.sock)
	checkCopied(t, loop, mnt, sums, &mounted)
	if f := fl.get(); len(f) != 0 {
		t.Errorf("%d requests failed, the first: %+v", len(f), f[0])
	}

	// The findings: every block a read met bad was repaired from leg 1,
	// on the medium: leg 0 holds leg 1's copy again.
	repaired := 0
	leg0, leg1 := m.legBlocks(t)
	for _, f := range m.findings(t) {
		if f.State != store.FindingRepaired || f.Leg != 0 || !strings.HasPrefix(f.Source, "leg 1 (") {
			t.Errorf("finding %+v, want one repaired on leg 0 from leg 1", f)
		}
		if !bytes.Equal(leg0(f.LBA), leg1(f.LBA)) {
			t.Errorf("block %d, repaired, differs between the legs", f.LBA)
		}
		repaired++
	}
	t.Logf("leg 0: %d blocks rotted during the copy, %d later; %d findings repaired by reads", during, len(fileBlocks), repaired)
	if repaired == 0 {
		t.Error("no finding repaired: the reads met no bad block")
	}
	for _, l := range m.vol.Legs() {
		if !l.Online || l.StaleBlocks != 0 {
			t.Errorf("leg %d: %+v, want online and in sync", l.Leg, l)
		}
	}

	// A repair of the whole volume mends what the reads did not meet (the
	// blocks read from leg 1, the blocks no read asked for); the legs then
	// hold what the volume reads.
	rep, err := m.vol.Repair(t.Context(), nil, blockdev.RepairOptions{})
	if err != nil || rep.Unrepairable != 0 {
		t.Fatalf("repair: %v, %+v", err, rep)
	}
	t.Logf("repair of leg 0: %d blocks repaired", rep.Repaired)
	m.same(t)

	if leg != "qemu-nbd" {
		return
	}
	// The other way: leg 1's file rots behind qemu-nbd; a repair mends it
	// from leg 0.
	rt1 := newRot(t, m.legPath, 41)
	for range 64 {
		rt1.block(t, rt1.r.Int64N(blocks))
	}
	rep, err = m.vol.Repair(t.Context(), nil, blockdev.RepairOptions{})
	if err != nil || rep.Unrepairable != 0 || rep.Repaired != int64(len(rt1.hits)) {
		t.Fatalf("repair of leg 1: %v, %+v; want %d blocks repaired", err, rep, len(rt1.hits))
	}
	mended := map[int64]bool{}
	for _, f := range m.findings(t) {
		if f.State == store.FindingRepaired && f.Leg == 1 && strings.HasPrefix(f.Source, "leg 0 (") {
			mended[f.LBA] = true
		}
	}
	for b := range rt1.hits {
		if !mended[b] {
			t.Errorf("block %d: no finding repaired on leg 1 from leg 0", b)
		}
	}
	m.same(t)
}
