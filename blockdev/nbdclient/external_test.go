package nbdclient

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev/device"
)

// The tests in this file run against qemu-nbd and nbdkit, and skip when
// they are not installed.

// TestQemuNBD runs the concurrent workload against qemu-nbd serving a raw
// file, over a unix socket and TCP, then checks the file itself holds what
// the model says once the server has gone.
func TestQemuNBD(t *testing.T) {
	need(t, "qemu-nbd")
	const size = 8 << 20
	for _, transport := range []string{"unix", "tcp"} {
		t.Run("transport="+transport, func(t *testing.T) {
			dir := t.TempDir()
			img := filepath.Join(dir, "disk.img")
			if err := os.WriteFile(img, make([]byte, size), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"-f", "raw", "-x", "disk", "-t", "-e", "8", "--discard=unmap", "--cache=writeback"}
			var url string
			if transport == "unix" {
				sock := filepath.Join(dir, "qemu.sock")
				startProcess(t, sock, "qemu-nbd", append(args, "-k", sock, img)...)
				url = "nbd+unix:///disk?socket=" + sock
			} else {
				port := strconv.Itoa(freePort(t))
				startProcess(t, "", "qemu-nbd", append(args, "-b", "127.0.0.1", "-p", port, img)...)
				waitTCP(t, "127.0.0.1:"+port)
				url = "nbd://127.0.0.1:" + port + "/disk"
			}
			d := open(t, url, Options{MaxInflight: 16})
			in := d.Info()
			if !in.Flush || !in.WriteZeroes || d.Size() != size {
				t.Fatalf("info %+v", in)
			}
			model := make([]byte, size)
			workload(t, d, model, 8, 40, 11)
			if err := d.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			file, err := os.ReadFile(img)
			if err != nil {
				t.Fatal(err)
			}
			if i := firstDiff(file, model); i >= 0 {
				t.Fatalf("the image file differs from the model from byte %d", i)
			}
		})
	}
}

// TestQemuNBDReadOnly: qemu-nbd -r advertises a read-only export.
func TestQemuNBDReadOnly(t *testing.T) {
	need(t, "qemu-nbd")
	dir := t.TempDir()
	img := filepath.Join(dir, "disk.img")
	want := pattern(1<<20, 4)
	if err := os.WriteFile(img, want, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "qemu.sock")
	startProcess(t, sock, "qemu-nbd", "-r", "-f", "raw", "-k", sock, "-t", img)
	d := open(t, "nbd+unix:///?socket="+sock, Options{})
	if !d.Info().ReadOnly {
		t.Error("not read-only")
	}
	if err := d.writeErr(make([]byte, 512), 0); !errors.Is(err, device.ErrReadOnly) {
		t.Errorf("WriteAt: %v", err)
	}
	got := make([]byte, len(want))
	if _, err := d.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadAt: %v, equal %v", err, bytes.Equal(got, want))
	}
	if err := d.Sync(); err != nil {
		t.Errorf("Sync: %v", err)
	}
}

// nbdkit serves plugin args with nbdkit on a unix socket until the test
// ends and returns the socket.
func nbdkit(t *testing.T, args ...string) string {
	t.Helper()
	need(t, "nbdkit")
	sock := filepath.Join(t.TempDir(), "nbdkit.sock")
	startProcess(t, sock, "nbdkit", append([]string{"-f", "--exit-with-parent", "-U", sock}, args...)...)
	return "nbd+unix:///?socket=" + sock
}

// TestNbdkit runs the concurrent workload against nbdkit's memory plugin.
func TestNbdkit(t *testing.T) {
	d := open(t, nbdkit(t, "memory", "8M"), Options{})
	workload(t, d, make([]byte, 8<<20), 8, 40, 13)
}

