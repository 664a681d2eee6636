package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/difctl/difctl/blockdev"
)

// Key files must be regular files of mode 0600 or 0400 holding a key of
// 32 raw bytes or 64 hex digits; the key from the environment is 64 hex
// digits. Every refusal is a *blockdev.KeyError (ErrKey: exit 8), naming
// where the key came from.
func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	raw := bytes.Repeat([]byte{0xab}, blockdev.KeySize)
	want, err := blockdev.ParseKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	hexKey := []byte(fmt.Sprintf("%x\n", raw))
	write := func(name string, b []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		b    []byte
		mode os.FileMode
		ok   bool
	}{
		{"raw-0600", raw, 0o600, true},
		{"hex-0400", hexKey, 0o400, true},
		{"group-readable", raw, 0o640, false},
		{"world-readable", hexKey, 0o604, false},
		{"group-writable", raw, 0o620, false},
		{"short", raw[:31], 0o600, false},
		{"bad-hex", append(bytes.Repeat([]byte("zz"), 32), '\n'), 0o600, false},
	} {
		t.Run("file="+tc.name, func(t *testing.T) {
			p := write(tc.name, tc.b, tc.mode)
			k, err := readKeyFile(p)
			if tc.ok {
				if err != nil || *k != *want {
					t.Fatalf("got %v, %v", k, err)
				}
				return
			}
			var ke *blockdev.KeyError
			if !errors.As(err, &ke) || !errors.Is(err, blockdev.ErrKey) || ke.Source != "file "+p {
				t.Fatalf("got %v, want a *KeyError from the file", err)
			}
		})
	}
	if _, err := readKeyFile(filepath.Join(dir, "missing")); !errors.Is(err, blockdev.ErrKey) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := readKeyFile(dir); !errors.Is(err, blockdev.ErrKey) {
		t.Fatalf("directory: %v", err)
	}
	t.Setenv("DIFCTL_TEST_KEY", string(hexKey[:64]))
	if k, err := keyFromEnv("DIFCTL_TEST_KEY"); err != nil || *k != *want {
		t.Fatalf("from the environment: %v", err)
	}
	if _, err := keyFromEnv("DIFCTL_TEST_KEY_UNSET"); !errors.Is(err, blockdev.ErrKey) {
		t.Fatalf("unset variable: %v", err)
	}
}
