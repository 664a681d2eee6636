package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestNewProgressOff(t *testing.T) {
	var b bytes.Buffer
	// Not a terminal: nothing, whatever --quiet says.
	for _, quiet := range []bool{false, true} {
		p := newProgress(&b, quiet, 100, "x")
		if _, ok := p.(noProgress); !ok {
			t.Errorf("quiet=%v: a buffer got a %T, want no progress", quiet, p)
		}
		p.Add(50)
		p.Finish()
	}
	if b.Len() != 0 {
		t.Errorf("no-op progress wrote %q", b.String())
	}
	// A regular file is not a terminal either.
	f, err := os.Create(t.TempDir() + "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Error("a regular file is a terminal")
	}
	if _, ok := newProgress(f, false, 1, "x").(noProgress); !ok {
		t.Error("a regular file got a progress bar")
	}
}

// TestBar renders the terminal reporter into a buffer: description,
// bytes, rate; and Finish clears the line.
func TestBar(t *testing.T) {
	var b bytes.Buffer
	p := newBar(&b, 10<<20, "disk.img")
	p.Add(5 << 20)
	out := b.String()
	for _, want := range []string{"disk.img", "50%", "MiB", "/s", "elapsed", "ETA"} {
		if !strings.Contains(out, want) {
			t.Errorf("bar %q does not show %q", out, want)
		}
	}
	p.Add(5 << 20)
	p.Finish()
	if !strings.HasSuffix(b.String(), "\r") {
		t.Errorf("bar not cleared on finish: %q", b.String())
	}
}

// TestBarUnknownTotal: a pipe or a character device has no size: a
// spinner with the bytes done and the rate.
func TestBarUnknownTotal(t *testing.T) {
	var b bytes.Buffer
	p := newBar(&b, -1, "stdin")
	p.Add(5 << 20)
	p.Finish()
	for _, want := range []string{"stdin", "5.0 MiB", "/s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("spinner %q does not show %q", b.String(), want)
		}
	}
}
