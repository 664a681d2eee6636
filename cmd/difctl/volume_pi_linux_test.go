//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/nbdclient"
	"github.com/difctl/difctl/blockdev/nvme"
	"github.com/difctl/difctl/dif"
)

// The namespace of volumeDevicePI: 4096+8, Type 1, DIX.
const (
	volNS     = "/dev/nvme0n7"
	volBlocks = 64
)

// forgePI is a volume's device whose WriteWithPI changes the guard of
// block lba's tuple on its way to the namespace, as a memory or transfer
// error between the volume and the device would.
type forgePI struct {
	*nvme.VolumeDevice
	lba int64 // -1: none
}

func (f *forgePI) WriteWithPI(data, tuples []byte, off int64) error {
	bs := int64(f.LogicalBlockSize())
	if first := off / bs; first <= f.lba && f.lba < first+int64(len(data))/bs {
		tuples = bytes.Clone(tuples)
		tuples[(f.lba-first)*8] ^= 1
	}
	return f.VolumeDevice.WriteWithPI(data, tuples, off)
}

// devicePI reads the data and the metadata of blocks [lba, lba+n) of
// volNS through passthrough, as stored.
func devicePI(t *testing.T, lba, n int) (data, md []byte) {
	t.Helper()
	f, err := os.Open(volNS)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	nsid, err := nvme.NamespaceID(f)
	if err != nil {
		t.Fatal(err)
	}
	data, md = make([]byte, n*4096), make([]byte, n*8)
	if err := nvme.Read(f, nsid, uint64(lba), n, data, md); err != nil {
		t.Fatal(err)
	}
	return data, md
}

