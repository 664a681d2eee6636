package scrub

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/dif"
)

func TestBadRanges(t *testing.T) {
	for _, c := range []struct {
		name string
		add  [][2]int64
		want []blockdev.BlockRange
	}{
		{"order=sorted", [][2]int64{{1, 1}, {2, 1}, {3, 2}, {7, 1}, {7, 1}, {8, 3}}, []blockdev.BlockRange{{LBA: 1, N: 4}, {LBA: 7, N: 4}}},
		{"order=overlap", [][2]int64{{1, 10}, {3, 2}, {11, 1}}, []blockdev.BlockRange{{LBA: 1, N: 11}}},
		{"order=reverse", [][2]int64{{9, 1}, {5, 1}, {1, 1}, {6, 3}, {0, 1}}, []blockdev.BlockRange{{LBA: 0, N: 2}, {LBA: 5, N: 5}}},
		{"order=empty", [][2]int64{{4, 0}, {-1, 3}}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b BadRanges
			for _, a := range c.add {
				b.Add(a[0], a[1])
			}
			if got := b.Ranges(); !slices.Equal(got, c.want) {
				t.Errorf("ranges %v, want %v", got, c.want)
			}
		})
	}
	var b BadRanges
	b.AddFinding(Finding{LBA: 3, N: 1, State: FindingOpen})
	b.AddFinding(Finding{LBA: 4, N: 1, State: FindingOpen, Transient: true})
	b.AddFinding(Finding{LBA: 5, N: 1, State: FindingRecheckedOK})
	b.AddFinding(Finding{LBA: 6, N: 2, State: FindingOpen})
	if got := b.Ranges(); !slices.Equal(got, []blockdev.BlockRange{{LBA: 3, N: 1}, {LBA: 6, N: 2}}) || b.Blocks() != 3 {
		t.Errorf("from findings: %v", got)
	}
}

func TestWriteBadblocks(t *testing.T) {
	bad := []blockdev.BlockRange{{LBA: 0, N: 1}, {LBA: 5, N: 3}, {LBA: 9, N: 1}, {LBA: 17, N: 2}}
	for _, c := range []struct {
		bs, out int
		want    string
	}{
		{512, 512, "0\n5\n6\n7\n9\n17\n18\n"},
		{512, 1024, "0\n2\n3\n4\n8\n9\n"},
		{512, 4096, "0\n1\n2\n"},
		{4096, 1024, "0\n1\n2\n3\n20\n21\n22\n23\n24\n25\n26\n27\n28\n29\n30\n31\n36\n37\n38\n39\n68\n69\n70\n71\n72\n73\n74\n75\n"},
		{4096, 4096, "0\n5\n6\n7\n9\n17\n18\n"},
	} {
		t.Run(fmt.Sprintf("bs=%d/out=%d", c.bs, c.out), func(t *testing.T) {
			var w bytes.Buffer
			if err := WriteBadblocks(&w, bad, c.bs, c.out); err != nil {
				t.Fatal(err)
			}
			if w.String() != c.want {
				t.Errorf("got\n%s\nwant\n%s", w.String(), c.want)
			}
		})
	}
	var w bytes.Buffer
	if err := WriteBadblocks(&w, nil, 512, 512); err != nil || w.Len() != 0 {
		t.Errorf("no bad blocks: %q %v", w.String(), err)
	}
	for _, c := range []struct {
		bad     []blockdev.BlockRange
		bs, out int
	}{
		{bad, 0, 512}, {bad, 512, -1},
		{[]blockdev.BlockRange{{LBA: 5, N: 1}, {LBA: 2, N: 1}}, 512, 512},
		{[]blockdev.BlockRange{{LBA: 5, N: 2}, {LBA: 6, N: 1}}, 512, 512},
		{[]blockdev.BlockRange{{LBA: 5, N: 0}}, 512, 512},
	} {
		if err := WriteBadblocks(&w, c.bad, c.bs, c.out); err == nil || !strings.HasPrefix(err.Error(), "scrub: ") {
			t.Errorf("WriteBadblocks(%v, %d, %d): %v", c.bad, c.bs, c.out, err)
		}
	}
}

