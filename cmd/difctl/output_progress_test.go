package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	p.minElapsed = 0
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

// TestJSONProgress: --progress-json records parse, carry the bytes done
// and the total, give no rate (nor ETA) before minRateElapsed, and end
// with one final record.
func TestJSONProgress(t *testing.T) {
	var b bytes.Buffer
	p := newJSONProgress(&b, 10<<20, "verify", "disk.img")
	p.interval = 0 // a record on every Add
	p.Add(4 << 20) // the first chunk, done in microseconds
	p.t0 = p.t0.Add(-2 * time.Second)
	p.Add(1 << 20)
	p.Finish()
	p.Finish()
	var recs []progressRecord
	for line := range strings.Lines(b.String()) {
		var r progressRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if r.Schema != schemaVersion || r.Type != "progress" || r.Command != "verify" || r.Image != "disk.img" || r.Total == nil || *r.Total != 10<<20 {
			t.Errorf("record %q", line)
		}
		recs = append(recs, r)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3:\n%s", len(recs), b.String())
	}
	if r := recs[0]; r.Rate != nil || r.ETA != nil || r.Done != 4<<20 || r.Final {
		t.Errorf("first record %+v: want 4 MiB done, no rate and no ETA", r)
	}
	if r := recs[1]; r.Rate == nil || *r.Rate > float64(5<<20)/2 || *r.Rate < float64(5<<20)/3 || r.ETA == nil || r.Seconds < 2 {
		t.Errorf("second record %+v: want about 2.5 MiB/s after 2 s, and an ETA", r)
	}
	if r := recs[2]; !r.Final || r.Done != 5<<20 {
		t.Errorf("last record %+v: want final, 5 MiB done", r)
	}
}

// TestBarFirstSample: the bar draws nothing before minRateElapsed, so its
// first sample shows no rate of bytes over almost no time (it showed
// "296 GiB/s"); the rate it then shows is bytes over the time since the
// bar was made.
func TestBarFirstSample(t *testing.T) {
	var b bytes.Buffer
	p := newBar(&b, 1<<40, "disk.img")
	p.minElapsed = 100 * time.Millisecond
	p.Add(64 << 10)
	if b.Len() != 0 {
		t.Errorf("bar drawn at once: %q", b.String())
	}
	time.Sleep(p.minElapsed)
	p.Add(0)
	out := b.String()
	// 64 KiB over at least 100 ms: at most 640 KiB/s.
	if !strings.Contains(out, "64 KiB/") || !strings.Contains(out, "KiB/s") || strings.Contains(out, "MiB/s") || strings.Contains(out, "GiB/s") {
		t.Errorf("first sample %q: want 64 KiB done at some KiB/s", out)
	}
}

// TestProgressJSONCommands: protect, verify and scrub with --progress-json
// write parsable progress records on stderr, the last one final with all
// the bytes, and keep stdout for the results.
func TestProgressJSONCommands(t *testing.T) {
	img := filepath.Join(t.TempDir(), "disk.img")
	randomImage(t, img, 256<<10, 1)
	for _, cmd := range []string{"protect", "verify", "scrub"} {
		t.Run("cmd="+cmd, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), []string{cmd, "--progress-json", "-q", img}, strings.NewReader(""), &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d:\n%s%s", code, stdout.String(), stderr.String())
			}
			var last progressRecord
			for line := range strings.Lines(stderr.String()) {
				last = progressRecord{}
				if err := json.Unmarshal([]byte(line), &last); err != nil || last.Type != "progress" {
					t.Fatalf("stderr line %q: %v", line, err)
				}
			}
			if !last.Final || last.Command != cmd || last.Done != 256<<10 || last.Total == nil || *last.Total != 256<<10 {
				t.Errorf("last record %+v:\n%s", last, stderr.String())
			}
		})
	}
}
