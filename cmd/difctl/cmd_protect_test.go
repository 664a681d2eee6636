package main

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/difctl/difctl/store"
)

// A store that holds an image's records but lost its manifest (as a damaged
// store may) is not re-protected: that would checksum the data as it is
// now. --reprotect does it, explicitly.
func TestProtectRefusesLostManifest(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	randomImage(t, img, 256<<10, 1)
	if code, out := difctl(t, "protect", img); code != exitOK {
		t.Fatalf("protect: %d %s", code, out)
	}
	// Lose the manifest record behind difctl's back.
	kv, err := store.Open("pebble:" + img + storeSuffix)
	if err != nil {
		t.Fatal(err)
	}
	key := append([]byte{'T', byte(len("default"))}, "default"...)
	b := kv.NewBatch()
	b.Delete(append(key, 'M'))
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	kv.Close()
	// The data changes meanwhile (the damage protect must not launder).
	data, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	data[1000] ^= 1
	os.WriteFile(img, data, 0o600)

	code, out := difctl(t, "protect", img)
	if code != exitOperational || !strings.Contains(out, "no manifest") || !strings.Contains(out, "--reprotect") {
		t.Fatalf("protect over a lost manifest: exit %d: %s", code, out)
	}
	if code, out := difctl(t, "protect", "--reprotect", img); code != exitOK {
		t.Fatalf("protect --reprotect: exit %d: %s", code, out)
	}
	if code, out := difctl(t, "verify", img); code != exitOK {
		t.Fatalf("verify after --reprotect: exit %d: %s", code, out)
	}
}

// --reprotect keeps what the volume was: its format and tags, and a keyed
// volume stays keyed under its own key. Without the key, or with another
// volume's, it is refused before anything is deleted (the verify of a cron
// job must not turn into "volume is not keyed"). Dropping the key takes
// --drop-key and the key.
func TestReprotectKeepsFormatAndKey(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	if err := os.WriteFile(img, make([]byte, 256<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	keyFile := func(name string) string {
		b := make([]byte, 32)
		rand.Read(b)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key, other := keyFile("key"), keyFile("other")
	if code, out := difctl(t, "protect", "--format", "4096+8", "--app-tag", "0x1234", "--key-file", key, img); code != exitOK {
		t.Fatalf("protect: %d %s", code, out)
	}
	if code, out := difctl(t, "protect", "--reprotect", img); code != exitUsage || !strings.Contains(out, "keyed volume") {
		t.Errorf("--reprotect without the key: exit %d: %s", code, out)
	}
	if code, out := difctl(t, "protect", "--reprotect", "--key-file", other, img); code != exitOperational || !strings.Contains(out, "wrong key") {
		t.Errorf("--reprotect with another key: exit %d: %s", code, out)
	}
	// Still the keyed 4096+8 volume it was.
	if code, out := difctl(t, "verify", "--key-file", key, img); code != exitOK || !strings.Contains(out, "4096+8") || !strings.Contains(out, "keyed tags checked") {
		t.Fatalf("verify after the refused reprotects: exit %d: %s", code, out)
	}
	if code, out := difctl(t, "protect", "--reprotect", "--key-file", key, img); code != exitOK {
		t.Fatalf("--reprotect with the key: exit %d: %s", code, out)
	}
	code, out := difctl(t, "inspect", img)
	if code != exitOK || !strings.Contains(out, "4096+8") || !strings.Contains(out, "app tag 0x1234") {
		t.Errorf("after --reprotect: format and tags changed: %s", out)
	}
	if code, out := difctl(t, "verify", "--key-file", key, img); code != exitOK || !strings.Contains(out, "keyed tags checked") {
		t.Fatalf("verify after --reprotect: exit %d: %s", code, out)
	}
	if code, out := difctl(t, "protect", "--reprotect", "--drop-key", img); code != exitUsage {
		t.Errorf("--drop-key without the key: exit %d: %s", code, out)
	}
	if code, out := difctl(t, "protect", "--reprotect", "--drop-key", "--key-file", key, img); code != exitOK {
		t.Fatalf("--drop-key with the key: exit %d: %s", code, out)
	}
	if code, out := difctl(t, "verify", img); code != exitOK || strings.Contains(out, "keyed") || !strings.Contains(out, "4096+8") {
		t.Errorf("verify after --drop-key: exit %d: %s", code, out)
	}
}
