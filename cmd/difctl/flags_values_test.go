package main

import (
	"fmt"
	"slices"
	"testing"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int // 0: error
	}{
		{"512", 512},
		{"4096", 4096},
		{"4k", 4096},
		{"4K", 4096},
		{"64KiB", 64 << 10},
		{"1MiB", 1 << 20},
		{"1m", 1 << 20},
		{"1 MiB", 1 << 20},
		{"1MB", 1000000},
		{"4kB", 4000},
		{"1g", 1 << 30},
		{"2g", 0}, // over 2 GiB - 1
		{"0", 0},
		{"", 0},
		{"k", 0},
		{"-1", 0},
		{"4x", 0},
		{"99999999999999999999t", 0},
		{"17179869184t", 0}, // overflows the shift
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("in=%q", tt.in), func(t *testing.T) {
			got, err := parseSize(tt.in)
			if tt.want == 0 {
				if err == nil {
					t.Errorf("parseSize(%q) = %d, want an error", tt.in, got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("parseSize(%q) = %d, %v, want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int]string{
		1: "1 B", 512: "512 B", 1000: "1000 B", 1024: "1 KiB", 4096: "4 KiB",
		1536: "1536 B", 64 << 10: "64 KiB", 1 << 20: "1 MiB", 3 << 20: "3 MiB", 1 << 30: "1 GiB",
	} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
		// What formatSize writes, parseSize reads back.
		if back, err := parseSize(formatSize(n)); int64(n) < 1<<31 && (err != nil || back != n) {
			t.Errorf("parseSize(formatSize(%d)) = %d, %v", n, back, err)
		}
	}
}

func TestSizeListFlag(t *testing.T) {
	f := sizeListFlag{sizes: defaultBenchSizes}
	if err := f.Set("512, 4k"); err != nil {
		t.Fatal(err)
	}
	if err := f.Set("1MiB"); err != nil {
		t.Fatal(err)
	}
	if want := []int{512, 4096, 1 << 20}; !slices.Equal(f.sizes, want) {
		t.Errorf("sizes %v, want %v (the first Set replaces the default)", f.sizes, want)
	}
	if !slices.Equal(defaultBenchSizes, []int{512, 4 << 10, 64 << 10, 1 << 20}) {
		t.Errorf("Set changed the defaults: %v", defaultBenchSizes)
	}
	if err := f.Set("4k,0"); err == nil {
		t.Error("size 0 accepted")
	}
}

func TestAlgFlags(t *testing.T) {
	var a algFlag
	for _, name := range []string{"t10dif", "crct10dif", "crc32c", "crc64nvme"} {
		if err := a.Set(name); err != nil {
			t.Errorf("Set(%q): %v", name, err)
		}
	}
	if err := a.Set("crc16"); err == nil {
		t.Error("unknown algorithm accepted")
	}
	var l algListFlag
	if err := l.Set("crc32c,t10dif"); err != nil || l.String() != "crc32c,t10dif" {
		t.Errorf("algListFlag = %q, %v", l.String(), err)
	}
	if err := l.Set("crc32c,sha1"); err == nil {
		t.Error("unknown algorithm in a list accepted")
	}
}