// volumeDevicePI (in the guest of TestGuestDevicePI) protects nvme0n7
// with a store and app tag 0x5a, which the kernel never writes, and
// writes it through the store-backed volume (docs/device-pi.md, "A
// protected volume on a namespace with PI"): difctl write (on its own and
// with --device-pi) and difctl serve --device-pi with an NBD client. The
// namespace then holds, as each written block's PI, the tuple the volume
// generated and stored (app tag 0x5a); the kernel reads the namespace
// through its own PI checks; verify is clean. A volume whose tuple of
// block 40 is changed on its way to the device (forgePI) gets the
// device's refusal as an integrity error (a *nvme.WriteCheckError for
// LBA 40, exit 4 in the CLI), and nothing of the write reaches the
// device. Another format, and a namespace with no PI, are refused with
// --device-pi.
func volumeDevicePI(t *testing.T) {
	const bs = 4096
	st := "/tmp/v7.difdb"
	out := mustDifctl(t, 0, "--json", "protect", "--device-pi", "--store", st, "--app-tag", "0x5a", volNS)
	if p := recordsOf(records(t, out), "protect"); len(p) != 1 || !strings.HasPrefix(fmt.Sprint(p[0]["format"]), "4096+8") {
		t.Fatalf("protect --device-pi: %s", out)
	}
	model := make([]byte, volBlocks*bs)
	// checkPI checks blocks [lba, lba+n): the namespace holds the model's
	// data with the tuples the volume generates, app tag 0x5a.
	checkPI := func(lba, n int) {
		t.Helper()
		data, md := devicePI(t, lba, n)
		if !bytes.Equal(data, model[lba*bs:(lba+n)*bs]) {
			t.Errorf("blocks [%d, %d): the namespace holds other data", lba, lba+n)
		}
		want := make([]byte, n*8)
		f := dif.MustFormat("4096+8:dix")
		if err := f.Generate(data, want, dif.Params{RefTag: uint64(lba), AppTag: 0x5a}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(md, want) {
			t.Errorf("blocks [%d, %d): the namespace's PI is not the volume's tuples:\n got %x\nwant %x", lba, lba+n, md[:16], want[:16])
		}
	}

	in := filepath.Join(t.TempDir(), "in")
	payload := blockPattern(777, 3*bs+bs/2)
	if err := os.WriteFile(in, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	// On its own: the store-backed image is such a namespace.
	recs := records(t, mustDifctl(t, 0, "--json", "write", "--store", st, volNS, "--offset", fmt.Sprint(2*bs+100), in))
	if w := recordsOf(recs, "write"); len(w) != 1 || w[0]["device_pi"] != true {
		t.Errorf("write: %v, want device_pi", recs)
	}
	copy(model[2*bs+100:], payload)
	checkPI(2, 4)
	// A reader of the block device's page cache that holds blocks 10 to
	// 13 (its open file keeps the cache alive) reads what the volume
	// then writes there through passthrough, not the cached blocks.
	cached, err := os.Open(volNS)
	if err != nil {
		t.Fatal(err)
	}
	defer cached.Close()
	old := make([]byte, 4*bs)
	if _, err := cached.ReadAt(old, 10*bs); err != nil {
		t.Fatal(err)
	}
	mustDifctl(t, 0, "write", "--device-pi", "--store", st, volNS, "--offset", fmt.Sprint(10*bs), in)
	copy(model[10*bs:], payload)
	checkPI(10, 4)
	if _, err := cached.ReadAt(old, 10*bs); err != nil || !bytes.Equal(old, model[10*bs:14*bs]) {
		t.Errorf("a buffered read after the volume's write: %v, or the data before it (the page cache was not invalidated)", err)
	}

	// difctl serve --device-pi, and an NBD client.
	ctx, cancel := context.WithCancelCause(context.Background())
	sock := "/tmp/v7.sock"
	srv := startServe(t, ctx, serveOptions{Images: []string{volNS}, Store: st, Socket: sock, MaxConns: 4, DevicePI: true, NoControl: true})
	if srv.ended {
		t.Fatalf("serve: %v; %s", srv.err, srv.stderr.String())
	}
	if !strings.Contains(srv.stderr.String(), "the volume's tuples are written as its PI") {
		t.Errorf("serve does not say that the namespace's PI is the volume's: %s", srv.stderr.String())
	}
	c, err := nbdclient.Open(ctx, "nbd+unix:///nvme0n7?socket="+sock, nbdclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	nb := slices.Concat(blockPattern(20, bs), blockPattern(21, bs), blockPattern(22, bs), blockPattern(23, bs))
	if _, err := c.WriteAt(nb, 20*bs); err != nil {
		t.Fatal(err)
	}
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	copy(model[20*bs:], nb)
	got := make([]byte, len(model))
	if _, err := c.ReadAt(got, 0); err != nil || !bytes.Equal(got, model) {
		t.Errorf("the NBD client reads back other data: %v", err)
	}
	c.Close()
	cancel(errors.New("test done"))
	if stopped, _ := srv.wait(); !stopped {
		t.Fatal("serve did not stop")
	}
	checkPI(20, 4)

	// A discard of blocks 21 and 22: zeros written through the device's
	// WriteAt, their PI generated from the volume's parameters.
	mustDifctl(t, 0, "discard", "--store", st, volNS, "--lba", "21", "--count", "2")
	clear(model[21*bs : 23*bs])
	checkPI(21, 2)

	if got := kernelRead(t, volNS, 0, volBlocks*bs); !bytes.Equal(got, model) {
		t.Error("the kernel reads back other data than the volume wrote")
	}
	mustDifctl(t, 0, "verify", "--store", st, volNS)

	t.Run("forged", func(t *testing.T) {
		kv, err := openStore(volNS, st, storeWrite)
		if err != nil {
			t.Fatal(err)
		}
		d, err := nvme.Open(volNS, true)
		if err != nil {
			t.Fatal(err)
		}
		vd, err := d.VolumeDevice(dif.MustFormat("4096+8"), dif.Params{AppTag: 0x5a, AppMask: 0xffff})
		if err != nil {
			d.Close()
			t.Fatal(err)
		}
		defer vd.Close()
		fd := &forgePI{vd, -1}
		v, err := blockdev.Open(context.Background(), fd, kv, blockdev.Options{})
		if err != nil {
			t.Fatal(err)
		}
		// Blocks 40 to 43 written first as they should be, then again
		// with block 40's tuple changed on the way.
		good := blockPattern(40, 4*bs)
		if _, err := v.WriteAt(good, 40*bs); err != nil {
			t.Fatal(err)
		}
		if err := v.Sync(); err != nil {
			t.Fatal(err)
		}
		copy(model[40*bs:], good)
		checkPI(40, 4)
		// The device's reads of a range that starts and ends inside
		// blocks.
		part := make([]byte, 2*bs+300)
		if _, err := vd.ReadAt(part, 40*bs+100); err != nil || !bytes.Equal(part, model[40*bs+100:42*bs+400]) {
			t.Errorf("ReadAt of %d bytes at %d: %v, or other data", len(part), 40*bs+100, err)
		}
		fd.lba = 40
		if _, err := v.WriteAt(bytes.Repeat([]byte{0xee}, 4*bs), 40*bs); err != nil {
			t.Fatal(err)
		}
		err = v.Sync()
		var wce *nvme.WriteCheckError
		if !errors.Is(err, dif.ErrIntegrity) || !errors.Is(err, dif.ErrGuard) || !errors.As(err, &wce) || wce.LBA != 40 {
			t.Errorf("Sync of a write whose tuple was changed on the way: %v, want the device's refusal of LBA 40's guard", err)
		}
		v.Close()
		kv.Close()
		checkPI(40, 4) // the old contents, with their PI
		// Recovery keeps the old data's tuples; the kernel reads it.
		mustDifctl(t, 0, "verify", "--store", st, volNS)
		if got := kernelRead(t, volNS, 40*bs, 4*bs); !bytes.Equal(got, model[40*bs:44*bs]) {
			t.Error("the kernel reads other data where the write was refused")
		}
	})

	t.Run("forged-cli", func(t *testing.T) {
		// difctl write whose tuple of block 50 is changed on its way:
		// exit 4 naming the LBA, nothing written from there on.
		testHookVolumePI = func(vd *nvme.VolumeDevice) device.Device { return &forgePI{vd, 50} }
		defer func() { testHookVolumePI = nil }()
		d0, md0 := devicePI(t, 50, 4)
		out := mustDifctl(t, 4, "write", "--store", st, volNS, "--offset", fmt.Sprint(50*bs), in)
		if !strings.Contains(out, "LBA 50") || !strings.Contains(out, "guard") {
			t.Errorf("write refused by the device: %q, want LBA 50's guard named", out)
		}
		testHookVolumePI = nil
		if d1, md1 := devicePI(t, 50, 4); !bytes.Equal(d0, d1) || !bytes.Equal(md0, md1) {
			t.Error("blocks 50 to 53 changed on the device")
		}
		mustDifctl(t, 0, "verify", "--store", st, volNS)
	})

	t.Run("refused", func(t *testing.T) {
		// A volume of another format (Type 3) on a namespace with PI:
		// refused with --device-pi (written as a plain block device
		// without).
		st2 := "/tmp/v7-type3.difdb"
		mustDifctl(t, 0, "protect", "--store", st2, "--block-size", "4096", "--type", "3", volNS)
		if out := mustDifctl(t, 8, "write", "--device-pi", "--store", st2, volNS, "--offset", "0", in); !strings.Contains(out, "cannot carry the PI") {
			t.Errorf("write --device-pi of a Type 3 volume on a Type 1 namespace: %q", out)
		}
		if out := mustDifctl(t, 8, "protect", "--device-pi", "--store", "/tmp/v7-x.difdb", "--type", "3", volNS); !strings.Contains(out, "cannot carry the PI") {
			t.Errorf("protect --device-pi --type 3 on a Type 1 namespace: %q", out)
		}
		if out := mustDifctl(t, 8, "protect", "--device-pi", "--store", "/tmp/n2.difdb", "/dev/nvme0n2"); !strings.Contains(out, "no metadata") {
			t.Errorf("protect --device-pi of a namespace with no metadata: %q", out)
		}
	})
}
