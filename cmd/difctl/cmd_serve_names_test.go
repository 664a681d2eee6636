package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestExportNames: file names when they are distinct, paths relative to
// the working directory for the images whose file names repeat,
// --export-name when given; duplicates and a wrong count are refused.
func TestExportNames(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	outside := filepath.Join(t.TempDir(), "disk.img")
	for _, tt := range []struct {
		name          string
		images, names []string
		want          []string
		err           string
	}{
		{"case=distinct", []string{"a.img", "sub/b.img"}, nil, []string{"a.img", "b.img"}, ""},
		{"case=same-file-name", []string{"a/disk.img", "b/disk.img", "c.img"}, nil, []string{"a/disk.img", "b/disk.img", "c.img"}, ""},
		{"case=same-file-name-abs", []string{filepath.Join(dir, "a/disk.img"), "./b/../b/disk.img"}, nil, []string{"a/disk.img", "b/disk.img"}, ""},
		{"case=outside", []string{"a/disk.img", outside}, nil, []string{"a/disk.img", filepath.ToSlash(outside)}, ""},
		{"case=export-name", []string{"a/disk.img", "b/disk.img"}, []string{"vm1", "vm2"}, []string{"vm1", "vm2"}, ""},
		{"case=same-image", []string{"a.img", "./a.img"}, nil, nil, `would both be the export "a.img"`},
		{"case=count", []string{"a/disk.img", "b/disk.img"}, []string{"vm1"}, nil, "given 1 times for 2 images"},
		{"case=dup-name", []string{"a.img", "b.img"}, []string{"vm", "vm"}, nil, `would both be the export "vm"`},
		{"case=empty", []string{"a.img"}, []string{""}, nil, "must not be empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := exportNames(tt.images, tt.names)
			var ue *usageError
			switch {
			case tt.err != "" && (err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("err %v, want a usage error with %q", err, tt.err)
			case tt.err == "" && (err != nil || !slices.Equal(got, tt.want)):
				t.Errorf("%q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestServeSameFileName serves a/disk.img and b/disk.img: two exports,
// named after their paths (and, with --export-name, after the names
// given), where the server refused them before.
func TestServeSameFileName(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	imgs := []string{"a/disk.img", "b/disk.img"}
	for _, im := range imgs {
		if err := os.MkdirAll(filepath.Dir(im), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(im, make([]byte, 64<<10), 0o644); err != nil {
			t.Fatal(err)
		}
		mustDifctl(t, 0, "protect", im)
	}
	for _, tt := range []struct {
		name  string
		names []string
		want  []string
	}{
		{"names=default", nil, []string{"a/disk.img", "b/disk.img"}},
		{"names=given", []string{"vm1", "vm2"}, []string{"vm1", "vm2"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			srv := startServe(t, ctx, serveOptions{Images: imgs, ExportNames: tt.names, Socket: filepath.Join(dir, "s.sock"), MaxConns: 1})
			if srv.ended {
				t.Fatalf("serve: %v\n%s", srv.err, srv.stderr.String())
			}
			cancel(&signalError{sig: syscall.SIGTERM})
			if stopped, _ := srv.wait(); !stopped {
				t.Fatal("serve did not stop")
			}
			for _, name := range tt.want {
				if !strings.Contains(srv.stderr.String(), "difctl: serving "+name+" at nbd+unix:///"+name+"?socket=") {
					t.Errorf("no export %q:\n%s", name, srv.stderr.String())
				}
			}
		})
	}
}