func TestWriteMapfile(t *testing.T) {
	for _, c := range []struct {
		name string
		bad  []blockdev.BlockRange
		o    MapfileOptions
		want string
	}{
		{"range=all", []blockdev.BlockRange{{LBA: 0, N: 1}, {LBA: 5, N: 3}, {LBA: 15, N: 1}}, MapfileOptions{BlockSize: 512, Blocks: 16}, `# Mapfile. Created by difctl
# current_pos  current_status  current_pass
0x00000000     +               1
#      pos        size  status
0x00000000  0x00000200  -
0x00000200  0x00000800  +
0x00000A00  0x00000600  -
0x00001000  0x00000E00  +
0x00001E00  0x00000200  -
`},
		{"range=part/comments=2", []blockdev.BlockRange{{LBA: 6, N: 1}}, MapfileOptions{BlockSize: 4096, Blocks: 1 << 20, Start: 4, End: 12, Comments: []string{"Command line: difctl scrub disk.img", "Start time:   2025-01-02 03:04:05"}}, `# Mapfile. Created by difctl
# Command line: difctl scrub disk.img
# Start time:   2025-01-02 03:04:05
# current_pos  current_status  current_pass
0x00000000     +               1
#      pos        size  status
0x00000000  0x00004000  ?
0x00004000  0x00002000  +
0x00006000  0x00001000  -
0x00007000  0x00005000  +
0x0000C000  0xFFFF4000  ?
`},
		{"range=clean", nil, MapfileOptions{BlockSize: 512, Blocks: 1 << 33}, `# Mapfile. Created by difctl
# current_pos  current_status  current_pass
0x00000000     +               1
#      pos        size  status
0x00000000  0x40000000000  +
`},
		{"range=empty", nil, MapfileOptions{BlockSize: 512}, `# Mapfile. Created by difctl
# current_pos  current_status  current_pass
0x00000000     +               1
#      pos        size  status
`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var w bytes.Buffer
			if err := WriteMapfile(&w, c.bad, c.o); err != nil {
				t.Fatal(err)
			}
			if w.String() != c.want {
				t.Errorf("got\n%s\nwant\n%s", w.String(), c.want)
			}
			checkMapfile(t, w.Bytes(), int64(c.o.BlockSize)*c.o.Blocks)
		})
	}
	for _, c := range []struct {
		bad []blockdev.BlockRange
		o   MapfileOptions
	}{
		{nil, MapfileOptions{Blocks: 4}},
		{nil, MapfileOptions{BlockSize: 512, Blocks: -1}},
		{nil, MapfileOptions{BlockSize: 512, Blocks: 4, Start: 5}},
		{nil, MapfileOptions{BlockSize: 512, Blocks: 4, End: 5}},
		{[]blockdev.BlockRange{{LBA: 3, N: 2}}, MapfileOptions{BlockSize: 512, Blocks: 4}},
		{[]blockdev.BlockRange{{LBA: 0, N: 1}}, MapfileOptions{BlockSize: 512, Blocks: 4, Start: 1}},
		{[]blockdev.BlockRange{{LBA: 2, N: 1}, {LBA: 1, N: 1}}, MapfileOptions{BlockSize: 512, Blocks: 4}},
	} {
		if err := WriteMapfile(&bytes.Buffer{}, c.bad, c.o); err == nil || !strings.HasPrefix(err.Error(), "scrub: ") {
			t.Errorf("WriteMapfile(%v, %+v): %v", c.bad, c.o, err)
		}
	}
}

// checkMapfile parses a mapfile as the ddrescue manual describes it and
// checks that its blocks cover [0, size) exactly, in order.
func checkMapfile(t *testing.T, b []byte, size int64) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(b))
	status := false
	var pos int64
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if !status {
			if len(f) != 3 || !strings.Contains("?*/-FG+", f[1]) || len(f[1]) != 1 {
				t.Fatalf("status line %q", line)
			}
			status = true
			continue
		}
		if len(f) != 3 || len(f[2]) != 1 || !strings.Contains("?*/-+", f[2]) {
			t.Fatalf("block line %q", line)
		}
		p, err1 := strconv.ParseInt(f[0], 0, 64)
		n, err2 := strconv.ParseInt(f[1], 0, 64)
		if err1 != nil || err2 != nil || p != pos || n <= 0 {
			t.Fatalf("block line %q at %#x", line, pos)
		}
		pos += n
	}
	if !status || pos != size {
		t.Fatalf("mapfile covers %#x of %#x", pos, size)
	}
}

func TestScrubToBadblocksAndMapfile(t *testing.T) {
	// End to end: a scrub's findings, collected as they come, make a
	// mapfile and a badblocks list.
	hits := []hit{{3, dif.FieldData, 0}, {4, dif.FieldAppTag, 0}, {4, dif.FieldData, 0}, {5, dif.FieldGuard, 0}, {40, dif.FieldRefTag, 0}}
	x := newFixture(t, "512+8", dif.Interleaved, 64, []int{50}, hits)
	s := x.source(t, t.TempDir())
	var bad BadRanges
	if _, err := Run(context.Background(), s, Options{RunBlocks: 4, OnFinding: func(f Finding) error { bad.AddFinding(f); return nil }}); err != nil {
		t.Fatal(err)
	}
	var bb, mf bytes.Buffer
	if err := WriteBadblocks(&bb, bad.Ranges(), 512, 1024); err != nil {
		t.Fatal(err)
	}
	if bb.String() != "1\n2\n20\n" {
		t.Errorf("badblocks %q", bb.String())
	}
	if err := WriteMapfile(&mf, bad.Ranges(), MapfileOptions{BlockSize: 512, Blocks: 64}); err != nil {
		t.Fatal(err)
	}
	want := "0x00000000  0x00000600  +\n0x00000600  0x00000600  -\n0x00000C00  0x00004400  +\n0x00005000  0x00000200  -\n0x00005200  0x00002E00  +\n"
	if !strings.HasSuffix(mf.String(), want) {
		t.Errorf("mapfile\n%s", mf.String())
	}
}

