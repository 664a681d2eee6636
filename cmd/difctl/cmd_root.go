package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// newRootCmd builds the command tree. g receives the global flags when
// cobra parses them; the constructors keep the pointer and copy *g into
// their options when they run. A new command is one file, cmd_xxx.go,
// with a constructor newXxxCmd(g, ...) *cobra.Command, an xxxOptions
// struct embedding globalOptions and a runXxx(ctx, opts, stdout, stderr)
// error, registered here.
func newRootCmd(g *globalOptions, stdin io.Reader) *cobra.Command {
	// --version is ours rather than cobra's (root.Version), so that it
	// honours --json as difctl version does.
	var showVersion bool
	root := &cobra.Command{
		Use:   "difctl",
		Short: "T10 DIF/PI protection information for block images and devices",
		Long: `difctl generates, stores and verifies T10 DIF / NVMe protection
information (PI) for block images and devices.

Results go to standard output, as text or, with --json, as JSON Lines (one
object per line, each with "schema" and "type"; see SCHEMA.md). Errors go to
standard error as one line, "difctl: <cause>". Progress is shown on standard
error only when it is a terminal, or as JSON Lines progress records with
--progress-json (protect, verify, scrub). With --quiet (-q) difctl prints nothing but
errors, like grep -q: no progress and no text results, only the exit status
(JSON Lines, which a program asked for, are still written).

` + exitCodesHelp(exitOK, exitCorrected, exitUncorrected, exitOperational, exitUsage, exitCancelled),
		// Runnable so that an unknown command is our usage error rather
		// than cobra's multi-line one.
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if showVersion && len(args) == 0 {
				// --version prints even with --quiet, as --help does.
				w := cmd.OutOrStdout()
				if q, ok := w.(*quietWriter); ok {
					w = q.w
				}
				return runVersion(cmd.Context(), *g, w)
			}
			if len(args) > 0 {
				hint := ""
				if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
					hint = fmt.Sprintf("; did you mean %q?", s[0])
				}
				return usageErrorf("unknown command %q%s", args[0], hint)
			}
			// No command: the usage, on standard error, and the usage
			// error's exit status (difctl --help is the way to ask).
			cmd.SetOut(cmd.ErrOrStderr())
			if err := cmd.Help(); err != nil {
				return err
			}
			return usageErrorf("no command given")
		},
		SilenceErrors: true, // main prints errors, as one line
		SilenceUsage:  true, // a usage error is not worth a screen of help
	}
	root.SuggestionsMinimumDistance = 2
	root.Flags().BoolVarP(&showVersion, "version", "v", false, "show difctl's version (as difctl version)")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return checkCommonFlags(cmd) }
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &usageError{err: err}
	})
	pf := root.PersistentFlags()
	pf.BoolVar(&g.JSON, "json", false, "write results as JSON Lines (see SCHEMA.md)")
	pf.BoolVarP(&g.Quiet, "quiet", "q", false, "print nothing but errors: no progress, no results (the exit status tells the outcome; --json output is kept)")

	root.AddCommand(
		newProtectCmd(g),
		newVerifyCmd(g),
		newScrubCmd(g),
		newRepairCmd(g),
		newMirrorCmd(g),
		newResyncCmd(g),
		newParityCmd(g),
		newInspectCmd(g),
		newDiscardCmd(g),
		newWriteCmd(g, stdin),
		newConvertCmd(g),
		newRemapCmd(g),
		newInjectCmd(g),
		newCrcCmd(g, stdin),
		newKernelsCmd(g),
		newBenchCmd(g),
		newServeCmd(g),
		newVersionCmd(g),
	)
	return root
}

// globalOptions are the root's persistent flags. Every command's options
// struct embeds a copy, taken when the command runs.
type globalOptions struct {
	JSON  bool // --json: JSON Lines on stdout instead of text
	Quiet bool // --quiet: nothing but errors (text results are dropped)
	// ProgressJSON is --progress-json of protect, verify and scrub: JSON
	// Lines progress records on stderr.
	ProgressJSON bool
	// Args is the command line after "difctl", for the files that record
	// it (mapfile headers).
	Args []string
	// Key is --key-file/--key-env of the commands on store-backed images
	// (keys.go).
	Key keyFlags
}
