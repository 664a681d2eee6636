// Command difctl generates, stores and verifies T10 DIF / NVMe protection
// information for block images and devices.
//
// Images without PI are protected with `difctl protect`, which keeps the
// tuples in a store beside the image (Pebble, IMAGE.difdb, by default);
// verify, scrub, inspect, write, discard, convert and remap then work
// through that store. Images that carry their own PI (extended-LBA dumps,
// DIX pairs) are checked with `verify --interleaved` or `verify --dix`, and
// NVMe namespaces that do with `verify --device-pi` (docs/device-pi.md).
// crc, kernels and bench expose the checksum kernels. With --json every
// command writes JSON Lines in the difctl/v1 schema (SCHEMA.md).
//
// Exit codes follow fsck(8), as a bit mask: 0 clean, 1 errors corrected,
// 4 errors left uncorrected, 8 operational error, 16 usage error, 32
// cancelled by the user. They are decided in one place, exitCode in
// exit.go, from the error a command returns.
//
// # Files
//
// A command parses its flags, calls the library and prints; what it
// decides about volumes and stores is in blockdev, blockdev/scrub and
// store. Each command is one file, cmd_NAME.go: its cobra command (the
// constructor newNameCmd, with its help and flags), its options and
// records, and its run function, runName(ctx, opts, stdout, stderr);
// cmd_root.go registers them and holds the global flags. The helpers are
// grouped by job:
//
//   - flags_common.go, flags_pi.go, flags_values.go: the argument count
//     and --store; the PI flags and the flags that name an image
//     (imageFlags, imageSpec); the flag value types;
//   - keys.go: the key flags of keyed volumes, and the keyed check's
//     state and errors;
//   - store_open.go, store_volume.go, store_tuples.go, store_errors.go: a
//     store-backed image's store, opened as a Volume or for its tuples
//     alone, and its errors in the user's words; identity.go: whether a
//     store describes the image given;
//   - image_pi.go: an image with its own PI (extended-LBA or DIX);
//     device_pi.go: an NVMe namespace that carries PI, read and written
//     through passthrough (--device-pi, detection; cmd_write_device.go and
//     convert_device.go write one); files.go: the files read and written
//     directly; check.go: checking a range of blocks in runs;
//   - output.go, output_findings.go, output_progress.go: records and text,
//     findings and summaries, progress bars;
//   - exit.go: exit codes and the errors that carry them; signal.go:
//     SIGINT and SIGTERM; metrics.go: --metrics-listen; net.go: serve's
//     listeners, TLS and handshake log; algs.go, sysinfo.go: the kernels
//     as crc and bench use them, and the machine they run on;
//   - control.go, control_server.go, control_client.go, control_peer_*.go:
//     serve's control socket, on which verify, scrub and inspect of a
//     served image ask the server to run them on the volume it serves.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	_ "github.com/difctl/difctl/store/etcd"   // etcd:// URLs for every --store flag
	_ "github.com/difctl/difctl/store/pebble" // pebble:PATH and plain paths, the default (blockdev links it too)
)

func main() { os.Exit(difctlMain()) }

// difctlMain runs difctl on the process's arguments and standard streams
// and returns the exit code. The testscript tests run it as the "difctl"
// command.
func difctlMain() int {
	ctx, stop := signalContext(context.Background())
	defer stop()
	return run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
}

// run executes one difctl command line and maps its outcome to an exit
// code, printing the error, if any, as one line on stderr (and, with
// --json, as a final "error" record on stdout).
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := globalOptions{Args: args}
	root := newRootCmd(&g, stdin)
	root.SetArgs(args)
	root.SetIn(stdin)
	ran := false
	root.SetOut(&quietWriter{w: stdout, g: &g, ran: &ran})
	root.SetErr(stderr)
	markRun(root, &ran)

	cmd, err := root.ExecuteContextC(ctx)
	code := exitCode(ctx, err, ran)
	if line := errorLine(ctx, err); line != "" {
		if code == exitUsage && cmd != nil {
			line += fmt.Sprintf(" (see '%s --help')", cmd.CommandPath())
		}
		fmt.Fprintf(stderr, "difctl: %s\n", line)
		if g.JSON {
			rec := &errorRecord{Error: line, ExitCode: code}
			// The damaged store file: a *storeDamageError's, or the one a
			// server named for a check it ran (control_client.go).
			var sd interface{ file() string }
			if errors.As(err, &sd) {
				rec.File = sd.file()
			}
			_ = newOutput(stdout, true).emit(rec)
		}
	}
	return code
}

// markRun wraps the RunE of every command so that *ran tells whether
// cobra got as far as running one: everything failing before that is a
// usage error.
func markRun(c *cobra.Command, ran *bool) {
	if runE := c.RunE; runE != nil {
		c.RunE = func(cmd *cobra.Command, args []string) error {
			*ran = true
			return runE(cmd, args)
		}
	}
	for _, sub := range c.Commands() {
		markRun(sub, ran)
	}
}

// quietWriter is the commands' stdout: with --quiet and without --json it
// drops everything a command writes (help and --version, which run no
// command, still print).
type quietWriter struct {
	w   io.Writer
	g   *globalOptions
	ran *bool
}

func (q *quietWriter) Write(p []byte) (int, error) {
	if *q.ran && q.g.Quiet && !q.g.JSON {
		return len(p), nil
	}
	return q.w.Write(p)
}