func TestFindingStateText(t *testing.T) {
	for s := FindingOpen; s <= FindingClosed; s++ {
		b, err := s.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back FindingState
		if err := back.UnmarshalText(b); err != nil || back != s {
			t.Errorf("%v: %q -> %v %v", s, b, back, err)
		}
	}
	if _, err := FindingState(0).MarshalText(); err == nil {
		t.Error("zero state marshalled")
	}
	var s FindingState
	if err := s.UnmarshalText([]byte("fixed")); err == nil {
		t.Error("unknown state parsed")
	}
	b, err := json.Marshal(Finding{LBA: 7, N: 1, Kind: blockdev.KindGuard, Expected: 1, Actual: 2, State: FindingOpen, Err: errors.New("x")})
	if err != nil || string(b) != `{"lba":7,"n":1,"kind":"guard","expected":1,"actual":2,"state":"open"}` {
		t.Errorf("JSON %s %v", b, err)
	}
}

func TestFileScrubState(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "img.scrub")
	st := openFileState(t, path)
	if _, ok, err := st.LoadCursor(0, 10); ok || err != nil {
		t.Fatalf("empty state: %v %v", ok, err)
	}
	now := time.Now()
	pass := Cursor{Start: 0, End: 100, Next: 0, Started: now}
	if err := st.SaveCursor(pass); err != nil {
		t.Fatal(err)
	}
	for _, f := range []Finding{{LBA: 5, Kind: blockdev.KindGuard, Expected: 1, Actual: 2}, {LBA: 9, Kind: blockdev.KindIO}, {LBA: 5, Kind: blockdev.KindAppTag}} {
		if err := st.RecordFinding(pass, f); err != nil {
			t.Fatal(err)
		}
	}
	pass.Next = 50
	if err := st.SaveCursor(pass); err != nil {
		t.Fatal(err)
	}
	// Recorded after the last save: lost when the process dies.
	if err := st.RecordFinding(pass, Finding{LBA: 60, Kind: blockdev.KindGuard}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetFindingState(9, blockdev.KindIO, FindingRecheckedOK); err != nil {
		t.Fatal(err)
	}
	if err := st.SetFindingState(9, blockdev.KindIO, 0); err == nil {
		t.Error("state 0 accepted")
	}
	if err := st.SaveCursor(Cursor{Start: 5, End: 4}); err == nil {
		t.Error("bad cursor accepted")
	}
	st.Close()
	if err := st.RecordFinding(pass, Finding{LBA: 1}); err == nil {
		t.Error("record after close")
	}

	st = openFileState(t, path)
	c, ok, err := st.LoadCursor(0, 100)
	if err != nil || !ok || c.Next != 50 || !c.Started.Equal(now) {
		t.Fatalf("cursor %+v %v %v", c, ok, err)
	}
	if _, ok, _ := st.LoadCursor(0, 99); ok {
		t.Error("cursor of another range")
	}
	all, err := st.Findings()
	if err != nil {
		t.Fatal(err)
	}
	want := []Finding{{LBA: 5, Kind: blockdev.KindAppTag}, {LBA: 5, Kind: blockdev.KindGuard}, {LBA: 9, Kind: blockdev.KindIO}}
	if !slices.Equal(keys(all), want) {
		t.Fatalf("findings %v, want %v", keys(all), want)
	}
	if g := all[1]; g.Expected != 1 || g.Actual != 2 || g.Count != 1 || g.State != FindingOpen || g.FirstSeen.IsZero() {
		t.Errorf("guard finding %+v", g)
	}
	// Sightings accumulate; a state change is durable after Sync.
	if err := st.RecordFinding(Cursor{}, Finding{LBA: 5, Kind: blockdev.KindGuard, Expected: 1, Actual: 3}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetFindingState(5, blockdev.KindAppTag, FindingClosed); err != nil {
		t.Fatal(err)
	}
	if err := st.Sync(); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st = openFileState(t, path)
	var open []Finding
	for f, err := range st.OpenFindings(0, 6) {
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, f)
	}
	if len(open) != 1 || open[0].Kind != blockdev.KindGuard || open[0].Count != 2 || open[0].Actual != 3 {
		t.Errorf("open findings %+v", open)
	}
	st.Close()

	// Damage is reported, not ignored.
	for _, c := range []struct {
		name, state, log string
	}{
		{"state=garbage", "{", ""},
		{"state=version", `{"version":9,"log_size":0}`, ""},
		{"state=cursor", `{"version":1,"cursor":{"start":5,"end":4,"next":5},"log_size":0}`, ""},
		{"state=field", `{"version":1,"log_size":0,"x":1}`, ""},
		{"log=short", `{"version":1,"log_size":100}`, "{}\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "s")
			os.WriteFile(p, []byte(c.state), 0o644)
			os.WriteFile(p+".findings", []byte(c.log), 0o644)
			if st, err := OpenFileState(p); err == nil || !strings.HasPrefix(err.Error(), "scrub: ") {
				t.Errorf("opened: %v", err)
				if st != nil {
					st.Close()
				}
			}
		})
	}
	t.Run("log=garbage", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "s")
		os.WriteFile(p, []byte(`{"version":1,"log_size":6}`), 0o644)
		os.WriteFile(p+".findings", []byte("{nope\n"), 0o644)
		st := openFileState(t, p)
		if _, err := st.Findings(); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("garbage log: %v", err)
		}
	})
}

