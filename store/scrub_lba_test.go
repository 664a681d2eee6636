package store_test

import (
	"errors"
	"testing"

	"github.com/difctl/difctl/store"
)

// TestScrubRecordsRefuseNegativeLBAs checks that the scrub records, whose
// LBAs are int64 like blockdev's, refuse a negative block instead of
// storing it under the key of a huge unsigned one.
func TestScrubRecordsRefuseNegativeLBAs(t *testing.T) {
	kv := store.NewMem()
	defer kv.Close()
	tp, err := store.CreateTuples(kv, "v", store.NewManifest("512+8:crc16:type1:pi-last", 512, 8, 100*512, "d"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.RecordFinding(store.Finding{LBA: -1, Field: "guard"}, false); !errors.Is(err, store.ErrOutOfRange) {
		t.Errorf("RecordFinding at -1: %v", err)
	}
	if _, err := tp.RecordFinding(store.Finding{LBA: 5, N: -3, Field: "guard"}, false); !errors.Is(err, store.ErrOutOfRange) {
		t.Errorf("RecordFinding of -3 blocks: %v", err)
	}
	if _, err := tp.SetFindingState(-1, "guard", store.FindingClosed, false); !errors.Is(err, store.ErrOutOfRange) {
		t.Errorf("SetFindingState at -1: %v", err)
	}
	if err := tp.SetScrubCursor("s", store.ScrubCursor{Next: -1}, false); !errors.Is(err, store.ErrOutOfRange) {
		t.Errorf("SetScrubCursor at -1: %v", err)
	}
	var qerr error
	for _, err := range tp.Findings(store.FindingQuery{LBA: -1}) {
		qerr = err
	}
	if !errors.Is(qerr, store.ErrInvalid) {
		t.Errorf("Findings from -1: %v", qerr)
	}
	if err := tp.SetScrubCursor("s", store.ScrubCursor{Start: 10, End: 101, Next: 10}, false); !errors.Is(err, store.ErrOutOfRange) {
		t.Errorf("SetScrubCursor of a range beyond the volume: %v", err)
	}
	// In range, they work, and a cursor keeps its range.
	want := store.ScrubCursor{Start: 10, End: 20, Next: 15, Pass: 2}
	if err := tp.SetScrubCursor("s", want, false); err != nil {
		t.Fatal(err)
	}
	if got, err := tp.ScrubCursor("s"); err != nil || got != want {
		t.Errorf("ScrubCursor = %+v, %v; want %+v", got, err, want)
	}
	if _, err := tp.RecordFinding(store.Finding{LBA: 99, Field: "guard"}, false); err != nil {
		t.Fatal(err)
	}
	n := 0
	for f, err := range tp.Findings(store.FindingQuery{LBA: 99, N: 1}) {
		if err != nil || f.LBA != 99 || f.N != 1 {
			t.Errorf("finding %+v, %v", f, err)
		}
		n++
	}
	if n != 1 {
		t.Errorf("%d findings at 99, want 1", n)
	}
}
