package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/dif"
)

// Human output lists the first maxFindingLines problems and then counts the
// rest, saying where the full list is; --json lists every one.
func TestFindingsCapped(t *testing.T) {
	f := dif.MustFormat("512+8")
	const n = maxFindingLines + 250
	for _, json := range []bool{false, true} {
		var buf bytes.Buffer
		fw := newFindings(newOutput(&buf, json), f)
		fw.where = ", and the log in X keeps them"
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
		if len(lines) != maxFindingLines+2 {
			t.Fatalf("%d lines, want %d: ...%q", len(lines), maxFindingLines+2, lines[len(lines)-3:])
		}
		want := "... and 250 more problems not listed (the first 100 are); --json lists every one, and the log in X keeps them"
		if lines[maxFindingLines] != want {
			t.Errorf("line %q, want %q", lines[maxFindingLines], want)
		}
		if !strings.HasPrefix(lines[maxFindingLines+1], "img: 350 blocks checked") {
			t.Errorf("summary %q", lines[maxFindingLines+1])
		}
	}
}
