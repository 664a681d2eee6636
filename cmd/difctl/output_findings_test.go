package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/dif"
)

// Human output lists the first maxTextFindings problems and then counts the
// rest, saying where the full list is; --json lists every one.
func TestFindingsCapped(t *testing.T) {
	f := dif.MustFormat("512+8")
	const n = maxTextFindings + 250
	for _, json := range []bool{false, true} {
		var buf bytes.Buffer
		fw := newFindings(newOutput(&buf, json), f)
		fw.more = "--json lists them all, and the log in X keeps them"
		for i := range n {
			fw.report(blockdev.Problem{LBA: int64(i), Kind: blockdev.KindGuard, Expected: 1, Actual: 2})
		}
		err := fw.summary(&summaryRecord{Command: "verify", Image: "img", Format: "512+8"}, blockdev.RunStats{Blocks: n, Failed: n}, time.Second)
		if !isIntegrityErr(err) {
			t.Fatalf("json=%v: summary error %v", json, err)
		}
		lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
		if json {
			if got := strings.Count(buf.String(), `"type":"finding"`); got != n {
				t.Errorf("json: %d finding records, want %d", got, n)
			}
			continue
		}
		if len(lines) != maxTextFindings+2 {
			t.Fatalf("%d lines, want %d: ...%q", len(lines), maxTextFindings+2, lines[len(lines)-3:])
		}
		if !strings.HasPrefix(lines[maxTextFindings], "img: 350 blocks checked") {
			t.Errorf("summary %q", lines[maxTextFindings])
		}
		want := "250 more findings not listed after the first 100; --json lists them all, and the log in X keeps them"
		if lines[maxTextFindings+1] != want {
			t.Errorf("line %q, want %q", lines[maxTextFindings+1], want)
		}
	}
}
