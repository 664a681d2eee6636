package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/difctl/difctl/kernels"
	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
)

// benchOptions are the inputs of runBench.
type benchOptions struct {
	globalOptions
	Algs     []*algorithm  // kernels to measure; default all
	Impls    []string      // implementation names; default every available one
	Sizes    []int         // block sizes; default 512, 4 KiB, 64 KiB, 1 MiB
	Batch    int           // bytes of blocks per measured call; default 4 MiB
	Duration time.Duration // measuring time per sample; default 50ms
	Samples  int           // samples per cell and mode; default 5
}

const (
	defaultBenchDuration = 50 * time.Millisecond
	defaultBenchSamples  = 5
	// benchNoisy is the spread of a cell's samples, (max-min)/median,
	// above which bench warns that the numbers are noise as much as speed.
	benchNoisy = 0.10
)

var defaultBenchSizes = []int{512, 4 << 10, 64 << 10, 1 << 20}

// benchRecord is the --json result of one cell.
type benchRecord struct {
	header
	Kernel         string  `json:"kernel"`           // kernel package
	Impl           string  `json:"impl"`             // implementation
	Mode           string  `json:"mode"`             // "update": one Update per block; "blocks": one Blocks per batch
	BlockSize      int     `json:"block_size"`       // bytes per block
	BatchBytes     int     `json:"batch_bytes"`      // bytes per measured call sequence
	Bytes          int64   `json:"bytes"`            // bytes checksummed while measuring, all samples
	Seconds        float64 `json:"seconds"`          // time spent measuring, all samples
	BytesPerSecond float64 `json:"bytes_per_second"` // Bytes / Seconds
	Samples        int     `json:"samples"`          // samples taken
	Median         float64 `json:"median_bytes_per_second"`
	Min            float64 `json:"min_bytes_per_second"`
	Max            float64 `json:"max_bytes_per_second"`
}

func (*benchRecord) recordType() string { return "bench" }

