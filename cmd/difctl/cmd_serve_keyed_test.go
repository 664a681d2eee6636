package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/store"
)

// TestServeKeyed serves a keyed volume through qemu-io: with the key,
// writes produce keyed tags (difctl verify with the key is clean after)
// and reads check them (a block whose data an attacker changed, with its
// tuple recomputed, fails with an I/O error while it passes the CRC
// check); without the key the volume is served read-only, says so on
// stderr, and reads verify the tuples only.
func TestServeKeyed(t *testing.T) {
	if _, err := exec.LookPath("qemu-io"); err != nil {
		t.Skip("qemu-io is not installed (Debian: qemu-utils)")
	}
	dir := t.TempDir()
	im := filepath.Join(dir, "k.img")
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, bytes.Repeat([]byte{0x3c}, blockdev.KeySize), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(im, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"protect", "--format", "4096+8", "--key-file", keyFile, im}, nil, &out, &errb); code != 0 {
		t.Fatalf("protect: %d %s", code, errb.String())
	}
	sock := filepath.Join(dir, "k.sock")
	uri := "nbd+unix:///k.img?socket=" + sock
	qemu := func(cmds ...string) (string, error) {
		args := []string{"-f", "raw"}
		if cmds[0] == "-r" {
			args, cmds = append(args, "-r"), cmds[1:]
		}
		for _, c := range cmds {
			args = append(args, "-c", c)
		}
		o, err := exec.Command("qemu-io", append(args, uri)...).CombinedOutput()
		return string(o), err
	}
	// serve runs the server while fn talks to it, then stops it as
	// SIGTERM would; it returns the server's stderr and exit status.
	serve := func(key keyFlags, fn func()) (string, int) {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		o := serveOptions{Images: []string{im}, Socket: sock, MaxConns: 4}
		o.Key = key
		srv := startServe(t, ctx, o)
		if srv.ended {
			return srv.stderr.String(), exitCode(ctx, srv.err, true)
		}
		fn()
		cancel(&signalError{sig: syscall.SIGTERM})
		stopped, err := srv.wait()
		if !stopped {
			t.Fatal("serve did not stop")
		}
		return srv.stderr.String(), exitCode(ctx, err, true)
	}
	withKey := keyFlags{File: keyFile}

	// With the key: a write and a read back.
	stderr, code := serve(withKey, func() {
		if o, err := qemu("write -P 0x61 0 64k", "flush", "read -P 0x61 0 64k"); err != nil || strings.Contains(o, "error") {
			t.Errorf("qemu-io with the key: %v\n%s", err, o)
		}
	})
	if code != exitCancelled {
		t.Fatalf("serve with the key: exit %d\n%s", code, stderr)
	}
	if strings.Contains(stderr, "read-only") {
		t.Errorf("served read-only with its key:\n%s", stderr)
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"verify", "--key-file", keyFile, im}, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), "keyed tags checked") {
		t.Fatalf("verify with the key after serving: %d\n%s%s", code, out.String(), errb.String())
	}

	// The attacker: block 3's data changed, its tuple recomputed.
	forgeBlock(t, im, 3)

	// With the key the forged block fails the read; so does block 4 of
	// the same tag page, whose MAC seals the edited tuple page.
	stderr, code = serve(withKey, func() {
		if o, err := qemu("read -P 0x61 12k 4k"); err == nil || !strings.Contains(o, "Input/output error") {
			t.Errorf("read of the forged block with the key: %v\n%s", err, o)
		}
		if o, err := qemu("read -P 0x61 16k 4k"); err == nil || !strings.Contains(o, "Input/output error") {
			t.Errorf("read of block 4, beside the edited tuple: %v\n%s", err, o)
		}
	})
	if code != exitCancelled|exitUncorrected || !strings.Contains(stderr, "block 3: keyed-tag") || !strings.Contains(stderr, "block 4: keyed-tag") {
		t.Errorf("serve of the forged volume with the key: exit %d, stderr:\n%s", code, stderr)
	}

	// Without the key: read-only, said on stderr; the forged block passes
	// the tuple check, and writes are refused.
	stderr, code = serve(keyFlags{}, func() {
		if o, err := qemu("-r", "read -v 12k 16"); err != nil || strings.Contains(o, "error") {
			t.Errorf("read without the key: %v\n%s", err, o)
		}
		// The export itself is read-only: a writable open is refused.
		if o, err := qemu("write -P 0x62 64k 4k"); err == nil || !strings.Contains(o, "Permission denied") {
			t.Errorf("writable open without the key: %v\n%s", err, o)
		}
	})
	if code != exitCancelled {
		t.Errorf("serve without the key: exit %d\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "k.img is a keyed volume and no key was given (--key-file or --key-env): serving it read-only, with its keyed check skipped") {
		t.Errorf("stderr does not say the volume is served read-only without its key:\n%s", stderr)
	}
	got, _ := os.ReadFile(im)
	if got[64<<10] != 0 {
		t.Error("the write without the key reached the image")
	}

	// A key for an unkeyed image is refused.
	plain := filepath.Join(dir, "p.img")
	if err := os.WriteFile(plain, make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := run(context.Background(), []string{"protect", "--format", "4096+8", plain}, nil, &out, &errb); code != 0 {
		t.Fatal("protect p.img")
	}
	errb.Reset()
	// (Bounded: a server that wrongly started stops after 20 s.)
	pctx, pcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer pcancel()
	if code := run(pctx, []string{"serve", "--key-file", keyFile, "--socket", filepath.Join(dir, "p.sock"), plain}, nil, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), "not keyed") {
		t.Errorf("serve --key-file of an unkeyed image: exit %d\n%s", code, errb.String())
	}
}

// forgeBlock flips a bit of block lba of image and stores the tuple and
// sector sum that make it pass the CRC checks, as an attacker without the
// key can.
func forgeBlock(t *testing.T, image string, lba int64) {
	t.Helper()
	dev, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	kv, err := store.OpenWith("pebble:"+image+storeSuffix, store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	tu, err := store.OpenTuples(kv, blockdev.DefaultVolumeName, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := tu.Manifest()
	f := dif.MustFormat(m.Format).WithLayout(dif.Separate)
	b := make([]byte, f.BlockSize())
	if _, err := dev.ReadAt(b, lba*int64(len(b))); err != nil {
		t.Fatal(err)
	}
	b[100] ^= 0x04
	if _, err := dev.WriteAt(b, lba*int64(len(b))); err != nil {
		t.Fatal(err)
	}
	tuple := make([]byte, f.TupleSize())
	if err := f.Generate(b, tuple, dif.Params{RefTag: m.InitialRefTag + uint64(lba), AppTag: m.AppTag, LBA: lba}); err != nil {
		t.Fatal(err)
	}
	var sums []uint32
	if m.SectorSums {
		sums = []uint32{crc32c.Checksum(b)}
	}
	if err := tu.WriteRange(lba, tuple, sums, true); err != nil {
		t.Fatal(err)
	}
}
