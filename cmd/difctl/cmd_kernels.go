package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/difctl/difctl/kernels"
	"github.com/spf13/cobra"
)

// kernelsOptions are the inputs of runKernels.
type kernelsOptions struct {
	globalOptions
	// List returns the implementations to show; nil means kernels.List.
	// Tests substitute it.
	List func() []kernels.Impl
}

// kernelRecord is the --json line for one implementation of one kernel.
type kernelRecord struct {
	header
	Kernel    string `json:"kernel"`    // kernel package: one of kernels.Packages
	Impl      string `json:"impl"`      // implementation name
	Available bool   `json:"available"` // the CPU can run it
	Active    bool   `json:"active"`    // it is in use
}

func (*kernelRecord) recordType() string { return "kernel" }

func newKernelsCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "kernels",
		Short: "Show the CPU features and the checksum implementations in use",
		Long: `Show the CPU features the checksum kernels use, and every implementation
of each kernel, best first: "active" is the one in use, "available" one the
CPU can run, "unsupported" one it cannot. The environment variable
DIFCTL_KERNELS forces a choice, for example
DIFCTL_KERNELS=crct10dif=generic,crc32c=generic.

` + exitCodesHelp(exitOK, exitOperational, exitUsage),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runKernels(cmd.Context(), kernelsOptions{globalOptions: *g}, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
}

func runKernels(_ context.Context, opts kernelsOptions, stdout, _ io.Writer) error {
	list := opts.List
	if list == nil {
		list = kernels.List
	}
	impls := list()
	cpu := newCPURecord()
	out := newOutput(stdout, opts.JSON)
	if out.json {
		if err := out.emit(cpu); err != nil {
			return err
		}
		for _, im := range impls {
			r := &kernelRecord{Kernel: im.Package, Impl: im.Name, Available: im.Available, Active: im.Active}
			if err := out.emit(r); err != nil {
				return err
			}
		}
		return nil
	}
	features := strings.Join(cpu.Features, " ")
	if features == "" {
		features = "(none used by the kernels)"
	}
	if cpu.Model != "" {
		fmt.Fprintf(out.w, "cpu:      %s\n", cpu.Model)
	}
	fmt.Fprintf(out.w, "arch:     %s/%s\n", cpu.GOOS, cpu.GOARCH)
	fmt.Fprintf(out.w, "features: %s\n\n", features)
	tw := tabwriter.NewWriter(out.w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KERNEL\tIMPL\tSTATUS")
	for _, im := range impls {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", im.Package, im.Name, implStatus(im))
	}
	return tw.Flush()
}

func implStatus(im kernels.Impl) string {
	switch {
	case im.Active:
		return "active"
	case im.Available:
		return "available"
	}
	return "unsupported"
}