func TestStoreScrubState(t *testing.T) {
	st, tu := newStoreState(t, 100)
	if _, err := NewStoreState(nil, "x"); err == nil {
		t.Error("nil store")
	}
	for _, name := range []string{"", "a@b"} {
		if _, err := NewStoreState(tu, name); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
	if _, ok, err := st.LoadCursor(0, 100); ok || err != nil {
		t.Fatalf("no cursor: %v %v", ok, err)
	}
	now := time.Now()
	full := Cursor{Start: 0, End: 100, Next: 40, Pass: 3, Started: now}
	part := Cursor{Start: 10, End: 20, Next: 15, Started: now}
	for _, c := range []Cursor{full, part} {
		if err := st.SaveCursor(c); err != nil {
			t.Fatal(err)
		}
	}
	if c, ok, err := st.LoadCursor(0, 100); err != nil || !ok || c.Next != 40 || c.Pass != 3 || !c.Started.Equal(now) {
		t.Errorf("full cursor %+v %v %v", c, ok, err)
	}
	if c, ok, err := st.LoadCursor(10, 20); err != nil || !ok || c.Next != 15 {
		t.Errorf("range cursor %+v %v %v", c, ok, err)
	}
	if _, err := tu.ScrubCursor("default@10-20"); err != nil {
		t.Errorf("range cursor name: %v", err)
	}
	// Exactly once per pass; again in a later pass.
	f := Finding{LBA: 7, N: 1, Kind: blockdev.KindRefTag, Expected: 107, Actual: 3, State: FindingOpen, LastSeen: now.Add(time.Millisecond)}
	for range 2 {
		if err := st.RecordFinding(full, f); err != nil {
			t.Fatal(err)
		}
	}
	later := full
	later.Started = now.Add(time.Second)
	f.LastSeen = later.Started
	if err := st.RecordFinding(later, f); err != nil {
		t.Fatal(err)
	}
	var got []Finding
	for f, err := range st.OpenFindings(0, 100) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, f)
	}
	if len(got) != 1 || got[0].Count != 2 || got[0].Expected != 107 || got[0].Actual != 3 || got[0].Kind != blockdev.KindRefTag {
		t.Errorf("findings %+v", got)
	}
	if err := st.SetFindingState(7, blockdev.KindRefTag, FindingClosed); err != nil {
		t.Fatal(err)
	}
	if err := st.Sync(); err != nil {
		t.Fatal(err)
	}
	for range st.OpenFindings(0, 100) {
		t.Error("closed finding still open")
	}
	if err := st.SetFindingState(8, blockdev.KindGuard, FindingClosed); err == nil {
		t.Error("state of a missing finding")
	}
}

// TestFindingOfProblem checks that a Finding records its Problem whole and
// gives it back: the scrub engine, the NBD server and the CLI convert
// through these two only.
func TestFindingOfProblem(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cause := errors.New("cause")
	for _, p := range []blockdev.Problem{
		{LBA: 7, Kind: blockdev.KindGuard, Expected: 0x1234, Actual: 0x4321, Err: cause},
		{LBA: 9, Kind: blockdev.KindIO, Transient: true, Err: cause},
	} {
		f := FindingOf(p, now)
		want := FindingOpen
		if p.Transient {
			want = FindingRecheckedOK
		}
		if f.N != 1 || f.State != want || !f.LastSeen.Equal(now) || f.Bad() == p.Transient {
			t.Errorf("FindingOf(%+v) = %+v", p, f)
		}
		if got := f.Problem(); got != p {
			t.Errorf("FindingOf(%+v).Problem() = %+v", p, got)
		}
	}
}
