package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/difctl/difctl/internal/etcdtest"
)

// TestWitnessEtcd: --witness etcd://HOSTS/PREFIX with the witness's own
// user (allowed only its prefix, password from a file) finds a rollback of
// image and store together (exit 4); an unreachable witness, or refused
// credentials, is exit 8, and credentials in the URL exit 16.
func TestWitnessEtcd(t *testing.T) {
	c := etcdtest.Start(t, 1, etcdtest.Options{NoFsync: true})
	c.EnableAuth(t, etcdtest.User{Name: "witness", Password: "w1tness", Prefixes: []string{"wit/"}})
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	key := filepath.Join(dir, "key")
	img := filepath.Join(dir, "disk.img")
	for path, b := range map[string][]byte{
		pw:  []byte("w1tness\n"),
		key: []byte(strings.Repeat("3c", 32)),
		img: make([]byte, 1<<20),
	} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("DIFCTL_WITNESS_ETCD_USER", "witness")
	t.Setenv("DIFCTL_WITNESS_ETCD_PASSWORD_FILE", pw)
	wit := c.URL("wit/difctl")
	cli := func(stdin string, want int, args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, strings.NewReader(stdin), &stdout, &stderr)
		out := stdout.String() + stderr.String()
		if code != want {
			t.Fatalf("difctl %s: exit %d, want %d:\n%s", strings.Join(args, " "), code, want, out)
		}
		return out
	}
	cli("", exitOK, "protect", "--format", "4096+8", "--key-file", key, "--witness", wit, img)
	cli("", exitOK, "verify", "--key-file", key, "--witness", wit, img)

	// The attacker's copy of image and store, put back after a write.
	old := filepath.Join(dir, "old.img")
	if err := copyVolume(img, old); err != nil {
		t.Fatal(err)
	}
	cli("hello", exitOK, "write", "--key-file", key, "--witness", wit, "--offset", "8192", img)
	if err := copyVolume(old, img); err != nil {
		t.Fatal(err)
	}
	rolledBack := regexp.MustCompile(`rolled back to generation [0-9]+ \(witness has [0-9]+\)`)
	for _, args := range [][]string{
		{"verify", "--key-file", key, "--witness", wit, img},
		{"verify", "--witness", wit, img},
		{"scrub", "--key-file", key, "--witness", wit, img},
	} {
		if out := cli("", exitUncorrected, args...); !rolledBack.MatchString(out) {
			t.Fatalf("difctl %s: %s; want %s", strings.Join(args, " "), out, rolledBack)
		}
	}
	cli("", exitOK, "verify", "--key-file", key, img) // nothing else can tell

	// Refused credentials: exit 8, naming the witness.
	t.Setenv("DIFCTL_WITNESS_ETCD_PASSWORD_FILE", "")
	t.Setenv("DIFCTL_WITNESS_ETCD_PASSWORD", "nope")
	if out := cli("", exitOperational, "verify", "--key-file", key, "--witness", wit, img); !strings.Contains(out, "cannot open witness "+wit) || !strings.Contains(out, "authentication") {
		t.Fatalf("wrong password: %s", out)
	}
	// Credentials in the URL, or no prefix: usage errors.
	hosts := strings.TrimPrefix(c.URL(""), "etcd://")
	if out := cli("", exitUsage, "verify", "--witness", "etcd://witness:s3cret@"+hosts+"wit/difctl", img); strings.Contains(out, "s3cret") || !strings.Contains(out, "DIFCTL_WITNESS_ETCD_USER") {
		t.Fatalf("credentials in the URL: %s", out)
	}
	cli("", exitUsage, "verify", "--witness", "etcd://"+strings.TrimSuffix(hosts, "/"), img)

	// Nobody at the address: exit 8 within the dial timeout (5 s).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	t0 := time.Now()
	if out := cli("", exitOperational, "verify", "--key-file", key, "--witness", "etcd://"+addr+"/wit", img); !strings.Contains(out, "cannot open witness etcd://"+addr+"/wit") || !strings.Contains(out, "cluster unavailable") {
		t.Fatalf("unreachable witness: %s", out)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Fatalf("the unreachable witness took %v", d)
	}
}