// TestNbdkitBlockSizePolicy: nbdkit advertising (and enforcing, with
// blocksize-error-policy=error) a 4096-byte minimum and a 64 KiB maximum:
// the device's logical block is 4096, unaligned requests are refused
// locally, and long ones are split so that the server accepts them.
func TestNbdkitBlockSizePolicy(t *testing.T) {
	url := nbdkit(t, "--filter=blocksize-policy", "memory", "4M", "blocksize-minimum=4096",
		"blocksize-preferred=16384", "blocksize-maximum=65536", "blocksize-error-policy=error")
	d := open(t, url, Options{})
	in := d.Info()
	if in.MinBlock != 4096 || in.PreferredBlock != 16384 || in.MaxBlock != 65536 ||
		d.LogicalBlockSize() != 4096 || d.PhysicalBlockSize() != 16384 {
		t.Fatalf("info %+v, block sizes %d/%d", in, d.LogicalBlockSize(), d.PhysicalBlockSize())
	}
	p := pattern(1<<20, 8)
	if _, err := d.WriteAt(p, 8192); err != nil {
		t.Fatalf("a 1 MiB write (16 requests of 64 KiB): %v", err)
	}
	got := make([]byte, len(p))
	if _, err := d.ReadAt(got, 8192); err != nil || !bytes.Equal(got, p) {
		t.Fatalf("ReadAt: %v, equal %v", err, bytes.Equal(got, p))
	}
	if err := d.Discard(0, 2<<20); err != nil {
		t.Fatalf("Discard of 2 MiB: %v", err)
	}
	if err := d.writeErr(make([]byte, 512), 512); !errors.Is(err, device.ErrUnaligned) {
		t.Errorf("512-byte write: %v, want device.ErrUnaligned", err)
	}
	workload(t, d, make([]byte, 4<<20), 4, 30, 17)
}

// TestNbdkitErrors: nbdkit's error filter fails every read with EIO: the
// device reports an I/O error and goes on; writes still work.
func TestNbdkitErrors(t *testing.T) {
	d := open(t, nbdkit(t, "--filter=error", "memory", "1M", "error-pread=EIO", "error-pread-rate=100%"), Options{})
	_, err := d.ReadAt(make([]byte, 4096), 8192)
	var ioe *device.IOError
	var re *ReplyError
	if !errors.As(err, &ioe) || !errors.As(err, &re) || re.Errno != 5 || !errors.Is(err, syscall.EIO) ||
		ioe.Op != "read" || ioe.Off != 8192 || ioe.Len != 4096 {
		t.Fatalf("read: %v, want a *device.IOError of the read wrapping an EIO *ReplyError", err)
	}
	if _, err := d.WriteAt(make([]byte, 4096), 0); err != nil {
		t.Fatalf("write after a read error: %v", err)
	}
}

// TestNbdkitTimeout: nbdkit's delay filter holds reads for 10 s; with a
// 300 ms request timeout the read fails with a *ConnError matching
// ErrTimeout in about that time, and the device is over.
func TestNbdkitTimeout(t *testing.T) {
	noLeak(t)
	d := open(t, nbdkit(t, "--filter=delay", "memory", "1M", "rdelay=10"), Options{RequestTimeout: 300 * time.Millisecond})
	start := time.Now()
	err := d.readErr(make([]byte, 512), 0)
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("the timed-out read returned after %v", el)
	}
	if ce := isConnEnd(t, err); !errors.Is(ce, ErrTimeout) {
		t.Fatalf("read: %v, want ErrTimeout", err)
	}
	isConnEnd(t, d.writeErr(make([]byte, 512), 0))
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestNbdkitBadSize: an export whose size is not a multiple of 512 cannot
// be a device.
func TestNbdkitBadSize(t *testing.T) {
	_, err := Open(t.Context(), nbdkit(t, "null", "1000"), Options{})
	var ee *ExportError
	if !errors.As(err, &ee) || !errors.Is(err, ErrBadExport) {
		t.Fatalf("Open: %v, want an *ExportError", err)
	}
	// With a 4096-byte logical block, 1 MiB + 512 does not fit either.
	_, err = Open(t.Context(), nbdkit(t, "null", fmt.Sprint(1<<20+512)), Options{BlockSize: 4096})
	if !errors.As(err, &ee) {
		t.Fatalf("Open with BlockSize 4096: %v, want an *ExportError", err)
	}
}
