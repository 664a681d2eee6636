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
	Duration time.Duration // measuring time per cell; default 250ms
}

var defaultBenchSizes = []int{512, 4 << 10, 64 << 10, 1 << 20}

// benchRecord is the --json result of one cell.
type benchRecord struct {
	header
	Kernel         string  `json:"kernel"`           // kernel package
	Impl           string  `json:"impl"`             // implementation
	Mode           string  `json:"mode"`             // "update": one Update per block; "blocks": one Blocks per batch
	BlockSize      int     `json:"block_size"`       // bytes per block
	BatchBytes     int     `json:"batch_bytes"`      // bytes per measured call sequence
	Bytes          int64   `json:"bytes"`            // bytes checksummed while measuring
	Seconds        float64 `json:"seconds"`          // time spent measuring
	BytesPerSecond float64 `json:"bytes_per_second"` // Bytes / Seconds
}

func (*benchRecord) recordType() string { return "bench" }

func newBenchCmd(g *globalOptions) *cobra.Command {
	var (
		algs     algListFlag
		impls    stringListFlag
		sizes    = sizeListFlag{sizes: defaultBenchSizes}
		batch    = sizeFlag{n: 4 << 20}
		duration time.Duration
	)
	cmd := &cobra.Command{
		Use:   "bench [flags]",
		Short: "Measure the throughput of the checksum kernels",
		Long: `Measure the throughput of every checksum kernel, with every implementation
the CPU can run (or those named by --impl), over each block size. Each
cell checksums a batch of blocks (--batch) for --duration, two ways:

  Update  one Update call per block
  Blocks  one Blocks call for the whole batch, one guard per block, as
          protection information is computed

The output is a Markdown table with aligned columns, ready for a README;
--json gives one "bench" record per cell. The kernel in use is restored
afterwards.

` + exitCodesHelp(exitOK, exitOperational, exitUsage, exitCancelled),
		Example: `  difctl bench
  difctl bench --alg crc32c --sizes 4KiB --duration 1s
  difctl bench --impl generic --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBench(cmd.Context(), benchOptions{
				globalOptions: *g,
				Algs:          algs.algs,
				Impls:         impls.list,
				Sizes:         sizes.sizes,
				Batch:         batch.n,
				Duration:      duration,
			}, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.Var(&algs, "alg", "kernels to measure, comma-separated: "+algorithmNames()+" (default all)")
	f.Var(&impls, "impl", "implementations to measure, comma-separated (default every available one)")
	f.Var(&sizes, "sizes", "block sizes, comma-separated (512, 4KiB, 4k, 1MiB...)")
	f.Var(&batch, "batch", "bytes of blocks per measured call")
	f.DurationVar(&duration, "duration", 250*time.Millisecond, "measuring time per cell")
	return cmd
}

// benchCell is one row of the table: a kernel implementation at one block
// size, measured in both modes.
type benchCell struct {
	alg  *algorithm
	impl string
	size int
}

func runBench(ctx context.Context, opts benchOptions, stdout, _ io.Writer) error {
	if opts.Duration <= 0 {
		return usageErrorf("--duration must be positive, not %v", opts.Duration)
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
		fmt.Fprintf(out.w, "batch: %s per call, %v per cell\n\n", formatSize(opts.Batch), opts.Duration)
		tbl.header(out.w)
	}

	buf := make([]byte, max(opts.Batch, slices.Max(opts.Sizes)))
	for i := range buf {
		buf[i] = byte(i*131 ^ i>>9)
	}
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
			bytes, elapsed, err := measure(ctx, opts.Duration, len(p), m.fn)
			if err != nil {
				return err
			}
			recs[i] = &benchRecord{
				Kernel: c.alg.kernel, Impl: c.impl, Mode: m.name,
				BlockSize: c.size, BatchBytes: len(p),
				Bytes: bytes, Seconds: elapsed.Seconds(),
				BytesPerSecond: float64(bytes) / elapsed.Seconds(),
			}
			if out.json {
				if err := out.emit(recs[i]); err != nil {
					return err
				}
			}
		}
		if !out.json {
			if err := tbl.row(out.w, c, recs[0].BytesPerSecond, recs[1].BytesPerSecond); err != nil {
				return err
			}
		}
	}
	runtime.KeepAlive(benchSink) // the results were consumed
	return nil
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

func newBenchTable(cells []benchCell) *benchTable {
	t := &benchTable{kernelW: len("kernel"), implW: len("impl"), sizeW: len("block"), rateW: len("1023 MB/s")}
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

func (t *benchTable) row(w io.Writer, c benchCell, update, blocks float64) error {
	_, err := fmt.Fprintf(w, "| %-*s | %-*s | %*s | %*s | %*s |\n",
		t.kernelW, c.alg.kernel, t.implW, c.impl, t.sizeW, formatSize(c.size),
		t.rateW, formatRate(update), t.rateW, formatRate(blocks))
	return err
}

// formatRate writes bytes per second in SI units: "12 GB/s", "980 MB/s".
func formatRate(bps float64) string { return humanize.Bytes(uint64(bps)) + "/s" }
