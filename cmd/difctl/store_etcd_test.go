package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/difctl/difctl/internal/etcdtest"
)

// startEtcd starts a one-member etcd on loopback ports, without fsync, and
// returns its client address.
func startEtcd(t *testing.T) string {
	t.Helper()
	return etcdtest.Start(t, 1, etcdtest.Options{NoFsync: true}).Hosts()
}

// The CLI takes an etcd URL wherever it takes --store: protect, write,
// verify, scrub and inspect run against a real etcd, and a corrupted block
// is still found through it.
func TestEtcdStoreURL(t *testing.T) {
	store := "etcd://" + startEtcd(t) + "/difctl/test"
	img := filepath.Join(t.TempDir(), "disk.img")
	data := bytes.Repeat([]byte("difctl on etcd. "), 64<<10/16)
	if err := os.WriteFile(img, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cli := func(stdin string, args ...string) (int, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, strings.NewReader(stdin), &stdout, &stderr)
		return code, stdout.String() + stderr.String()
	}
	for _, c := range []struct {
		stdin string
		args  []string
		code  int
	}{
		{"", []string{"protect", "--store", store, img}, exitOK},
		{"hello", []string{"write", "--store", store, "--offset", "4096", img}, exitOK},
		{"", []string{"verify", "--store", store, img}, exitOK},
		{"", []string{"scrub", "--store", store, img}, exitOK},
		{"", []string{"inspect", "--store", store, img}, exitOK},
	} {
		if code, out := cli(c.stdin, c.args...); code != c.code {
			t.Fatalf("difctl %s: exit %d, want %d:\n%s", strings.Join(c.args, " "), code, c.code, out)
		}
	}

	// Readers run together: three verifies at once all pass (each took the
	// writer's lock before, and two of three exited 8, "locked by another
	// writer").
	codes := make(chan string, 3)
	for range 3 {
		go func() {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), []string{"verify", "--store", store, img}, nil, &stdout, &stderr)
			codes <- fmt.Sprintf("%d %s", code, stderr.String())
		}()
	}
	for range 3 {
		if c := <-codes; !strings.HasPrefix(c, "0 ") {
			t.Errorf("one of three parallel verifies: exit %s", c)
		}
	}

	// On another host the image has another name: the same volume (the
	// name was compared before, and this exited 8).
	moved := filepath.Join(filepath.Dir(img), "sdc")
	if err := os.Rename(img, moved); err != nil {
		t.Fatal(err)
	}
	img = moved
	if code, out := cli("", "verify", "--store", store, img); code != exitOK {
		t.Fatalf("verify under another name: exit %d, want %d:\n%s", code, exitOK, out)
	}

	// Damage block 3 behind the store's back: verify reports it (exit 4).
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, 3*512+7); err != nil {
		t.Fatal(err)
	}
	f.Close()
	code, out := cli("", "verify", "--store", store, img)
	if code != exitUncorrected || !strings.Contains(out, "LBA 3:") {
		t.Fatalf("verify after damage: exit %d, want %d, with LBA 3:\n%s", code, exitUncorrected, out)
	}

	// An unknown scheme is still a usage error, and the message lists the
	// schemes linked in.
	code, out = cli("", "verify", "--store", "bogus://x/y", img)
	if code != exitUsage || !strings.Contains(out, "etcd, mem, pebble") {
		t.Fatalf("bogus scheme: exit %d, want %d, naming etcd, mem, pebble:\n%s", code, exitUsage, out)
	}
	// So are credentials in the URL (refused, and never printed) and a
	// URL without a key prefix.
	code, out = cli("", "verify", "--store", "etcd://alice:s3cret@"+strings.TrimPrefix(store, "etcd://"), img)
	if code != exitUsage || !strings.Contains(out, "credentials in the URL are refused") || strings.Contains(out, "s3cret") {
		t.Fatalf("credentials in the URL: exit %d, want %d, refused without the password:\n%s", code, exitUsage, out)
	}
	code, out = cli("", "verify", "--store", "etcd://127.0.0.1:1", img)
	if code != exitUsage || !strings.Contains(out, "names no key prefix") {
		t.Fatalf("no key prefix: exit %d, want %d:\n%s", code, exitUsage, out)
	}
}
