package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/difctl/difctl/store"
)

// writeManifest stores a raw manifest for the default volume, as a hostile
// or damaged store could hold it.
func writeManifest(t *testing.T, url, json string) {
	t.Helper()
	kv, err := store.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	vol := "default"
	key := append([]byte{'T', byte(len(vol))}, vol...)
	key = append(key, 'M')
	b := kv.NewBatch()
	b.Set(key, []byte(json))
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
}

// A manifest is checked against the image before it is used: a hostile
// device_size (2^62 bytes took inspect over ten minutes) is refused at
// once, and a device_id with control characters (which names no image
// file: the data identifies one) is printed escaped. A manifest without
// pages is damaged from schema 2 on, unwritten in schema 1.
func TestInspectHostileManifest(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	if err := os.WriteFile(img, make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, size, id string
		schemas        []int
		code           int
		want           string // in stdout or stderr
	}{
		{"device_size=2^62", fmt.Sprint(uint64(1) << 62), "img", []int{1, 2}, exitOperational, "a volume may have at most 268435456 pages"},
		{"device_size=2^40", fmt.Sprint(uint64(1) << 40), "img", []int{1, 2}, exitOperational, "the store protects 1099511627776 bytes, the image has 65536"},
		{"device_id=control", fmt.Sprint(64 << 10), "by-id:img\x1b[2J\x07", []int{1}, exitOK, `id "by-id:img\x1b[2J\a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := "pebble:" + filepath.Join(dir, tc.name+".difdb")
			for _, schema := range tc.schemas {
				writeManifest(t, url, fmt.Sprintf(`{"kind":"difctl.store.manifest","schema":%d,"format":"512+8:crc16:type1:pi-last:dix","block_size":512,"tuple_size":8,"sector_sums":true,"page_tuples":1024,"device_size":%s,"device_id":%s,"created":"2026-01-01T00:00:00Z"}`,
					schema, tc.size, jsonString(tc.id)))
				var stdout, stderr bytes.Buffer
				t0 := time.Now()
				code := run(context.Background(), []string{"inspect", "--store", url, img}, nil, &stdout, &stderr)
				if code != tc.code || !strings.Contains(stdout.String()+stderr.String(), tc.want) {
					t.Errorf("schema %d: exit %d, stdout %q, stderr %q, want %d and %q", schema, code, stdout.String(), stderr.String(), tc.code, tc.want)
				}
				if strings.ContainsAny(stderr.String()+stdout.String(), "\x1b\x07") {
					t.Errorf("schema %d: raw control characters printed", schema)
				}
				if d := time.Since(t0); d > 10*time.Second {
					t.Errorf("schema %d: inspect took %v", schema, d)
				}
			}
		})
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
