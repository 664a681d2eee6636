package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/difctl/difctl/kernels"
)

func TestBenchCells(t *testing.T) {
	impls := []kernels.Impl{
		{Package: "crct10dif", Name: "fast", Available: false},
		{Package: "crct10dif", Name: "generic", Available: true, Active: true},
		{Package: "crc32c", Name: "fast", Available: true, Active: true},
		{Package: "crc32c", Name: "generic", Available: true},
		{Package: "crc64nvme", Name: "generic", Available: true, Active: true},
	}
	t10, c32, c64 := algorithms[0], algorithms[1], algorithms[2]
	sizes := []int{512, 4096}
	tests := []struct {
		name  string
		algs  []*algorithm
		impls []string
		want  []string // kernel/impl of the cells, once per impl
		code  int      // exit code of the error, if any
	}{
		{"all", algorithms, nil, []string{"crct10dif/generic", "crc32c/fast", "crc32c/generic", "crc64nvme/generic"}, 0},
		{"generic", algorithms, []string{"generic"}, []string{"crct10dif/generic", "crc32c/generic", "crc64nvme/generic"}, 0},
		{"fast", algorithms, []string{"fast"}, []string{"crc32c/fast"}, 0},
		{"one-alg", []*algorithm{c64}, nil, []string{"crc64nvme/generic"}, 0},
		{"unknown", algorithms, []string{"nosuch"}, nil, exitUsage},
		{"other-kernel-only", []*algorithm{c64}, []string{"fast"}, nil, exitUsage},
		{"unsupported", []*algorithm{t10}, []string{"fast"}, nil, exitOperational},
		{"mixed", []*algorithm{t10, c32}, []string{"fast"}, []string{"crc32c/fast"}, 0},
	}
	for _, tt := range tests {
		t.Run("case="+tt.name, func(t *testing.T) {
			cells, err := benchCells(benchOptions{Algs: tt.algs, Impls: tt.impls, Sizes: sizes}, impls)
			if tt.code != 0 {
				if got := classify(err, true); err == nil || got != tt.code {
					t.Fatalf("err %v (exit %d), want exit %d", err, got, tt.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i, c := range cells {
				if c.size != sizes[i%len(sizes)] {
					t.Errorf("cell %d: size %d", i, c.size)
				}
				if i%len(sizes) == 0 {
					got = append(got, c.alg.kernel+"/"+c.impl)
				}
			}
			if !slices.Equal(got, tt.want) || len(cells) != len(tt.want)*len(sizes) {
				t.Errorf("cells %v (%d), want %v", got, len(cells), tt.want)
			}
		})
	}
}

func TestRunBenchJSON(t *testing.T) {
	before := kernels.List()
	var stdout bytes.Buffer
	opts := benchOptions{
		globalOptions: globalOptions{JSON: true},
		Sizes:         []int{512, 3000},
		Batch:         8192,
		Duration:      time.Millisecond,
	}
	if err := runBench(context.Background(), opts, &stdout, os.Stderr); err != nil {
		t.Fatal(err)
	}
	if after := kernels.List(); !slices.Equal(before, after) {
		t.Errorf("bench changed the kernels in use:\nbefore %v\nafter  %v", before, after)
	}
	dec := json.NewDecoder(&stdout)
	var cpu cpuRecord
	if err := dec.Decode(&cpu); err != nil || cpu.Type != "cpu" || cpu.GOARCH == "" {
		t.Fatalf("first record %+v, %v: want the cpu record", cpu, err)
	}
	// bench measures the kernels of the guard algorithms; the fused
	// T10-DIF + CRC-32C pass (t10crc32c) is listed by kernels but is
	// not an algorithm of its own.
	measured := map[string]bool{}
	for _, a := range algorithms {
		measured[a.kernel] = true
	}
	cells := 0
	for _, im := range before {
		if im.Available && measured[im.Package] {
			cells += len(opts.Sizes)
		}
	}
	for i := range 2 * cells {
		var r benchRecord
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		mode := []string{"update", "blocks"}[i%2]
		size := opts.Sizes[i/2%len(opts.Sizes)]
		// 3000-byte blocks: the batch holds 2 of them, 6000 bytes.
		batch := opts.Batch / size * size
		switch {
		case r.Schema != schemaVersion || r.Type != "bench":
			t.Errorf("record %d: header %+v", i, r.header)
		case r.Mode != mode || r.BlockSize != size || r.BatchBytes != batch:
			t.Errorf("record %d: mode %s size %d batch %d, want %s %d %d", i, r.Mode, r.BlockSize, r.BatchBytes, mode, size, batch)
		case r.Bytes <= 0 || r.Bytes%int64(batch) != 0:
			t.Errorf("record %d: %d bytes, not a positive multiple of the batch", i, r.Bytes)
		case r.Seconds < opts.Duration.Seconds():
			t.Errorf("record %d: measured %vs, less than --duration", i, r.Seconds)
		case math.Abs(r.BytesPerSecond-float64(r.Bytes)/r.Seconds) > 1e-6*r.BytesPerSecond:
			t.Errorf("record %d: rate %v, want bytes/seconds", i, r.BytesPerSecond)
		case r.Samples != defaultBenchSamples || r.Min <= 0 || r.Min > r.Median || r.Median > r.Max:
			t.Errorf("record %d: %d samples, min %v median %v max %v", i, r.Samples, r.Min, r.Median, r.Max)
		}
	}
	if dec.More() {
		t.Error("more records than cells")
	}
}

func TestRunBenchText(t *testing.T) {
	var stdout bytes.Buffer
	opts := benchOptions{
		Algs:     []*algorithm{algorithms[1]},
		Impls:    []string{"generic"},
		Sizes:    []int{512, 64 << 10},
		Batch:    64 << 10,
		Duration: time.Millisecond,
	}
	if err := runBench(context.Background(), opts, &stdout, os.Stderr); err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(stdout.String(), "\n\n")
	if !ok {
		t.Fatalf("no blank line between the header and the table:\n%s", stdout.String())
	}
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("table has %d lines, want 4:\n%s", len(lines), table)
	}
	for i, l := range lines {
		if len(l) != len(lines[0]) {
			t.Errorf("line %d is %d wide, header %d:\n%s", i, len(l), len(lines[0]), table)
		}
	}
	if !strings.HasPrefix(lines[2], "| crc32c | generic |  512 B | ") || !strings.HasPrefix(lines[3], "| crc32c | generic | 64 KiB | ") {
		t.Errorf("rows:\n%s", table)
	}
}

func TestRunBenchCancelled(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(&signalError{sig: os.Interrupt})
	var stdout bytes.Buffer
	err := runBench(ctx, benchOptions{globalOptions: globalOptions{JSON: true}, Duration: time.Hour}, &stdout, os.Stderr)
	if !errors.Is(err, errInterrupted) {
		t.Fatalf("err = %v, want the interrupt", err)
	}
	if strings.Contains(stdout.String(), `"type":"bench"`) {
		t.Errorf("a cancelled cell was reported:\n%s", stdout.String())
	}
}

func TestMeasure(t *testing.T) {
	calls := 0
	bytes, elapsed, err := measure(context.Background(), 5*time.Millisecond, 100, func() error {
		calls++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// One warm-up call is not counted.
	if calls < 2 || bytes != int64(calls-1)*100 {
		t.Errorf("%d calls, %d bytes", calls, bytes)
	}
	if elapsed < 5*time.Millisecond {
		t.Errorf("elapsed %v, less than the duration", elapsed)
	}
	boom := errors.New("boom")
	if _, _, err := measure(context.Background(), time.Hour, 1, func() error { return boom }); err != boom {
		t.Errorf("err = %v, want the kernel's", err)
	}
}

func TestBenchTableAlignment(t *testing.T) {
	cells := []benchCell{
		{alg: algorithms[0], impl: "generic", size: 512},
		{alg: algorithms[2], impl: "a-long-impl-name", size: 1 << 30},
	}
	tbl := newBenchTable(cells)
	var b bytes.Buffer
	tbl.header(&b)
	for _, c := range cells {
		for _, rate := range []float64{0, 999, 999.9e3, 1023e6, 9.99e9, 12e9, 999e12} {
			r := &benchRecord{Median: rate, Min: rate, Max: rate}
			if err := tbl.row(&b, c, r, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	for i, l := range lines {
		if len(l) != len(lines[0]) {
			t.Errorf("line %d is %d wide, header %d:\n%s", i, len(l), len(lines[0]), b.String())
		}
	}
}

// TestMedianMinMax: the median of an odd and an even number of samples,
// and the spread past which bench warns.
func TestMedianMinMax(t *testing.T) {
	for _, tt := range []struct {
		rates          []float64
		median, lo, hi float64
		noisy          bool
	}{
		{[]float64{5}, 5, 5, 5, false},
		{[]float64{9, 10, 11, 10, 10}, 10, 9, 11, true},
		{[]float64{100, 97, 103, 101, 99}, 100, 97, 103, false},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4, true},
	} {
		t.Run(fmt.Sprintf("rates=%v", tt.rates), func(t *testing.T) {
			m, lo, hi := medianMinMax(slices.Clone(tt.rates))
			if m != tt.median || lo != tt.lo || hi != tt.hi {
				t.Errorf("median %v min %v max %v, want %v %v %v", m, lo, hi, tt.median, tt.lo, tt.hi)
			}
			r := &benchRecord{Samples: len(tt.rates), Median: m, Min: lo, Max: hi}
			if r.noisy() != tt.noisy {
				t.Errorf("noisy %v, want %v", r.noisy(), tt.noisy)
			}
		})
	}
}

// TestRunBenchSamples: --samples 1 gives one sample (no spread); a bad
// count is a usage error.
func TestRunBenchSamples(t *testing.T) {
	var stdout bytes.Buffer
	opts := benchOptions{globalOptions: globalOptions{JSON: true}, Algs: []*algorithm{algorithms[1]}, Impls: []string{"generic"}, Sizes: []int{512}, Batch: 4096, Duration: time.Millisecond, Samples: 1}
	if err := runBench(context.Background(), opts, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(stdout.String(), `"samples":1,`); n != 2 {
		t.Errorf("%d records with 1 sample, want 2:\n%s", n, stdout.String())
	}
	opts.Samples = -1
	var ue *usageError
	if err := runBench(context.Background(), opts, io.Discard, io.Discard); !errors.As(err, &ue) {
		t.Errorf("--samples -1: %v, want a usage error", err)
	}
}

func TestFormatRate(t *testing.T) {
	for _, tt := range []struct {
		bps  float64
		want string
	}{{0, "0 B/s"}, {1500, "1.5 kB/s"}, {12e9, "12 GB/s"}, {1.24e9, "1.2 GB/s"}} {
		t.Run(fmt.Sprintf("bps=%g", tt.bps), func(t *testing.T) {
			if got := formatRate(tt.bps); got != tt.want {
				t.Errorf("formatRate(%g) = %q, want %q", tt.bps, got, tt.want)
			}
		})
	}
}
