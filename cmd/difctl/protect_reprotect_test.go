package main

import (
	"bytes"
	"context"
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
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	data := make([]byte, 256<<10)
	rand.Read(data)
	if err := os.WriteFile(img, data, 0o600); err != nil {
		t.Fatal(err)
	}
	difctl := func(args ...string) (int, string) {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, nil, &stdout, &stderr)
		return code, stdout.String() + stderr.String()
	}
	if code, out := difctl("protect", img); code != exitOK {
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
	data[1000] ^= 1
	os.WriteFile(img, data, 0o600)

	code, out := difctl("protect", img)
	if code != exitOperational || !strings.Contains(out, "no manifest") || !strings.Contains(out, "--reprotect") {
		t.Fatalf("protect over a lost manifest: exit %d: %s", code, out)
	}
	if code, out := difctl("protect", "--reprotect", img); code != exitOK {
		t.Fatalf("protect --reprotect: exit %d: %s", code, out)
	}
	if code, out := difctl("verify", img); code != exitOK {
		t.Fatalf("verify after --reprotect: exit %d: %s", code, out)
	}
}
