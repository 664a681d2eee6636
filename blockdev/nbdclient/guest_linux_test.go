package nbdclient

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/nbd"
	"github.com/difctl/difctl/internal/guest"
	"golang.org/x/sys/unix"
)

// The ioctls of the kernel's NBD client (linux/nbd.h: _IO(0xab, nr)).
const (
	nbdSetSock       = 0xab00
	nbdSetBlksize    = 0xab01
	nbdDoIt          = 0xab03
	nbdClearSock     = 0xab04
	nbdClearQue      = 0xab05
	nbdSetSizeBlocks = 0xab07
	nbdDisconnect    = 0xab08
	nbdSetTimeout    = 0xab09
	nbdSetFlags      = 0xab0a
)

// TestGuestKernelClient: the Linux kernel's own NBD client (nbd.ko) on a
// protected volume served by difctl's NBD server. In a guest, the test
// serves a fresh 4096+8 volume on a unix socket, negotiates as this
// package's client does and hands the socket to /dev/nbd0 (NBD_SET_SOCK,
// NBD_DO_IT). Then mkfs.ext4, mount, writes, reads after a remount,
// unmount and e2fsck -fn all pass; a block of a file corrupted behind the
// server (on its device) gives EIO to the kernel, through the block device
// and through the file system.
func TestGuestKernelClient(t *testing.T) {
	if !guest.Run(t, guest.Config{
		Modules:  []string{"ext4", "crc32c_generic"},
		Binaries: []string{"/usr/sbin/mkfs.ext4", "/usr/sbin/e2fsck"},
		Timeout:  4 * time.Minute,
	}) {
		return
	}
	const size = 64 << 20
	rs := startRepoServer(t, size, false, nbd.Options{})
	nb := attachKernel(t, rs.sock, "disk")

	run(t, "mkfs.ext4", "-F", "-q", "-b", "4096", nb)
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "mount", "-t", "ext4", nb, mnt)
	want := map[string][]byte{}
	for i, n := range []int{1, 4096, 3 << 20, 8<<20 + 17} {
		name := filepath.Join(mnt, string(rune('a'+i)))
		want[name] = pattern(n, uint64(100+i))
		if err := os.WriteFile(name, want[name], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(t, "umount", mnt)
	run(t, "mount", "-t", "ext4", "-o", "ro", nb, mnt)
	for name, w := range want {
		got, err := os.ReadFile(name)
		if err != nil || !bytes.Equal(got, w) {
			t.Fatalf("%s after a remount: %d bytes, %v; want %d bytes as written", name, len(got), err, len(w))
		}
	}
	run(t, "umount", mnt)
	run(t, "e2fsck", "-f", "-n", nb)

	// Rot one 4 KiB block of file "c" on the server's device, behind its
	// back: the kernel must get an I/O error for it, not the bytes.
	c := want[filepath.Join(mnt, "c")]
	dev := make([]byte, size)
	if _, err := rs.dev.ReadAt(dev, 0); err != nil {
		t.Fatal(err)
	}
	const blk = 4096
	needle := c[blk : 2*blk] // the file's second block, 4096-aligned in it
	at := -1
	for off := 0; off+blk <= size; off += blk {
		if bytes.Equal(dev[off:off+blk], needle) {
			at = off
			break
		}
	}
	if at < 0 {
		t.Fatal("file c's second block is nowhere on the device")
	}
	flip := []byte{dev[at+100] ^ 0x40}
	if _, err := rs.dev.WriteAt(flip, int64(at+100)); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(nb, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := device.AlignedBuffer(blk)
	if _, err := f.ReadAt(buf, int64(at)); !errors.Is(err, syscall.EIO) {
		t.Errorf("O_DIRECT read of the rotted block at %d through %s: %v, want EIO", at, nb, err)
	}
	if _, err := f.ReadAt(buf, int64(at+blk)); err != nil {
		t.Errorf("read of the next block: %v", err)
	}
	f.Close()
	if err := unix.IoctlSetInt(int(openFd(t, nb)), unix.BLKFLSBUF, 0); err != nil {
		t.Fatal(err)
	}
	run(t, "mount", "-t", "ext4", "-o", "ro", nb, mnt)
	if _, err := os.ReadFile(filepath.Join(mnt, "c")); !errors.Is(err, syscall.EIO) {
		t.Errorf("reading file c through ext4 with a rotted block: %v, want EIO", err)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "b")); err != nil || !bytes.Equal(got, want[filepath.Join(mnt, "b")]) {
		t.Errorf("file b beside the rotted one: %v", err)
	}
	run(t, "umount", mnt)
}

// attachKernel connects the kernel's NBD client /dev/nbd0 to export on
// the unix socket sock: it negotiates in user space, then gives the kernel
// the socket, and disconnects it when the test ends.
func attachKernel(t *testing.T, sock, export string) string {
	t.Helper()
	const nb = "/dev/nbd0"
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tg := &target{network: "unix", addr: sock, export: export, redacted: "nbd+unix:///" + export}
	conn, ng, err := negotiate(ctx, nc, tg, nil)
	if err != nil {
		t.Fatal(err)
	}
	sf, err := conn.(*net.UnixConn).File() // a blocking duplicate, for the kernel
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	fd := int(openFd(t, nb))
	bs := uint64(4096)
	for _, c := range []struct {
		req uint
		v   int
	}{
		{nbdSetBlksize, int(bs)},
		{nbdSetSizeBlocks, int(ng.size / bs)},
		{nbdSetFlags, int(ng.flags)},
		{nbdSetTimeout, 60},
		{nbdSetSock, int(sf.Fd())},
	} {
		if err := unix.IoctlSetInt(fd, c.req, c.v); err != nil {
			t.Fatalf("ioctl %#x on %s: %v", c.req, nb, err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- unix.IoctlSetInt(fd, nbdDoIt, 0) }()
	t.Cleanup(func() {
		unix.IoctlSetInt(fd, nbdDisconnect, 0)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("NBD_DO_IT did not return 30 s after NBD_DISCONNECT")
		}
		unix.IoctlSetInt(fd, nbdClearQue, 0)
		unix.IoctlSetInt(fd, nbdClearSock, 0)
		sf.Close()
	})
	// The device is usable once the kernel reads its partition table.
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := os.ReadFile("/sys/block/nbd0/size")
		if err == nil && string(bytes.TrimSpace(st)) != "0" {
			return nb
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has no size 20 s after NBD_DO_IT (%v)", nb, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openFd opens path read-write for ioctls, until the test ends.
func openFd(t *testing.T, path string) uintptr {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f.Fd()
}

// run runs a command of the guest and fails the test if it fails.
func run(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}
