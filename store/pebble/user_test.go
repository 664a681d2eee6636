//go:build unix

package pebble_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/difctl/difctl/store"
	"github.com/difctl/difctl/store/pebble"
)

// A user who may only read a store's files can open it read-only (the lock
// is shared and the LOCK file opened read-only); a read-write open fails
// cleanly. Run as root, the test re-runs itself as nobody.
func TestReadOnlyUser(t *testing.T) {
	if dir := os.Getenv("DIFCTL_RO_STORE"); dir != "" {
		kv, err := pebble.Open(dir, store.OpenOptions{ReadOnly: true})
		if err != nil {
			t.Fatalf("read-only open as uid %d: %v", os.Getuid(), err)
		}
		if v, err := kv.Get([]byte("k")); err != nil || string(v) != "v" {
			t.Errorf("Get = %q, %v", v, err)
		}
		kv.Close()
		if kv, err := pebble.Open(dir, store.OpenOptions{}); err == nil {
			kv.Close()
			t.Error("read-write open succeeded for a user who may only read")
		} else if !errors.Is(err, os.ErrPermission) {
			t.Logf("read-write open: %v", err)
		}
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a child as another user")
	}
	base, err := os.MkdirTemp("", "difctl-ro-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	dir := filepath.Join(base, "db")
	kv, err := pebble.Open(dir, store.OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	b := kv.NewBatch()
	b.Set([]byte("k"), []byte("v"))
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	if err := kv.Close(); err != nil {
		t.Fatal(err)
	}
	// Let others read (not write) the store, as an administrator would.
	filepath.Walk(base, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			os.Chmod(p, fi.Mode().Perm()|0o005|(fi.Mode().Perm()&0o100)>>6)
		}
		return nil
	})
	os.Chmod(base, 0o755)
	if parent := filepath.Dir(base); parent != "/" {
		if fi, err := os.Stat(parent); err != nil || fi.Mode().Perm()&0o001 == 0 {
			t.Skipf("%s is not searchable by others", parent)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(base, "pebble.test") // where nobody may run it
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestReadOnlyUser$", "-test.v")
	cmd.Env = append(os.Environ(), "DIFCTL_RO_STORE="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			t.Skipf("cannot run the test binary as nobody: %v", err)
		}
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Logf("child:\n%s", out)
}