func newBenchCmd(g *globalOptions) *cobra.Command {
	var (
		algs     algListFlag
		impls    stringListFlag
		sizes    = sizeListFlag{sizes: defaultBenchSizes}
		batch    = sizeFlag{n: 4 << 20}
		duration time.Duration
		samples  int
	)
	cmd := &cobra.Command{
		Use:   "bench [flags]",
		Short: "Measure the throughput of the checksum kernels",
		Long: `Measure the throughput of every checksum kernel, with every implementation
the CPU can run (or those named by --impl), over each block size. Each
cell checksums a batch of blocks (--batch) for --duration, --samples times
(5), two ways:

  Update  one Update call per block
  Blocks  one Blocks call for the whole batch, one guard per block, as
          protection information is computed

The output is a Markdown table with aligned columns, ready for a README:
the median rate of the samples and their spread (min-max). A line on
standard error warns when a cell's samples spread by more than 10% of
their median: the machine is busy, or its clock changes, and the numbers
measure that too. --json gives one "bench" record per cell and mode, with
the median, min and max. The kernel in use is restored afterwards.

` + exitCodesHelp(exitOK, exitOperational, exitUsage, exitCancelled),
		Example: `  difctl bench
  difctl bench --alg crc32c --sizes 4KiB --duration 1s --samples 9
  difctl bench --impl generic --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if samples < 1 { // 0 in benchOptions is the default
				return usageErrorf("--samples must be at least 1, not %d", samples)
			}
			return runBench(cmd.Context(), benchOptions{
				globalOptions: *g,
				Algs:          algs.algs,
				Impls:         impls.list,
				Sizes:         sizes.sizes,
				Batch:         batch.n,
				Duration:      duration,
				Samples:       samples,
			}, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.Var(&algs, "alg", "kernels to measure, comma-separated: "+algorithmNames()+" (default all)")
	f.Var(&impls, "impl", "implementations to measure, comma-separated (default every available one)")
	f.Var(&sizes, "sizes", "block sizes, comma-separated (512, 4KiB, 4k, 1MiB...)")
	f.Var(&batch, "batch", "bytes of blocks per measured call")
	f.DurationVar(&duration, "duration", defaultBenchDuration, "measuring time per sample")
	f.IntVar(&samples, "samples", defaultBenchSamples, "samples per cell and mode: the table shows their median and min-max")
	return cmd
}

// benchCell is one row of the table: a kernel implementation at one block
// size, measured in both modes.
type benchCell struct {
	alg  *algorithm
	impl string
	size int
}

func runBench(ctx context.Context, opts benchOptions, stdout, stderr io.Writer) error {
	if opts.Duration <= 0 {
		return usageErrorf("--duration must be positive, not %v", opts.Duration)
	}
	if opts.Samples == 0 {
		opts.Samples = defaultBenchSamples
	}
	if opts.Samples < 1 {
		return usageErrorf("--samples must be at least 1, not %d", opts.Samples)
	}
	if len(opts.Algs) == 0 {
		opts.Algs = algorithms
	}
	if len(opts.Sizes) == 0 {
		opts.Sizes = defaultBenchSizes
	}
	if opts.Batch <= 0 {
		opts.Batch = 4 << 20
	}
	cells, err := benchCells(opts, kernels.List())
	if err != nil {
		return err
	}
	// Leave every kernel as we found it.
	for _, a := range opts.Algs {
		if active := kernels.Active(a.kernel); active != "" {
			defer kernels.Select(a.kernel, active)
		}
	}

	out := newOutput(stdout, opts.JSON)
	tbl := newBenchTable(cells)
	if out.json {
		if err := out.emit(newCPURecord()); err != nil {
			return err
		}
	} else {
		cpu := newCPURecord()
		if cpu.Model != "" {
			fmt.Fprintf(out.w, "cpu: %s\n", cpu.Model)
		}
		fmt.Fprintf(out.w, "arch: %s/%s, features: %s\n", cpu.GOOS, cpu.GOARCH, strings.Join(cpu.Features, " "))
		fmt.Fprintf(out.w, "batch: %s per call, %d samples of %v per cell: median rate (min-max)\n\n", formatSize(opts.Batch), opts.Samples, opts.Duration)
		tbl.header(out.w)
	}

	buf := make([]byte, max(opts.Batch, slices.Max(opts.Sizes)))
	for i := range buf {
		buf[i] = byte(i*131 ^ i>>9)
	}
	noisy := 0
	for _, c := range cells {
		if err := kernels.Select(c.alg.kernel, c.impl); err != nil {
			return err
		}
		n := len(buf) / c.size
		p := buf[:n*c.size]
		update := func() error {
			var crc uint64
			for off := 0; off < len(p); off += c.size {
				crc ^= c.alg.update(0, p[off:off+c.size])
			}
			benchSink ^= crc
			return nil
		}
		blocks := c.alg.batcher(n)
		var recs [2]*benchRecord
		for i, m := range []struct {
			name string
			fn   func() error
		}{{"update", update}, {"blocks", func() error { return blocks(p, c.size, c.size) }}} {
			r := &benchRecord{
				Kernel: c.alg.kernel, Impl: c.impl, Mode: m.name,
				BlockSize: c.size, BatchBytes: len(p), Samples: opts.Samples,
			}
			rates := make([]float64, opts.Samples)
			for j := range rates {
				bytes, elapsed, err := measure(ctx, opts.Duration, len(p), m.fn)
				if err != nil {
					return err
				}
				r.Bytes += bytes
				r.Seconds += elapsed.Seconds()
				rates[j] = float64(bytes) / elapsed.Seconds()
			}
			r.BytesPerSecond = float64(r.Bytes) / r.Seconds
			r.Median, r.Min, r.Max = medianMinMax(rates)
			if r.noisy() {
				noisy++
			}
			recs[i] = r
			if out.json {
				if err := out.emit(recs[i]); err != nil {
					return err
				}
			}
		}
		if !out.json {
			if err := tbl.row(out.w, c, recs[0], recs[1]); err != nil {
				return err
			}
		}
	}
	runtime.KeepAlive(benchSink) // the results were consumed
	if noisy > 0 && !opts.Quiet {
		fmt.Fprintf(stderr, "difctl: bench: in %d of %d measurements the samples spread by more than %.0f%% of their median: the machine is busy or its clock varies, and these numbers measure that too (close other work, or raise --duration or --samples)\n",
			noisy, 2*len(cells), benchNoisy*100)
	}
	return nil
}

// medianMinMax returns the median, the least and the greatest of rates
// (not empty); it sorts rates.
func medianMinMax(rates []float64) (median, lo, hi float64) {
	slices.Sort(rates)
	n := len(rates)
	median = rates[n/2]
	if n%2 == 0 {
		median = (rates[n/2-1] + rates[n/2]) / 2
	}
	return median, rates[0], rates[n-1]
}

// noisy reports whether the samples spread by more than benchNoisy of
// their median.
func (r *benchRecord) noisy() bool {
	return r.Samples > 1 && r.Median > 0 && (r.Max-r.Min)/r.Median > benchNoisy
}

// benchCells lists the cells to measure, and checks --impl against what
// the kernels offer: a name no selected kernel has is a usage error, one
// that exists but that the CPU cannot run is an operational error.
func benchCells(opts benchOptions, impls []kernels.Impl) ([]benchCell, error) {
	known := map[string]bool{}    // name exists in a selected kernel
	runnable := map[string]bool{} // and the CPU can run it there
	var cells []benchCell
	for _, a := range opts.Algs {
		for _, im := range impls {
			if im.Package != a.kernel {
				continue
			}
			known[im.Name] = true
			if !im.Available || len(opts.Impls) > 0 && !slices.Contains(opts.Impls, im.Name) {
				continue
			}
			runnable[im.Name] = true
			for _, size := range opts.Sizes {
				cells = append(cells, benchCell{alg: a, impl: im.Name, size: size})
			}
		}
	}
	for _, name := range opts.Impls {
		switch {
		case !known[name]:
			return nil, usageErrorf("unknown implementation %q (difctl kernels lists them)", name)
		case !runnable[name]:
			return nil, fmt.Errorf("implementation %q is not supported by this CPU", name)
		}
	}
	if len(cells) == 0 {
		return nil, errors.New("no implementation to measure")
	}
	return cells, nil
}

// measure calls fn, which checksums bytesPerCall bytes, once to warm up
// and then until d has passed. It stops early, with the cancellation
// cause, when ctx is cancelled.
func measure(ctx context.Context, d time.Duration, bytesPerCall int, fn func() error) (bytes int64, elapsed time.Duration, err error) {
	if err := fn(); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	for {
		if ctx.Err() != nil {
			return 0, 0, context.Cause(ctx)
		}
		if err := fn(); err != nil {
			return 0, 0, err
		}
		bytes += int64(bytesPerCall)
		if elapsed = time.Since(start); elapsed >= d {
			return bytes, elapsed, nil
		}
	}
}

// benchTable prints the human output: a Markdown table whose columns are
// padded to fixed widths known before the first measurement, so rows can
// stream out as they are measured and still line up.
type benchTable struct{ kernelW, implW, sizeW, rateW int }

// benchRateW is the width of a rate cell: the median, then the min-max,
// each at most as wide as "1023 MB/s".
const benchRateW = len("1023 MB/s (1023 MB/s-1023 MB/s)")

func newBenchTable(cells []benchCell) *benchTable {
	t := &benchTable{kernelW: len("kernel"), implW: len("impl"), sizeW: len("block"), rateW: benchRateW}
	for _, c := range cells {
		t.kernelW = max(t.kernelW, len(c.alg.kernel))
		t.implW = max(t.implW, len(c.impl))
		t.sizeW = max(t.sizeW, len(formatSize(c.size)))
	}
	return t
}

func (t *benchTable) header(w io.Writer) {
	fmt.Fprintf(w, "| %-*s | %-*s | %*s | %*s | %*s |\n",
		t.kernelW, "kernel", t.implW, "impl", t.sizeW, "block", t.rateW, "Update", t.rateW, "Blocks")
	fmt.Fprintf(w, "|%s|%s|%s:|%s:|%s:|\n",
		strings.Repeat("-", t.kernelW+2), strings.Repeat("-", t.implW+2),
		strings.Repeat("-", t.sizeW+1), strings.Repeat("-", t.rateW+1), strings.Repeat("-", t.rateW+1))
}

func (t *benchTable) row(w io.Writer, c benchCell, update, blocks *benchRecord) error {
	_, err := fmt.Fprintf(w, "| %-*s | %-*s | %*s | %*s | %*s |\n",
		t.kernelW, c.alg.kernel, t.implW, c.impl, t.sizeW, formatSize(c.size),
		t.rateW, formatSpread(update), t.rateW, formatSpread(blocks))
	return err
}

// formatSpread writes a cell's median rate and the min-max of its
// samples: "12 GB/s (11 GB/s-12 GB/s)".
func formatSpread(r *benchRecord) string {
	return fmt.Sprintf("%s (%s-%s)", formatRate(r.Median), formatRate(r.Min), formatRate(r.Max))
}

// formatRate writes bytes per second in SI units: "12 GB/s", "980 MB/s".
func formatRate(bps float64) string { return humanize.Bytes(uint64(bps)) + "/s" }
