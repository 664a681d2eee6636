package scrub

import (
	"errors"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

func TestOpenImageState(t *testing.T) {
	kv := store.NewMem()
	t.Cleanup(func() { kv.Close() })
	f := dif.MustFormat("512+8")
	for range 2 { // created, then opened
		tu, err := OpenImageState(kv, f, 100, "/images/a.dump", "difctl")
		if err != nil {
			t.Fatal(err)
		}
		if m := tu.Manifest(); tu.Volume() != ImageStateVolume || m.Format != f.String() || m.DeviceSize != 100*512 || m.DeviceID != "/images/a.dump" || m.Tool != "difctl" {
			t.Fatalf("volume %q, manifest %+v", tu.Volume(), m)
		}
	}
	for _, tc := range []struct {
		name   string
		f      dif.Format
		blocks int64
		id     string
		field  string
	}{
		{"format", dif.MustFormat("4096+8"), 100, "/images/a.dump", "format"},
		{"size", f, 101, "/images/a.dump", "device_size"},
		{"image", f, 100, "/images/b.dump", "device_id"},
	} {
		t.Run("other="+tc.name, func(t *testing.T) {
			_, err := OpenImageState(kv, tc.f, tc.blocks, tc.id, "difctl")
			var mm *store.ManifestMismatchError
			if !errors.As(err, &mm) || mm.Field != tc.field {
				t.Errorf("OpenImageState of another image: %v, want a mismatch of the %s", err, tc.field)
			}
		})
	}
}

func TestLoadEarlier(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	record := func(t *testing.T, st *StoreState, f Finding) {
		t.Helper()
		if err := st.RecordFinding(Cursor{}, f); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		cursor *Cursor
		blocks int64
		kinds  map[blockdev.Kind]int64
	}{
		{name: "stopped", cursor: &Cursor{Start: 0, End: 100, Next: 50, Started: t0, Pass: 1}, blocks: 3,
			kinds: map[blockdev.Kind]int64{blockdev.KindGuard: 2, blockdev.KindRefTag: 1}},
		{name: "none"},
		{name: "complete", cursor: &Cursor{Start: 0, End: 100, Next: 0, Pass: 2}},
		{name: "at-start", cursor: &Cursor{Start: 0, End: 100, Next: 0, Started: t0, Pass: 1}},
	} {
		t.Run("cursor="+tc.name, func(t *testing.T) {
			st, _ := newStoreState(t, 100)
			if tc.cursor != nil {
				if err := st.SaveCursor(*tc.cursor); err != nil {
					t.Fatal(err)
				}
			}
			after := t0.Add(time.Second)
			// This pass's bad findings before the cursor: blocks 10 and
			// 20 (two kinds), 12 and 13 (one finding of two blocks);
			// then what does not count.
			record(t, st, Finding{LBA: 10, N: 1, Kind: blockdev.KindGuard, LastSeen: after})
			record(t, st, Finding{LBA: 10, N: 1, Kind: blockdev.KindRefTag, LastSeen: after})
			record(t, st, Finding{LBA: 12, N: 2, Kind: blockdev.KindGuard, LastSeen: after})
			record(t, st, Finding{LBA: 15, N: 1, Kind: blockdev.KindGuard, LastSeen: t0.Add(-time.Hour)})               // an earlier pass's
			record(t, st, Finding{LBA: 16, N: 1, Kind: blockdev.KindGuard, LastSeen: after, State: FindingRecheckedOK}) // transient
			record(t, st, Finding{LBA: 60, N: 1, Kind: blockdev.KindGuard, LastSeen: after})                            // after the cursor
			e, err := LoadEarlier(st, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			if e.Blocks != tc.blocks || e.Bad.Blocks() != tc.blocks || len(e.Failures) != len(tc.kinds) {
				t.Fatalf("Earlier: %d blocks (%v), failures %v; want %d, %v", e.Blocks, e.Bad.Ranges(), e.Failures, tc.blocks, tc.kinds)
			}
			for k, n := range tc.kinds {
				if e.Failures[k] != n {
					t.Errorf("failures of %s: %d, want %d", k, e.Failures[k], n)
				}
			}
		})
	}
}

func TestReportPassFailed(t *testing.T) {
	earlier := &Earlier{Blocks: 3}
	for _, tc := range []struct {
		resumed bool
		earlier *Earlier
		want    int64
	}{
		{true, earlier, 5},
		{false, earlier, 2},
		{true, nil, 2},
	} {
		r := &Report{Resumed: tc.resumed, RunStats: blockdev.RunStats{Failed: 2}}
		if got := r.PassFailed(tc.earlier); got != tc.want {
			t.Errorf("resumed %v, earlier %v: PassFailed %d, want %d", tc.resumed, tc.earlier, got, tc.want)
		}
	}
}
